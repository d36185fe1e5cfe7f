// deploy_example: a deployment of a plan bundle through fusetune's public runtime API only.
//
//   deploy_example PLAN_DIR [--input NAME=FILE.bin]... [--backend auto|host|cuda|cuda:N] [--repeat N]
//
// Loads the plan (`fusetune compile MODEL.onnx --device h100 --out PLAN_DIR`), fills each input
// from its .bin file (raw little-endian bytes, exactly the input's size) or else with a
// deterministic pattern (floats cycle through [-0.5, 0.5], other types are zero), runs it and
// prints each output's name, type, shape, first values and checksum (the sum of its values).
// With --repeat N it then runs N more times and prints the mean wall time per run.
// Exit codes: 0 success, 2 bad usage or a runtime error (its message on stderr).
#include <fusetune/runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Bytes = std::vector<unsigned char>;

template <typename T>
std::vector<double> values_as(const Bytes& bytes) {
  std::vector<double> v(bytes.size() / sizeof(T));
  for (size_t i = 0; i < v.size(); ++i) {
    T x;
    std::memcpy(&x, bytes.data() + i * sizeof(T), sizeof(T));
    v[i] = static_cast<double>(x);
  }
  return v;
}

// An output's values; types without a C++ counterpart here (float16, bfloat16) as their raw bytes.
std::vector<double> values_of(const fusetune::TensorInfo& t, const Bytes& bytes) {
  switch (t.type) {
    case fusetune::ElementType::kFloat32: return values_as<float>(bytes);
    case fusetune::ElementType::kFloat64: return values_as<double>(bytes);
    case fusetune::ElementType::kInt32: return values_as<int32_t>(bytes);
    case fusetune::ElementType::kInt64: return values_as<int64_t>(bytes);
    default: return values_as<uint8_t>(bytes);
  }
}

Bytes pattern_for(const fusetune::TensorInfo& t) {
  Bytes bytes(t.bytes(), 0);
  if (t.type != fusetune::ElementType::kFloat32) return bytes;
  for (size_t i = 0; i < t.elements(); ++i) {
    const float x = static_cast<float>(i % 17) / 16.0f - 0.5f;
    std::memcpy(bytes.data() + i * sizeof x, &x, sizeof x);
  }
  return bytes;
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string shape_of(const fusetune::TensorInfo& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

int run(int argc, char** argv) {
  std::string dir, backend = "auto";
  std::map<std::string, std::string> files;  // input name -> .bin file
  int repeat = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--input" && has_value && std::strchr(argv[i + 1], '=') != nullptr) {
      const std::string spec = argv[++i];
      files[spec.substr(0, spec.find('='))] = spec.substr(spec.find('=') + 1);
    } else if (arg == "--backend" && has_value) {
      backend = argv[++i];
    } else if (arg == "--repeat" && has_value && std::strspn(argv[i + 1], "0123456789") == std::strlen(argv[i + 1])) {
      repeat = std::atoi(argv[++i]);
    } else if (dir.empty() && arg.rfind("--", 0) != 0) {
      dir = arg;
    } else {
      dir.clear();
      break;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: deploy_example PLAN_DIR [--input NAME=FILE.bin]... [--backend auto|host|cuda|cuda:N] [--repeat N]\n");
    return 2;
  }

  fusetune::Plan plan = fusetune::Plan::load(dir, backend);
  std::printf("%s: %zu kernel launches%s on %s%s\n", dir.c_str(), plan.launches(), plan.cuda_graph() ? " (one CUDA graph)" : "",
              plan.backend().c_str(), plan.no_gpu_reason().empty() ? "" : (" (no GPU: " + plan.no_gpu_reason() + ")").c_str());

  for (const fusetune::TensorInfo& in : plan.inputs()) {
    const auto file = files.find(in.name);
    const Bytes data = file != files.end() ? read_file(file->second) : pattern_for(in);
    plan.set_input(in.name, data.data(), data.size());
    std::printf("input  %s %s %s <- %s\n", in.name.c_str(), fusetune::element_type_name(in.type).c_str(), shape_of(in).c_str(),
                file != files.end() ? file->second.c_str() : "pattern");
    if (file != files.end()) files.erase(file);
  }
  if (!files.empty()) throw std::runtime_error("--input " + files.begin()->first + ": the plan has no such input");

  plan.run();
  for (const fusetune::TensorInfo& out : plan.outputs()) {
    Bytes data(out.bytes());
    plan.get_output(out.name, data.data(), data.size());
    const std::vector<double> v = values_of(out, data);
    double checksum = 0;
    for (double x : v) checksum += x;
    std::printf("output %s %s %s:", out.name.c_str(), fusetune::element_type_name(out.type).c_str(), shape_of(out).c_str());
    for (size_t i = 0; i < v.size() && i < 5; ++i) std::printf(" %.6g", v[i]);
    std::printf("%s checksum %.9g\n", v.size() > 5 ? " ..." : "", checksum);
  }

  if (repeat > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < repeat; ++r) plan.run();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("mean over %d runs: %.3f ms\n", repeat, ms / repeat);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::runtime_error& e) {  // fusetune::RuntimeError is one too
    std::fprintf(stderr, "deploy_example: %s\n", e.what());
    return 2;
  }
}
