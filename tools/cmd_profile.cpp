// fusetune profile (its options: tools/command_table.cpp): runs a plan bundle once on the
// host's SIMT executor (simt/executor.h), with its checks, and prints per kernel (the launches
// that run one kernel together: a model's repeated layers; the JSON says how many) what it did to
// memory: global requests and 32-byte sectors (loads, stores), sectors per request, the unique
// sectors of the launch as bytes (a lower bound on the DRAM traffic a GPU moves), shared-memory
// requests and bank-conflict wavefronts, barriers, floating-point operations (and transcendental
// calls apart: simt/prelude.h says what counts), and the planner's modeled DRAM bytes and
// arithmetic for the same kernel (manifest `modeled_dram_bytes`, `modeled_flops`) with the ratios
// counted / modeled; the bytes of the sectors requested against the modeled L2 traffic
// (`modeled_l2_bytes`) in the JSON and for the plan. Counted figures come from executing the
// kernels; modeled ones from the cost model; the table labels each. `ld 16B` and `st 16B`: the
// share of the global sectors requested by 16-byte (128-bit) accesses, cp.async copies included;
// the plan's share on a line of its own.
// --sites N adds the N access sites (lines of kernels.cu) with the most sectors or wavefronts
// beyond one per request: where uncoalesced accesses and bank conflicts come from.
// --sol adds, per kernel, the speed of light on the plan's device (planner/speed_of_light.h) for
// the counted bytes and operations (memory: bytes / DRAM bandwidth; compute: operations / the peak
// of the kernel's instruction class, mma.sync's rate for a kernel using mma (on 16-bit, TF32 or
// 8-bit integer operands), dp4a's for one using dp4a, or its transcendental
// calls / the special function units' rate, the larger), what bounds it, ptxas's
// registers and shared memory per block, occupancy and what limits it, bytes in flight per SM
// (modeled: one load request of the counted mean size per resident warp), and the modeled time
// against the speed of light; with the plan's totals. Counted figures (bytes, operations) and
// modeled ones (time, bytes in flight) stay in their own columns; their ratio says how far the
// model's time is above what the counted work needs at the device's peaks.
// --ptx adds, per kernel, the census of the PTX NVRTC emits for the plan's architecture
// (backend/ptx_census.h: native and software float16 conversions, global loads and stores by
// width, cp.async, mma.sync, wgmma, 64- and 32-bit integer division, local memory, the longest
// run of global loads before a shared store or barrier): static instruction counts, beside the
// executed counts above.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/nvrtc.h"
#include "backend/ptx_census.h"
#include "backend/verify.h"
#include "core/error.h"
#include "importer/test_data.h"
#include "planner/speed_of_light.h"
#include "planner/tiling.h"
#include "runtime/bundle.h"
#include "runtime/plan_runner.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"

namespace fusetune::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Random inputs for the plan's inputs: normal floats, integers in [0, 1] (token ids and masks
// of the bundled models stay in range).
std::vector<Tensor> random_inputs(const std::vector<runtime::TensorSpec>& specs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> out;
  for (const runtime::TensorSpec& s : specs) out.push_back(backend::random_tensor(s.dtype, s.shape, 0, 1, rng));
  return out;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

// The share of the global load (or store) sectors requested by 16-byte accesses.
double wide_share(const simt::Counters& c, bool store) {
  return ratio(static_cast<double>(c.global_sectors_of_width(16, store)),
               static_cast<double>(store ? c.global_store_sectors : c.global_load_sectors));
}

// The n access sites with the most sectors (global) or wavefronts (shared) beyond what full-warp
// requests of their size need (Counters::Site::ideal).
void print_sites(const std::map<std::string, simt::Counters>& counted, size_t n) {
  struct Row {
    std::string kernel;
    const void* site;
    simt::Counters::Site c;
  };
  std::vector<Row> rows;
  for (const auto& [kernel, c] : counted) {
    for (const auto& [site, sc] : c.sites) rows.push_back({kernel, site, sc});
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) {
              const auto excess = [](const simt::Counters::Site& c) {
                return static_cast<double>(c.units) - static_cast<double>(c.ideal());
              };
              return excess(a.c) > excess(b.c);
            });
  rows.resize(std::min(rows.size(), n));
  std::vector<const void*> sites;
  for (const Row& r : rows) sites.push_back(r.site);
  const std::map<const void*, std::string> lines = simt::site_lines(sites);
  std::printf("access sites with the most sectors (global) or wavefronts (shared) beyond the least full-warp requests "
              "need (counted):\n");
  std::printf("%-6s %-16s %-16s %10s %10s %8s %8s\n", "kernel", "line", "access", "requests", "units", "per req",
              "least");
  for (const Row& r : rows) {
    const auto it = lines.find(r.site);
    const std::string access = std::string(r.c.global ? "global " : "shared ") + (r.c.store ? "store " : "load ") +
                               std::to_string(r.c.size) + "B";
    std::printf("%-6s %-16s %-16s %10llu %10llu %8.2f %8.2f\n", r.kernel.c_str(),
                it == lines.end() ? "?" : it->second.c_str(), access.c_str(),
                static_cast<unsigned long long>(r.c.requests), static_cast<unsigned long long>(r.c.units),
                ratio(static_cast<double>(r.c.units), static_cast<double>(r.c.requests)),
                ratio(static_cast<double>(r.c.ideal()), static_cast<double>(r.c.requests)));
  }
}

// The speed-of-light table (--sol) of the rows sol_row made.
void print_sol(const json& rows, const planner::Device& d, double sol_total_us, double modeled_total_us) {
  std::printf("speed of light on %s (%.0f GB/s, %.0f TFLOP/s fp32, %.0f TFLOP/s mma.sync, %.0f G special/s) for the "
              "counted bytes and operations; modeled time from the cost model; bytes in flight per SM as one load request of the "
              "counted mean size a resident warp (cp.async rings keep more in flight):\n",
              d.name.c_str(), d.dram_bandwidth_gbps, d.fp32_tflops, d.mma_sync_fp16_tflops, d.special_ops_per_us() / 1e3);
  std::printf("%-6s %10s %8s %7s %5s %8s %7s %13s %6s %9s %11s %10s %9s\n", "kernel", "SOL us", "bound", "peak", "regs",
              "smem B", "blk/SM", "limit", "occ", "warps/SM", "KB in fl/SM", "model us", "mod/SOL");
  for (const json& r : rows) {
    const json& s = r.at("sol");
    std::printf("%-6s %10.3f %8s %7s %5d %8lld %7d %13s %6.2f %9.1f %11.2f %10.3f %9.2f\n",
                r.at("kernel").get<std::string>().c_str(), s.at("sol_us").get<double>(), s.at("bound").get<std::string>().c_str(),
                s.at("peak").get<std::string>().c_str(), s.at("registers").get<int>(),
                static_cast<long long>(s.at("shared_bytes").get<int64_t>()), s.at("blocks_per_sm").get<int>(),
                s.at("occupancy_limit").get<std::string>().c_str(), s.at("occupancy").get<double>(),
                s.at("resident_warps_per_sm").get<double>(), s.at("modeled_bytes_in_flight_per_sm").get<double>() / 1024,
                s.at("modeled_us").get<double>(), s.at("modeled_over_sol").get<double>());
  }
  std::printf("plan: speed of light %.3f us, modeled %.3f us, modeled / SOL %.2f\n", sol_total_us, modeled_total_us,
              ratio(modeled_total_us, sol_total_us));
}

// The kernel's text in a module (from its signature to the next kernel's): to see what it computes with.
std::string kernel_text(const std::string& cuda, const std::string& kernel) {
  const size_t at = cuda.find(") " + kernel + "(");
  if (at == std::string::npos) return "";
  return cuda.substr(at, cuda.find("extern \"C\"", at) - at);
}

// Speed of light of one counted kernel on `d` (see the header comment).
json sol_row(const planner::Device& d, const json& launch, const simt::Counters& c, const std::string& cuda, double modeled_us) {
  const json& res = launch.value("resources", json::object()).value(d.arch, json::object());
  planner::LaunchShape shape;
  shape.grid = launch.at("grid").get<int64_t>();
  shape.threads = launch.at("threads").get<int>();
  shape.registers = res.value("registers", 0);
  shape.shared_bytes = launch.value("shared_bytes", int64_t{0});
  const std::string text = kernel_text(cuda, launch.at("kernel").get<std::string>());
  const planner::Pipe pipe = text.find("ft_wgmma") != std::string::npos                 ? planner::Pipe::kWgmma
                             : text.find("ft_mma_m16n8k16_") != std::string::npos     ? planner::Pipe::kMmaSync
                             : text.find("ft_mma_m16n8k8_tf32(") != std::string::npos ? planner::Pipe::kMmaSyncTf32
                             : text.find("ft_mma_m16n8k32_") != std::string::npos     ? planner::Pipe::kMmaSyncInt8
                             : text.find("ft_dp4a_") != std::string::npos             ? planner::Pipe::kDp4a
                                                                                       : planner::Pipe::kFp32;
  const planner::SpeedOfLight s = planner::speed_of_light(d, static_cast<double>(c.unique_bytes()), static_cast<double>(c.flops),
                                                          static_cast<double>(c.special_ops), pipe);
  const planner::Occupancy o = planner::occupancy(d, shape);
  const double per_request = ratio(static_cast<double>(c.global_load_sectors) * d.sector_bytes, static_cast<double>(c.global_load_requests));
  return {{"sol_us", s.us},
          {"sol_memory_us", s.memory_us},
          {"sol_compute_us", s.compute_us},
          {"bound", s.bound},
          {"peak", s.peak},
          {"registers", shape.registers},
          {"shared_bytes", shape.shared_bytes},
          {"blocks_per_sm", o.blocks_per_sm},
          {"occupancy_limit", o.limit},
          {"occupancy", o.occupancy},
          {"resident_warps_per_sm", o.resident_warps},
          {"modeled_bytes_in_flight_per_sm", planner::bytes_in_flight_per_sm(o, per_request)},
          {"modeled_us", modeled_us},
          {"modeled_over_sol", ratio(modeled_us, s.us)}};
}

// The PTX census table (--ptx) of the rows, with the plan's totals.
void print_ptx(const json& rows, const json& total, const std::string& arch) {
  static const std::pair<const char*, const char*> kColumns[] = {
      {"cvt_f16_to_f32", "cvt>f32"},      {"cvt_f32_to_f16", "cvt>16"},        {"software_conversion", "sw conv"},
      {"global_loads", "ld"},             {"global_loads_16bit", "ld 16b"},    {"global_loads_128bit", "ld 128b"},
      {"global_loads_readonly", "ld.nc"}, {"global_stores", "st"},             {"global_stores_16bit", "st 16b"},
      {"global_stores_128bit", "st 128b"}, {"cp_async", "cp.async"},           {"mma_sync", "mma"},
      {"wgmma", "wgmma"},                 {"ldmatrix", "ldmatrix"},            {"div_rem_64", "div64"},
      {"div_rem_32", "div32"},            {"local_accesses", "local"},         {"longest_load_run", "ld run"}};
  std::printf("PTX for %s (NVRTC; static instruction counts, not executions):\n%-6s", arch.c_str(), "kernel");
  for (const auto& [key, head] : kColumns) std::printf(" %8s", head);
  std::printf("\n");
  const auto row = [](const std::string& name, const json& c) {
    std::printf("%-6s", name.c_str());
    for (const auto& [key, head] : kColumns) std::printf(" %8lld", static_cast<long long>(c.at(key).get<int64_t>()));
    std::printf("\n");
  };
  for (const json& r : rows) row(r.at("kernel").get<std::string>(), r.at("ptx"));
  row("plan", total);
}

}  // namespace

int cmd_profile(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("profile");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1, spec);
  const fs::path dir = args.positional()[0];
  const runtime::Bundle bundle = runtime::read_bundle(dir);
  const json manifest = json::parse(bundle.manifest);
  const std::unique_ptr<backend::Backend> be = backend::make_host_backend();
  runtime::PlanRunner runner(bundle, *be);
  const auto seed = static_cast<uint32_t>(args.number("seed", 1));
  std::vector<Tensor> inputs;
  if (args.has("inputs")) {
    std::vector<std::string> names;
    for (const auto& input : runner.inputs()) names.push_back(input.name);
    inputs = importer::bind_inputs(names, importer::load_test_data(args.get("inputs")), nullptr);
  } else {
    inputs = random_inputs(runner.inputs(), seed);
  }
  runner.run(inputs);  // a finding of the checks throws: `fusetune` exits 3 naming it
  const std::map<std::string, simt::Counters> counted = runner.counters();
  const bool sol = args.has("sol");
  const bool ptx = args.has("ptx");
  const std::string arch = manifest.at("arch").get<std::string>();
  std::map<std::string, backend::PtxCounts> census;
  backend::PtxCounts census_total;
  if (ptx) {
    check(backend::nvrtc_available(), "profile --ptx needs NVRTC: ", backend::nvrtc_unavailable_reason());
    for (backend::KernelPtx& k : backend::ptx_census(backend::compile_ptx(bundle.cuda_source, arch))) census[k.name] = k.counts;
  }
  const planner::Device device = planner::find_device(manifest.at("device").get<std::string>());
  json rows = json::array();
  simt::Counters total;
  int64_t modeled_total = 0, modeled_l2_total = 0, modeled_flops_total = 0;
  double sol_total_us = 0, modeled_us_total = 0;
  // A row per kernel: launches that run one kernel (compiler/compile_bundle.h: a model's repeated
  // layers) are counted together by the host, and their row adds up what the model says of each.
  struct KernelRow {
    const json* launch = nullptr;  // the first that runs it
    int launches = 0;
    int64_t modeled = 0, modeled_l2 = 0, modeled_flops = 0;
    double modeled_us = 0;
    std::string groups;
  };
  std::vector<std::string> order;
  std::map<std::string, KernelRow> by_kernel;
  for (const json& l : manifest.at("launches")) {
    const std::string kernel = l.at("kernel").get<std::string>();
    KernelRow& kr = by_kernel[kernel];
    if (kr.launches++ == 0) {
      order.push_back(kernel);
      kr.launch = &l;
      for (const json& g : l.at("groups")) kr.groups += (kr.groups.empty() ? "" : " | ") + g.at("pattern").get<std::string>();
    }
    for (const json& g : l.at("groups")) {
      kr.modeled += g.value("modeled_dram_bytes", int64_t{0});
      kr.modeled_l2 += g.value("modeled_l2_bytes", int64_t{0});
      kr.modeled_flops += g.value("modeled_flops", int64_t{0});
      kr.modeled_us += g.value("modeled_us", 0.0);
    }
    // Groups packed into one launch pay one launch's overhead between them (planner/select.cpp),
    // where each group's modeled time counts its own.
    if (const size_t packed = l.at("groups").size(); packed > 1) {
      kr.modeled_us -= static_cast<double>(packed - 1) * planner::TilingOptions{}.launch_overhead_us;
    }
  }
  for (const std::string& kernel : order) {
    const KernelRow& kr = by_kernel.at(kernel);
    const int64_t modeled = kr.modeled, modeled_l2 = kr.modeled_l2, modeled_flops = kr.modeled_flops;
    const double modeled_us = kr.modeled_us;
    const std::string& groups = kr.groups;
    const auto it = counted.find(kernel);
    if (it == counted.end()) continue;  // a library call (not executed by the SIMT executor), or a branch not taken
    const simt::Counters& c = it->second;
    total += c;
    modeled_total += modeled;
    modeled_l2_total += modeled_l2;
    modeled_flops_total += modeled_flops;
    rows.push_back({{"kernel", kernel},
                    {"launches", kr.launches},
                    {"groups", groups},
                    {"counted",
                     {{"global_load_requests", c.global_load_requests},
                      {"global_load_sectors", c.global_load_sectors},
                      {"global_store_requests", c.global_store_requests},
                      {"global_store_sectors", c.global_store_sectors},
                      {"global_load_sectors_16B", c.global_sectors_of_width(16, false)},
                      {"global_store_sectors_16B", c.global_sectors_of_width(16, true)},
                      {"unique_load_sectors", c.unique_load_sectors},
                      {"unique_store_sectors", c.unique_store_sectors},
                      {"unique_bytes", c.unique_bytes()},
                      {"requested_bytes", c.requested_bytes()},
                      {"redundant_stores", c.redundant_stores},
                      {"shared_load_requests", c.shared_load_requests},
                      {"shared_load_wavefronts", c.shared_load_wavefronts},
                      {"shared_store_requests", c.shared_store_requests},
                      {"shared_store_wavefronts", c.shared_store_wavefronts},
                      {"barriers", c.barriers},
                      {"warp_operations", c.warp_operations},
                      {"flops", c.flops},
                      {"special_ops", c.special_ops}}},
                    {"modeled", {{"dram_bytes", modeled}, {"l2_bytes", modeled_l2}, {"flops", modeled_flops}}},
                    {"counted_over_modeled_bytes", ratio(static_cast<double>(c.unique_bytes()), static_cast<double>(modeled))},
                    {"counted_over_modeled_l2_bytes",
                     ratio(static_cast<double>(c.requested_bytes()), static_cast<double>(modeled_l2))},
                    {"counted_over_modeled_flops",
                     ratio(static_cast<double>(c.flops + c.special_ops), static_cast<double>(modeled_flops))}});
    if (ptx) {
      const auto p = census.find(kernel);
      check(p != census.end(), "kernel ", kernel, " of the manifest is not in the plan's PTX");
      rows.back()["ptx"] = p->second.to_json();
      census_total += p->second;
    }
    if (sol) {
      rows.back()["sol"] = sol_row(device, *kr.launch, c, bundle.cuda_source, modeled_us);
      sol_total_us += rows.back()["sol"]["sol_us"].get<double>();
      modeled_us_total += modeled_us;
    }
  }
  if (args.has("json")) {
    json totals = {{"counted_unique_bytes", total.unique_bytes()},
                   {"counted_load_sectors_16B_share", wide_share(total, false)},
                   {"counted_store_sectors_16B_share", wide_share(total, true)},
                   {"modeled_dram_bytes", modeled_total},
                   {"counted_requested_bytes", total.requested_bytes()},
                   {"modeled_l2_bytes", modeled_l2_total},
                   {"counted_flops", total.flops},
                   {"counted_special_ops", total.special_ops},
                   {"modeled_flops", modeled_flops_total}};
    if (sol) {
      totals["sol_us"] = sol_total_us;
      totals["modeled_us"] = modeled_us_total;
      totals["modeled_over_sol"] = ratio(modeled_us_total, sol_total_us);
      totals["device"] = device.name;
    }
    if (ptx) totals["ptx"] = census_total.to_json();
    std::printf("%s\n", json({{"plan", dir.string()}, {"kernels", rows}, {"total", totals}}).dump(2).c_str());
    return 0;
  }
  std::printf("%s: %zu kernels executed on the host (counted) against the traffic model (modeled)%s\n",
              dir.string().c_str(), rows.size(), args.has("inputs") ? "" : (", random inputs, seed " + std::to_string(seed)).c_str());
  std::printf("%-6s %10s %9s %6s %10s %9s %6s %12s %12s %6s %10s %8s %6s %10s %9s %10s %6s  %s\n", "kernel", "ld req",
              "ld sec/req", "ld 16B", "st req", "st sec/req", "st 16B", "counted MB", "modeled MB", "ratio", "smem req",
              "wf/req", "bars", "MFLOP", "M special", "mod MFLOP", "ratio", "groups");
  for (const json& r : rows) {
    const json& c = r.at("counted");
    const double ld = c.at("global_load_requests").get<double>(), st = c.at("global_store_requests").get<double>();
    const double sreq = c.at("shared_load_requests").get<double>() + c.at("shared_store_requests").get<double>();
    const double swf = c.at("shared_load_wavefronts").get<double>() + c.at("shared_store_wavefronts").get<double>();
    std::printf("%-6s %10.0f %9.2f %5.0f%% %10.0f %9.2f %5.0f%% %12.4f %12.4f %6.2f %10.0f %8.2f %6llu %10.4f %9.4f %10.4f "
                "%6.2f  %s\n",
                r.at("kernel").get<std::string>().c_str(), ld, ratio(c.at("global_load_sectors").get<double>(), ld),
                100 * ratio(c.at("global_load_sectors_16B").get<double>(), c.at("global_load_sectors").get<double>()), st,
                ratio(c.at("global_store_sectors").get<double>(), st),
                100 * ratio(c.at("global_store_sectors_16B").get<double>(), c.at("global_store_sectors").get<double>()),
                c.at("unique_bytes").get<double>() / 1e6,
                r.at("modeled").at("dram_bytes").get<double>() / 1e6, r.at("counted_over_modeled_bytes").get<double>(), sreq,
                ratio(swf, sreq), static_cast<unsigned long long>(c.at("barriers").get<uint64_t>()),
                c.at("flops").get<double>() / 1e6, c.at("special_ops").get<double>() / 1e6,
                r.at("modeled").at("flops").get<double>() / 1e6, r.at("counted_over_modeled_flops").get<double>(),
                r.at("groups").get<std::string>().c_str());
  }
  std::printf("plan: counted %.4f MB unique (a lower bound on DRAM traffic), modeled %.4f MB, ratio %.2f\n",
              static_cast<double>(total.unique_bytes()) / 1e6, static_cast<double>(modeled_total) / 1e6,
              ratio(static_cast<double>(total.unique_bytes()), static_cast<double>(modeled_total)));
  std::printf("plan: counted %.4f MB requested in 32-byte sectors (the L2 traffic where L1 keeps nothing), modeled L2 "
              "%.4f MB, ratio %.2f\n",
              static_cast<double>(total.requested_bytes()) / 1e6, static_cast<double>(modeled_l2_total) / 1e6,
              ratio(static_cast<double>(total.requested_bytes()), static_cast<double>(modeled_l2_total)));
  std::printf("plan: counted %.0f%% of the global load sectors and %.0f%% of the store sectors requested by 16-byte "
              "accesses (ld 16B, st 16B)\n",
              100 * wide_share(total, false), 100 * wide_share(total, true));
  std::printf("plan: counted %.4f MFLOP and %.4f M transcendental calls, modeled %.4f MFLOP (all arithmetic), ratio %.2f\n",
              static_cast<double>(total.flops) / 1e6, static_cast<double>(total.special_ops) / 1e6,
              static_cast<double>(modeled_flops_total) / 1e6,
              ratio(static_cast<double>(total.flops + total.special_ops), static_cast<double>(modeled_flops_total)));
  if (const auto n = static_cast<size_t>(args.number("sites", 0)); n > 0) print_sites(counted, n);
  if (sol) print_sol(rows, device, sol_total_us, modeled_us_total);
  if (ptx) print_ptx(rows, census_total.to_json(), arch);
  return 0;
}

}  // namespace fusetune::cli
