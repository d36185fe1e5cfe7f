#include "tools/service_common.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "coordinator/model_files.h"
#include "core/error.h"
#include "core/files.h"

namespace fusetune::cli {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_stop_again{false};
CancelToken g_cancel;

void on_signal(int) {
  if (g_stop.load()) g_stop_again = true;
  g_stop = true;
  g_cancel.raise();
}

}  // namespace

const std::atomic<bool>& stop_on_signals() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    // A file-size limit reached: EFBIG from the write (a full disk's handling), not death.
    signal(SIGXFSZ, SIG_IGN);
    return true;
  }();
  (void)installed;
  return g_stop;
}

const std::atomic<bool>& stopped_twice() { return g_stop_again; }

const CancelToken& signal_cancel_token() {
  (void)stop_on_signals();
  return g_cancel;
}

std::string self_executable() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  check(!ec, "cannot find this executable (/proc/self/exe): ", ec.message());
  return p.string();
}

std::vector<wire::ModelFile> read_model_files(const fs::path& model) {
  std::vector<wire::ModelFile> out;
  for (const coordinator::UploadFile& f : coordinator::model_files(model)) {
    wire::ModelFile& m = out.emplace_back();
    m.set_path(f.path);
    m.set_data(read_file(f.local, f.path == model.filename().string() ? "model file" : "external data file"));
  }
  return out;
}

void write_files(const std::vector<wire::ModelFile>& files, const fs::path& dir) {
  fs::create_directories(dir);
  for (const wire::ModelFile& f : files) {
    const fs::path rel = path_inside(f.path(), "refusing to write outside " + dir.string() + ": file");
    fs::create_directories((dir / rel).parent_path());
    std::ofstream out(dir / rel, std::ios::binary);
    out.write(f.data().data(), static_cast<std::streamsize>(f.data().size()));
    check(out.good(), (dir / rel).string(), ": cannot write");
  }
}

wire::ClientSecurity client_security(const Args& args) {
  check(args.has("key") == args.has("coordinator-key"), "--key and --coordinator-key go together (CURVE needs both)");
  wire::ClientSecurity s;
  if (!args.has("key")) return s;
  s.own = wire::read_key_file(args.get("key"));
  check(!s.own.secret_key.empty(), args.get("key"), ": no secret key (give the NAME.key file, not NAME.pub)");
  s.server_public = wire::read_key_file(args.get("coordinator-key")).public_key;
  return s;
}

wire::ServerSecurity server_security(const Args& args) {
  const bool allows = args.has("allow-workers") || args.has("allow-clients");
  check(args.has("key") == allows, "--key and --allow-workers/--allow-clients go together (CURVE needs both)");
  wire::ServerSecurity s;
  if (!args.has("key")) return s;
  s.own = wire::read_key_file(args.get("key"));
  check(!s.own.secret_key.empty(), args.get("key"), ": no secret key (give the NAME.key file, not NAME.pub)");
  if (args.has("allow-workers")) s.workers = wire::read_public_keys(args.get("allow-workers"));
  if (args.has("allow-clients")) s.clients = wire::read_public_keys(args.get("allow-clients"));
  return s;
}

dashboards::HttpOptions http_options(const Args& args, const std::string& address_flag, const std::string& token_flag) {
  dashboards::HttpOptions o;
  o.address = args.get(address_flag, "");
  if (args.has(token_flag)) {
    const fs::path file = args.get(token_flag);
    struct stat st {};
    check(::stat(file.c_str(), &st) == 0, "--", token_flag, " ", file.string(), ": cannot read it");
    check((st.st_mode & 077) == 0, "--", token_flag, " ", file.string(), ": others may read it (mode ",
          std::oct, (st.st_mode & 0777), "); chmod 600 it");
    std::string token = read_file(file, "the HTTP token file");
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    check(!token.empty() && token.find_first_of(" \t\r\n") == std::string::npos, "--", token_flag, " ", file.string(),
          ": the token must be one word on one line");
    o.token = token;
  } else if (const char* env = std::getenv("FUSETUNE_HTTP_TOKEN")) {
    o.token = env;
  }
  // Clamped into int's range here; HttpServer refuses what is outside each limit's own.
  auto number = [&](const char* flag, double fallback, double scale) {
    return static_cast<int>(std::clamp(std::round(args.number(flag, fallback) * scale), -1e9, 1e9));
  };
  o.max_connections = number("http-max-connections", o.max_connections, 1);
  o.max_header_bytes = number("http-max-header-kb", o.max_header_bytes / 1024.0, 1024);
  o.max_header_lines = number("http-max-headers", o.max_header_lines, 1);
  o.timeout_ms = number("http-timeout-s", o.timeout_ms / 1000.0, 1000);
  o.keep_alive_ms = number("http-keep-alive-s", o.keep_alive_ms / 1000.0, 1000);
  return o;
}

coordinator::JobOptions job_options(const Args& args) {
  coordinator::JobOptions options;
  options.shapes = shape_overrides(args);
  options.candidates = static_cast<int>(args.number("candidates", options.candidates));
  options.plan_device = args.get("plan-device", options.plan_device);
  options.trials = static_cast<int>(args.number("trials", options.trials));
  options.time_s = args.number("time", options.time_s);
  options.precision = args.get("precision", options.precision);
  options.libraries = args.get("libraries", options.libraries);
  // Checked as the coordinator checks them, so a bad value is named before anything is sent.
  return coordinator::JobOptions::from_json(options.to_json());
}

void print_jobs(const std::vector<wire::JobStatus>& jobs) {
  std::printf("%6s  %-10s  %-28s  %-8s  %11s  %9s  %10s\n", "job", "state", "model", "device", "tasks", "measured",
              "cache hits");
  for (const wire::JobStatus& j : jobs) {
    const std::string tasks = std::to_string(j.tasks_done() + j.tasks_failed()) + "/" + std::to_string(j.tasks());
    std::printf("%6lld  %-10s  %-28s  %-8s  %11s  %9lld  %10d%s%s\n", static_cast<long long>(j.job_id()),
                j.state().c_str(), j.model_name().substr(0, 28).c_str(), j.device().c_str(), tasks.c_str(),
                static_cast<long long>(j.candidates_measured()), j.cache_hits(), j.error().empty() ? "" : "  ",
                j.error().c_str());
  }
}

void print_summary(const wire::JobStatus& job) {
  const auto s = nlohmann::json::parse(job.summary(), nullptr, false);
  if (!s.is_object() || !s.contains("groups")) return;
  auto us = [&](const char* key) { return s[key].is_number() ? s[key].get<double>() : NAN; };
  const double tuned = us("tuned_us"), unfused = us("unfused_us");
  std::printf("\n%-34s %s\n", "job", std::to_string(job.job_id()).c_str());
  if (!job.identity().empty()) std::printf("%-34s %s\n", "measured on (device identity)", job.identity().c_str());
  std::printf("%-34s %lld\n", "fusion groups", static_cast<long long>(s["groups"].get<int64_t>()));
  std::printf("%-34s %lld\n", "kernel launches", static_cast<long long>(s["launches"].get<int64_t>()));
  std::printf("%-34s %lld\n", "tasks (unique groups measured)", static_cast<long long>(s["tasks"].get<int64_t>()));
  std::printf("%-34s %lld\n", "cache hits (answered by the db)", static_cast<long long>(s["cache_hits"].get<int64_t>()));
  std::printf("%-34s %lld\n", "candidates measured", static_cast<long long>(s["candidates_measured"].get<int64_t>()));
  std::printf("%-34s %lld\n", "fused groups split back", static_cast<long long>(s["split_groups"].get<int64_t>()));
  if (s.contains("library_groups") && s["library_groups"].is_object() && !s["library_groups"].empty()) {
    std::string libraries;
    for (const auto& [name, count] : s["library_groups"].items()) {
      libraries += (libraries.empty() ? "" : ", ") + name + " " + std::to_string(count.get<int64_t>());
    }
    std::printf("%-34s %s\n", "groups on a library call", libraries.c_str());
  }
  if (s.contains("convergence") && s["convergence"].is_array() && !s["convergence"].empty()) {
    std::string rounds;
    for (const auto& r : s["convergence"]) {
      char one[96];
      if (r["tuned_us"].is_number()) {
        std::snprintf(one, sizeof one, "%s%.1f us after %lld", rounds.empty() ? "" : ", ", r["tuned_us"].get<double>(),
                      static_cast<long long>(r["trials"].get<int64_t>()));
      } else {
        std::snprintf(one, sizeof one, "%s- after %lld", rounds.empty() ? "" : ", ", static_cast<long long>(r["trials"].get<int64_t>()));
      }
      rounds += one;
    }
    std::printf("%-34s %zu: %s trials (measured)\n", "search rounds, best so far", s["convergence"].size(), rounds.c_str());
  }
  if (s.contains("interleaved_pairs")) {
    std::printf("%-34s %lld\n", "leaders within noise, interleaved", static_cast<long long>(s["interleaved_pairs"].get<int64_t>()));
  }
  if (s.contains("failed_groups") && s["failed_groups"].is_array() && !s["failed_groups"].empty()) {
    std::string names;
    for (const auto& n : s["failed_groups"]) names += (names.empty() ? "" : ", ") + n.get<std::string>();
    std::printf("%-34s %zu: %s (every candidate failed; fused ones run as their parts)\n", "groups with no working candidate",
                s["failed_groups"].size(), names.c_str());
  }
  if (std::isfinite(tuned) && std::isfinite(unfused)) {
    std::printf("%-34s %.1f us\n%-34s %.1f us\n%-34s %.2fx\n", "best plan (sum of kernels)", tuned,
                "unfused plan, same worker", unfused, "speed-up over unfused", unfused / tuned);
  } else {
    std::printf("%-34s %s\n", "best plan latency", "not every group was measured (see failures in `fusetune db stats`)");
  }
}

}  // namespace fusetune::cli
