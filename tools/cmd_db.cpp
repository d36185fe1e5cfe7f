// fusetune db (its operands and options: tools/command_table.cpp): the search database (storage/),
// by default in fusetune's cache directory (core/files.h cache_dir: $FUSETUNE_CACHE_DIR/search.db,
// else $XDG_CACHE_HOME/fusetune/search.db, else ~/.cache/fusetune/search.db). stats counts the
// records (per device identity) and the service's state with the file's size; gc drops what no
// unfinished job needs (done tasks' payloads) and keeps every measurement; vacuum returns the
// freed pages to the file system; export/import move results (workloads and measurements) between
// labs as JSON lines; import merges. The service's local state (models, jobs, tasks) is never
// exported.
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "storage/job_queue.h"
#include "storage/search_db.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"

namespace fusetune::cli {

namespace fs = std::filesystem;

std::filesystem::path default_db_path() { return cache_dir("search.db"); }

int cmd_db(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("db");
  const Args args = parse_args(spec, argv);
  const auto& pos = args.positional();
  const bool one_word = pos.size() == 1 && (pos[0] == "stats" || pos[0] == "gc" || pos[0] == "vacuum");
  const bool with_file = pos.size() == 2 && (pos[0] == "export" || pos[0] == "import");
  check_usage(one_word || with_file, spec);
  const fs::path path = args.has("db") ? fs::path(args.get("db")) : default_db_path();
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  storage::SearchDb db(path);
  storage::JobQueue queue(db);
  const auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / 1e6; };
  if (pos[0] == "stats") {
    const storage::DbStats s = db.stats();
    const storage::QueueStats q = queue.stats();
    std::printf("%s (schema %d, %.1f MB): %lld workloads, %lld devices, %lld candidates, %lld measurements (%lld "
                "failed, %lld interleaved), %lld best plans; %lld models (%.1f MB of files beside it), %lld jobs (%lld "
                "unfinished), %lld tasks (%lld open, %.1f MB of payloads)\n",
                path.string().c_str(), s.schema_version, mb(s.file_bytes), static_cast<long long>(s.workloads),
                static_cast<long long>(s.devices), static_cast<long long>(s.candidates),
                static_cast<long long>(s.measurements), static_cast<long long>(s.failures),
                static_cast<long long>(s.interleaved), static_cast<long long>(s.best_plans),
                static_cast<long long>(q.models), mb(q.model_bytes), static_cast<long long>(q.jobs),
                static_cast<long long>(q.unfinished_jobs), static_cast<long long>(q.tasks),
                static_cast<long long>(q.open_tasks), mb(q.payload_bytes));
    // Each identity answers only for itself; rows recorded before identities (schema 2) have no
    // product, driver or toolkit and only seed rankings.
    for (const storage::IdentityStats& i : s.identities) {
      const bool legacy = i.device.product.empty() && i.device.toolkit.empty();
      std::printf("  %s, codegen %d: %lld measurements, %lld best plans%s\n", i.device.str().c_str(), i.codegen_version,
                  static_cast<long long>(i.measurements), static_cast<long long>(i.best_plans),
                  legacy ? " (recorded before device identities: seeds rankings, answers nothing)" : "");
    }
  } else if (pos[0] == "gc") {
    const storage::GcResult r = queue.gc();
    std::printf("%s: dropped the payloads of %lld finished tasks (%.1f MB); every measurement, job and model kept; "
                "`fusetune db vacuum` returns the space to the file system\n",
                path.string().c_str(), static_cast<long long>(r.tasks_cleared), mb(r.bytes_cleared));
  } else if (pos[0] == "vacuum") {
    const int64_t before = db.file().size_bytes();
    db.file().vacuum();
    std::printf("%s: %.1f MB before, %.1f MB after vacuum\n", path.string().c_str(), mb(before),
                mb(db.file().size_bytes()));
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
