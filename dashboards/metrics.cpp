#include "dashboards/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace fusetune::dashboards {

namespace {

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;  // the shortest text that reads back as v
  return std::string(buf, end);
}

// Label values escape backslash, double quote and newline (the format's three).
std::string labels_text(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (const auto& [k, v] : labels) {
    if (out.size() > 1) out += ',';
    out += k + "=\"";
    for (char c : v) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    out += '"';
  }
  return out + "}";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  check(std::is_sorted(bounds_.begin(), bounds_.end()), "histogram bounds must ascend");
}

void Histogram::observe(double value) {
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Exposition::family(const std::string& name, const std::string& help, const char* type) {
  text_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Exposition::counter(const std::string& name, const std::string& help,
                         const std::vector<std::pair<Labels, double>>& samples) {
  family(name + "_total", help, "counter");  // the 0.0.4 format names the family as its samples
  for (const auto& [labels, v] : samples) text_ += name + "_total" + labels_text(labels) + " " + number(v) + "\n";
}

void Exposition::gauge(const std::string& name, const std::string& help,
                       const std::vector<std::pair<Labels, double>>& samples) {
  family(name, help, "gauge");
  for (const auto& [labels, v] : samples) text_ += name + labels_text(labels) + " " + number(v) + "\n";
}

void Exposition::histogram(const std::string& name, const std::string& help, const Histogram& h) {
  family(name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    text_ += name + "_bucket{le=\"" + number(h.bounds()[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  text_ += name + "_bucket{le=\"+Inf\"} " + std::to_string(h.count()) + "\n";
  text_ += name + "_sum " + number(h.sum()) + "\n";
  text_ += name + "_count " + std::to_string(h.count()) + "\n";
}

}  // namespace fusetune::dashboards
