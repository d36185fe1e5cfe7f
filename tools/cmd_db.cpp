// fusetune db stats|export FILE|import FILE [--db PATH]: the search database (storage/), by
// default $XDG_CACHE_HOME/fusetune/search.db (~/.cache/fusetune/search.db). export/import move
// results (workloads and measurements) between labs as JSON lines; import merges. The tuning
// service's local state (models, jobs, tasks) is counted by stats but never exported.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "storage/search_db.h"
#include "tools/cli_args.h"
#include "tools/commands.h"

namespace fusetune::cli {

namespace fs = std::filesystem;

std::filesystem::path default_db_path() {
  fs::path base;
  if (const char* x = std::getenv("XDG_CACHE_HOME")) {
    base = x;
  } else if (const char* h = std::getenv("HOME")) {
    base = fs::path(h) / ".cache";
  } else {
    base = fs::temp_directory_path();
  }
  return base / "fusetune" / "search.db";
}

int cmd_db(const std::vector<std::string>& argv) {
  const Args args(argv, {"db"}, {});
  const auto& pos = args.positional();
  check(!pos.empty() && ((pos[0] == "stats" && pos.size() == 1) || ((pos[0] == "export" || pos[0] == "import") && pos.size() == 2)),
        "usage: fusetune db stats|export FILE|import FILE [--db PATH]");
  const fs::path path = args.has("db") ? fs::path(args.get("db")) : default_db_path();
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  storage::SearchDb db(path);
  if (pos[0] == "stats") {
    const storage::DbStats s = db.stats();
    std::printf("%s (schema %d): %lld workloads, %lld devices, %lld candidates, %lld measurements (%lld failed, "
                "%lld interleaved), %lld best plans; %lld models, %lld jobs (%lld unfinished), %lld tasks (%lld open)\n",
                path.string().c_str(), s.schema_version, static_cast<long long>(s.workloads),
                static_cast<long long>(s.devices), static_cast<long long>(s.candidates),
                static_cast<long long>(s.measurements), static_cast<long long>(s.failures),
                static_cast<long long>(s.interleaved),
                static_cast<long long>(s.best_plans), static_cast<long long>(s.models), static_cast<long long>(s.jobs),
                static_cast<long long>(s.unfinished_jobs), static_cast<long long>(s.tasks),
                static_cast<long long>(s.open_tasks));
    // Each identity answers only for itself; rows recorded before identities (schema 2) have no
    // product, driver or toolkit and only seed rankings.
    for (const storage::IdentityStats& i : s.identities) {
      const bool legacy = i.device.product.empty() && i.device.toolkit.empty();
      std::printf("  %s, codegen %d: %lld measurements, %lld best plans%s\n", i.device.str().c_str(), i.codegen_version,
                  static_cast<long long>(i.measurements), static_cast<long long>(i.best_plans),
                  legacy ? " (recorded before device identities: seeds rankings, answers nothing)" : "");
    }
  } else if (pos[0] == "export") {
    const int64_t n = db.export_to(pos[1]);
    std::printf("exported %lld records from %s to %s\n", static_cast<long long>(n), path.string().c_str(), pos[1].c_str());
  } else {
    const int64_t n = db.import_from(pos[1]);
    std::printf("imported %lld new records from %s into %s\n", static_cast<long long>(n), pos[1].c_str(),
                path.string().c_str());
  }
  return 0;
}

}  // namespace fusetune::cli
