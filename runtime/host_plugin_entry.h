// What the host backend's plugin (runtime/host_plugin.h) and the library that loads it agree on:
// the plugin's file name and its one entry point, which returns a new host backend
// (backend::make_plan_host_backend: every check on, the race checks on `checked_blocks` blocks of
// each launch, 0: all; the counters off) that the caller owns. The entry point's name carries the build's
// version, so a plugin of another build is not taken for this one's.
#pragma once

#include "backend/backend.h"

namespace fusetune::runtime {

#define FUSETUNE_HOST_PLUGIN_STR_(x) #x
#define FUSETUNE_HOST_PLUGIN_STR(x) FUSETUNE_HOST_PLUGIN_STR_(x)

// FUSETUNE_HOST_PLUGIN_FILE and FUSETUNE_HOST_PLUGIN_SYMBOL come from runtime/CMakeLists.txt.
inline constexpr const char* kHostPluginFile = FUSETUNE_HOST_PLUGIN_FILE;
inline constexpr const char* kHostPluginEntry = FUSETUNE_HOST_PLUGIN_STR(FUSETUNE_HOST_PLUGIN_SYMBOL);

}  // namespace fusetune::runtime
