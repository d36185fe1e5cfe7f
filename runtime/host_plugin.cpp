#include "runtime/host_plugin.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "core/error.h"
#include "runtime/host_plugin_entry.h"

namespace fusetune::runtime {

namespace {

using Entry = backend::Backend* (*)(int64_t checked_blocks);

// The plugin's entry point, resolved once; or the reason it could not be.
Entry plugin_entry(std::string& why) {
  static std::once_flag once;
  static Entry entry = nullptr;
  static std::string reason;
  std::call_once(once, [] {
    std::string beside;
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void*>(&host_backend_from_plugin), &info) != 0 && info.dli_fname != nullptr) {
      beside = (std::filesystem::path(info.dli_fname).parent_path() / kHostPluginFile).string();
    }
    void* lib = nullptr;
    for (const std::string& name : {beside, std::string(kHostPluginFile)}) {
      if (name.empty()) continue;
      if ((lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
      reason += (reason.empty() ? "" : "; ") + std::string(dlerror());
    }
    if (lib == nullptr) {
      reason = std::string("the host backend's plugin ") + kHostPluginFile + " could not be loaded (" + reason +
               "): install it beside the runtime library, or run on a GPU";
      return;
    }
    entry = reinterpret_cast<Entry>(dlsym(lib, kHostPluginEntry));
    if (entry == nullptr) reason = std::string(kHostPluginFile) + " has no " + kHostPluginEntry + ": a plugin of another fusetune build";
  });
  why = reason;
  return entry;
}

}  // namespace

std::unique_ptr<backend::Backend> host_backend_from_plugin(int64_t checked_blocks) {
  std::string why;
  const Entry entry = plugin_entry(why);
  check(entry != nullptr, why);
  return std::unique_ptr<backend::Backend>(entry(checked_blocks));
}

}  // namespace fusetune::runtime
