// EventLog: the coordinator's log lines (core/log.h), each naming the job, task and worker it
// concerns and, where it reports one, its event (core/log.h's LogEvent: a name and figures that a
// JSON line carries for programs), written to the sink ServerOptions::log gives (stderr without
// one). Takes the sink; guarantees one formatted line per call, in the process's log format.
// Shared by the coordinator's parts, so that they all log alike.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "core/log.h"

namespace fusetune::coordinator {

class EventLog {
 public:
  explicit EventLog(std::function<void(const std::string&)> sink) : sink_(std::move(sink)) {}

  void operator()(const LogIds& ids, const std::string& line, LogLevel level = LogLevel::kInfo) const {
    (*this)(ids, LogEvent{}, line, level);
  }
  void operator()(const LogIds& ids, const LogEvent& event, const std::string& line, LogLevel level = LogLevel::kInfo) const {
    const std::string text = format_log_line(level, "coordinator", ids, line, log_format(), event);
    if (sink_) sink_(text);
    else std::fprintf(stderr, "%s\n", text.c_str());
  }
  void operator()(const std::string& line, LogLevel level = LogLevel::kInfo) const { (*this)(LogIds{}, line, level); }

 private:
  std::function<void(const std::string&)> sink_;
};

}  // namespace fusetune::coordinator
