// Device: what the planner knows of a target GPU, read from a JSON description
// (planner/devices/*.json, compiled in; or any file of the same form).
//
// find_device("h100") returns a built-in description; load_device(path) reads a file. Both
// validate every field (present, positive, consistent) and throw Error naming the device and field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fusetune::planner {

// The int8 mma.sync (m16n8k32) rate against the float16 one (modeled, not yet measured): dense
// INT8 tensor TOPS are twice FP16 TFLOPS on A100, H100 and H200 (their datasheets).
inline constexpr double kImmaPerFp16Mma = 2.0;
// The share of a tensor-core instruction's rate (Device::fp16_tensor_tflops, the datasheets' peak
// at the boost clock; mma_sync_fp16_tflops and the TF32 pair, what those instructions issue at the
// same clock) that a kernel sustains: every lease measured
// a 4096^3 float16 torch.matmul (cuBLAS) at 0.77 to 0.78 of the 989 TFLOP/s peak (768 on an H100,
// 761 and 776 on H200s; docs/performance.md), so no kernel keeps the pipe busier than that. The
// generated tensor-core forms are charged this share, the share cuBLASLt's calls are charged
// (kCublasLtRates, its FFMA kernels alike): no generated form is modeled to use the tensor cores better than the tuned
// library does. (Modeled; the generated forms' own share on large products is not measured yet.)
inline constexpr double kTensorSustained = 0.7;
// dp4a instructions a clock per SM (modeled, not yet measured): the rate CUDA's throughput table
// gives the 32-bit integer multiply-add pipe on compute capability 7.x to 9.0, where dp4a issues.
inline constexpr int kDp4aPerClockPerSm = 64;

struct Device {
  std::string name;
  std::string description;
  std::string arch;  // "sm_90"
  int compute_capability = 0;
  int sms = 0;
  int warp_size = 32;
  int max_threads_per_block = 0;
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;
  int registers_per_sm = 0;
  int max_registers_per_thread = 0;
  int64_t shared_memory_per_sm = 0;
  int64_t shared_memory_per_block = 0;
  int64_t shared_memory_per_block_optin = 0;
  int64_t l2_bytes = 0;
  int64_t dram_bytes = 0;
  double dram_bandwidth_gbps = 0;
  double dram_latency_ns = 0;  // loaded: bytes in flight to reach the bandwidth = bandwidth x latency
  double l2_bandwidth_gbps = 0;
  double shared_bandwidth_gbps_per_sm = 0;
  int sector_bytes = 32;
  int cache_line_bytes = 128;
  // Arithmetic rates per instruction class, TFLOP/s. fp16_tensor_tflops: the dense float16
  // tensor-core peak (on sm_90 reached only by wgmma, as cuBLASLt does); mma_sync_fp16_tflops:
  // what the warp-level mma.sync that generated kernels issue attains (the same before sm_90; on
  // Hopper about two thirds of the peak); the TF32 pair likewise.
  double fp32_tflops = 0;
  double fp16_tensor_tflops = 0;
  double mma_sync_fp16_tflops = 0;
  double tf32_tensor_tflops = 0;
  double mma_sync_tf32_tflops = 0;
  int special_ops_per_clock_per_sm = 0;  // special function unit results (exp2, rsqrt, sin, ...)
  int clock_mhz = 0;

  double special_ops_per_us() const { return static_cast<double>(sms) * special_ops_per_clock_per_sm * clock_mhz; }
  // dp4a's operations (8 an instruction: four multiplies, four adds) a second, in TOP/s.
  double dp4a_tops() const { return static_cast<double>(sms) * kDp4aPerClockPerSm * 8 * clock_mhz * 1e-6; }
};

Device parse_device(const std::string& json_text, const std::string& label);
Device load_device(const std::filesystem::path& path);
// A built-in description, or one registered in this process, by name.
Device find_device(const std::string& name);
// Makes `d` (a GPU described from its attributes: planner/device_identity.h) one find_device
// returns by its name in this process; throws for a built-in description's name.
void register_device(const Device& d);
std::vector<std::string> builtin_device_names();

}  // namespace fusetune::planner
