// Files: whole-file reads for the passes and commands that take files from users (models, external
// data, tensors), and fusetune's cache directories. read_file takes a path and what the file is
// for the user ("model file"); it returns the bytes, or throws Error naming the path and that role
// when the file is missing, not a regular file, or unreadable. cache_dir(kind) is where a cache of
// that kind lives ("host-kernels", "nvrtc"; "search.db", the default search database):
// $FUSETUNE_CACHE_DIR/kind, else
// $XDG_CACHE_HOME/fusetune/kind, else ~/.cache/fusetune/kind, else under the temporary directory;
// it is not created here. write_file_atomically writes a file under a private name and renames it
// into place, so readers in other threads or processes see the whole file or none.
// map_file maps a whole file read-only (private: nothing written through it reaches the file); the
// mapping lives while the returned pointer or an alias of it does, its pages are read when first
// touched, and a file mapped again while the first mapping lives shares it.
// path_inside(path, what) is a path given by a peer or a file (a model's file, an export's), made
// normal and refused (Error naming it and `what`) when empty, absolute or leading out of the
// directory it is relative to.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

namespace fusetune {

std::string read_file(const std::filesystem::path& path, const std::string& what);
std::filesystem::path cache_dir(const std::string& kind);
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes);
std::filesystem::path path_inside(const std::string& path, const std::string& what);

struct MappedFile {
  std::shared_ptr<const std::byte> bytes;
  size_t size = 0;
};
MappedFile map_file(const std::filesystem::path& path, const std::string& what);

}  // namespace fusetune
