#include "backend/cudnn.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#ifdef FUSETUNE_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "backend/cudnn_attention.h"

namespace fusetune::backend {

#ifdef FUSETUNE_HAVE_CUDNN

// cuDNN 9 marks the operation graph's and execution plan's handle attribute and the legacy tensor
// addition and activation deprecated. Both stay: the handle attribute is what every cuDNN 9 release
// understands (its replacement, a device-property descriptor, is recent), and the legacy calls
// are the fallback epilogue that runs wherever no fused engine does.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using Desc = cudnnBackendDescriptor_t;

// The entry points used, resolved from libcudnn at run time (once per process).
struct Dnn {
  void* lib = nullptr;
  cudnnStatus_t (*create)(cudnnHandle_t*);
  cudnnStatus_t (*destroy)(cudnnHandle_t);
  cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
  size_t (*get_version)();
  cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, Desc*);
  cudnnStatus_t (*destroy_desc)(Desc);
  cudnnStatus_t (*finalize)(Desc);
  cudnnStatus_t (*set)(Desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t, const void*);
  cudnnStatus_t (*get)(Desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t, int64_t*, void*);
  cudnnStatus_t (*execute)(cudnnHandle_t, Desc, Desc);
  cudnnStatus_t (*create_tensor)(cudnnTensorDescriptor_t*);
  cudnnStatus_t (*set_tensor4d)(cudnnTensorDescriptor_t, cudnnTensorFormat_t, cudnnDataType_t, int, int, int, int);
  cudnnStatus_t (*destroy_tensor)(cudnnTensorDescriptor_t);
  cudnnStatus_t (*add_tensor)(cudnnHandle_t, const void*, cudnnTensorDescriptor_t, const void*, const void*,
                              cudnnTensorDescriptor_t, void*);
  cudnnStatus_t (*create_activation)(cudnnActivationDescriptor_t*);
  cudnnStatus_t (*set_activation)(cudnnActivationDescriptor_t, cudnnActivationMode_t, cudnnNanPropagation_t, double);
  cudnnStatus_t (*destroy_activation)(cudnnActivationDescriptor_t);
  cudnnStatus_t (*activation_forward)(cudnnHandle_t, cudnnActivationDescriptor_t, const void*, cudnnTensorDescriptor_t,
                                      const void*, const void*, cudnnTensorDescriptor_t, void*);

  template <typename F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    return f != nullptr;
  }
  bool open(std::string& why) {
    for (const char* name : {"libcudnn.so.9", "libcudnn.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) {
      why = "cuDNN is not installed (libcudnn.so.9 not found)";
      return false;
    }
    const bool ok =
        sym(create, "cudnnCreate") && sym(destroy, "cudnnDestroy") && sym(set_stream, "cudnnSetStream") && sym(get_version, "cudnnGetVersion") &&
        sym(create_desc, "cudnnBackendCreateDescriptor") && sym(destroy_desc, "cudnnBackendDestroyDescriptor") &&
        sym(finalize, "cudnnBackendFinalize") && sym(set, "cudnnBackendSetAttribute") &&
        sym(get, "cudnnBackendGetAttribute") && sym(execute, "cudnnBackendExecute") &&
        sym(create_tensor, "cudnnCreateTensorDescriptor") && sym(set_tensor4d, "cudnnSetTensor4dDescriptor") &&
        sym(destroy_tensor, "cudnnDestroyTensorDescriptor") && sym(add_tensor, "cudnnAddTensor") &&
        sym(create_activation, "cudnnCreateActivationDescriptor") &&
        sym(set_activation, "cudnnSetActivationDescriptor") &&
        sym(destroy_activation, "cudnnDestroyActivationDescriptor") &&
        sym(activation_forward, "cudnnActivationForward");
    if (!ok) {
      why = "libcudnn lacks an expected entry point";
      return false;
    }
    return true;
  }
};

Dnn* dnn_library(std::string& why) {
  static Dnn dnn;
  static std::string failure;
  static const bool ok = dnn.open(failure);
  if (!ok) why = failure;
  return ok ? &dnn : nullptr;
}

// A handle belongs to the device whose context was current when it was made, and one handle must
// not be used from two threads at once (its stream is set before each call), so there is one per
// owner (`owner`: a CUDA backend, whose calls its plan serializes), made on its first call, not when the library is
// opened (cudnn_version() works without a device); a failed creation is tried again next time.
struct Handles {
  std::mutex mu;
  std::map<const void*, cudnnHandle_t> by_owner;
};

Handles& handles() {
  static Handles h;
  return h;
}

cudnnHandle_t handle(Dnn& d, const void* owner, std::string& why) {
  Handles& all = handles();
  std::lock_guard<std::mutex> lock(all.mu);
  cudnnHandle_t& h = all.by_owner[owner];
  if (h == nullptr && d.create(&h) != CUDNN_STATUS_SUCCESS) {
    h = nullptr;
    why = "cudnnCreate failed (no CUDA context current?)";
  }
  return h;
}

// Owns the backend descriptors made for one call; each is destroyed with it.
class Descriptors {
 public:
  explicit Descriptors(Dnn& d) : d_(d) {}
  ~Descriptors() {
    for (auto it = all_.rbegin(); it != all_.rend(); ++it) d_.destroy_desc(*it);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  Desc make(cudnnBackendDescriptorType_t type) {
    Desc desc = nullptr;
    if (d_.create_desc(type, &desc) != CUDNN_STATUS_SUCCESS) return nullptr;
    all_.push_back(desc);
    return desc;
  }

 private:
  Dnn& d_;
  std::vector<Desc> all_;
};

constexpr int64_t kX = 1, kW = 2, kBias = 3, kResidual = 4, kY = 5;  // the variant pack's unique ids
constexpr int64_t kAlignment = 16;  // bytes every operand's address is declared (and checked) to have

class DnnCall : public GpuLibraryCall {
 public:
  DnnCall(Dnn& d, cudnnHandle_t h, const planner::LibraryCall& c, uint64_t workspace, size_t workspace_bytes)
      : d_(d), h_(h), call_(c), workspace_(workspace), workspace_bytes_(workspace_bytes), descs_(d) {}
  ~DnnCall() override {
    for (cudnnTensorDescriptor_t t : {y_legacy_, bias_legacy_}) {
      if (t != nullptr) d_.destroy_tensor(t);
    }
    if (activation_ != nullptr) d_.destroy_activation(activation_);
    if (pack_ != nullptr) d_.destroy_desc(pack_);
  }

  // The call's `algorithm`-th engine of the fused graph; only where the fused graph has no engine
  // at all, that of the convolution alone with the legacy epilogue.
  bool init(std::string& why) {
    int passing = call_.bias || call_.residual || call_.relu ? plan(true) : 0;  // conv and epilogue in one engine
    if (passing == 0) {
      fused_ = false;
      passing = plan(false);
    }
    if (plan_ == nullptr) {
      why = "cuDNN has " + std::to_string(passing) + " engines for this " + (fused_ ? "fused " : "") +
            "convolution that keep its precision within " + std::to_string(workspace_bytes_ >> 20) +
            " MiB of workspace; the call asks for number " + std::to_string(call_.algorithm + 1);
      return false;
    }
    return fused_ || legacy_epilogue(why);
  }

  bool enqueue(void* stream, const std::vector<uint64_t>& args) override {
    for (uint64_t a : args) {
      if (a % kAlignment != 0) return false;
    }
    if (d_.set_stream(h_, static_cast<cudaStream_t>(stream)) != CUDNN_STATUS_SUCCESS) return false;
    size_t next = 2;
    const uint64_t bias = call_.bias ? args.at(next++) : 0;
    const uint64_t residual = call_.residual ? args.at(next++) : 0;
    void* y = reinterpret_cast<void*>(args.at(next));
    // The variant pack binds the addresses; a timed loop launches with the same ones again and
    // again, so it is made only when they change (not between the timing events of each launch).
    if (args != packed_args_ && !pack(args, bias, residual, y)) return false;
    if (d_.execute(h_, plan_, pack_) != CUDNN_STATUS_SUCCESS) return false;
    if (fused_) return true;
    // The epilogue after the convolution alone, in the fused graph's order, in place on Y.
    const float one = 1.0f, zero = 0.0f;
    if (call_.bias && d_.add_tensor(h_, &one, bias_legacy_, reinterpret_cast<const void*>(bias), &one, y_legacy_, y) !=
                          CUDNN_STATUS_SUCCESS) {
      return false;
    }
    if (call_.residual && d_.add_tensor(h_, &one, y_legacy_, reinterpret_cast<const void*>(residual), &one, y_legacy_,
                                        y) != CUDNN_STATUS_SUCCESS) {
      return false;
    }
    return !call_.relu || d_.activation_forward(h_, activation_, &one, y_legacy_, y, &zero, y_legacy_, y) ==
                              CUDNN_STATUS_SUCCESS;
  }

 private:
  cudnnDataType_t io_type() const { return call_.dtype == DType::kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT; }

  // A variant pack of the planned graph's tensors at these addresses (and the workspace) into pack_.
  bool pack(const std::vector<uint64_t>& args, uint64_t bias, uint64_t residual, void* y) {
    if (pack_ != nullptr) d_.destroy_desc(pack_);
    pack_ = nullptr;
    packed_args_.clear();
    std::vector<int64_t> ids = {kX, kW, kY};
    std::vector<void*> pointers = {reinterpret_cast<void*>(args.at(0)), reinterpret_cast<void*>(args.at(1)), y};
    if (fused_ && call_.bias) {
      ids.push_back(kBias);
      pointers.push_back(reinterpret_cast<void*>(bias));
    }
    if (fused_ && call_.residual) {
      ids.push_back(kResidual);
      pointers.push_back(reinterpret_cast<void*>(residual));
    }
    void* ws = reinterpret_cast<void*>(workspace_);
    Desc p = nullptr;
    if (d_.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &p) != CUDNN_STATUS_SUCCESS) return false;
    if (d_.set(p, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(ids.size()), ids.data()) !=
            CUDNN_STATUS_SUCCESS ||
        d_.set(p, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
               pointers.data()) != CUDNN_STATUS_SUCCESS ||
        d_.set(p, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) != CUDNN_STATUS_SUCCESS ||
        d_.finalize(p) != CUDNN_STATUS_SUCCESS) {
      d_.destroy_desc(p);
      return false;
    }
    pack_ = p;
    packed_args_ = args;
    return true;
  }

  // An NCHW tensor of `dims`; virtual ones (between fused operations) hold float.
  Desc tensor(Descriptors& ds, int64_t id, std::array<int64_t, 4> dims, bool is_virtual) {
    Desc t = ds.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const std::array<int64_t, 4> strides = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
    const cudnnDataType_t type = is_virtual ? CUDNN_DATA_FLOAT : io_type();
    const bool virt = is_virtual;
    const bool ok = t != nullptr &&
                    d_.set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type) == CUDNN_STATUS_SUCCESS &&
                    d_.set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data()) == CUDNN_STATUS_SUCCESS &&
                    d_.set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data()) == CUDNN_STATUS_SUCCESS &&
                    d_.set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id) == CUDNN_STATUS_SUCCESS &&
                    d_.set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment) == CUDNN_STATUS_SUCCESS &&
                    d_.set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt) == CUDNN_STATUS_SUCCESS &&
                    d_.finalize(t) == CUDNN_STATUS_SUCCESS;
    return ok ? t : nullptr;
  }

  // A pointwise operation out = mode(in [, b]).
  Desc pointwise(Descriptors& ds, cudnnPointwiseMode_t mode, Desc in, Desc b, Desc out) {
    Desc pw = ds.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnDataType_t math = CUDNN_DATA_FLOAT;
    bool ok = pw != nullptr &&
              d_.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) == CUDNN_STATUS_SUCCESS &&
              d_.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math) == CUDNN_STATUS_SUCCESS;
    if (ok && mode == CUDNN_POINTWISE_RELU_FWD) {
      const double lower = 0.0, upper = call_.relu_max;
      ok = d_.set(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &lower) == CUDNN_STATUS_SUCCESS &&
           (call_.relu_max <= 0.0f ||
            d_.set(pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &upper) == CUDNN_STATUS_SUCCESS);
    }
    if (!ok || d_.finalize(pw) != CUDNN_STATUS_SUCCESS) return nullptr;
    Desc op = ds.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    ok = op != nullptr &&
         d_.set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw) ==
             CUDNN_STATUS_SUCCESS &&
         d_.set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in) == CUDNN_STATUS_SUCCESS &&
         (b == nullptr ||
          d_.set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b) == CUDNN_STATUS_SUCCESS) &&
         d_.set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out) == CUDNN_STATUS_SUCCESS &&
         d_.finalize(op) == CUDNN_STATUS_SUCCESS;
    return ok ? op : nullptr;
  }

  // The convolution (with the epilogue when `fused`) as an operation graph, and its engine
  // configurations that keep the call's precision, fit the workspace and finalize, each engine
  // once in the heuristics' order: the call's `algorithm`-th goes into plan_. Returns how many
  // passed (up to the call's).
  int plan(bool fused) {
    Descriptors& ds = descs_;
    const planner::ConvShape& cs = call_.conv;
    const std::array<int64_t, 4> y_dims = {call_.batch, cs.k, cs.p(), cs.q()};
    Desc x = tensor(ds, kX, {call_.batch, cs.c, cs.h, cs.w}, false);
    Desc w = tensor(ds, kW, {cs.k, cs.c / cs.groups, cs.r, cs.s}, false);
    Desc y = tensor(ds, kY, y_dims, false);
    if (x == nullptr || w == nullptr || y == nullptr) return 0;
    // Each fused step writes a float virtual tensor, the last one Y.
    int64_t next_virtual = 10;
    std::vector<std::pair<cudnnPointwiseMode_t, Desc>> steps;  // (mode, second operand)
    if (fused && call_.bias) {
      Desc b = tensor(ds, kBias, {1, cs.k, 1, 1}, false);
      if (b == nullptr) return 0;
      steps.emplace_back(CUDNN_POINTWISE_ADD, b);
    }
    if (fused && call_.residual) {
      Desc r = tensor(ds, kResidual, y_dims, false);
      if (r == nullptr) return 0;
      steps.emplace_back(CUDNN_POINTWISE_ADD, r);
    }
    if (fused && call_.relu) steps.emplace_back(CUDNN_POINTWISE_RELU_FWD, nullptr);
    Desc conv_out = steps.empty() ? y : tensor(ds, next_virtual++, y_dims, true);
    if (conv_out == nullptr) return 0;
    Desc conv = ds.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t spatial = 2;
    const std::array<int64_t, 2> pre = {cs.pads[0], cs.pads[1]}, post = {cs.pads[2], cs.pads[3]};
    if (conv == nullptr ||
        d_.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute) != CUDNN_STATUS_SUCCESS ||
        d_.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) != CUDNN_STATUS_SUCCESS ||
        d_.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial) != CUDNN_STATUS_SUCCESS ||
        d_.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, cs.dilations.data()) != CUDNN_STATUS_SUCCESS ||
        d_.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, cs.strides.data()) !=
            CUDNN_STATUS_SUCCESS ||
        d_.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pre.data()) != CUDNN_STATUS_SUCCESS ||
        d_.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, post.data()) != CUDNN_STATUS_SUCCESS ||
        d_.finalize(conv) != CUDNN_STATUS_SUCCESS) {
      return 0;
    }
    Desc fprop = ds.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    const float alpha = 1.0f, beta = 0.0f;
    if (fprop == nullptr ||
        d_.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) !=
            CUDNN_STATUS_SUCCESS ||
        d_.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w) !=
            CUDNN_STATUS_SUCCESS ||
        d_.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_out) !=
            CUDNN_STATUS_SUCCESS ||
        d_.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv) !=
            CUDNN_STATUS_SUCCESS ||
        d_.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha) !=
            CUDNN_STATUS_SUCCESS ||
        d_.set(fprop, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta) != CUDNN_STATUS_SUCCESS ||
        d_.finalize(fprop) != CUDNN_STATUS_SUCCESS) {
      return 0;
    }
    std::vector<Desc> ops = {fprop};
    Desc current = conv_out;
    for (size_t i = 0; i < steps.size(); ++i) {
      Desc out = i + 1 == steps.size() ? y : tensor(ds, next_virtual++, y_dims, true);
      Desc op = out == nullptr ? nullptr : pointwise(ds, steps[i].first, current, steps[i].second, out);
      if (op == nullptr) return 0;
      ops.push_back(op);
      current = out;
    }
    Desc graph = ds.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (graph == nullptr ||
        d_.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()),
               ops.data()) != CUDNN_STATUS_SUCCESS ||
        d_.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h_) != CUDNN_STATUS_SUCCESS ||
        d_.finalize(graph) != CUDNN_STATUS_SUCCESS) {
      return 0;
    }
    int passed = 0;
    std::set<int64_t> engines;  // the heuristics' modes can propose one engine twice
    for (cudnnBackendHeurMode_t heur_mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      for (Desc cfg : configurations(graph, heur_mode)) {
        const int64_t engine = precise_engine(cfg);
        if (engine < 0 || !engines.insert(engine).second) continue;
        Desc p = ds.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        if (p == nullptr ||
            d_.set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h_) != CUDNN_STATUS_SUCCESS ||
            d_.set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) !=
                CUDNN_STATUS_SUCCESS ||
            d_.finalize(p) != CUDNN_STATUS_SUCCESS) {
          continue;
        }
        int64_t ws = 0, n = 0;
        if (d_.get(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
            ws < 0 || static_cast<size_t>(ws) > workspace_bytes_) {
          continue;
        }
        if (passed++ < call_.algorithm) continue;
        plan_ = p;
        return passed;
      }
    }
    return passed;
  }

  // The engine configurations the heuristics propose in `heur_mode`, best first (owned by descs_).
  std::vector<Desc> configurations(Desc graph, cudnnBackendHeurMode_t heur_mode) {
    Desc heur = descs_.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    int64_t count = 0;
    if (heur == nullptr ||
        d_.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) !=
            CUDNN_STATUS_SUCCESS ||
        d_.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode) != CUDNN_STATUS_SUCCESS ||
        d_.finalize(heur) != CUDNN_STATUS_SUCCESS ||
        d_.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr) !=
            CUDNN_STATUS_SUCCESS ||
        count <= 0) {
      return {};
    }
    std::vector<Desc> cfgs;
    for (int64_t i = 0; i < count; ++i) {
      Desc cfg = descs_.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      if (cfg == nullptr) return {};
      cfgs.push_back(cfg);
    }
    int64_t got = 0;
    if (d_.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs.data()) !=
        CUDNN_STATUS_SUCCESS) {
      return {};
    }
    cfgs.resize(static_cast<size_t>(std::min(got, count)));
    return cfgs;
  }

  // The global index of an engine configuration's engine where it computes at the call's
  // precision, else -1: no input down-conversion and no reduced-precision reduction for any call,
  // and for a float32 call without the TF32 policy no tensor cores (which would take its operands
  // as TF32), as torch does when allow_tf32 is off.
  int64_t precise_engine(Desc cfg) {
    Desc engine = descs_.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0, index = -1;
    if (engine == nullptr ||
        d_.get(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) != CUDNN_STATUS_SUCCESS ||
        d_.get(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) != CUDNN_STATUS_SUCCESS) {
      return -1;
    }
    std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
    if (d_.get(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, static_cast<int64_t>(notes.size()), &n,
               notes.data()) != CUDNN_STATUS_SUCCESS) {
      return -1;
    }
    for (int64_t i = 0; i < std::min<int64_t>(n, static_cast<int64_t>(notes.size())); ++i) {
      const cudnnBackendNumericalNote_t note = notes[static_cast<size_t>(i)];
      if (note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS || note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) {
        return -1;
      }
      if (note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && call_.dtype == DType::kF32 && !call_.tf32) return -1;
    }
    return index;
  }

  // The epilogue as legacy cuDNN calls on Y (NCHW), for a plan of the convolution alone.
  bool legacy_epilogue(std::string& why) {
    const planner::ConvShape& cs = call_.conv;
    const auto dims = [](int64_t v) { return static_cast<int>(v); };
    if (d_.create_tensor(&y_legacy_) != CUDNN_STATUS_SUCCESS ||
        d_.set_tensor4d(y_legacy_, CUDNN_TENSOR_NCHW, io_type(), dims(call_.batch), dims(cs.k), dims(cs.p()),
                        dims(cs.q())) != CUDNN_STATUS_SUCCESS) {
      why = "cuDNN refused the output's tensor descriptor";
      return false;
    }
    if (call_.bias && (d_.create_tensor(&bias_legacy_) != CUDNN_STATUS_SUCCESS ||
                       d_.set_tensor4d(bias_legacy_, CUDNN_TENSOR_NCHW, io_type(), 1, dims(cs.k), 1, 1) !=
                           CUDNN_STATUS_SUCCESS)) {
      why = "cuDNN refused the bias's tensor descriptor";
      return false;
    }
    if (call_.relu) {
      const cudnnActivationMode_t mode = call_.relu_max > 0.0f ? CUDNN_ACTIVATION_CLIPPED_RELU : CUDNN_ACTIVATION_RELU;
      if (d_.create_activation(&activation_) != CUDNN_STATUS_SUCCESS ||
          d_.set_activation(activation_, mode, CUDNN_PROPAGATE_NAN, call_.relu_max) != CUDNN_STATUS_SUCCESS) {
        why = "cuDNN refused the activation descriptor";
        return false;
      }
    }
    return true;
  }

  Dnn& d_;
  cudnnHandle_t h_;
  planner::LibraryCall call_;
  uint64_t workspace_;
  size_t workspace_bytes_;
  Descriptors descs_;
  Desc plan_ = nullptr;
  Desc pack_ = nullptr;                // the variant pack for packed_args_
  std::vector<uint64_t> packed_args_;  // the addresses pack_ binds
  bool fused_ = true;
  cudnnTensorDescriptor_t y_legacy_ = nullptr, bias_legacy_ = nullptr;
  cudnnActivationDescriptor_t activation_ = nullptr;
};

}  // namespace

std::string cudnn_version() {
  std::string why;
  Dnn* d = dnn_library(why);
  return d ? "cudnn " + std::to_string(d->get_version()) : "";
}

void* cudnn_library(std::string* why_not) {
  std::string why;
  Dnn* d = dnn_library(why);
  if (d == nullptr && why_not) *why_not = why;
  return d ? d->lib : nullptr;
}

void release_cudnn_handle(const void* owner) {
  std::string why;
  Dnn* d = dnn_library(why);
  if (d == nullptr) return;
  Handles& all = handles();
  std::lock_guard<std::mutex> lock(all.mu);
  auto it = all.by_owner.find(owner);
  if (it == all.by_owner.end()) return;
  if (it->second != nullptr) d->destroy(it->second);
  all.by_owner.erase(it);
}

std::unique_ptr<GpuLibraryCall> make_cudnn_call(const planner::LibraryCall& call, const void* owner, int sm,
                                                uint64_t workspace, size_t workspace_bytes, std::string* why_not) {
  std::string why;
  Dnn* d = dnn_library(why);
  cudnnHandle_t h = d ? handle(*d, owner, why) : nullptr;
  if (h == nullptr) {
    if (why_not) *why_not = why;
    return nullptr;
  }
  if (call.op == planner::LibraryOp::kAttention) {
    return make_cudnn_attention_call(call, d->lib, h, sm, workspace, workspace_bytes, why_not);
  }
  if (call.op != planner::LibraryOp::kConv) {
    if (why_not) *why_not = "cuDNN runs convolution and attention calls only";
    return nullptr;
  }
  auto c = std::make_unique<DnnCall>(*d, h, call, workspace, workspace_bytes);
  if (!c->init(why)) {
    if (why_not) *why_not = why;
    return nullptr;
  }
  return c;
}

#pragma GCC diagnostic pop

#else

std::string cudnn_version() { return ""; }

void* cudnn_library(std::string* why_not) {
  if (why_not) *why_not = "this build has no cuDNN headers";
  return nullptr;
}

void release_cudnn_handle(const void*) {}

std::unique_ptr<GpuLibraryCall> make_cudnn_call(const planner::LibraryCall&, const void*, int, uint64_t, size_t,
                                                std::string* why_not) {
  if (why_not) *why_not = "this build has no cuDNN headers";
  return nullptr;
}

#endif

}  // namespace fusetune::backend
