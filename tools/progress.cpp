#include "tools/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fusetune::cli {

ProgressLine::ProgressLine(std::string label, ProgressPace pace)
    : label_(std::move(label)), pace_(pace), start_(std::chrono::steady_clock::now()), last_(start_) {
  const char* mode = std::getenv("FUSETUNE_PROGRESS");
  mode_ = mode != nullptr && std::strcmp(mode, "lines") == 0 ? Mode::kLines : isatty(2) != 0 ? Mode::kRedraw : Mode::kDeciles;
}

ProgressLine::~ProgressLine() {
  if (shown_ && mode_ == Mode::kRedraw) std::fputc('\n', stderr);
}

void ProgressLine::update(size_t done, size_t total, const std::string& detail) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (total == 0 || (now - start_ < pace_.silent_for && mode_ != Mode::kLines)) return;
  const int decile = static_cast<int>(10 * done / total);
  // A redraw or a line at most ten times a second (the last always); a tenth's line once, and
  // another after a long quiet.
  if (mode_ == Mode::kDeciles ? decile == last_decile_ && now - last_ < pace_.quiet_at_most
                              : now - last_ < std::chrono::milliseconds(100) && done != total) {
    return;
  }
  // The time left at the rate so far, once something is done.
  std::string left;
  if (done > 0 && done < total) {
    const double s = elapsed * static_cast<double>(total - done) / static_cast<double>(done);
    char text[64];
    if (s < 120) std::snprintf(text, sizeof text, ", about %.0fs left", s);
    else if (s < 7200) std::snprintf(text, sizeof text, ", about %.0f min left", s / 60);
    else std::snprintf(text, sizeof text, ", about %.1f h left", s / 3600);
    left = text;
  }
  if (mode_ == Mode::kRedraw) {
    std::fprintf(stderr, "\r%s %zu/%zu (%.0f%%) %s%s%.1fs%s\x1b[K", label_.c_str(), done, total,
                 100.0 * static_cast<double>(done) / static_cast<double>(total), detail.c_str(), detail.empty() ? "" : ", ",
                 elapsed, left.c_str());
  } else {
    const int percent = mode_ == Mode::kLines ? static_cast<int>(100 * done / total) : decile * 10;
    std::fprintf(stderr, "%s %zu/%zu (%d%%) %s%s%.1fs%s\n", label_.c_str(), done, total, percent, detail.c_str(),
                 detail.empty() ? "" : ", ", elapsed, left.c_str());
  }
  std::fflush(stderr);
  last_decile_ = decile;
  last_ = now;
  shown_ = true;
}

}  // namespace fusetune::cli
