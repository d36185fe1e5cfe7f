#include "planner/device_identity.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "planner/devices_embedded.h"

namespace fusetune::planner {

namespace {

constexpr double kTolerance = 0.12;

bool near(double a, double b) { return b > 0 && std::abs(a - b) <= kTolerance * b; }

// The upper-case words of a product name ("NVIDIA A100-SXM4-80GB" -> NVIDIA, A100, SXM4, 80GB).
std::set<std::string> words(const std::string& name) {
  std::set<std::string> out;
  std::string w;
  for (char c : name + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      w += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!w.empty()) {
      out.insert(w);
      w.clear();
    }
  }
  return out;
}

// The word a description's product name holds: its name up to a '-', upper case, without "RTX"
// ("h100-pcie" -> H100, "gh200" -> GH200, "rtx4090" -> 4090).
std::string family(const std::string& device_name) {
  std::string f = device_name.substr(0, device_name.find('-'));
  for (char& c : f) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return f.rfind("RTX", 0) == 0 ? f.substr(3) : f;
}

std::string gb(double bytes) {
  std::ostringstream out;
  out.precision(3);
  out << bytes / 1e9;
  return out.str();
}

}  // namespace

std::string identify_device(const DriverAttributes& a, std::string* why) {
  const std::set<std::string> named = words(a.name);
  std::vector<std::string> matching;
  std::string reasons;
  for (const EmbeddedDevice& e : embedded_devices()) {
    const Device d = find_device(std::string(e.name));
    std::string no;
    if (d.compute_capability != a.compute_capability) {
      no = "compute capability " + std::to_string(a.compute_capability) + ", not " + std::to_string(d.compute_capability);
    } else if (d.sms != a.sms) {
      no = std::to_string(a.sms) + " SMs, not " + std::to_string(d.sms);
    } else if (!near(static_cast<double>(a.l2_bytes), static_cast<double>(d.l2_bytes))) {
      no = "L2 of " + gb(static_cast<double>(a.l2_bytes)) + " GB, not " + gb(static_cast<double>(d.l2_bytes));
    } else if (!near(static_cast<double>(a.memory_bytes), static_cast<double>(d.dram_bytes))) {
      no = gb(static_cast<double>(a.memory_bytes)) + " GB of memory, not " + gb(static_cast<double>(d.dram_bytes));
    } else if (!near(a.dram_bandwidth_gbps(), d.dram_bandwidth_gbps)) {
      no = gb(a.dram_bandwidth_gbps() * 1e9) + " TB/s of DRAM bandwidth (memory clock x bus width), not " +
           gb(d.dram_bandwidth_gbps * 1e9);
    } else if (!named.count(family(d.name))) {
      no = "the name '" + a.name + "' is not a " + family(d.name);
    }
    if (no.empty()) {
      matching.push_back(d.name);
    } else {
      reasons += (reasons.empty() ? "" : "; ") + d.name + ": " + no;
    }
  }
  if (matching.size() == 1) return matching.front();
  if (why != nullptr) {
    *why = matching.empty() ? "'" + a.name + "' is none of the built-in descriptions (" + reasons + ")"
                            : "'" + a.name + "' matches several descriptions equally";
  }
  return "";
}

Device describe_device(const DriverAttributes& a) {
  check(a.compute_capability > 0 && a.sms > 0 && a.l2_bytes > 0 && a.memory_bytes > 0 && a.memory_clock_khz > 0 &&
            a.bus_width_bits > 0 && a.clock_khz > 0,
        "device '", a.name, "': the driver reported no compute capability, SMs, L2, memory, memory clock, bus width or clock");
  // The architecture's description: the same compute capability, else the nearest lower one.
  const EmbeddedDevice* base = nullptr;
  int base_cc = 0;
  for (const EmbeddedDevice& e : embedded_devices()) {
    const int cc = find_device(std::string(e.name)).compute_capability;
    if (cc <= a.compute_capability && cc > base_cc) {
      base = &e;
      base_cc = cc;
    }
  }
  check(base != nullptr, "device '", a.name, "': no built-in description of compute capability ", a.compute_capability,
        " or lower to start from (give one with --device-file)");
  nlohmann::json j = nlohmann::json::parse(base->json);
  const double scale = static_cast<double>(a.sms) * static_cast<double>(a.clock_khz) / 1000.0 /
                       (j.at("sms").get<double>() * j.at("clock_mhz").get<double>());
  j["name"] = "sm_" + std::to_string(a.compute_capability) + "-" + std::to_string(a.sms) + "sm";
  j["description"] = a.name + " (described from its driver's attributes, rates scaled from " + std::string(base->name) + ")";
  j["arch"] = "sm_" + std::to_string(a.compute_capability);
  j["compute_capability"] = a.compute_capability;
  j["sms"] = a.sms;
  j["l2_bytes"] = a.l2_bytes;
  j["dram_bytes"] = a.memory_bytes;
  j["dram_bandwidth_gbps"] = std::round(a.dram_bandwidth_gbps());
  j["clock_mhz"] = a.clock_khz / 1000;
  for (const char* rate : {"fp32_tflops", "fp16_tensor_tflops", "mma_sync_fp16_tflops", "tf32_tensor_tflops",
                           "mma_sync_tf32_tflops", "l2_bandwidth_gbps"}) {
    j[rate] = j.at(rate).get<double>() * scale;
  }
  return parse_device(j.dump(), "device '" + a.name + "' (described from its attributes)");
}

}  // namespace fusetune::planner
