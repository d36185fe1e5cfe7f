// The Python extension module fusetune._fusetune: the deployment runtime's Plan (runtime/include/
// fusetune/runtime.h) as the class _Plan, for python/fusetune/__init__.py to wrap.
//
// Takes what the public C++ API takes, nothing more: a bundle directory and a backend name to
// load; a run's input and output addresses (host memory, or with `device` the plan's device
// memory), which fusetune/__init__.py takes from arrays whose dtypes, shapes and layouts it has
// checked and which it keeps alive across the call. Guarantees: every runtime error reaches Python
// as RuntimeError with the runtime's message (which names the culprit, and refuses a pointer that
// is not the device's); the GIL is released while a plan loads and runs, so other Python threads go on.
// _dlpack_info reads what a DLPack capsule describes (Debian's dlpack.h, the exchange format's
// own header), without consuming it: its producer keeps the memory.
#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "fusetune/runtime.h"

namespace py = pybind11;

namespace {

// (name, element type's ONNX spelling, shape) of each tensor.
std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> describe(const std::vector<fusetune::TensorInfo>& ts) {
  std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> out;
  for (const fusetune::TensorInfo& t : ts) out.emplace_back(t.name, fusetune::element_type_name(t.type), t.shape);
  return out;
}

}  // namespace

PYBIND11_MODULE(_fusetune, m) {
  m.doc() = "fusetune's deployment runtime (use the fusetune package, not this module)";
  // (address of the first element, device type, device id, shape, strides in elements or None,
  // (type code, bits, lanes)) of an unconsumed DLPack capsule ("dltensor").
  m.def("_dlpack_info", [](const py::capsule& capsule) {
    if (capsule.name() == nullptr || std::string(capsule.name()) != "dltensor") {
      throw py::value_error("not an unconsumed DLPack capsule (named 'dltensor')");
    }
    const auto* managed = capsule.get_pointer<DLManagedTensor>();
    const DLTensor& t = managed->dl_tensor;
    std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
    py::object strides = py::none();
    if (t.strides != nullptr) strides = py::tuple(py::cast(std::vector<int64_t>(t.strides, t.strides + t.ndim)));
    const uintptr_t address = reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(t.byte_offset);
    return py::make_tuple(address, static_cast<int>(t.device.device_type), t.device.device_id, py::tuple(py::cast(shape)),
                          strides, py::make_tuple(t.dtype.code, t.dtype.bits, t.dtype.lanes));
  });
  py::class_<fusetune::Plan>(m, "_Plan")
      .def_static(
          "load",
          [](const std::string& dir, const std::string& backend, int64_t host_checked_blocks) {
            fusetune::LoadOptions options;
            options.host_checked_blocks = host_checked_blocks;
            return fusetune::Plan::load(dir, backend, options);
          },
          py::arg("dir"), py::arg("backend"), py::arg("host_checked_blocks"), py::call_guard<py::gil_scoped_release>())
      .def("inputs", [](const fusetune::Plan& p) { return describe(p.inputs()); })
      .def("outputs", [](const fusetune::Plan& p) { return describe(p.outputs()); })
      .def("output_counts",
           [](const fusetune::Plan& p) {
             std::vector<std::tuple<std::string, std::string, int>> out;
             for (const fusetune::TensorInfo& t : p.outputs()) {
               if (!t.count_output.empty()) out.emplace_back(t.name, t.count_output, t.count_axis);
             }
             return out;
           })
      .def("backend", &fusetune::Plan::backend)
      .def("no_gpu_reason", &fusetune::Plan::no_gpu_reason)
      .def("launches", &fusetune::Plan::launches)
      .def("cuda_graph", &fusetune::Plan::cuda_graph)
      .def(
          "run_memory",
          [](fusetune::Plan& p, const std::vector<uintptr_t>& inputs, const std::vector<uintptr_t>& outputs, bool device) {
            std::vector<const void*> in;
            std::vector<void*> out;
            for (uintptr_t a : inputs) in.push_back(reinterpret_cast<const void*>(a));
            for (uintptr_t a : outputs) out.push_back(reinterpret_cast<void*>(a));
            p.run(in, out, device ? fusetune::Memory::kDevice : fusetune::Memory::kHost);
          },
          py::arg("inputs"), py::arg("outputs"), py::arg("device"), py::call_guard<py::gil_scoped_release>());
}
