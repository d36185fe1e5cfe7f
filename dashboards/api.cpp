#include "dashboards/api.h"

#include <exception>
#include <string>

namespace fusetune::dashboards {

namespace {

constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

HttpReply json_reply(int status, const nlohmann::json& body) { return {status, "application/json", body.dump(-1, ' ', false, kReplace)}; }

HttpReply not_found(const std::string& what) { return json_reply(404, {{"error", what}}); }

// A job id as a path gives it: a whole positive number, or 0.
int64_t job_id(const std::string& text) {
  try {
    size_t used = 0;
    const int64_t id = std::stoll(text, &used);
    return used == text.size() && id > 0 ? id : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

HttpReply answer(const ServiceView& view, const HttpRequest& r) {
  if (r.path == "/metrics") {
    Exposition x;
    view.metrics(x);
    return {200, "text/plain; version=0.0.4; charset=utf-8", x.text()};
  }
  if (r.path == "/api/jobs") return json_reply(200, view.jobs());
  if (r.path == "/api/workers") return json_reply(200, view.workers());
  if (r.path.rfind("/api/jobs/", 0) == 0) {
    std::string rest = r.path.substr(10);
    const bool tasks = rest.size() > 6 && rest.compare(rest.size() - 6, 6, "/tasks") == 0;
    if (tasks) rest.resize(rest.size() - 6);
    const int64_t id = job_id(rest);
    const std::optional<nlohmann::json> found = id == 0 ? std::nullopt : tasks ? view.tasks(id) : view.job(id);
    if (!found) return not_found("no job " + rest);
    return json_reply(200, *found);
  }
  return not_found("no such resource: " + r.path);
}

}  // namespace fusetune::dashboards
