// model_vs_measured: the cost model (planner/tiling.h) against a search database's measurements:
// how far its times are from measured ones, per kernel form, and how well it orders a group's
// candidates (issue 27's cost-model item; docs/performance.md).
//
//   model_vs_measured DB --device NAME [--constant-bytes N] [--csv FILE]
//
// For every task the database keeps (its group as a standalone sub-graph, proto/wire.h), the
// planner's whole space of candidates on --device (evaluate_tile, as the job planner
// ranks them; --constant-bytes: the model's weights, which decide whether they stream from DRAM,
// as a model over half the L2 does; default: the sub-graph's own) is joined by configuration with
// the measurements of that signature (status ok; the median of each; library calls too, each
// algorithm a candidate as the planner lists them). It prints, per form (SIMT, mma.sync, wgmma;
// split-K, staged rings and GEMV are configurations of these; cuBLASLt, cuDNN), the measured /
// modeled ratio's quartiles, and per
// group with 3 or more joined candidates Spearman's rank correlation of modeled against measured
// and the regret of the model's pick among the measured ones (its measured time over the best
// measured - 1), and against the best of all the group's measured candidates, in the model's
// space or not (a model change that drops the best from the space shows there). Times are measured or modeled, each in its own column; nothing is mixed.
// --csv writes every joined row (signature, configuration, form, measured, modeled, and the
// model's terms: blocks, threads, blocks per SM, DRAM and L2 bytes, FLOPs, issue time, whether
// latency bound, a block's reduction steps, its place in the planner's order).
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "planner/device.h"
#include "planner/fusion.h"
#include "planner/tiling.h"
#include "proto/wire.h"

using namespace fusetune;

namespace {

struct Row {
  std::string signature, config, form;
  double measured = 0, modeled = 0;
  planner::Cost cost;  // the model's terms behind `modeled`
  int threads = 0;
  size_t rank = 0;  // the candidate's place in the planner's order (which breaks ties of modeled time)
};

std::string form_of(const planner::TileConfig& c) {
  return !c.library.empty() ? c.library : c.wgmma ? "wgmma" : c.mma ? "mma.sync" : "SIMT";
}

// Ranks (1-based, ties averaged) of `v`.
std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[order[k]] = (static_cast<double>(i + j) / 2.0) + 1.0;
    i = j + 1;
  }
  return r;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double num = 0, da = 0, db = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    num += (ra[i] - ma) * (rb[i] - mb);
    da += (ra[i] - ma) * (ra[i] - ma);
    db += (rb[i] - mb) * (rb[i] - mb);
  }
  return da > 0 && db > 0 ? num / std::sqrt(da * db) : 0;
}

// A candidate's time from its repeated measurements: the upper median.
double median(std::vector<double> t) {
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

class Db {
 public:
  explicit Db(const std::string& path) {
    check(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK, path, ": cannot open (",
          db_ ? sqlite3_errmsg(db_) : "no memory", ")");
  }
  ~Db() { sqlite3_close(db_); }
  // Calls fn(column texts or blobs) for each row of `sql`.
  template <class Fn>
  void each(const std::string& sql, Fn fn) {
    sqlite3_stmt* st = nullptr;
    check(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) == SQLITE_OK, "query failed: ", sqlite3_errmsg(db_));
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> cols;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const void* p = sqlite3_column_blob(st, c);
        cols.emplace_back(p ? static_cast<const char*>(p) : "", static_cast<size_t>(sqlite3_column_bytes(st, c)));
      }
      fn(cols);
    }
    sqlite3_finalize(st);
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string db_path, device_name, csv;
    int64_t constant_bytes = -1;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto value = [&]() -> std::string {
        check(i + 1 < argc, a, " needs a value");
        return argv[++i];
      };
      if (a == "--device") device_name = value();
      else if (a == "--constant-bytes") constant_bytes = std::stoll(value());
      else if (a == "--csv") csv = value();
      else if (db_path.empty() && a.rfind("--", 0) != 0) db_path = a;
      else fail("usage: model_vs_measured DB --device NAME [--constant-bytes N] [--csv FILE] (unknown argument ", a, ")");
    }
    check(!db_path.empty() && !device_name.empty(), "usage: model_vs_measured DB --device NAME [--constant-bytes N] [--csv FILE]");
    const planner::Device device = planner::find_device(device_name);
    Db db(db_path);

    // The median of each (signature, configuration)'s ok measurements.
    std::map<std::string, std::map<std::string, std::vector<double>>> measured;
    db.each("SELECT signature, config, median_us FROM measurements WHERE status = 'ok' AND repeats > 0", [&](const auto& c) {
      measured[c[0]][c[1]].push_back(std::stod(c[2]));
    });
    std::vector<Row> rows;
    std::vector<double> correlations, regrets;
    std::vector<double> regrets_all;  // the pick against the task's best measured candidate, in the space or not
    size_t tasks = 0, unjoined = 0;
    db.each("SELECT signature, payload FROM tasks ORDER BY signature", [&](const auto& c) {
      auto m = measured.find(c[0]);
      if (m == measured.end()) return;
      wire::Task task;
      if (!task.ParseFromString(c[1])) {
        std::fprintf(stderr, "task %s: payload does not parse; skipped\n", c[0].c_str());
        return;
      }
      ++tasks;
      const Graph g = wire::from_subgraph(task.graph());
      const planner::FusionGroup all = planner::whole_graph_group(g);
      planner::TilingOptions opt;
      opt.top_k = 1 << 20;  // the whole space
      opt.constant_bytes = constant_bytes;
      // The space in the planner's order, which breaks ties of modeled time (tile_candidates).
      std::map<std::string, std::pair<size_t, planner::Candidate>> space;
      for (planner::Candidate& cand : planner::tile_candidates(g, all, device, opt)) {
        space.emplace(cand.config.str(), std::make_pair(space.size(), cand));
      }
      std::vector<double> meas, model;
      std::vector<size_t> order;
      double best_measured = INFINITY;
      for (const auto& [config, times] : m->second) {
        best_measured = std::min(best_measured, median(times));
        auto s = space.find(config);
        if (s == space.end() || !s->second.second.cost.valid) {
          ++unjoined;
          continue;
        }
        const planner::Candidate& cand = s->second.second;
        rows.push_back({c[0], config, form_of(cand.config), median(times), cand.cost.modeled_us, cand.cost, cand.config.threads,
                        s->second.first});
        meas.push_back(rows.back().measured);
        model.push_back(rows.back().modeled);
        order.push_back(s->second.first);
      }
      if (meas.size() >= 3) {
        correlations.push_back(spearman(model, meas));
        size_t pick = 0;  // the least modeled, the planner's first of equals
        for (size_t i = 1; i < model.size(); ++i) {
          if (model[i] < model[pick] || (model[i] == model[pick] && order[i] < order[pick])) pick = i;
        }
        regrets.push_back(meas[pick] / *std::min_element(meas.begin(), meas.end()) - 1);
        regrets_all.push_back(meas[pick] / best_measured - 1);
      }
    });

    std::printf("%s on %s: %zu tasks, %zu measured candidates joined with the model (%zu not in its space)\n\n",
                db_path.c_str(), device.name.c_str(), tasks, rows.size(), unjoined);
    std::printf("| form | candidates | measured / modeled: 25%% | median | 75%% | measured us, median | modeled us, median |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (const std::string form : {"SIMT", "mma.sync", "wgmma", "cublasLt", "cudnn"}) {
      std::vector<double> ratio, ms, md;
      for (const Row& r : rows) {
        if (r.form != form) continue;
        ratio.push_back(r.measured / r.modeled);
        ms.push_back(r.measured);
        md.push_back(r.modeled);
      }
      if (ratio.empty()) continue;
      std::printf("| %s | %zu | %.2f | %.2f | %.2f | %.1f | %.1f |\n", form.c_str(), ratio.size(), quantile(ratio, 0.25),
                  quantile(ratio, 0.5), quantile(ratio, 0.75), quantile(ms, 0.5), quantile(md, 0.5));
    }
    std::printf("\nper group (%zu with 3 or more joined candidates): Spearman's rank correlation of modeled against measured: "
                "median %.2f (25%% %.2f, 75%% %.2f); the model's pick's regret among them: median %.1f%%, worst %.1f%%; against "
                "the best of all the group's measured candidates (in the model's space or not): median %.1f%%, mean %.1f%%, "
                "worst %.1f%%\n",
                correlations.size(), quantile(correlations, 0.5), quantile(correlations, 0.25), quantile(correlations, 0.75),
                100 * quantile(regrets, 0.5), 100 * quantile(regrets, 1.0), 100 * quantile(regrets_all, 0.5),
                100 * std::accumulate(regrets_all.begin(), regrets_all.end(), 0.0) / static_cast<double>(std::max<size_t>(1, regrets_all.size())),
                100 * quantile(regrets_all, 1.0));
    if (!csv.empty()) {
      std::ofstream out(csv);
      out << "signature,config,form,measured_us,modeled_us,blocks,threads,blocks_per_sm,dram_bytes,l2_bytes,flops,issue_us,"
             "latency_bound,steps,rank\n";
      for (const Row& r : rows) {
        out << r.signature << ",\"" << r.config << "\"," << r.form << "," << r.measured << "," << r.modeled << "," << r.cost.tiles << ","
            << r.threads << "," << r.cost.blocks_per_sm << "," << r.cost.dram_bytes << "," << r.cost.l2_bytes << "," << r.cost.flops
            << "," << r.cost.issue_us << "," << (r.cost.latency_bound ? 1 : 0) << "," << r.cost.steps << "," << r.rank << "\n";
      }
      check(out.good(), csv, ": cannot write");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_vs_measured: %s\n", e.what());
    return 2;
  }
}
