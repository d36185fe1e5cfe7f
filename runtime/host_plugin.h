// The host backend as the deployment library reaches it: a plugin, so that the library itself
// holds no compiler and no SIMT executor.
//
// libfusetune_host.so (runtime/host_plugin_entry.cpp) is the host backend (backend/backend.h:
// make_host_backend: the kernels' CUDA text built by the system C++ compiler and run by the SIMT
// executor), built from the same sources as the runtime library and installed beside it.
// host_backend_from_plugin opens it once, from the directory the calling library was loaded
// from, else by the loader's search, and returns a new host backend from it (race and
// initialisation checks on `checked_blocks` blocks of each launch, 0: all); a plugin that is
// missing, or of another build, throws Error saying which file was looked for and why it failed.
// Guarantees: the plugin stays loaded for the life of the process (its backends' code lives in it).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace fusetune::runtime {

std::unique_ptr<backend::Backend> host_backend_from_plugin(int64_t checked_blocks);

}  // namespace fusetune::runtime
