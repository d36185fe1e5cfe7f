#include "core/files.h"

#include <unistd.h>

#include <cstdlib>
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
