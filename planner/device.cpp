#include "planner/device.h"

#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "planner/devices_embedded.h"

namespace fusetune::planner {

namespace {

template <typename T>
void field(const nlohmann::json& j, const char* key, T& out, const std::string& label) {
  check(j.contains(key), label, ": field '", key, "' is missing");
  try {
    out = j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(label, ": field '", key, "' has the wrong type");
  }
  if constexpr (std::is_arithmetic_v<T>) check(out > 0, label, ": field '", key, "' must be positive");
}

}  // namespace

Device parse_device(const std::string& json_text, const std::string& label) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail(label, ": not valid JSON (", e.what(), ")");
  }
  check(j.is_object(), label, ": a device description must be a JSON object");
  Device d;
  field(j, "name", d.name, label);
  field(j, "description", d.description, label);
  field(j, "arch", d.arch, label);
  field(j, "compute_capability", d.compute_capability, label);
  field(j, "sms", d.sms, label);
  field(j, "warp_size", d.warp_size, label);
  field(j, "max_threads_per_block", d.max_threads_per_block, label);
  field(j, "max_threads_per_sm", d.max_threads_per_sm, label);
  field(j, "max_blocks_per_sm", d.max_blocks_per_sm, label);
  field(j, "registers_per_sm", d.registers_per_sm, label);
  field(j, "max_registers_per_thread", d.max_registers_per_thread, label);
  field(j, "shared_memory_per_sm", d.shared_memory_per_sm, label);
  field(j, "shared_memory_per_block", d.shared_memory_per_block, label);
  field(j, "shared_memory_per_block_optin", d.shared_memory_per_block_optin, label);
  field(j, "l2_bytes", d.l2_bytes, label);
  field(j, "dram_bytes", d.dram_bytes, label);
  field(j, "dram_bandwidth_gbps", d.dram_bandwidth_gbps, label);
  field(j, "dram_latency_ns", d.dram_latency_ns, label);
  field(j, "l2_bandwidth_gbps", d.l2_bandwidth_gbps, label);
  field(j, "shared_bandwidth_gbps_per_sm", d.shared_bandwidth_gbps_per_sm, label);
  field(j, "sector_bytes", d.sector_bytes, label);
  field(j, "cache_line_bytes", d.cache_line_bytes, label);
  field(j, "fp32_tflops", d.fp32_tflops, label);
  field(j, "fp16_tensor_tflops", d.fp16_tensor_tflops, label);
  field(j, "mma_sync_fp16_tflops", d.mma_sync_fp16_tflops, label);
  field(j, "tf32_tensor_tflops", d.tf32_tensor_tflops, label);
  field(j, "mma_sync_tf32_tflops", d.mma_sync_tf32_tflops, label);
  field(j, "special_ops_per_clock_per_sm", d.special_ops_per_clock_per_sm, label);
  field(j, "clock_mhz", d.clock_mhz, label);
  check(d.arch == "sm_" + std::to_string(d.compute_capability), label, ": arch '", d.arch,
        "' does not match compute_capability ", d.compute_capability);
  check(d.shared_memory_per_block <= d.shared_memory_per_block_optin &&
            d.shared_memory_per_block_optin <= d.shared_memory_per_sm,
        label, ": shared memory limits are inconsistent (per block <= opt-in <= per SM)");
  check(d.mma_sync_fp16_tflops <= d.fp16_tensor_tflops && d.mma_sync_tf32_tflops <= d.tf32_tensor_tflops &&
            d.tf32_tensor_tflops <= d.fp16_tensor_tflops,
        label, ": tensor rates are inconsistent (mma.sync <= the peak of its type, TF32 <= float16)");
  check(d.max_threads_per_block <= d.max_threads_per_sm, label, ": max_threads_per_block exceeds max_threads_per_sm");
  return d;
}

Device load_device(const std::filesystem::path& path) {
  std::ifstream in(path);
  check(in.good(), path.string(), ": cannot read the device description");
  std::ostringstream buf;
  buf << in.rdbuf();
  return parse_device(buf.str(), path.string());
}

namespace {
// Descriptions registered at run time (register_device), by name.
std::mutex& registered_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Device>& registered() {
  static std::map<std::string, Device> devices;
  return devices;
}
}  // namespace

void register_device(const Device& d) {
  check(!d.name.empty(), "register_device: a description without a name");
  for (const EmbeddedDevice& e : embedded_devices()) {
    check(e.name != d.name, "register_device: '", d.name, "' is a built-in description's name");
  }
  std::lock_guard<std::mutex> lock(registered_mutex());
  registered()[d.name] = d;
}

Device find_device(const std::string& name) {
  for (const EmbeddedDevice& e : embedded_devices()) {
    if (e.name == name) return parse_device(std::string(e.json), "device '" + name + "'");
  }
  {
    std::lock_guard<std::mutex> lock(registered_mutex());
    if (const auto it = registered().find(name); it != registered().end()) return it->second;
  }
  std::string known;
  for (const std::string& n : builtin_device_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown device '", name, "' (built in: ", known, "; or give --device-file PATH)");
}

std::vector<std::string> builtin_device_names() {
  std::vector<std::string> names;
  for (const EmbeddedDevice& e : embedded_devices()) names.emplace_back(e.name);
  return names;
}

}  // namespace fusetune::planner
