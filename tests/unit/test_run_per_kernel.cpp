// `fusetune run PLAN --per-kernel`: every launch of the plan timed alone, slowest first, beside the
// modeled time the manifest gives its groups, and the sums of both. Checked against the plan's
// own manifest (the real binary, a real compiled bundle, the host backend).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "unit/cli_run.h"
#include "unit/test_dir.h"

namespace fusetune {
namespace {

namespace fs = std::filesystem;
using testing::Outcome;
using testing::run_cli;

TEST(RunPerKernel, EveryLaunchOnceSlowestFirstBesideItsModeledTime) {
  const testing::TestDir dir("per_kernel");
  const fs::path model = fs::path(FUSETUNE_SOURCE_DIR) / "tests/data/models/cnn_small";
  const std::string data = (model / "test_data_set_0").string();
  Outcome o = run_cli("run " + (model / "model.onnx").string() + " --inputs " + data + " --per-kernel");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--per-kernel times a plan bundle's launches"), std::string::npos) << o.output;

  ASSERT_EQ(run_cli("compile " + (model / "model.onnx").string() + " --device h100 --out " + (dir / "plan").string()).exit_code, 0);
  o = run_cli("run " + (dir / "plan").string() + " --inputs " + data + " --backend host --per-kernel");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("per kernel, slowest first"), std::string::npos) << o.output;

  std::ifstream in(dir / "plan" / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(in);
  const nlohmann::json& launches = manifest.at("launches");
  ASSERT_GT(launches.size(), 1u);

  std::map<int64_t, int64_t> buffer_bytes;
  for (const nlohmann::json& b : manifest.at("buffers")) buffer_bytes[b.at("id").get<int64_t>()] = b.at("bytes").get<int64_t>();
  // | launch | kernel | groups | configuration | measured us | modeled us | measured / modeled | argument MB | argument GB/s |
  const std::regex row(R"(^\| (\d+) \| (\w+) \| (.*) \| `(.*)` \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+|-) \| ([0-9.]+) \| ([0-9.]+) \|$)");
  std::map<size_t, double> measured;
  double last = 1e300, measured_sum = 0, modeled_sum = 0;
  std::istringstream lines(o.output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    const size_t i = std::stoul(m[1]);
    ASSERT_LT(i, launches.size()) << line;
    EXPECT_TRUE(measured.emplace(i, std::stod(m[5])).second) << "launch " << i << " listed twice";
    const nlohmann::json& l = launches[i];
    EXPECT_EQ(m[2].str(), l.at("kernel").get<std::string>()) << line;
    double modeled = 0;
    for (const nlohmann::json& g : l.at("groups")) modeled += g.at("modeled_us").get<double>();
    EXPECT_NEAR(std::stod(m[6]), modeled, 0.006) << line;
    EXPECT_NE(m[3].str().find(l.at("groups")[0].at("pattern").get<std::string>()), std::string::npos) << line;
    // Counted: the launch's distinct arguments' bytes; and those bytes over the measured time.
    std::set<int64_t> args;
    for (const nlohmann::json& a : l.at("args")) args.insert(a.get<int64_t>());
    int64_t bytes = 0;
    for (int64_t a : args) bytes += buffer_bytes.at(a);
    EXPECT_GT(bytes, 0) << line;
    EXPECT_NEAR(std::stod(m[8]), static_cast<double>(bytes) / 1e6, 0.0006) << line;
    // The counted bytes, not the printed megabytes (3 decimals: 0.014 MB may be 3.6% off), over the
    // printed time; the rate is printed to 0.1 GB/s.
    EXPECT_NEAR(std::stod(m[9]), static_cast<double>(bytes) / 1e3 / std::stod(m[5]), 0.05 + 0.01 * std::stod(m[9])) << line;
    EXPECT_GT(std::stod(m[5]), 0.0) << line;
    EXPECT_LE(std::stod(m[5]), last) << "not slowest first: " << line;
    last = std::stod(m[5]);
    measured_sum += std::stod(m[5]);
    modeled_sum += modeled;
  }
  EXPECT_EQ(measured.size(), launches.size()) << o.output;
  std::smatch sums;
  ASSERT_TRUE(std::regex_search(o.output, sums, std::regex(R"(sum of the (\d+) launches alone: ([0-9.]+) us measured; ([0-9.]+) us modeled)")))
      << o.output;
  EXPECT_EQ(std::stoul(sums[1]), launches.size());
  EXPECT_NEAR(std::stod(sums[2]), measured_sum, 0.05 + 0.005 * static_cast<double>(launches.size())) << o.output;
  EXPECT_NEAR(std::stod(sums[3]), modeled_sum, 0.05 + 0.005 * static_cast<double>(launches.size())) << o.output;
}

}  // namespace
}  // namespace fusetune
