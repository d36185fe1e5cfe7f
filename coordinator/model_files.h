// What a client sends of a model (submit, and tune's inline submission): the .onnx and exactly the
// external-data files its tensors name, nothing else beside it. Takes the model's path; parses the
// ONNX protobuf and collects the `location` of every tensor stored as external data (data_location
// EXTERNAL): the graph's initializers, tensors held by node attributes (a Constant's value), and
// the same in every subgraph an attribute carries.
// Guarantees: the .onnx comes first, then each named file once (locations made normal, sorted);
// a location that is absolute or leaves the model's folder, a file reached through a symlink
// leading out of the folder (the folder itself resolved, so a symlink to another file inside it is
// fine), and a missing or non-regular file are each refused with one Error line naming the model,
// the tensor and the file. Each file's `local` is its real path (symlinks resolved), so what was
// checked is what is read. A file merely mentioned in the model's bytes (a doc string naming
// `.netrc`) is never sent.
#pragma once

#include <filesystem>
#include <vector>

#include "coordinator/client.h"

namespace fusetune::coordinator {

std::vector<UploadFile> model_files(const std::filesystem::path& model);

}  // namespace fusetune::coordinator
