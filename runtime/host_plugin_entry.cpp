// The host backend's plugin (runtime/host_plugin.h): libfusetune_host.so's one entry point.
#include "runtime/host_plugin_entry.h"

// Every check on, the counters off: a deployed plan's outputs, at twice the speed of counting.
extern "C" __attribute__((visibility("default"))) fusetune::backend::Backend* FUSETUNE_HOST_PLUGIN_SYMBOL() {
  fusetune::simt::Options checked;
  checked.counters = false;
  return fusetune::backend::make_host_backend("", checked).release();
}
