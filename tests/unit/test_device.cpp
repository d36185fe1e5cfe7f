// Device descriptions: every built-in one parses and is consistent; bad files name the field.
#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/device.h"

namespace fusetune::planner {
namespace {

TEST(Device, BuiltInDescriptionsCoverTheTargetArchitectures) {
  std::set<std::string> archs;
  for (const std::string& name : builtin_device_names()) {
    const Device d = find_device(name);
    EXPECT_EQ(d.name, name);
    EXPECT_GE(d.shared_memory_per_block_optin, d.shared_memory_per_block);
    EXPECT_EQ(d.warp_size, 32);
    EXPECT_LE(d.mma_sync_fp16_tflops, d.fp16_tensor_tflops) << name;
    EXPECT_LE(d.mma_sync_tf32_tflops, d.tf32_tensor_tflops) << name;
    // mma.sync attains the tensor peak before Hopper; on sm_90 wgmma alone reaches it.
    EXPECT_EQ(d.mma_sync_fp16_tflops < d.fp16_tensor_tflops, d.arch == "sm_90") << name;
    archs.insert(d.arch);
  }
  EXPECT_EQ(archs, (std::set<std::string>{"sm_80", "sm_89", "sm_90"}));
  EXPECT_EQ(find_device("h100").sms, 132);
  EXPECT_GT(find_device("h200").dram_bandwidth_gbps, find_device("h100").dram_bandwidth_gbps);
}

TEST(Device, ErrorsNameTheDeviceAndField) {
  try {
    find_device("v100");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown device 'v100'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("h100"), std::string::npos);
  }
  try {
    parse_device(R"({"name": "x", "description": "y", "arch": "sm_90"})", "my.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("my.json: field 'compute_capability' is missing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_device("{not json", "bad.json"), Error);
  // A description whose mma.sync is faster than the tensor peak is refused.
  std::string text = R"({"name": "x", "description": "y", "arch": "sm_90", "compute_capability": 90, "sms": 1,
      "warp_size": 32, "max_threads_per_block": 1024, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32,
      "registers_per_sm": 65536, "max_registers_per_thread": 255, "shared_memory_per_sm": 3,
      "shared_memory_per_block": 1, "shared_memory_per_block_optin": 2, "l2_bytes": 1, "dram_bytes": 1,
      "dram_bandwidth_gbps": 1, "dram_latency_ns": 1, "l2_bandwidth_gbps": 1, "shared_bandwidth_gbps_per_sm": 1,
      "sector_bytes": 32, "cache_line_bytes": 128, "fp32_tflops": 1, "fp16_tensor_tflops": 10,
      "mma_sync_fp16_tflops": 11, "tf32_tensor_tflops": 5, "mma_sync_tf32_tflops": 5,
      "special_ops_per_clock_per_sm": 16, "clock_mhz": 1000})";
  try {
    parse_device(text, "fast.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fast.json: tensor rates are inconsistent"), std::string::npos) << e.what();
  }
  const std::string fast = "\"mma_sync_fp16_tflops\": 11";
  text.replace(text.find(fast), fast.size(), "\"mma_sync_fp16_tflops\": 10");
  EXPECT_EQ(parse_device(text, "ok.json").mma_sync_fp16_tflops, 10);
}

}  // namespace
}  // namespace fusetune::planner
