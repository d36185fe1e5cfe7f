#include "search/mutation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace fusetune::search {

namespace {

// A configuration's knobs as numbers: log2 of each tile extent and of the threads, the reduction
// step's log2 (0 for none), the vector width's log2, the tensor-core, wgmma, TMA,
// warp-specialization and GEMV flags, the split-K count's log2, the ring's stages (0: its form's
// default), and the form (last, never mutated: 1 flash attention, 2 an in-place update).
std::vector<double> knobs(const planner::TileConfig& c) {
  std::vector<double> k;
  for (int64_t t : c.tile) k.push_back(std::log2(static_cast<double>(std::max<int64_t>(t, 1))));
  k.push_back(std::log2(static_cast<double>(std::max(c.threads, 1))));
  k.push_back(c.reduce_step > 0 ? std::log2(static_cast<double>(c.reduce_step)) : -1);
  k.push_back(std::log2(static_cast<double>(std::max(c.vector, 1))));
  k.push_back(c.mma ? 1 : 0);
  k.push_back(c.wgmma ? 1 : 0);
  k.push_back(c.tma ? 1 : 0);
  k.push_back(c.ws ? 1 : 0);
  k.push_back(c.gemv ? 1 : 0);
  k.push_back(std::log2(static_cast<double>(std::max(c.split_k, 1))));
  k.push_back(c.ring_stages);
  k.push_back(c.flash ? 1 : (c.in_place ? 2 : 0));
  return k;
}

}  // namespace

std::vector<planner::TileConfig> neighbors(const std::vector<planner::Candidate>& space, const planner::TileConfig& parent) {
  if (!parent.library.empty()) return {};
  const std::vector<double> p = knobs(parent);
  // (knob, direction) -> the nearest configuration's index in the space and its distance
  std::map<std::pair<size_t, int>, std::pair<size_t, double>> nearest;
  for (size_t i = 0; i < space.size(); ++i) {
    const planner::TileConfig& c = space[i].config;
    if (!space[i].cost.valid || !c.library.empty() || c.tile.size() != parent.tile.size()) continue;
    const std::vector<double> q = knobs(c);
    size_t differ = 0, knob = 0;
    for (size_t j = 0; j < p.size(); ++j) {
      if (q[j] != p[j]) {
        ++differ;
        knob = j;
      }
    }
    if (differ != 1 || knob + 1 == p.size()) continue;  // one knob, and not the last (the form)
    const double d = q[knob] - p[knob];
    const auto key = std::make_pair(knob, d > 0 ? 1 : -1);
    auto it = nearest.find(key);
    if (it == nearest.end() || std::abs(d) < it->second.second) nearest[key] = {i, std::abs(d)};
  }
  std::vector<size_t> picked;
  for (const auto& [key, found] : nearest) picked.push_back(found.first);
  std::sort(picked.begin(), picked.end());
  std::vector<planner::TileConfig> out;
  for (size_t i : picked) out.push_back(space[i].config);
  return out;
}

std::vector<planner::TileConfig> next_trials(const std::vector<planner::Candidate>& space,
                                             const std::vector<std::string>& parents, const std::set<std::string>& tried,
                                             size_t k, const std::vector<double>* scores) {
  std::map<std::string, size_t> index;  // config -> position in the space (its modeled rank)
  for (size_t i = 0; i < space.size(); ++i) index.emplace(space[i].config.str(), i);
  // The space's positions, best ranked first: by score where given (ties by modeled rank).
  std::vector<size_t> ranked(space.size());
  std::iota(ranked.begin(), ranked.end(), 0);
  if (scores != nullptr && scores->size() == space.size()) {
    std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return (*scores)[a] < (*scores)[b]; });
  }
  std::set<size_t> offspring;
  for (const std::string& parent : parents) {
    const auto it = index.find(parent);
    if (it == index.end()) continue;
    for (const planner::TileConfig& n : neighbors(space, space[it->second].config)) {
      const std::string s = n.str();
      if (!tried.count(s)) offspring.insert(index.at(s));
    }
  }
  std::vector<planner::TileConfig> out;
  for (size_t i : ranked) {
    if (out.size() == k) return out;
    if (offspring.count(i)) out.push_back(space[i].config);
  }
  for (size_t i : ranked) {
    if (out.size() == k) break;
    const planner::Candidate& c = space[i];
    if (c.cost.valid && c.config.library.empty() && !tried.count(c.config.str()) && !offspring.count(i)) {
      out.push_back(c.config);
    }
  }
  return out;
}

}  // namespace fusetune::search
