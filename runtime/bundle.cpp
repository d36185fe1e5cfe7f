#include "runtime/bundle.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

namespace fusetune::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  check(in.good(), p.string(), ": missing from the plan bundle");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<char> read_bytes(const fs::path& p) {
  const std::string s = read_text(p);
  return {s.begin(), s.end()};
}

}  // namespace

std::vector<std::pair<std::string, std::string_view>> bundle_files(const Bundle& b) {
  std::vector<std::pair<std::string, std::string_view>> files = {
      {"kernels.cu", b.cuda_source},
      {"constants.bin", {b.constants.data(), b.constants.size()}}};
  for (const auto& [arch, cubin] : b.cubins) files.push_back({"kernels." + arch + ".cubin", {cubin.data(), cubin.size()}});
  for (const auto& [target, ptx] : b.ptx) files.push_back({"kernels." + target + ".ptx", ptx});
  files.push_back({"manifest.json", b.manifest});
  return files;
}

void write_bundle(const Bundle& b, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, dir.string(), ": cannot create the plan directory (", ec.message(), ")");
  for (const auto& [name, data] : bundle_files(b)) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    check(out.good(), (dir / name).string(), ": cannot write");
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
}

Bundle read_bundle(const fs::path& dir) {
  Bundle b;
  b.manifest = read_text(dir / "manifest.json");
  json m;
  try {
    m = json::parse(b.manifest);
  } catch (const json::exception& e) {
    fail((dir / "manifest.json").string(), ": not valid JSON (", e.what(), ")");
  }
  check(m.value("format", "") == "fusetune-plan", (dir / "manifest.json").string(), ": not a fusetune plan manifest");
  check(m.value("version", 0) >= kOldestBundleFormatVersion && m.value("version", 0) <= kBundleFormatVersion, (dir / "manifest.json").string(),
        ": plan format version ", m.value("version", 0), " is not supported (this fusetune reads versions ", kOldestBundleFormatVersion,
        " to ", kBundleFormatVersion, ")");
  b.cuda_source = read_text(dir / "kernels.cu");
  b.constants = read_bytes(dir / "constants.bin");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("kernels.sm_", 0) == 0 && entry.path().extension() == ".cubin") {
      b.cubins[name.substr(8, name.size() - 8 - 6)] = read_bytes(entry.path());
    } else if (name.rfind("kernels.sm_", 0) == 0 && entry.path().extension() == ".ptx") {
      b.ptx[name.substr(8, name.size() - 8 - 4)] = read_text(entry.path());
    }
  }
  return b;
}

}  // namespace fusetune::runtime
