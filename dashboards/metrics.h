// Metrics: what the coordinator counts while it runs, in Prometheus's text exposition format
// (version 0.0.4), for `/metrics` (dashboards/http_server.h).
//
// Takes counters, gauges and histograms by name, with labels; guarantees a well-formed exposition:
// one HELP and TYPE line per metric family, label values escaped, histogram buckets cumulative
// and ending in +Inf, with _sum and _count. Not thread-safe: the coordinator's loop owns its
// Metrics and renders them there.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fusetune::dashboards {

using Labels = std::map<std::string, std::string>;

// Observations counted into fixed buckets (upper bounds, ascending), as Prometheus's histograms.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket, not cumulative; last: above every bound
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// One exposition, family by family.
class Exposition {
 public:
  void counter(const std::string& name, const std::string& help, const std::vector<std::pair<Labels, double>>& samples);
  void gauge(const std::string& name, const std::string& help, const std::vector<std::pair<Labels, double>>& samples);
  void histogram(const std::string& name, const std::string& help, const Histogram& h);
  const std::string& text() const { return text_; }

 private:
  void family(const std::string& name, const std::string& help, const char* type);
  std::string text_;
};

}  // namespace fusetune::dashboards
