// Log lines of the service's components (coordinator, worker): each carries a UTC timestamp, a
// level, the component and the ids it concerns (job, task, worker), as text or, for log shippers
// (`--log-format json`), as one JSON object per line:
//   2026-11-24T18:10:00.123Z INFO coordinator job=3 task=12 worker=lab/gpu0: task 12 re-queued: ...
//   {"ts":"2026-11-24T18:10:00.123Z","level":"info","component":"coordinator","job":3,"task":12,
//    "worker":"lab/gpu0","msg":"task 12 re-queued: ..."}
// An id of 0 (or an empty worker) is left out. Whatever the values hold (a peer's name, a model's
// name with a newline, bytes that are not UTF-8), the line is one line of valid UTF-8: in text,
// the component, the worker and the message go through one_line (core/inert_text.h: a newline is
// written \n); in JSON, every string through valid_utf8 and JSON's own escapes. The format is the process's (set_log_format, once,
// from the command line); format_log_line is pure, write_log prints to stderr.
//
// A line may also carry a LogEvent: what it reports, for programs (tests, log shippers), so that
// none parses a message: a stable name (`search_round`, `task_failed`: docs/dashboards.md lists
// them) and its figures, written in JSON lines as "event":NAME and one member per field (an
// integer as a number, text as a string through the same escapes); a field never replaces the
// line's own members (ts, level, component, job, task, worker, msg, event): such a field is left
// out. Text lines do not show it (the message says the same in words).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace fusetune {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
enum class LogFormat { kText, kJson };

struct LogIds {
  int64_t job = 0;
  int64_t task = 0;
  std::string worker;
};

struct LogEvent {
  std::string name;  // empty: the line reports no event
  std::vector<std::pair<std::string, std::variant<int64_t, std::string>>> fields;
};

void set_log_format(LogFormat format);
LogFormat log_format();
// "text" or "json"; anything else is an Error naming it.
LogFormat parse_log_format(const std::string& name);
std::string format_log_line(LogLevel level, const std::string& component, const LogIds& ids, const std::string& message,
                            LogFormat format, const LogEvent& event = {});
void write_log(LogLevel level, const std::string& component, const LogIds& ids, const std::string& message,
               const LogEvent& event = {});

}  // namespace fusetune
