// The JSON device descriptions of planner/devices/, compiled into the library by CMake
// (devices_embedded.cpp is generated from them at configure time).
#pragma once

#include <span>
#include <string_view>

namespace fusetune::planner {

struct EmbeddedDevice {
  std::string_view name;
  std::string_view json;
};

std::span<const EmbeddedDevice> embedded_devices();

}  // namespace fusetune::planner
