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
#pragma once

#include <cstdint>
#include <string>

namespace fusetune {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
enum class LogFormat { kText, kJson };

struct LogIds {
  int64_t job = 0;
  int64_t task = 0;
  std::string worker;
};

void set_log_format(LogFormat format);
LogFormat log_format();
// "text" or "json"; anything else is an Error naming it.
LogFormat parse_log_format(const std::string& name);
std::string format_log_line(LogLevel level, const std::string& component, const LogIds& ids, const std::string& message,
                            LogFormat format);
void write_log(LogLevel level, const std::string& component, const LogIds& ids, const std::string& message);

}  // namespace fusetune
