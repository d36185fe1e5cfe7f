// Device identity: which of the planner's descriptions (planner/devices) a GPU is, from what its
// driver reports, and a description of one that none of them is.
//
// Takes the attributes a CUDA driver reports of a device (cuDeviceGetName, the compute
// capability, SM count, L2 size, total memory, peak memory clock and bus width, SM clock).
// identify_device matches them against every built-in description: the compute capability and
// the SM count equal, the L2 size, the memory size and the DRAM bandwidth (2 x memory clock x bus
// width, double data rate) each within 12% of the description's; where several match, the product
// name decides (a "GH200" is not an "H100 NVL", though their SMs, L2 and memory nearly agree):
// the one whose name's family tokens the driver's name holds. The name alone decides nothing: an
// "H100" with 114 SMs and HBM2e is the PCIe card, not the SXM module, and a GPU whose attributes
// match no description is unknown, never the nearest known one. describe_device builds a
// description of any GPU from its attributes: the limits per SM of its architecture's built-in
// description (the same compute capability; else the nearest lower one), its own SMs, L2, memory,
// bandwidth and clock, and the rates of that description scaled by SMs x clock.
// Guarantees: deterministic; identify_device returns a built-in name or "" with `why` saying
// which attribute ruled each candidate out; describe_device's result passes the planner's
// validation (planner/device.h) or it throws Error naming the attribute.
#pragma once

#include <cstdint>
#include <string>

#include "planner/device.h"

namespace fusetune::planner {

struct DriverAttributes {
  std::string name;            // "NVIDIA H100 80GB HBM3"
  int compute_capability = 0;  // major x 10 + minor
  int sms = 0;
  int64_t l2_bytes = 0;
  int64_t memory_bytes = 0;
  int64_t memory_clock_khz = 0;  // peak
  int bus_width_bits = 0;
  int64_t clock_khz = 0;         // peak SM clock
  double dram_bandwidth_gbps() const {
    return 2.0 * static_cast<double>(memory_clock_khz) * 1e3 * bus_width_bits / 8.0 / 1e9;
  }
};

// The built-in description the device is ("h100-pcie"), or "" (and `why`) when none is.
std::string identify_device(const DriverAttributes& a, std::string* why = nullptr);

// A description of the device from its attributes (see the header comment), named
// "sm_<cc>-<sms>sm" and described as the driver names it.
Device describe_device(const DriverAttributes& a);

}  // namespace fusetune::planner
