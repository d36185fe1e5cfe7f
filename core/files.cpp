#include "core/files.h"

#include <fstream>
#include <sstream>

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

}  // namespace fusetune
