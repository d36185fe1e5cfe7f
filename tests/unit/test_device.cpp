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
}

}  // namespace
}  // namespace fusetune::planner
