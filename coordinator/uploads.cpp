#include "coordinator/uploads.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>

#include "core/error.h"
#include "core/files.h"
#include "core/sha256.h"
#include "proto/wire.h"
#include "storage/job_queue.h"

namespace fusetune::coordinator {

namespace fs = std::filesystem;

Staged stage_inline(const fs::path& db, wire::Submit& s) {
  Staged st;
  static std::atomic<uint64_t> staged{0};
  st.dir = storage::JobQueue::staging_dir(db) / ("inline-" + std::to_string(::getpid()) + "-" + std::to_string(++staged));
  fs::remove_all(st.dir);
  for (wire::ModelFile& f : *s.mutable_files()) {
    const fs::path rel = path_inside(f.path(), "submit: model file");
    fs::create_directories((st.dir / rel).parent_path());
    write_file_atomically(st.dir / rel, f.data());
    st.received[rel.string()] += f.data().size();
    f.set_size(f.data().size());
    f.clear_data();
  }
  return st;
}

Uploads::Piece Uploads::accept(const std::string& client, const wire::Upload& u, uint64_t stored_bytes,
                               Clock::time_point now) {
  const std::string& name = u.upload();
  check(!name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        }),
        "upload: name '", name.substr(0, 64), "' must be 1 to 64 letters, digits, '-' or '_'");
  const std::string rel = path_inside(u.path(), "upload: file").string();
  check(u.data().size() <= wire::kMaxUploadChunk, "upload: a piece of ", u.data().size(), " bytes (at most ",
        wire::kMaxUploadChunk, ")");
  check(u.offset() <= kMaxFile && u.data().size() <= kMaxFile - u.offset(), "upload: offset ", u.offset(), " of '", rel,
        "' is beyond the largest file taken (", kMaxFile, " bytes)");
  Piece piece;
  piece.key = {client, name};
  const auto [it, fresh] = uploads_.try_emplace(piece.key);
  Upload& up = it->second;
  if (fresh) up.dir = storage::JobQueue::staging_dir(db_) / ("upload-" + sha256_hex(client + '\0' + name).substr(0, 24));
  check(up.error.empty(), "upload '", name, "' failed before: ", up.error);
  uint64_t& extent = up.extent[rel];
  const uint64_t end = u.offset() + u.data().size();
  if (end > extent) {
    try {
      check_quotas(client, name, up.bytes, end - extent, stored_bytes);
    } catch (const Error&) {
      if (fresh) uploads_.erase(it);  // a refused first piece leaves no upload behind
      throw;
    }
    up.bytes += end - extent;
    extent = end;
  }
  ++up.writing;
  up.last = now;
  up.received[rel] += u.data().size();
  piece.dir = up.dir;
  piece.file = up.dir / rel;
  piece.fresh = fresh;
  return piece;
}

void Uploads::written(const Key& key) {
  const auto it = uploads_.find(key);
  if (it != uploads_.end()) --it->second.writing;
}

void Uploads::failed(const Key& key, const std::string& error) {
  const auto it = uploads_.find(key);
  if (it == uploads_.end()) return;
  --it->second.writing;
  it->second.error = error;
}

Staged Uploads::take(const std::string& client, const std::string& name) {
  const auto it = uploads_.find({client, name});
  check(it != uploads_.end(), "submit: no upload '", name.substr(0, 64), "' from this client");
  check(it->second.writing == 0, "submit: upload '", name, "' still has ", it->second.writing,
        " pieces being written (wait for their acknowledgements)");
  check(it->second.error.empty(), "submit: upload '", name, "' failed: ", it->second.error);
  Staged st{it->second.dir, std::move(it->second.received)};
  uploads_.erase(it);
  return st;
}

void Uploads::check_quotas(const std::string& client, const std::string& name, uint64_t bytes, uint64_t more,
                           uint64_t stored_bytes) const {
  uint64_t clients = 0, in_flight = 0;
  for (const auto& [key, other] : uploads_) {
    in_flight += other.bytes;
    if (key.first == client) clients += other.bytes;
  }
  auto over = [&](uint64_t total, int64_t quota, const char* what, const char* flag) {
    check(total <= static_cast<uint64_t>(quota), "upload '", name, "': ", total, " bytes would pass ", what, " of ", quota,
          " bytes (", flag, ")");
  };
  over(bytes + more, quotas_.job, "the quota of one job's files", "--max-upload-gb");
  over(clients + more, quotas_.client, "the quota of one client's uploads under way", "--max-client-upload-gb");
  over(stored_bytes + in_flight + more, quotas_.store, "the model store's quota (stored models and uploads under way)",
       "--max-store-gb");
}

std::vector<std::pair<Uploads::Key, fs::path>> Uploads::drop_idle(Clock::time_point now) {
  std::vector<std::pair<Key, fs::path>> dropped;
  for (auto it = uploads_.begin(); it != uploads_.end();) {
    if (it->second.writing > 0 || now - it->second.last < kIdle) {
      ++it;
      continue;
    }
    dropped.emplace_back(it->first, it->second.dir);
    it = uploads_.erase(it);
  }
  return dropped;
}

void Uploads::write_piece(const fs::path& file, uint64_t offset, const std::string& data) {
  fs::create_directories(file.parent_path());
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  check(fd >= 0, "upload: cannot open ", file.filename().string(), " in the staging directory");
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail("upload: writing ", file.filename().string(), " failed (disk full?)");
    }
    done += static_cast<size_t>(n);
  }
  check(::close(fd) == 0, "upload: writing ", file.filename().string(), " failed");
}

}  // namespace fusetune::coordinator
