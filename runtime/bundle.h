// Plan bundles: what `fusetune compile` writes and `fusetune run DIR` executes (docs/plan-format.md).
//
// A Bundle is the files of one plan: the JSON manifest (launches, buffers, arena and constants
// layout, libraries), the kernels' CUDA text, cubins per architecture, the PTX of the same
// compilation (which the driver compiles for a GPU newer than the cubins' where that target allows)
// and the constants.
// write_bundle/read_bundle move a bundle to and from a directory; read_bundle checks the
// manifest's format and version. This is all the deployment runtime knows of bundles: making one
// from a plan is compiler/compile_bundle.h, on the compiler's side.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fusetune::runtime {

inline constexpr int kBundleFormatVersion = 3;
// The oldest version read_bundle takes: version 2 is version 3 without launches' `when`.
inline constexpr int kOldestBundleFormatVersion = 2;

struct Bundle {
  std::string manifest;   // JSON text
  std::string cuda_source;  // what NVRTC compiles for the GPU and the host executor runs
  std::map<std::string, std::vector<char>> cubins;  // by architecture
  std::map<std::string, std::string> ptx;           // by PTX target ("sm_80"; "sm_90a": for sm_90 alone)
  std::vector<char> constants;
  std::vector<std::string> group_configs;  // per plan group: the TileConfig::str() its kernel was lowered with (not stored)
};

// The files of a bundle as a directory holds them (name, contents), the manifest last: a bundle
// with a manifest is complete. write_bundle writes them; the coordinator sends them to clients.
std::vector<std::pair<std::string, std::string_view>> bundle_files(const Bundle& b);
void write_bundle(const Bundle& b, const std::filesystem::path& dir);
Bundle read_bundle(const std::filesystem::path& dir);

}  // namespace fusetune::runtime
