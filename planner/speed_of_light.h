// Speed of light: the least time a kernel's work can take on a device, and how much of the device
// a launch can keep busy, from figures known without running on it.
//
// Takes a device (planner/device.h), a kernel's launch (grid, threads per block), what ptxas
// reports for it (registers per thread, shared memory per block) and the work it does (bytes of
// DRAM traffic and floating-point operations, counted by the host executor or modeled: the caller
// says which, and never mixes the two). Gives:
//  - the speed-of-light time: the largest of bytes / DRAM bandwidth, operations / the peak of
//    the instruction class the kernel computes with (for a kernel using mma, the rate mma.sync
//    attains, every counted operation charged at it, a lower bound; the FP32 peak otherwise) and
//    special-function results / the special function units' rate, and which bounds it;
//  - occupancy as CUDA's occupancy calculator computes it: blocks per SM limited by threads,
//    registers (per warp, in allocation units of 256; per thread rounded up to 8), shared memory
//    (with the 1 KB per block the runtime reserves from sm_80 on) and the block limit; the
//    launch's resident warps per SM (a grid smaller than a full wave leaves SMs idle);
//  - bytes in flight per SM if each resident warp has one global load request of the given size
//    outstanding (a model: the GPU may keep more per warp; Little's law asks bandwidth x latency).
// Guarantees: deterministic; every figure finite; occupancy in [0, 1].
#pragma once

#include <cstdint>
#include <string>

#include "planner/device.h"

namespace fusetune::planner {

struct LaunchShape {
  int64_t grid = 1;
  int threads = 32;
  int registers = 0;           // per thread (ptxas); 0 if not known: not a limit
  int64_t shared_bytes = 0;    // per block, dynamic included
};

struct Occupancy {
  int blocks_per_sm = 0;       // the most that fit on one SM
  std::string limit;           // "threads", "registers", "shared memory", "blocks"
  double occupancy = 0;        // resident warps / the SM's warp slots, at blocks_per_sm
  double resident_warps = 0;   // per SM in this launch: its blocks spread over the SMs
};

Occupancy occupancy(const Device& d, const LaunchShape& launch);

struct SpeedOfLight {
  double memory_us = 0;   // bytes / DRAM bandwidth
  double compute_us = 0;  // the larger of operations / the peak of the kernel's instruction class
                          // and special-function results / their rate
  double us = 0;          // the larger of memory_us and compute_us
  std::string bound;      // "memory" or "compute"
  std::string peak;       // what bounds compute_us: "fp32", "dp4a", "mma.sync", "mma.sync.tf32", "mma.sync.int8",
                          // "wgmma" or "special"
};

// The instruction class a kernel computes with: FP32 issue, dp4a (8-bit integer products at
// Device::dp4a_tops), or
// tensor cores by mma.sync on 16-bit operands, on TF32 ones or on 8-bit integers (kImmaPerFp16Mma
// times the 16-bit rate), or by wgmma (the tensor peak); its operations are charged at that
// class's rate. `special_ops`: its special-function results (exp, sqrt, ...), apart from
// `operations`.
enum class Pipe { kFp32, kDp4a, kMmaSync, kMmaSyncTf32, kMmaSyncInt8, kWgmma };
SpeedOfLight speed_of_light(const Device& d, double bytes, double operations, double special_ops, Pipe pipe);

// Bytes in flight per SM with one load request of `bytes_per_request` outstanding per resident warp.
double bytes_in_flight_per_sm(const Occupancy& o, double bytes_per_request);

}  // namespace fusetune::planner
