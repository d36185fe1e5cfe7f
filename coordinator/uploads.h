// The coordinator's staging of submitted model files: the ledger of uploads under way (the
// wire::Upload pieces a client sends before the Submit that names its upload), and the files a
// Submit carries itself, each laid out in a directory of its own under the database's staging
// directory.
// Takes pieces as peers send them (untrusted: name, path, offset and size) and the coordinator's
// quotas. Guarantees: a piece it accepts names a file inside its upload's directory, and no quota
// is passed by it (one job's files, one client's uploads under way, the model store with every
// upload under way); a refusal is one Error line naming the upload and the field or quota (and its
// flag); an upload is handed to its submission only once every piece it accepted is on disk and
// none failed; an upload nothing came for in kIdle is dropped. The ledger never touches the disk:
// the caller writes pieces (write_piece) and removes directories on its disk thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fusetune_proto/service.pb.h"

namespace fusetune::coordinator {

// A submission's files in a directory under the staging directory: written there by its Upload
// pieces (`received` bytes per path) or from the Submit's own data.
struct Staged {
  std::filesystem::path dir;
  std::map<std::string, uint64_t> received;
};

// Writes the files a Submit carries into a fresh directory under the staging directory of database
// `db`; each file keeps its path and size, its data goes (the Submit is left as an upload's would be).
Staged stage_inline(const std::filesystem::path& db, wire::Submit& s);

// Bytes, each a limit of its own (the coordinator's --max-upload-gb, --max-client-upload-gb and
// --max-store-gb).
struct UploadQuotas {
  int64_t job = 0;     // one job's files
  int64_t client = 0;  // one client's uploads under way
  int64_t store = 0;   // the model store: stored models and every upload under way
};

class Uploads {
 public:
  using Clock = std::chrono::steady_clock;
  using Key = std::pair<std::string, std::string>;  // (client identity, upload name)
  static constexpr uint64_t kMaxFile = uint64_t{1} << 40;
  static constexpr auto kIdle = std::chrono::minutes(10);

  // Uploads into the staging directory of database `db` (storage::JobQueue::staging_dir, made
  // when an upload starts).
  Uploads(std::filesystem::path db, UploadQuotas quotas) : db_(std::move(db)), quotas_(quotas) {}

  // A piece accepted: the file to write it into (at the piece's offset) and the key that settles
  // it (written or failed).
  struct Piece {
    Key key;
    std::filesystem::path dir;   // the upload's directory
    std::filesystem::path file;  // inside it
    bool fresh = false;  // the upload's first piece: its directory may hold an abandoned one's files
  };
  // Checks a piece from `client` and counts it against the quotas (`stored_bytes`: the model
  // store's); throws Error when refused.
  Piece accept(const std::string& client, const wire::Upload& u, uint64_t stored_bytes, Clock::time_point now);
  void written(const Key& key);
  void failed(const Key& key, const std::string& error);

  // The upload `name` of `client`, taken off the ledger for its submission; throws Error when there
  // is none, a piece is still being written, or one failed.
  Staged take(const std::string& client, const std::string& name);

  // Refuses `more` bytes for upload `name` of `client` (which holds `bytes` already) when they would
  // pass a quota.
  void check_quotas(const std::string& client, const std::string& name, uint64_t bytes, uint64_t more,
                    uint64_t stored_bytes) const;

  // Takes off the ledger the uploads nothing came for in kIdle (none with a piece being written);
  // returns each with the directory to remove.
  std::vector<std::pair<Key, std::filesystem::path>> drop_idle(Clock::time_point now);

  // Writes `data` at `offset` of `file` (its directories made): the disk thread's part of a piece.
  static void write_piece(const std::filesystem::path& file, uint64_t offset, const std::string& data);

 private:
  struct Upload {
    std::filesystem::path dir;
    size_t writing = 0;
    std::map<std::string, uint64_t> received;
    std::map<std::string, uint64_t> extent;
    uint64_t bytes = 0;
    Clock::time_point last;
    std::string error;
  };
  std::filesystem::path db_;
  UploadQuotas quotas_;
  std::map<Key, Upload> uploads_;
};

}  // namespace fusetune::coordinator
