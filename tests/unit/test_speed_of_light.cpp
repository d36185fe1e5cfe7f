// Speed of light and occupancy (planner/speed_of_light.h) against figures CUDA's occupancy
// calculator gives for an H100, and `fusetune profile --sol --json` on a compiled plan: every
// kernel's speed of light is what its own counted bytes and operations give at the device's
// peaks, and the plan's totals are the sums of its kernels'.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "planner/device.h"
#include "planner/speed_of_light.h"
#include "unit/cli_run.h"

namespace fusetune::planner {
namespace {

namespace fs = std::filesystem;

TEST(SpeedOfLight, OccupancyAsTheCalculatorComputesIt) {
  const Device h100 = find_device("h100");
  struct Case {
    const char* what;
    LaunchShape launch;
    int blocks;
    const char* limit;
    double occupancy;
  };
  const Case cases[] = {
      {"256 threads of 64 registers: 2,048 registers a warp, 32 warps", {1000, 256, 64, 0}, 4, "registers", 0.5},
      {"48 KB of shared memory a block (+1 KB reserved)", {1000, 128, 32, 49152}, 4, "shared memory", 0.25},
      {"30 registers round up to 32; one-warp blocks stop at 32 blocks", {100000, 32, 30, 0}, 32, "blocks", 0.5},
      {"512 threads: 4 blocks fill the SM's 2,048 threads", {100000, 512, 32, 0}, 4, "threads", 1.0},
      {"1,024 threads of 255 registers do not fit", {1, 1024, 255, 0}, 0, "registers", 0.0}};
  for (const Case& c : cases) {
    const Occupancy o = occupancy(h100, c.launch);
    EXPECT_EQ(o.blocks_per_sm, c.blocks) << c.what;
    EXPECT_EQ(o.limit, c.limit) << c.what;
    EXPECT_DOUBLE_EQ(o.occupancy, c.occupancy) << c.what;
  }
  EXPECT_DOUBLE_EQ(occupancy(h100, {100000, 32, 30, 0}).resident_warps, 32);
  // A grid of 10 blocks on 132 SMs: one block on the SMs that have one.
  const Occupancy small = occupancy(h100, {10, 256, 32, 0});
  EXPECT_DOUBLE_EQ(small.resident_warps, 8);
  EXPECT_DOUBLE_EQ(bytes_in_flight_per_sm(small, 512), 8 * 512);
}

TEST(SpeedOfLight, TheSlowerOfBandwidthAndThePeakOfTheInstructionClass) {
  const Device h100 = find_device("h100");
  SpeedOfLight s = speed_of_light(h100, 3.35e9, 67e6, 0, Pipe::kFp32);  // 3.35 GB: 1,000 µs
  EXPECT_NEAR(s.memory_us, 1000, 1e-9);
  EXPECT_NEAR(s.compute_us, 1, 1e-9);
  EXPECT_EQ(s.bound, "memory");
  EXPECT_DOUBLE_EQ(s.us, s.memory_us);
  // A kernel with mma.sync: Hopper's mma.sync attains 660 of the 989 TFLOP/s only wgmma reaches.
  s = speed_of_light(h100, 3.35e3, 660e6, 0, Pipe::kMmaSync);
  EXPECT_EQ(s.peak, "mma.sync");
  EXPECT_NEAR(s.compute_us, 1, 1e-9);
  EXPECT_EQ(s.bound, "compute");
  // Special functions: 132 SMs x 16 results a clock x 1,980 MHz = 4,181,760 results a µs.
  EXPECT_DOUBLE_EQ(h100.special_ops_per_us(), 132.0 * 16 * 1980);
  s = speed_of_light(h100, 0, 330e6, 0, Pipe::kMmaSyncTf32);  // TF32: 330 of 495 TFLOP/s
  EXPECT_EQ(s.peak, "mma.sync.tf32");
  EXPECT_NEAR(s.compute_us, 1, 1e-9);
  s = speed_of_light(h100, 0, 67e6, 2 * 4181760.0, Pipe::kFp32);
  EXPECT_EQ(s.peak, "special");
  EXPECT_NEAR(s.compute_us, 2, 1e-9);
  // 8-bit integer products: int8 mma.sync at twice the float16 mma.sync rate (1,320 TOP/s), dp4a at
  // 64 instructions of 8 operations a clock per SM (132 x 64 x 8 x 1,980 MHz = 133.8 TOP/s).
  s = speed_of_light(h100, 0, 1320e6, 0, Pipe::kMmaSyncInt8);
  EXPECT_EQ(s.peak, "mma.sync.int8");
  EXPECT_NEAR(s.compute_us, 1, 1e-9);
  EXPECT_DOUBLE_EQ(h100.dp4a_tops(), 132.0 * 64 * 8 * 1980 * 1e-6);
  s = speed_of_light(h100, 0, h100.dp4a_tops() * 1e6, 0, Pipe::kDp4a);
  EXPECT_EQ(s.peak, "dp4a");
  EXPECT_NEAR(s.compute_us, 1, 1e-9);
  // Before Hopper mma.sync is the tensor cores' widest instruction: it attains their peak.
  const Device a100 = find_device("a100");
  EXPECT_DOUBLE_EQ(a100.mma_sync_fp16_tflops, a100.fp16_tensor_tflops);
  EXPECT_NEAR(speed_of_light(a100, 0, 312e6, 0, Pipe::kMmaSync).compute_us, 1, 1e-9);
}

TEST(SpeedOfLight, ProfileReportsEveryKernelsSpeedOfLightFromItsCountedWork) {
  const fs::path plan = fs::temp_directory_path() / ("fusetune_sol_" + std::to_string(::getpid()));
  const fs::path onnx = fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models/cnn_small/model.onnx";
  const testing::Outcome c = testing::run_cli("compile " + onnx.string() + " --device h100 --out " + plan.string());
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const testing::Outcome p = testing::run_cli("profile " + plan.string() + " --sol --json");
  fs::remove_all(plan);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const nlohmann::json j = nlohmann::json::parse(p.output.substr(p.output.find('{')));
  const Device h100 = find_device("h100");
  double sol = 0, modeled = 0;
  ASSERT_FALSE(j.at("kernels").empty());
  for (const nlohmann::json& k : j.at("kernels")) {
    const nlohmann::json& s = k.at("sol");
    const double bytes = k.at("counted").at("unique_bytes").get<double>();
    const double flops = k.at("counted").at("flops").get<double>();
    const double special = k.at("counted").at("special_ops").get<double>();
    const double rate = s.at("peak") == "mma.sync"        ? h100.mma_sync_fp16_tflops
                        : s.at("peak") == "mma.sync.tf32" ? h100.mma_sync_tf32_tflops
                                                          : h100.fp32_tflops;  // cnn_small: no tensor cores
    const double expect = std::max({bytes / (h100.dram_bandwidth_gbps * 1e3), flops / (rate * 1e6),
                                    special / h100.special_ops_per_us()});
    EXPECT_NEAR(s.at("sol_us").get<double>(), expect, 1e-9 * std::max(1.0, expect)) << k.at("kernel");
    EXPECT_GT(s.at("registers").get<int>(), 0) << "ptxas's registers for " << k.at("kernel");
    EXPECT_GT(s.at("occupancy").get<double>(), 0);
    EXPECT_LE(s.at("occupancy").get<double>(), 1);
    EXPECT_NEAR(s.at("modeled_over_sol").get<double>(), s.at("modeled_us").get<double>() / s.at("sol_us").get<double>(), 1e-6);
    sol += s.at("sol_us").get<double>();
    modeled += s.at("modeled_us").get<double>();
  }
  EXPECT_NEAR(j.at("total").at("sol_us").get<double>(), sol, 1e-9);
  EXPECT_NEAR(j.at("total").at("modeled_us").get<double>(), modeled, 1e-9);
  EXPECT_EQ(j.at("total").at("device"), "h100");
}

// A launch holding several groups pays one launch overhead, as the planner's total does: with no
// library calls (every launch counted), the plan's modeled time in `profile --sol` is the
// manifest's. nerf_mlp's plan packs two groups into a launch.
TEST(SpeedOfLight, APackedLaunchIsModeledAsOneLaunch) {
  const fs::path plan = fs::temp_directory_path() / ("fusetune_sol_packed_" + std::to_string(::getpid()));
  const fs::path onnx = fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models/nerf_mlp/model.onnx";
  const testing::Outcome c = testing::run_cli("compile " + onnx.string() + " --device h100 --libraries none --out " + plan.string());
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const nlohmann::json manifest = nlohmann::json::parse(read_file(plan / "manifest.json", "the manifest"));
  const testing::Outcome p = testing::run_cli("profile " + plan.string() + " --sol --json");
  fs::remove_all(plan);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  size_t packed = 0;
  for (const nlohmann::json& l : manifest.at("launches")) packed += l.at("groups").size() > 1 ? 1 : 0;
  ASSERT_GT(packed, 0u) << "no launch of nerf_mlp's plan packs groups";
  const nlohmann::json j = nlohmann::json::parse(p.output.substr(p.output.find('{')));
  EXPECT_NEAR(j.at("total").at("modeled_us").get<double>(), manifest.at("modeled_us").get<double>(), 1e-6);
}

}  // namespace
}  // namespace fusetune::planner
