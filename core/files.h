// Whole-file reads for the passes and commands that take files from users (models, external data,
// tensors). read_file takes a path and what the file is for the user ("model file"); it returns
// the bytes, or throws Error naming the path and that role when the file is missing, not a
// regular file, or unreadable.
#pragma once

#include <filesystem>
#include <string>

namespace fusetune {

std::string read_file(const std::filesystem::path& path, const std::string& what);

}  // namespace fusetune
