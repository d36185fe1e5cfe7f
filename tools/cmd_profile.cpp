// fusetune profile PLAN_DIR [--inputs DIR] [--seed S] [--sites N] [--json]: runs a plan bundle once on the
// host's SIMT executor (simt/executor.h), with its checks, and prints per kernel what it did to
// memory: global requests and 32-byte sectors (loads, stores), sectors per request, the unique
// sectors of the launch as bytes (a lower bound on the DRAM traffic a GPU moves), shared-memory
// requests and bank-conflict wavefronts, barriers, floating-point operations (and transcendental
// calls apart: simt/prelude.h says what counts), and the planner's modeled DRAM bytes and
// arithmetic for the same kernel (manifest `modeled_dram_bytes`, `modeled_flops`) with the ratios
// counted / modeled. Counted figures come from executing the kernels; modeled ones from the cost
// model; the table labels each.
// --sites N adds the N access sites (lines of kernels.cu) with the most sectors or wavefronts
// beyond one per request: where uncoalesced accesses and bank conflicts come from.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/verify.h"
#include "core/error.h"
#include "importer/test_data.h"
#include "runtime/bundle.h"
#include "runtime/plan_runner.h"
#include "tools/cli_args.h"
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

}  // namespace

int cmd_profile(const std::vector<std::string>& argv) {
  const Args args(argv, {"inputs", "seed", "sites"}, {"json"});
  check(args.positional().size() == 1, "usage: fusetune profile PLAN_DIR [--inputs DIR] [--seed S] [--sites N] [--json]");
  const fs::path dir = args.positional()[0];
  const runtime::Bundle bundle = runtime::read_bundle(dir);
  const json manifest = json::parse(bundle.manifest);
  const std::unique_ptr<backend::Backend> be = backend::make_host_backend();
  runtime::PlanRunner runner(bundle, *be);
  const auto seed = static_cast<uint32_t>(args.number("seed", 1));
  std::vector<Tensor> inputs;
  if (args.has("inputs")) {
    std::vector<std::string> names;
    for (const auto& spec : runner.inputs()) names.push_back(spec.name);
    inputs = importer::bind_inputs(names, importer::load_test_data(args.get("inputs")).inputs, nullptr);
  } else {
    inputs = random_inputs(runner.inputs(), seed);
  }
  runner.run(inputs);  // a finding of the checks throws: `fusetune` exits 3 naming it
  const std::map<std::string, simt::Counters> counted = runner.counters();
  json rows = json::array();
  simt::Counters total;
  int64_t modeled_total = 0, modeled_flops_total = 0;
  for (const json& l : manifest.at("launches")) {
    const std::string kernel = l.at("kernel").get<std::string>();
    int64_t modeled = 0, modeled_flops = 0;
    std::string groups;
    for (const json& g : l.at("groups")) {
      modeled += g.value("modeled_dram_bytes", int64_t{0});
      modeled_flops += g.value("modeled_flops", int64_t{0});
      groups += (groups.empty() ? "" : " | ") + g.at("pattern").get<std::string>();
    }
    const auto it = counted.find(kernel);
    if (it == counted.end()) continue;  // a library call: not executed by the SIMT executor
    const simt::Counters& c = it->second;
    total += c;
    modeled_total += modeled;
    modeled_flops_total += modeled_flops;
    rows.push_back({{"kernel", kernel},
                    {"groups", groups},
                    {"counted",
                     {{"global_load_requests", c.global_load_requests},
                      {"global_load_sectors", c.global_load_sectors},
                      {"global_store_requests", c.global_store_requests},
                      {"global_store_sectors", c.global_store_sectors},
                      {"unique_load_sectors", c.unique_load_sectors},
                      {"unique_store_sectors", c.unique_store_sectors},
                      {"unique_bytes", c.unique_bytes()},
                      {"redundant_stores", c.redundant_stores},
                      {"shared_load_requests", c.shared_load_requests},
                      {"shared_load_wavefronts", c.shared_load_wavefronts},
                      {"shared_store_requests", c.shared_store_requests},
                      {"shared_store_wavefronts", c.shared_store_wavefronts},
                      {"barriers", c.barriers},
                      {"warp_operations", c.warp_operations},
                      {"flops", c.flops},
                      {"special_ops", c.special_ops}}},
                    {"modeled", {{"dram_bytes", modeled}, {"flops", modeled_flops}}},
                    {"counted_over_modeled_bytes", ratio(static_cast<double>(c.unique_bytes()), static_cast<double>(modeled))},
                    {"counted_over_modeled_flops",
                     ratio(static_cast<double>(c.flops + c.special_ops), static_cast<double>(modeled_flops))}});
  }
  if (args.has("json")) {
    std::printf("%s\n", json({{"plan", dir.string()},
                              {"kernels", rows},
                              {"total",
                               {{"counted_unique_bytes", total.unique_bytes()},
                                {"modeled_dram_bytes", modeled_total},
                                {"counted_flops", total.flops},
                                {"counted_special_ops", total.special_ops},
                                {"modeled_flops", modeled_flops_total}}}})
                            .dump(2)
                            .c_str());
    return 0;
  }
  std::printf("%s: %zu kernels executed on the host (counted) against the traffic model (modeled)%s\n",
              dir.string().c_str(), rows.size(), args.has("inputs") ? "" : (", random inputs, seed " + std::to_string(seed)).c_str());
  std::printf("%-6s %10s %9s %10s %9s %12s %12s %6s %10s %8s %6s %10s %9s %10s %6s  %s\n", "kernel", "ld req",
              "ld sec/req", "st req", "st sec/req", "counted MB", "modeled MB", "ratio", "smem req", "wf/req", "bars",
              "MFLOP", "M special", "mod MFLOP", "ratio", "groups");
  for (const json& r : rows) {
    const json& c = r.at("counted");
    const double ld = c.at("global_load_requests").get<double>(), st = c.at("global_store_requests").get<double>();
    const double sreq = c.at("shared_load_requests").get<double>() + c.at("shared_store_requests").get<double>();
    const double swf = c.at("shared_load_wavefronts").get<double>() + c.at("shared_store_wavefronts").get<double>();
    std::printf("%-6s %10.0f %9.2f %10.0f %9.2f %12.4f %12.4f %6.2f %10.0f %8.2f %6llu %10.4f %9.4f %10.4f %6.2f  %s\n",
                r.at("kernel").get<std::string>().c_str(), ld, ratio(c.at("global_load_sectors").get<double>(), ld), st,
                ratio(c.at("global_store_sectors").get<double>(), st), c.at("unique_bytes").get<double>() / 1e6,
                r.at("modeled").at("dram_bytes").get<double>() / 1e6, r.at("counted_over_modeled_bytes").get<double>(), sreq,
                ratio(swf, sreq), static_cast<unsigned long long>(c.at("barriers").get<uint64_t>()),
                c.at("flops").get<double>() / 1e6, c.at("special_ops").get<double>() / 1e6,
                r.at("modeled").at("flops").get<double>() / 1e6, r.at("counted_over_modeled_flops").get<double>(),
                r.at("groups").get<std::string>().c_str());
  }
  std::printf("plan: counted %.4f MB unique (a lower bound on DRAM traffic), modeled %.4f MB, ratio %.2f\n",
              static_cast<double>(total.unique_bytes()) / 1e6, static_cast<double>(modeled_total) / 1e6,
              ratio(static_cast<double>(total.unique_bytes()), static_cast<double>(modeled_total)));
  std::printf("plan: counted %.4f MFLOP and %.4f M transcendental calls, modeled %.4f MFLOP (all arithmetic), ratio %.2f\n",
              static_cast<double>(total.flops) / 1e6, static_cast<double>(total.special_ops) / 1e6,
              static_cast<double>(modeled_flops_total) / 1e6,
              ratio(static_cast<double>(total.flops + total.special_ops), static_cast<double>(modeled_flops_total)));
  if (const auto n = static_cast<size_t>(args.number("sites", 0)); n > 0) print_sites(counted, n);
  return 0;
}

}  // namespace fusetune::cli
