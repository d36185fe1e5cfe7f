// The cost model's L2 traffic (planner/tiling.h, Cost::l2_bytes, in the manifest as
// `modeled_l2_bytes`) against what the host executor counts the plan's kernels requesting
// (`fusetune profile --json`: each global request's distinct 32-byte sectors, loads and stores).
// The requested sectors are an upper bound on a GPU's L2 traffic (L1 hits come off them), so a
// model that charges a kernel much more L2 traffic than it requests is wrong for that kernel; the
// model may charge less (it does not count the re-reads L1 serves). Small exported models with
// pointwise and depthwise convolutions, windows and attention, planned for the H100.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "unit/cli_run.h"
#include "unit/test_dir.h"

namespace fusetune::planner {
namespace {

TEST(TrafficModel, NoKernelIsChargedMoreL2TrafficThanItRequests) {
  // The sectors of a row of 1,280 weights of a 1x1 convolution are 160 sectors, not 1,280 (the
  // model once charged a sector for each element of an axis of extent 1: 8x the requests).
  constexpr double kLeast = 1 / 1.1;  // counted / modeled; the smallest seen is 0.94 (swin_t's k0)
  const testing::TestDir dir("traffic");
  for (const std::string model : {"mobilenet_v2", "efficientnet_b0", "swin_t", "bert"}) {
    const std::string onnx = std::string(FUSETUNE_SOURCE_DIR) + "/tests/data/models/" + model + "/model.onnx";
    const std::string shapes = model == "bert" ? " --shape input_ids=1x16 --shape attention_mask=1x16" : "";
    const std::string plan = (dir / model).string();
    const testing::Outcome c = testing::run_cli("compile " + onnx + " --device h100 --libraries none --out " + plan + shapes);
    ASSERT_EQ(c.exit_code, 0) << c.output;
    const testing::Outcome p = testing::run_cli("profile " + plan + " --json");
    ASSERT_EQ(p.exit_code, 0) << p.output;
    const nlohmann::json j = nlohmann::json::parse(p.output.substr(p.output.find('{')));
    ASSERT_FALSE(j.at("kernels").empty()) << model;
    int64_t requested = 0;
    for (const nlohmann::json& k : j.at("kernels")) {
      const auto counted = k.at("counted").at("requested_bytes").get<int64_t>();
      const auto modeled = k.at("modeled").at("l2_bytes").get<int64_t>();
      ASSERT_GT(modeled, 0) << model << " " << k.at("kernel") << ": no modeled L2 traffic in the manifest";
      EXPECT_GE(static_cast<double>(counted) / static_cast<double>(modeled), kLeast)
          << model << " " << k.at("kernel") << " (" << k.at("groups").get<std::string>() << "): requests " << counted
          << " bytes of sectors, modeled " << modeled << " bytes of L2 traffic";
      requested += counted;
    }
    EXPECT_EQ(j.at("total").at("counted_requested_bytes").get<int64_t>(), requested) << model;
  }
}

}  // namespace
}  // namespace fusetune::planner
