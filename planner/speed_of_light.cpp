#include "planner/speed_of_light.h"

#include <algorithm>

#include "core/integer.h"

namespace fusetune::planner {

Occupancy occupancy(const Device& d, const LaunchShape& launch) {
  Occupancy o;
  const int64_t warps_per_block = ceil_div(std::max(launch.threads, 1), d.warp_size);
  const int64_t warp_slots = d.max_threads_per_sm / d.warp_size;
  const auto consider = [&](int64_t blocks, const char* why) {
    if (o.limit.empty() || blocks < o.blocks_per_sm) {
      o.blocks_per_sm = static_cast<int>(std::max<int64_t>(0, blocks));
      o.limit = why;
    }
  };
  consider(d.max_blocks_per_sm, "blocks");
  consider(warp_slots / warps_per_block, "threads");
  if (launch.registers > 0) {
    const int64_t per_thread = ceil_div(launch.registers, 8) * 8;
    const int64_t per_warp = ceil_div(per_thread * d.warp_size, 256) * 256;
    consider((d.registers_per_sm / per_warp) / warps_per_block, "registers");
  }
  if (launch.shared_bytes > 0) {
    const int64_t reserved = d.compute_capability >= 80 ? 1024 : 0;
    consider(d.shared_memory_per_sm / (launch.shared_bytes + reserved), "shared memory");
  }
  o.occupancy = static_cast<double>(o.blocks_per_sm * warps_per_block) / static_cast<double>(warp_slots);
  const double blocks_here = std::min<double>(o.blocks_per_sm, static_cast<double>(ceil_div(std::max<int64_t>(launch.grid, 1), d.sms)));
  o.resident_warps = blocks_here * static_cast<double>(warps_per_block);
  return o;
}

SpeedOfLight speed_of_light(const Device& d, double bytes, double operations, double special_ops, Pipe pipe) {
  SpeedOfLight s;
  s.memory_us = bytes / (d.dram_bandwidth_gbps * 1e3);  // GB/s = 1e3 bytes per µs
  const double tflops = pipe == Pipe::kMmaSync       ? d.mma_sync_fp16_tflops
                        : pipe == Pipe::kMmaSyncTf32 ? d.mma_sync_tf32_tflops
                        : pipe == Pipe::kMmaSyncInt8 ? kImmaPerFp16Mma * d.mma_sync_fp16_tflops
                        : pipe == Pipe::kWgmma       ? d.fp16_tensor_tflops
                        : pipe == Pipe::kDp4a        ? d.dp4a_tops()
                                                     : d.fp32_tflops;
  s.compute_us = operations / (tflops * 1e6);  // TFLOP/s = 1e6 operations per µs
  s.peak = pipe == Pipe::kMmaSync       ? "mma.sync"
           : pipe == Pipe::kMmaSyncTf32 ? "mma.sync.tf32"
           : pipe == Pipe::kMmaSyncInt8 ? "mma.sync.int8"
           : pipe == Pipe::kWgmma       ? "wgmma"
           : pipe == Pipe::kDp4a        ? "dp4a"
                                        : "fp32";
  const double special_us = special_ops / d.special_ops_per_us();
  if (special_us > s.compute_us) {
    s.compute_us = special_us;
    s.peak = "special";
  }
  s.bound = s.compute_us > s.memory_us ? "compute" : "memory";
  s.us = std::max(s.memory_us, s.compute_us);
  return s;
}

double bytes_in_flight_per_sm(const Occupancy& o, double bytes_per_request) { return o.resident_warps * bytes_per_request; }

}  // namespace fusetune::planner
