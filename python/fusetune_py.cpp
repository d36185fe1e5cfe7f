// The Python extension module fusetune._fusetune: the deployment runtime's Plan (runtime/include/
// fusetune/runtime.h) as the class _Plan, for python/fusetune/__init__.py to wrap.
//
// Takes what the public C++ API takes, nothing more: a bundle directory and a backend name to
// load; raw bytes through the buffer protocol to set an input and to receive an output. Guarantees:
// every runtime error reaches Python as RuntimeError with the runtime's message (which names the
// culprit); the GIL is released while a plan loads and runs, so other Python threads go on; a
// buffer of the wrong size is refused before anything is copied.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
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
  py::class_<fusetune::Plan>(m, "_Plan")
      .def_static("load", &fusetune::Plan::load, py::arg("dir"), py::arg("backend"), py::call_guard<py::gil_scoped_release>())
      .def("inputs", [](const fusetune::Plan& p) { return describe(p.inputs()); })
      .def("outputs", [](const fusetune::Plan& p) { return describe(p.outputs()); })
      .def("backend", &fusetune::Plan::backend)
      .def("no_gpu_reason", &fusetune::Plan::no_gpu_reason)
      .def("launches", &fusetune::Plan::launches)
      .def("cuda_graph", &fusetune::Plan::cuda_graph)
      .def("set_input",
           [](fusetune::Plan& p, const std::string& name, const py::buffer& data) {
             const py::buffer_info b = data.request();
             // Only whole, C-contiguous buffers: the bytes are taken as they lie.
             ssize_t expect = b.itemsize;
             for (ssize_t d = b.ndim; d-- > 0;) {
               if (b.shape[static_cast<size_t>(d)] > 1 && b.strides[static_cast<size_t>(d)] != expect) {
                 throw py::value_error("input '" + name + "': the buffer is not C-contiguous");
               }
               expect *= b.shape[static_cast<size_t>(d)];
             }
             const auto bytes = static_cast<size_t>(b.size * b.itemsize);
             py::gil_scoped_release release;
             p.set_input(name, b.ptr, bytes);
           })
      .def("run", &fusetune::Plan::run, py::call_guard<py::gil_scoped_release>())
      .def("get_output", [](const fusetune::Plan& p, const std::string& name, const py::buffer& into) {
        const py::buffer_info b = into.request(true);
        const auto bytes = static_cast<size_t>(b.size * b.itemsize);
        py::gil_scoped_release release;
        p.get_output(name, b.ptr, bytes);
      });
}
