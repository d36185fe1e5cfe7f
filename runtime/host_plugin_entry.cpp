// The host backend's plugin (runtime/host_plugin.h): libfusetune_host.so's one entry point.
#include "runtime/host_plugin_entry.h"

extern "C" __attribute__((visibility("default"))) fusetune::backend::Backend* FUSETUNE_HOST_PLUGIN_SYMBOL(int64_t checked_blocks) {
  return fusetune::backend::make_plan_host_backend(checked_blocks).release();
}
