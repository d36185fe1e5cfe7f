#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "core/error.h"
#include "core/inert_text.h"

namespace fusetune {

namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};

std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  ::gmtime_r(&secs, &utc);
  char buf[96];  // room for any int the format could be handed
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms));
  return buf;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

// A JSON string: quotes, backslashes and control characters escaped, bytes that are not UTF-8 as
// valid_utf8 writes them; other text as it is.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : valid_utf8(text)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

void set_log_format(LogFormat format) { g_format = format; }
LogFormat log_format() { return g_format; }

LogFormat parse_log_format(const std::string& name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  fail("--log-format ", name, ": give text or json");
}

std::string format_log_line(LogLevel level, const std::string& component, const LogIds& ids, const std::string& message,
                            LogFormat format, const LogEvent& event) {
  if (format == LogFormat::kJson) {
    std::string out = "{\"ts\":\"" + timestamp() + "\",\"level\":\"" + level_name(level) + "\",\"component\":" +
                      json_string(component);
    if (ids.job != 0) out += ",\"job\":" + std::to_string(ids.job);
    if (ids.task != 0) out += ",\"task\":" + std::to_string(ids.task);
    if (!ids.worker.empty()) out += ",\"worker\":" + json_string(ids.worker);
    out += ",\"msg\":" + json_string(message);
    if (!event.name.empty()) {
      out += ",\"event\":" + json_string(event.name);
      for (const auto& [key, value] : event.fields) {
        if (key == "ts" || key == "level" || key == "component" || key == "job" || key == "task" || key == "worker" ||
            key == "msg" || key == "event") {
          continue;
        }
        out += "," + json_string(key) + ":";
        out += std::holds_alternative<int64_t>(value) ? std::to_string(std::get<int64_t>(value))
                                                      : json_string(std::get<std::string>(value));
      }
    }
    return out + "}";
  }
  std::string level_text = level_name(level);
  for (char& c : level_text) c = static_cast<char>(c - 'a' + 'A');
  std::string out = timestamp() + " " + level_text + " " + one_line(component);
  if (ids.job != 0) out += " job=" + std::to_string(ids.job);
  if (ids.task != 0) out += " task=" + std::to_string(ids.task);
  if (!ids.worker.empty()) out += " worker=" + one_line(ids.worker);
  return out + ": " + one_line(message);
}

void write_log(LogLevel level, const std::string& component, const LogIds& ids, const std::string& message,
               const LogEvent& event) {
  const std::string line = format_log_line(level, component, ids, message, log_format(), event) + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace fusetune
