// The module side of the SIMT executor as text (simt/device_api.h and simt/prelude.h, embedded
// at configure time by simt/CMakeLists.txt): what simt/module.cpp puts before the CUDA text.
#pragma once

namespace fusetune::simt {

extern const char* const kDeviceApiText;
extern const char* const kPreludeText;

}  // namespace fusetune::simt
