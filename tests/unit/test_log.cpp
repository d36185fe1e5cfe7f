// Log lines (core/log.h): text and JSON carry a timestamp, the level, the component and the ids
// given, leave out the ids not given, and a line stays one line of valid UTF-8 (a JSON line one
// valid object) whatever the message and the ids hold; a JSON line carries its event.
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

// Peer text in a log line (a model's name with a forged line after a newline, a worker's name that
// is not UTF-8) leaves one line of valid UTF-8, in text and in JSON.
TEST(Log, PeerTextStaysOneLineOfValidUtf8) {
  const std::string message = "job 3 (evil.onnx\n2026-01-01T00:00:00.000Z INFO coordinator: forged\r) waits";
  const LogIds ids{3, 0, "w\xff\n1"};
  const std::string text = format_log_line(LogLevel::kInfo, "coordinator", ids, message, LogFormat::kText);
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_NE(text.find(" worker=w\\xFF\\n1: job 3 (evil.onnx\\n2026-01-01T00:00:00.000Z INFO coordinator: forged\\r) waits"),
            std::string::npos)
      << text;
  EXPECT_NO_THROW((void)nlohmann::json(text).dump()) << text;
  const std::string json = format_log_line(LogLevel::kInfo, "coordinator", ids, message, LogFormat::kJson);
  EXPECT_EQ(json.find('\n'), std::string::npos) << json;
  const nlohmann::json j = nlohmann::json::parse(json);  // throws on text that is not UTF-8
  EXPECT_EQ(j["worker"], "w\\xFF\n1");
  EXPECT_EQ(j["msg"], message);
}

// An event rides on its line: in JSON its name and figures as members (integers as numbers, text
// escaped as any string), a field named like one of the line's own members left out; text lines
// unchanged by it.
TEST(Log, AnEventIsItsNameAndFiguresInJsonAndNothingInText) {
  const LogEvent event{"search_round",
                       {{"round", int64_t{3}}, {"ranked_by", std::string("learned model (\"x\")\n")}, {"msg", std::string("forged")},
                        {"job", int64_t{99}}, {"big", int64_t{1} << 40}}};
  const std::string json = format_log_line(LogLevel::kInfo, "coordinator", {7, 0, ""}, "job 7: search round 3", LogFormat::kJson, event);
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["event"], "search_round");
  EXPECT_EQ(j["round"], 3);
  EXPECT_TRUE(j["round"].is_number_integer());
  EXPECT_EQ(j["ranked_by"], "learned model (\"x\")\n");
  EXPECT_EQ(j["big"], int64_t{1} << 40);
  EXPECT_EQ(j["msg"], "job 7: search round 3");  // the line's own members win
  EXPECT_EQ(j["job"], 7);
  EXPECT_EQ(json.find('\n'), std::string::npos) << json;
  EXPECT_EQ(format_log_line(LogLevel::kInfo, "coordinator", {7, 0, ""}, "job 7", LogFormat::kText, event).substr(24),
            " INFO coordinator job=7: job 7");
  EXPECT_FALSE(nlohmann::json::parse(format_log_line(LogLevel::kInfo, "worker", {}, "x", LogFormat::kJson)).contains("event"));
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
