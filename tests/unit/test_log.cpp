// Log lines (core/log.h): text and JSON carry a timestamp, the level, the component and the ids
// given, leave out the ids not given, and a JSON line stays one valid object whatever the message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "core/log.h"

namespace fusetune {
namespace {

TEST(Log, TextLinesCarryTimeLevelComponentAndIds) {
  const std::string line = format_log_line(LogLevel::kWarn, "coordinator", {3, 12, "lab/gpu0"}, "task 12 re-queued",
                                           LogFormat::kText);
  EXPECT_TRUE(std::regex_match(line, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARN coordinator job=3 task=12 worker=lab/gpu0: task 12 re-queued)")))
      << line;
  const std::string bare = format_log_line(LogLevel::kInfo, "worker", {}, "stopped", LogFormat::kText);
  EXPECT_EQ(bare.substr(24), " INFO worker: stopped") << bare;
}

TEST(Log, JsonLinesAreOneObjectEach) {
  const std::string message = "a \"quoted\" name,\nback\\slash and \x01 control";
  const std::string line = format_log_line(LogLevel::kError, "worker", {0, 7, "w\"1"}, message, LogFormat::kJson);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["component"], "worker");
  EXPECT_EQ(j["task"], 7);
  EXPECT_EQ(j["worker"], "w\"1");
  EXPECT_FALSE(j.contains("job"));  // not given: left out
  EXPECT_EQ(j["msg"], message);
  EXPECT_TRUE(std::regex_match(j["ts"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
}

TEST(Log, TheFormatIsTextOrJson) {
  EXPECT_EQ(parse_log_format("json"), LogFormat::kJson);
  EXPECT_EQ(parse_log_format("text"), LogFormat::kText);
  try {
    parse_log_format("xml");
    ADD_FAILURE() << "xml accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--log-format xml"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fusetune
