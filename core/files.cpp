#include "core/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace fusetune {

std::string read_file(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  check(std::filesystem::is_regular_file(path, ec), path.string(), ": ", what, " not found (or not a regular file)");
  std::ifstream in(path, std::ios::binary);
  check(in.good(), path.string(), ": cannot open ", what);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::filesystem::path cache_dir(const std::string& kind) {
  if (const char* d = std::getenv("FUSETUNE_CACHE_DIR")) return std::filesystem::path(d) / kind;
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::filesystem::path(x) / "fusetune" / kind;
  if (const char* h = std::getenv("HOME")) return std::filesystem::path(h) / ".cache" / "fusetune" / kind;
  return std::filesystem::temp_directory_path() / ("fusetune-" + kind);
}

void write_file_atomically(const std::filesystem::path& path, const std::string& bytes) {
  std::ostringstream tag;
  tag << ".tmp." << ::getpid() << "." << std::this_thread::get_id();
  const std::filesystem::path tmp = path.string() + tag.str();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    check(out.good(), tmp.string(), ": cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  check(!ec, path.string(), ": cannot publish (", ec.message(), ")");
}

std::filesystem::path path_inside(const std::string& path, const std::string& what) {
  const std::filesystem::path rel = std::filesystem::path(path).lexically_normal();
  check(!path.empty() && path.find('\0') == std::string::npos && rel.is_relative() && !rel.empty() &&
            *rel.begin() != ".." && *rel.begin() != "." && rel.filename() != "",
        what, " path '", path.substr(0, 200), "' must name a file inside its directory");
  return rel;
}

}  // namespace fusetune

namespace fusetune {

MappedFile map_file(const std::filesystem::path& path, const std::string& what) {
  // Live mappings by the file's identity (device, inode, size, modification time): a file replaced
  // since is mapped afresh.
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<const std::byte>> live;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, path.string(), ": cannot open the ", what);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path.string(), ": the ", what, " is not a regular file");
  }
  const auto size = static_cast<size_t>(st.st_size);
  const std::string key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(size) +
                          ":" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto bytes = live[key].lock()) {
    ::close(fd);
    return {bytes, size};
  }
  void* base = size == 0 ? nullptr : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  check(base != MAP_FAILED, path.string(), ": cannot map the ", what);
  std::shared_ptr<const std::byte> bytes(static_cast<const std::byte*>(base), [size](const std::byte* p) {
    if (p != nullptr) ::munmap(const_cast<std::byte*>(p), size);
  });
  std::erase_if(live, [](const auto& e) { return e.second.expired(); });
  live[key] = bytes;
  return {bytes, size};
}

}  // namespace fusetune
