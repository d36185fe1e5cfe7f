// Device identity (planner/device_identity.h): the attribute sets a CUDA driver reports for the
// GPUs the planner describes are told apart, including those a product-name substring confused
// (an H100 PCIe is not the SXM module, a GH200 not an H200 nor an H100 NVL), and a GPU no
// description fits is unknown and described from its attributes. The attribute sets are written
// from NVIDIA's data sheets (SMs, L2, memory, its clock and bus width: the bandwidth the sheets
// give, 2 x clock x width), not recorded from the devices; on a lent GPU, bench/gpu_check.sh's
// `fusetune tune --device auto` prints the description the driver's attributes identified.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "planner/device.h"
#include "planner/device_identity.h"
#include "worker/daemon.h"

namespace fusetune::planner {
namespace {

DriverAttributes gpu(std::string name, int cc, int sms, int64_t l2, int64_t memory, int64_t memory_clock_khz, int bus_bits,
                     int64_t clock_khz) {
  DriverAttributes a;
  a.name = std::move(name);
  a.compute_capability = cc;
  a.sms = sms;
  a.l2_bytes = l2;
  a.memory_bytes = memory;
  a.memory_clock_khz = memory_clock_khz;
  a.bus_width_bits = bus_bits;
  a.clock_khz = clock_khz;
  return a;
}

constexpr int64_t kMiB = 1 << 20;

TEST(DeviceIdentity, EveryDescribedGpuIsToldApartFromItsAttributes) {
  const std::vector<std::pair<DriverAttributes, std::string>> known = {
      {gpu("NVIDIA H100 80GB HBM3", 90, 132, 50 * kMiB, 81559 * kMiB, 2619000, 5120, 1980000), "h100"},
      {gpu("NVIDIA H100 PCIe", 90, 114, 50 * kMiB, 81559 * kMiB, 1593000, 5120, 1755000), "h100-pcie"},
      {gpu("NVIDIA H100 NVL", 90, 132, 50 * kMiB, 95830 * kMiB, 2539000, 6144, 1785000), "h100-nvl"},
      {gpu("NVIDIA GH200 480GB", 90, 132, 50 * kMiB, 97280 * kMiB, 2619000, 6144, 1980000), "gh200"},
      {gpu("NVIDIA H200", 90, 132, 50 * kMiB, 143771 * kMiB, 3201000, 6144, 1980000), "h200"},
      {gpu("NVIDIA A100-SXM4-80GB", 80, 108, 40 * kMiB, 81051 * kMiB, 1593000, 5120, 1410000), "a100"},
      {gpu("NVIDIA A100-SXM4-40GB", 80, 108, 40 * kMiB, 40536 * kMiB, 1215000, 5120, 1410000), "a100-40gb"},
      {gpu("NVIDIA L4", 89, 58, 48 * kMiB, 22491 * kMiB, 6251000, 192, 2040000), "l4"},
      {gpu("NVIDIA GeForce RTX 4090", 89, 128, 72 * kMiB, 24217 * kMiB, 10501000, 384, 2520000), "rtx4090"},
  };
  for (const auto& [attributes, expected] : known) {
    std::string why;
    EXPECT_EQ(identify_device(attributes, &why), expected) << attributes.name << ": " << why;
    // Every built-in description is among them (a new one needs its attribute set here).
    const Device d = find_device(expected);
    EXPECT_EQ(d.sms, attributes.sms) << expected;
  }
  EXPECT_EQ(known.size(), builtin_device_names().size());
}

TEST(DeviceIdentity, AGpuNoDescriptionFitsIsUnknownAndDescribedFromItsAttributes) {
  // A GH200 with 144 GB of HBM3e: its 60 MB L2 is no H200's, its name no H200's or H100's.
  const DriverAttributes gh200e = gpu("NVIDIA GH200 144G HBM3e", 90, 132, 60 * kMiB, 146432 * kMiB, 3189000, 6144, 1980000);
  std::string why;
  EXPECT_EQ(identify_device(gh200e, &why), "");
  EXPECT_NE(why.find("h200: L2 of"), std::string::npos) << why;
  const Device d = describe_device(gh200e);
  EXPECT_EQ(d.name, "sm_90-132sm");
  EXPECT_EQ(d.arch, "sm_90");
  EXPECT_EQ(d.l2_bytes, 60 * kMiB);
  EXPECT_NEAR(d.dram_bandwidth_gbps, 4898, 1);
  EXPECT_NE(d.description.find("GH200 144G"), std::string::npos);
  EXPECT_DOUBLE_EQ(d.fp16_tensor_tflops, find_device("h100").fp16_tensor_tflops);  // same SMs and clock as its base
  // An architecture none is described at (sm_86): from the nearest below (sm_80), its rates
  // scaled by SMs x clock.
  const DriverAttributes rtx3090 = gpu("NVIDIA GeForce RTX 3090", 86, 82, 6 * kMiB, 24259 * kMiB, 9751000, 384, 1695000);
  EXPECT_EQ(identify_device(rtx3090, &why), "");
  const Device ampere = describe_device(rtx3090);
  EXPECT_EQ(ampere.arch, "sm_86");
  EXPECT_EQ(ampere.sms, 82);
  EXPECT_NEAR(ampere.fp32_tflops, 19.5 * 82 * 1695 / (108.0 * 1410), 1e-9);
  // An H100's name on the PCIe card's attributes but 124 SMs: neither.
  EXPECT_EQ(identify_device(gpu("NVIDIA H100", 90, 124, 50 * kMiB, 65536 * kMiB, 1593000, 5120, 1755000), &why), "");
  // Nothing to describe from.
  EXPECT_THROW(describe_device(gpu("?", 90, 0, 0, 0, 0, 0, 0)), Error);
}

// A worker on a GPU no description fits names it by the description made from its attributes,
// registered in its process, so that an embedded coordinator (`fusetune tune`) plans for it.
TEST(DeviceIdentity, AWorkerOnAnUnknownGpuPlansForItsDescription) {
  backend::DeviceProperties props;
  props.description = "NVIDIA GH200 144G HBM3e";
  props.arch = "sm_90";
  props.attributes = gpu(props.description, 90, 132, 60 * kMiB, 146432 * kMiB, 3189000, 6144, 1980000);
  const std::string name = worker::planner_device_name(props);
  EXPECT_EQ(name, "sm_90-132sm");
  const Device d = find_device(name);
  EXPECT_EQ(d.l2_bytes, 60 * kMiB);
  EXPECT_THROW(register_device(find_device("h100")), Error) << "a built-in description's name taken over";
  props.attributes = gpu("NVIDIA H200", 90, 132, 50 * kMiB, 143771 * kMiB, 3201000, 6144, 1980000);
  EXPECT_EQ(worker::planner_device_name(props), "h200");
  backend::DeviceProperties host;
  host.arch = "host";
  EXPECT_EQ(worker::planner_device_name(host), "host");
}

}  // namespace
}  // namespace fusetune::planner
