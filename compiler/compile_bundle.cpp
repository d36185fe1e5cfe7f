#include "compiler/compile_bundle.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "backend/cublas_lt.h"
#include "backend/cudnn.h"
#include "backend/nvrtc.h"
#include "codegen/emit.h"
#include "codegen/kernel_identity.h"
#include "codegen/lower_group.h"
#include "codegen/memory_plan.h"
#include "core/error.h"
#include "core/parallel.h"
#include "planner/library_call.h"

namespace fusetune::compiler {

using nlohmann::json;

namespace {

json tensor_json(const Value& v) { return {{"name", v.name}, {"dtype", std::string(dtype_name(v.dtype))}, {"shape", v.shape}}; }

}  // namespace

runtime::Bundle compile_bundle(const Graph& g, const planner::ModelPlan& plan, const planner::Device& device,
                      const std::string& model_name, const BundleOptions& options,
                      std::vector<CompiledLaunch>* launches_out) {
  runtime::Bundle b;
  // One kernel per launch, run in launch id order (planner/fusion.h: producers first): groups the
  // planner packed into a launch become parts of one kernel (as measured: only parts measured at
  // the same thread count, which the packed kernel keeps).
  std::map<std::pair<int, int>, std::vector<size_t>> by_launch;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const planner::GroupPlan& gp = plan.groups[k];
    check(gp.candidates[gp.chosen].cost.valid, "group ", k, " (", gp.group.pattern, ") has no valid candidate: ",
          gp.candidates[gp.chosen].cost.reject);
    const int threads = options.as_measured ? gp.candidates[gp.chosen].config.threads : 0;
    by_launch[{gp.group.launch, threads}].push_back(k);
  }
  std::vector<std::vector<size_t>> launch_groups;
  for (auto& [key, groups] : by_launch) launch_groups.push_back(std::move(groups));
  // The candidate each group runs: the plan's choice, unless ptxas reports that it spills and a
  // lower-ranked candidate of the same group does not (a spilling candidate is never used silently).
  std::vector<size_t> choice(plan.groups.size());
  for (size_t k = 0; k < plan.groups.size(); ++k) choice[k] = plan.groups[k].chosen;
  std::vector<codegen::Kernel> kernels;
  std::vector<codegen::LoweredKernel> lowered;
  b.group_configs.assign(plan.groups.size(), "");
  std::map<size_t, int> launch_threads;  // a packed launch's thread count, when lowered to avoid spills
  // Launch l as one kernel: its groups' chosen candidates, all with the launch's thread count.
  auto lower_launch = [&](size_t l, int threads, const std::string& name) {
    std::vector<codegen::LoweredKernel> parts;
    int64_t base = 0;
    for (size_t j = 0; j < launch_groups[l].size(); ++j) {
      const size_t k = launch_groups[l][j];
      planner::TileConfig cfg = plan.groups[k].candidates[choice[k]].config;
      cfg.threads = threads;
      codegen::LowerOptions lo;
      if (launch_groups[l].size() > 1) lo.param_prefix = "p" + std::to_string(j) + "_";
      lo.block_base = base;
      parts.push_back(codegen::lower_group(g, plan.groups[k].group, cfg, name, lo));
      base += parts.back().kernel.grid;
    }
    return codegen::pack_kernels(parts, name);
  };
  // Lowered launches by what determines them (launch, thread count, each part's group and
  // candidate), so that a rebuild after a spill substitution lowers only the launches it changed
  // (a packed launch taken apart moves the launches after it: their parts tell them apart).
  std::map<std::vector<size_t>, codegen::LoweredKernel> lowered_by_key;
  auto build = [&]() {
    std::vector<std::vector<size_t>> keys(launch_groups.size());
    for (size_t l = 0; l < launch_groups.size(); ++l) {
      int threads = 0;
      for (size_t k : launch_groups[l]) threads = std::max(threads, plan.groups[k].candidates[choice[k]].config.threads);
      if (auto t = launch_threads.find(l); t != launch_threads.end()) threads = t->second;
      keys[l] = {l, static_cast<size_t>(threads)};
      for (size_t k : launch_groups[l]) {
        planner::TileConfig cfg = plan.groups[k].candidates[choice[k]].config;
        cfg.threads = threads;
        b.group_configs[k] = cfg.str();
        keys[l].push_back(k);
        keys[l].push_back(choice[k]);
      }
    }
    std::vector<size_t> missing;
    for (size_t l = 0; l < keys.size(); ++l) {
      if (!lowered_by_key.count(keys[l])) missing.push_back(l);
    }
    std::vector<codegen::LoweredKernel> fresh(missing.size());
    parallel_for(missing.size(), [&](size_t j) {  // launches are lowered independently, on every core
      const size_t l = missing[j];
      fresh[j] = lower_launch(l, static_cast<int>(keys[l][1]), "k" + std::to_string(l));
    });
    for (size_t j = 0; j < missing.size(); ++j) lowered_by_key[keys[missing[j]]] = std::move(fresh[j]);
    // Launches whose generated kernels are the same up to their own names (codegen/kernel_identity.h:
    // a model's repeated layers), on the same grid and shared memory, run one kernel: the later
    // ones take the first one's name, and the module holds it once.
    kernels.clear();
    lowered.clear();
    std::vector<codegen::Kernel> distinct;
    std::map<std::string, std::string> named;  // a kernel's canonical text -> the name it runs under
    for (const std::vector<size_t>& key : keys) {
      lowered.push_back(lowered_by_key.at(key));
      codegen::Kernel& kernel = lowered.back().kernel;
      if (kernel.library.empty()) {
        const std::string launch = std::to_string(kernel.grid) + " blocks, " + std::to_string(kernel.shared_bytes) + " bytes\n";
        const auto [first, unseen] = named.emplace(launch + codegen::canonical_text(kernel), kernel.name);
        if (unseen) distinct.push_back(kernel);
        kernel.name = first->second;
      }
      kernels.push_back(kernel);
    }
    b.cuda_source = codegen::emit_cuda(distinct);
  };
  // Whether a kernel compiled on its own spills registers.
  auto spills_alone = [&](const codegen::Kernel& kernel) {
    const auto r = backend::compile_cuda_cached(codegen::emit_cuda({kernel}), device.arch).resources;
    return !r.count(kernel.name) || r.at(kernel.name).spills();
  };
  build();
  std::map<std::string, backend::KernelResources> resources;
  std::string nvrtc = "unavailable";
  std::map<size_t, std::string> spill_avoided;  // group -> the spilling config it replaced
  if (backend::nvrtc_available()) {
    backend::CompiledCuda cc = backend::compile_cuda_cached(b.cuda_source, device.arch);
    std::map<std::string, size_t> probed;  // signature -> candidate that does not spill
    bool changed = false;
    for (size_t l = 0; l < launch_groups.size() && !options.as_measured; ++l) {
      auto r = cc.resources.find(kernels[l].name);
      if (r == cc.resources.end() || !r->second.spills()) continue;
      if (launch_groups[l].size() > 1) {  // a packed launch: fewer threads leave more registers each
        // A split-K part keeps its candidate's thread count (its warps' layout: planner::PackTerms),
        // so such a launch's parts become launches of their own, in order, each judged alone next.
        const bool own_threads = std::any_of(launch_groups[l].begin(), launch_groups[l].end(), [&](size_t k) {
          return plan.groups[k].candidates[choice[k]].config.split_k > 1;
        });
        if (own_threads) {
          std::vector<std::vector<size_t>> alone;
          for (size_t k : launch_groups[l]) alone.push_back({k});
          launch_groups.erase(launch_groups.begin() + static_cast<long>(l));
          launch_groups.insert(launch_groups.begin() + static_cast<long>(l), alone.begin(), alone.end());
          // (launch_threads, keyed by launch, holds none at or after l yet: the indices it holds stay.)
          build();
          cc = backend::compile_cuda_cached(b.cuda_source, device.arch);
          --l;  // the loop's increment comes back to launch l, now the first part alone
          continue;
        }
        for (int threads : {256, 128, 64}) {
          if (threads >= kernels[l].threads || spills_alone(lower_launch(l, threads, "probe").kernel)) continue;
          launch_threads[l] = threads;
          changed = true;
          break;
        }
        continue;
      }
      const size_t k = launch_groups[l][0];
      const planner::GroupPlan& gp = plan.groups[k];
      auto known = probed.find(gp.signature);
      if (known == probed.end()) {
        // The other candidates in rank order, probed a batch of the machine's threads at a time
        // (each its own NVRTC compilation: tens of seconds for a kernel of thousands of lines,
        // which a large group's candidates all are); the first of them that does not spill wins.
        std::vector<size_t> order;
        for (size_t c = 0; c < gp.candidates.size(); ++c) {
          if (c != choice[k] && gp.candidates[c].cost.valid && !options.rejected.count({gp.signature, gp.candidates[c].config.str()})) {
            order.push_back(c);
          }
        }
        size_t pick = choice[k];
        const size_t batch = std::max(1u, std::thread::hardware_concurrency());
        for (size_t at = 0; at < order.size() && pick == choice[k]; at += batch) {
          std::vector<char> spills(std::min(batch, order.size() - at));
          parallel_for(spills.size(), [&](size_t j) {
            spills[j] = spills_alone(codegen::lower_group(g, gp.group, gp.candidates[order[at + j]].config, "probe").kernel) ? 1 : 0;
          });
          const auto first = std::find(spills.begin(), spills.end(), 0);
          if (first != spills.end()) pick = order[at + static_cast<size_t>(first - spills.begin())];
        }
        known = probed.emplace(gp.signature, pick).first;
      }
      if (known->second != choice[k]) {
        spill_avoided[k] = gp.candidates[choice[k]].config.str();
        choice[k] = known->second;
        changed = true;
      }
    }
    if (changed) {
      build();
      cc = backend::compile_cuda_cached(b.cuda_source, device.arch);
    }
    b.cubins[device.arch] = cc.cubin;
    b.ptx[backend::target_architecture(device.arch)] = cc.ptx;
    resources = cc.resources;
    nvrtc = backend::nvrtc_version();
  }
  // Buffers: every value a kernel reads or writes, and the graph's inputs and outputs.
  std::vector<int> producer_launch(g.values().size(), -1), last_use(g.values().size(), -1);
  for (size_t k = 0; k < lowered.size(); ++k) {
    for (int v : lowered[k].outputs) producer_launch[static_cast<size_t>(v)] = static_cast<int>(k);
    for (int v : lowered[k].inputs) last_use[static_cast<size_t>(v)] = static_cast<int>(k);
    for (const Guard& gd : plan.groups[launch_groups[k][0]].group.guards) last_use[static_cast<size_t>(gd.cond)] = static_cast<int>(k);
  }
  std::set<int> graph_in(g.inputs().begin(), g.inputs().end()), graph_out(g.outputs().begin(), g.outputs().end());
  // A value a launch updates in place (planner/in_place.h) shares the buffer of the value it
  // updates: a class of values per buffer, named by its first, that lives from the first's
  // producer to the last read of any member, and is a graph output's buffer if one member is.
  std::map<int, int> first_of;   // member -> its class's first value (members only)
  std::map<int, int> class_last;  // first -> the class's last launch
  std::map<int, int> class_output;  // first -> the member that is a graph output
  for (size_t k = 0; k < lowered.size(); ++k) {
    for (size_t o = 0; o < lowered[k].in_place.size(); ++o) {
      if (lowered[k].in_place[o] < 0) continue;
      const int data = lowered[k].inputs[static_cast<size_t>(lowered[k].in_place[o])];
      const int first = first_of.count(data) ? first_of[data] : data;
      check(!graph_in.count(first) && !graph_out.count(data) && !g.value(first).is_constant(), "launch ", k,
            " updates '", g.value(data).name, "' in place, a graph input, output or constant");
      first_of[lowered[k].outputs[o]] = first;
    }
  }
  for (const auto& [member, first] : first_of) {
    const auto m = static_cast<size_t>(member);
    int& last = class_last.try_emplace(first, std::max(last_use[static_cast<size_t>(first)], producer_launch[static_cast<size_t>(first)])).first->second;
    last = std::max({last, last_use[m], producer_launch[m]});
    if (graph_out.count(member)) {
      const auto [other, fresh] = class_output.emplace(first, member);
      check(fresh, "two graph outputs, '", g.value(member).name, "' and '", g.value(other->second).name, "', would share one buffer");
    }
  }
  std::map<int, int> buffer_id;
  json buffers = json::array();
  std::vector<codegen::Lifetime> lifetimes;
  std::vector<size_t> arena_entries;
  // The buffer of value v (its class's first), described by the graph output among its members if any.
  auto make_buffer = [&](int v) {
    const int named = class_output.count(v) ? class_output[v] : v;
    const Value& val = g.value(named);
    const int64_t bytes = numel(val.shape) * static_cast<int64_t>(dtype_size(val.dtype));
    json e = tensor_json(val);
    e["id"] = buffers.size();
    e["bytes"] = bytes;
    if (graph_in.count(v)) {
      e["kind"] = "input";
    } else if (graph_out.count(named)) {
      e["kind"] = "output";
      if (val.is_constant()) e["constant_offset"] = b.constants.size();
    } else if (val.is_constant()) {
      e["kind"] = "constant";
    } else {
      e["kind"] = "intermediate";
      const auto at = static_cast<size_t>(v);
      const int last = class_last.count(v) ? class_last[v] : std::max(last_use[at], producer_launch[at]);
      lifetimes.push_back({bytes, producer_launch[at], last});
      arena_entries.push_back(buffers.size());
    }
    if (val.is_constant()) {
      const size_t offset = (b.constants.size() + 255) / 256 * 256;
      b.constants.resize(offset);
      b.constants.insert(b.constants.end(), reinterpret_cast<const char*>(val.data->data()),
                         reinterpret_cast<const char*>(val.data->data()) + val.data->nbytes());
      e["constant_offset"] = offset;
    }
    buffer_id[v] = static_cast<int>(buffers.size());
    buffers.push_back(e);
  };
  auto add_buffer = [&](int v) {
    if (buffer_id.count(v)) return;
    const int first = first_of.count(v) ? first_of[v] : v;
    if (!buffer_id.count(first)) make_buffer(first);
    buffer_id[v] = buffer_id[first];
  };
  for (int v : g.inputs()) add_buffer(v);
  for (int v : g.outputs()) add_buffer(v);
  json launches = json::array();
  std::map<std::string, int> library_calls;  // library -> launches calling it
  for (size_t k = 0; k < lowered.size(); ++k) {
    const codegen::Kernel& kern = lowered[k].kernel;
    json args = json::array();
    for (int v : lowered[k].inputs) {
      add_buffer(v);
      args.push_back(buffer_id[v]);
    }
    for (int v : lowered[k].outputs) {
      add_buffer(v);
      args.push_back(buffer_id[v]);
    }
    json groups = json::array();
    for (size_t gi : launch_groups[k]) {
      const planner::GroupPlan& gp = plan.groups[gi];
      json ge = {{"signature", gp.signature},
                 {"pattern", gp.group.pattern},
                 {"config", b.group_configs[gi]},
                 {"modeled_us", gp.candidates[choice[gi]].cost.modeled_us},
                 {"modeled_dram_bytes", gp.candidates[choice[gi]].cost.dram_bytes},
                 {"modeled_l2_bytes", gp.candidates[choice[gi]].cost.l2_bytes},
                 {"modeled_flops", gp.candidates[choice[gi]].cost.flops}};
      if (auto sa = spill_avoided.find(gi); sa != spill_avoided.end()) ge["replaced_spilling_config"] = sa->second;
      groups.push_back(ge);
    }
    json entry = {{"kernel", kern.name},
                  {"groups", groups},
                  {"grid", kern.grid},
                  {"threads", kern.threads},
                  {"shared_bytes", kern.shared_bytes},
                  {"args", args}};
    if (auto r = resources.find(kern.name); r != resources.end()) {
      entry["resources"][device.arch] = {{"registers", r->second.registers},
                                         {"stack_bytes", r->second.stack_bytes},
                                         {"spill_store_bytes", r->second.spill_store_bytes},
                                         {"spill_load_bytes", r->second.spill_load_bytes},
                                         {"spills", r->second.spills()}};
    }
    entry["exceeds_shared_memory"] = kern.shared_bytes > device.shared_memory_per_block_optin;
    // A launch of an If's branch decided at run time: it runs when each condition (a bool buffer)
    // holds the value given, read in order (packed groups share their guards: planner/fusion.h).
    if (const std::vector<Guard>& guards = plan.groups[launch_groups[k][0]].group.guards; !guards.empty()) {
      json when = json::array();
      for (const Guard& gd : guards) {
        add_buffer(gd.cond);
        when.push_back({{"buffer", buffer_id[gd.cond]}, {"equals", gd.when}});
      }
      entry["when"] = when;
    }
    if (!kern.library.empty()) {
      entry["library"] = json::parse(kern.library);
      ++library_calls[planner::library_family(planner::LibraryCall::from_json(kern.library).op)];
    }
    launches.push_back(entry);
  }
  // The libraries the plan calls, with the version this machine has (where it can load them): the
  // GPU that runs the plan loads its own at run time.
  json libraries = json::object();
  for (const auto& [name, calls] : library_calls) {
    const std::string version = name == planner::kCudnn ? backend::cudnn_version() : backend::cublaslt_version();
    libraries[name] = {{"calls", calls}, {"version_where_compiled", version.empty() ? json(nullptr) : json(version)}};
  }
  const codegen::ArenaPlan arena = codegen::plan_arena(lifetimes);
  for (size_t i = 0; i < arena_entries.size(); ++i) buffers[arena_entries[i]]["arena_offset"] = arena.offsets[i];
  json inputs = json::array(), outputs = json::array();
  for (int v : g.inputs()) inputs.push_back(buffer_id[v]);
  for (int v : g.outputs()) outputs.push_back(buffer_id[v]);
  json output_extents = json::array();  // outputs of data-dependent size (core/graph.h DataExtent)
  const std::vector<OutputExtent> extents = g.output_extents();
  for (size_t k = 0; k < extents.size(); ++k) {
    if (extents[k].count_output >= 0) output_extents.push_back({{"output", k}, {"count", extents[k].count_output}, {"axis", extents[k].axis}});
  }
  // Where the model's inputs or outputs include sequences or optionals: each ONNX input and output
  // and how many of the plan's tensors it is (core/graph.h OnnxValue).
  const auto onnx_values = [](const std::vector<OnnxValue>& list) {
    json out = json::array();
    for (const OnnxValue& v : list) out.push_back({{"name", v.name}, {"kind", onnx_value_kind_name(v.kind)}, {"tensors", v.tensors}});
    return out;
  };
  json manifest = {{"format", "fusetune-plan"},
                         {"version", runtime::kBundleFormatVersion},
                         {"codegen_version", codegen::kCodegenVersion},
                         {"model", model_name},
                         {"device", device.name},
                         {"arch", device.arch},
                         {"nvrtc", nvrtc},
                         {"precision", plan.tf32 ? "tf32" : "model"},
                         {"inputs", inputs},
                         {"outputs", outputs},
                         {"output_extents", output_extents},
                         {"buffers", buffers},
                         {"arena_bytes", arena.arena_bytes},
                         {"constants_bytes", b.constants.size()},
                         {"launches", launches},
                         {"libraries", libraries},
                         {"modeled_us", plan.modeled_us}};
  if (!g.onnx_inputs().empty()) {
    manifest["onnx_inputs"] = onnx_values(g.onnx_inputs());
    manifest["onnx_outputs"] = onnx_values(g.onnx_outputs());
  }
  // Names from the model that are not UTF-8 (ONNX says they are; a file need not be) become U+FFFD
  // rather than failing the bundle.
  b.manifest = manifest.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  if (launches_out != nullptr) {
    launches_out->clear();
    for (size_t l = 0; l < lowered.size(); ++l) launches_out->push_back({lowered[l], launch_groups[l]});
  }
  return b;
}

}  // namespace fusetune::compiler
