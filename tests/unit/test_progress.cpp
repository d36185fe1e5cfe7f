// The progress line (tools/progress.h) on a pipe: a line when the work enters a new tenth, none for
// further updates inside it while the quiet limit is not reached, and one per update once it is
// (a tune whose first task takes minutes says so); nothing before the silent time.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tools/progress.h"

namespace fusetune::cli {
namespace {

int lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

TEST(ProgressLine, OnAPipeATenthsLineOnceAndAnotherAfterTheQuietLimit) {
  ::unsetenv("FUSETUNE_PROGRESS");
  using std::chrono::milliseconds;
  {
    ::testing::internal::CaptureStderr();
    {
      ProgressLine p("tasks", {milliseconds(0), milliseconds(3600000)});
      p.update(0, 15, "0 candidates measured");
      p.update(0, 15, "3 candidates measured");  // the same tenth, not quiet for long: no line
      p.update(2, 15, "16 candidates measured");  // a new tenth
    }
    const std::string out = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(lines(out), 2) << out;
    EXPECT_NE(out.find("tasks 0/15 (0%) 0 candidates measured"), std::string::npos) << out;
    EXPECT_NE(out.find("tasks 2/15 (10%) 16 candidates measured"), std::string::npos) << out;
  }
  {
    ::testing::internal::CaptureStderr();
    {
      ProgressLine p("tasks", {milliseconds(0), milliseconds(0)});  // every update is past the quiet limit
      p.update(0, 15, "0 candidates measured");
      p.update(0, 15, "3 candidates measured");
    }
    const std::string out = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(lines(out), 2) << out;
    EXPECT_NE(out.find("tasks 0/15 (0%) 3 candidates measured"), std::string::npos) << out;
  }
  {
    ::testing::internal::CaptureStderr();
    {
      ProgressLine p("tasks", {milliseconds(3600000), milliseconds(0)});  // within the silent time
      p.update(0, 15);
      p.update(15, 15);
    }
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  }
}

}  // namespace
}  // namespace fusetune::cli
