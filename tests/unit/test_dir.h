// Test helper: a folder of the running test's own. Takes a prefix; guarantees a fresh, empty
// folder under the system's temporary directory, named by the prefix, the process and the test
// (so that tests running in parallel, and a test run twice, never share one), removed with
// everything in it when the helper goes.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace fusetune::testing {

class TestDir {
 public:
  explicit TestDir(const std::string& prefix) {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : test) c = c == '/' ? '_' : c;  // a parameterized test's name: Name/3
    path_ = std::filesystem::temp_directory_path() / ("fusetune_" + prefix + "_" + std::to_string(::getpid()) + "_" + test);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace fusetune::testing
