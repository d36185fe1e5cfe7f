#include "planner/in_place.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/sha256.h"

namespace fusetune::planner {

namespace {

// A store touches whole 32-byte sectors.
constexpr int64_t kSectorBytes = 32;

}  // namespace

InPlaceUpdates::InPlaceUpdates(const Graph& g)
    : g_(g),
      producer_(g.producers()),
      consumers_(g.values().size()),
      graph_input_(g.values().size(), false),
      graph_output_(g.values().size(), false) {
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    for (int v : reads(g.nodes()[n])) consumers_[static_cast<size_t>(v)].push_back(static_cast<int>(n));
  }
  for (int v : g.inputs()) graph_input_[static_cast<size_t>(v)] = true;
  for (int v : g.outputs()) graph_output_[static_cast<size_t>(v)] = true;
}

bool InPlaceUpdates::ancestor(int a, int n) const {
  // Node ids are topological: a walk back from n visits only nodes after a.
  if (a >= n) return false;
  std::vector<int> todo = {n};
  std::set<int> seen = {n};
  while (!todo.empty()) {
    const int m = todo.back();
    todo.pop_back();
    for (int v : reads(g_.nodes()[static_cast<size_t>(m)])) {
      const int p = producer_[static_cast<size_t>(v)];
      if (p == a) return true;
      if (p > a && seen.insert(p).second) todo.push_back(p);
    }
  }
  return false;
}

bool InPlaceUpdates::eligible(const FusionGroup& group) const {
  if (group.nodes.size() != 1) return false;
  const int id = group.nodes[0];
  const Node& n = g_.nodes()[static_cast<size_t>(id)];
  if (n.op != "ScatterND" || !n.guards.empty()) return false;
  const int data = n.inputs[0];
  const auto d = static_cast<size_t>(data);
  if (n.inputs[1] == data || n.inputs[2] == data) return false;  // the kernel would read what it writes
  if (g_.value(data).is_constant() || graph_input_[d] || graph_output_[d] || producer_[d] < 0) return false;
  for (int c : consumers_[d]) {
    if (c != id && !ancestor(c, id)) return false;
  }
  const Value& ids = g_.value(n.inputs[1]);
  if (!ids.is_constant()) return false;
  const Shape& shape = g_.value(data).shape;
  const int64_t depth = ids.shape.back();
  if (depth < 1 || depth > static_cast<int64_t>(shape.size())) return false;
  const std::vector<int64_t> tuples = ids.data->to_ints();
  std::set<std::vector<int64_t>> seen;
  for (size_t t = 0; t < tuples.size(); t += static_cast<size_t>(depth)) {
    std::vector<int64_t> at(tuples.begin() + static_cast<std::ptrdiff_t>(t), tuples.begin() + static_cast<std::ptrdiff_t>(t) + depth);
    for (size_t j = 0; j < at.size(); ++j) {
      if (at[j] < -shape[j] || at[j] >= shape[j]) return false;
      if (at[j] < 0) at[j] += shape[j];
    }
    if (!seen.insert(at).second) return false;
  }
  return true;
}

Signature group_signature(const Graph& g, const FusionGroup& group, bool in_place) {
  Signature s = subgraph_signature(g, group.nodes);
  if (!in_place) return s;
  s.canonical_form += "in place: out0 is written into in0's buffer\n";
  s.digest = "v" + std::to_string(kSignatureVersion) + ":" + sha256_hex(s.canonical_form);
  return s;
}

std::vector<Candidate> in_place_candidates(const Graph& g, const FusionGroup& group, const Device& d,
                                           const TilingOptions& opt) {
  const Node& n = g.nodes()[static_cast<size_t>(group.nodes.at(0))];
  const Value& out = g.value(n.outputs[0]);
  const Value& ids = g.value(n.inputs[1]);
  const Value& upd = g.value(n.inputs[2]);
  const int64_t depth = ids.shape.back();
  const int64_t tuples = numel(ids.shape) / depth;
  const int64_t elems = numel(upd.shape);
  const int64_t slice = tuples == 0 ? 0 : elems / tuples;  // 0: no update element
  const auto esize = static_cast<int64_t>(dtype_size(out.dtype));
  const bool combines = n.attrs.s("reduction", "none") != "none";
  // Each tuple's slice is one contiguous run of the output (its trailing axes whole).
  const int64_t run = (slice * esize + kSectorBytes - 1) / kSectorBytes * kSectorBytes;
  const int64_t dram = numel(ids.shape) * static_cast<int64_t>(dtype_size(ids.dtype)) +
                       elems * static_cast<int64_t>(dtype_size(upd.dtype)) + tuples * run * (combines ? 2 : 1);
  // An element: its tuple's depth index loads, the update's load, (the output's,) the store, and
  // about as many integer operations (an issue slot each, charged like an FMA's 2 flops).
  const int64_t flops = elems * 2 * (2 * (depth + 2 + (combines ? 1 : 0)));
  std::vector<Candidate> out_candidates;
  for (int threads : {32, 64, 128, 256}) {
    for (int64_t per : {1, 2, 4, 8}) {
      if (per > 1 && threads * per / 2 >= elems) break;  // blocks no longer shrink the grid
      TileConfig cfg;
      cfg.tile = {threads * per};
      cfg.threads = threads;
      cfg.in_place = true;
      Cost c;
      c.tiles = std::max<int64_t>(1, (elems + threads * per - 1) / (threads * per));
      c.dram_bytes = dram;
      c.l2_bytes = dram;
      c.flops = flops;
      c.registers = 32;
      c.blocks_per_sm = std::min(d.max_threads_per_sm / threads, d.max_blocks_per_sm);
      c.efficiency = std::min(1.0, static_cast<double>(c.tiles) / d.sms);
      // A thread's elements are rounds of one DRAM latency each (its tuple's index, then the
      // store that needs it), the blocks an SM holds at once running theirs together; the first
      // round of every kernel is in the launch overhead (as planner/tiling.h charges it). Beyond
      // them the bytes stream at the device's bandwidth; each block costs its SM kBlockCostNs (block_cost_us).
      const int64_t waves = (c.tiles + static_cast<int64_t>(d.sms) * c.blocks_per_sm - 1) /
                            (static_cast<int64_t>(d.sms) * c.blocks_per_sm);
      const double latency_us = static_cast<double>(waves * per - 1) * d.dram_latency_ns / 1e3;
      const double dram_us = static_cast<double>(dram) / (d.dram_bandwidth_gbps * 1e3);
      c.issue_us = static_cast<double>(flops) / (d.fp32_tflops * 1e6);
      c.latency_bound = latency_us > std::max(dram_us, c.issue_us);
      c.modeled_us = std::max({dram_us, c.issue_us, latency_us}) + block_cost_us(c.tiles, d) + opt.launch_overhead_us;
      c.valid = true;
      out_candidates.push_back({cfg, c});
    }
  }
  std::stable_sort(out_candidates.begin(), out_candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.cost.modeled_us < b.cost.modeled_us; });
  return out_candidates;
}

void merge_candidates(std::vector<Candidate>& ranked, std::vector<Candidate> more, int top_k) {
  for (Candidate& c : more) {
    ranked.insert(std::upper_bound(ranked.begin(), ranked.end(), c,
                                   [](const Candidate& x, const Candidate& y) { return x.cost.modeled_us < y.cost.modeled_us; }),
                  std::move(c));
  }
  int generated = 0;
  std::erase_if(ranked, [&](const Candidate& c) { return c.config.library.empty() && ++generated > top_k; });
}

}  // namespace fusetune::planner
