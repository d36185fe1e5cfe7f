#include "backend/cublas_lt.h"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

#ifdef FUSETUNE_HAVE_NVRTC
#include <cublasLt.h>
#endif

namespace fusetune::backend {

#ifdef FUSETUNE_HAVE_NVRTC

namespace {

// The entry points used, resolved from libcublasLt at run time (once per process).
struct Lt {
  void* lib = nullptr;
  cublasStatus_t (*create)(cublasLtHandle_t*);
  cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t);
  cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void*, size_t);
  cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
  cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t*, cudaDataType, uint64_t, uint64_t, int64_t);
  cublasStatus_t (*layout_set)(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, const void*, size_t);
  cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
  cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t*);
  cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void*, size_t);
  cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                              cublasLtMatmulHeuristicResult_t*, int*);
  cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*, cublasLtMatrixLayout_t,
                           const void*, cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t, void*,
                           cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t);
  size_t (*get_version)();
  cublasLtHandle_t handle = nullptr;

  template <typename F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    return f != nullptr;
  }
  bool open(std::string& why) {
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) {
      why = "cuBLASLt is not installed (libcublasLt.so not found)";
      return false;
    }
    const bool ok = sym(create, "cublasLtCreate") && sym(desc_create, "cublasLtMatmulDescCreate") &&
                    sym(desc_set, "cublasLtMatmulDescSetAttribute") && sym(desc_destroy, "cublasLtMatmulDescDestroy") &&
                    sym(layout_create, "cublasLtMatrixLayoutCreate") &&
                    sym(layout_set, "cublasLtMatrixLayoutSetAttribute") &&
                    sym(layout_destroy, "cublasLtMatrixLayoutDestroy") &&
                    sym(pref_create, "cublasLtMatmulPreferenceCreate") &&
                    sym(pref_set, "cublasLtMatmulPreferenceSetAttribute") &&
                    sym(pref_destroy, "cublasLtMatmulPreferenceDestroy") &&
                    sym(heuristic, "cublasLtMatmulAlgoGetHeuristic") && sym(matmul, "cublasLtMatmul") &&
                    sym(get_version, "cublasLtGetVersion");
    if (!ok) why = "libcublasLt lacks an expected entry point";
    return ok;
  }
  // The handle, made by the first call that needs one (cublaslt_version() needs none; a failed
  // creation is tried again next time).
  bool ready(std::string& why) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    if (handle == nullptr && create(&handle) != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      why = "cublasLtCreate failed";
    }
    return handle != nullptr;
  }
};

Lt* lt_library(std::string& why) {
  static Lt lt;
  static std::string failure;
  static const bool ok = lt.open(failure);
  if (!ok) why = failure;
  return ok ? &lt : nullptr;
}

class LtCall : public GpuLibraryCall {
 public:
  LtCall(Lt& lt, const planner::LibraryCall& c, uint64_t workspace, size_t workspace_bytes)
      : lt_(lt), call_(c), workspace_(workspace), workspace_bytes_(workspace_bytes) {}
  ~LtCall() override {
    for (cublasLtMatrixLayout_t l : {a_, b_, c_}) {
      if (l != nullptr) lt_.layout_destroy(l);
    }
    if (desc_ != nullptr) lt_.desc_destroy(desc_);
  }

  bool init(std::string& why) {
    const cudaDataType_t dt = call_.dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_32F;
    const cublasComputeType_t compute = call_.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (lt_.desc_create(&desc_, compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return fail_with(why, "descriptor");
    const cublasLtEpilogue_t epilogue =
        call_.bias ? (call_.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : call_.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                   : (call_.relu ? CUBLASLT_EPILOGUE_RELU : call_.gelu ? CUBLASLT_EPILOGUE_GELU : CUBLASLT_EPILOGUE_DEFAULT);
    lt_.desc_set(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    const auto n = static_cast<uint64_t>(call_.n), m = static_cast<uint64_t>(call_.m), k = static_cast<uint64_t>(call_.k);
    // Column-major views of the row-major operands (see the header): ours B as its "A", ours A as its "B".
    if (lt_.layout_create(&a_, dt, n, k, call_.n) != CUBLAS_STATUS_SUCCESS ||
        lt_.layout_create(&b_, dt, k, m, call_.k) != CUBLAS_STATUS_SUCCESS ||
        lt_.layout_create(&c_, dt, n, m, call_.n) != CUBLAS_STATUS_SUCCESS) {
      return fail_with(why, "matrix layout");
    }
    if (call_.batch > 1) {
      const auto batch = static_cast<int32_t>(call_.batch);
      const int64_t a_stride = call_.b_batched ? call_.k * call_.n : 0, b_stride = call_.m * call_.k,
                    c_stride = call_.m * call_.n;
      for (auto [layout, stride] : {std::pair{a_, a_stride}, {b_, b_stride}, {c_, c_stride}}) {
        lt_.layout_set(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
        lt_.layout_set(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
      }
    }
    cublasLtMatmulPreference_t pref = nullptr;
    if (lt_.pref_create(&pref) != CUBLAS_STATUS_SUCCESS) return fail_with(why, "preference");
    const uint64_t ws = workspace_bytes_;
    lt_.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    // The heuristic's ranked list up to the call's choice; the candidate takes that one.
    int found = 0;
    std::vector<cublasLtMatmulHeuristicResult_t> ranked(static_cast<size_t>(call_.algorithm) + 1);
    const cublasStatus_t st =
        lt_.heuristic(lt_.handle, desc_, a_, b_, c_, c_, pref, static_cast<int>(ranked.size()), ranked.data(), &found);
    lt_.pref_destroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) return fail_with(why, "algorithm (no heuristic result)");
    if (found <= call_.algorithm) {
      why = "cuBLASLt's heuristic ranks " + std::to_string(found) + " algorithms for the problem; the call asks for number " +
            std::to_string(call_.algorithm + 1);
      return false;
    }
    algo_ = ranked[static_cast<size_t>(call_.algorithm)];
    return true;
  }

  bool enqueue(void* stream, const std::vector<uint64_t>& args) override {
    size_t next = 2;
    const uint64_t bias = call_.bias ? args.at(next++) : 0;
    const uint64_t residual = call_.residual ? args.at(next++) : 0;
    const uint64_t y = args.at(next);
    if (call_.bias) {
      const void* p = reinterpret_cast<const void*>(bias);
      lt_.desc_set(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p);
    }
    const float alpha = 1.0f, beta = call_.residual ? 1.0f : 0.0f;
    const void* c = reinterpret_cast<const void*>(call_.residual ? residual : y);
    return lt_.matmul(lt_.handle, desc_, &alpha, reinterpret_cast<const void*>(args.at(1)), a_,
                      reinterpret_cast<const void*>(args.at(0)), b_, &beta, c, c_, reinterpret_cast<void*>(y), c_,
                      &algo_.algo, reinterpret_cast<void*>(workspace_), workspace_bytes_,
                      static_cast<cudaStream_t>(stream)) == CUBLAS_STATUS_SUCCESS;
  }

 private:
  static bool fail_with(std::string& why, const char* what) {
    why = std::string("cuBLASLt refused the problem: ") + what;
    return false;
  }
  Lt& lt_;
  planner::LibraryCall call_;
  uint64_t workspace_;
  size_t workspace_bytes_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
};

}  // namespace

std::string cublaslt_version() {
  std::string why;
  Lt* lt = lt_library(why);
  return lt ? "cublasLt " + std::to_string(lt->get_version()) : "";
}

std::unique_ptr<GpuLibraryCall> make_cublaslt_call(const planner::LibraryCall& call, uint64_t workspace,
                                                 size_t workspace_bytes, std::string* why_not) {
  std::string why;
  Lt* lt = lt_library(why);
  if (lt == nullptr || !lt->ready(why)) {
    if (why_not) *why_not = why;
    return nullptr;
  }
  auto c = std::make_unique<LtCall>(*lt, call, workspace, workspace_bytes);
  if (!c->init(why)) {
    if (why_not) *why_not = why;
    return nullptr;
  }
  return c;
}

#else

std::string cublaslt_version() { return ""; }

std::unique_ptr<GpuLibraryCall> make_cublaslt_call(const planner::LibraryCall&, uint64_t, size_t, std::string* why_not) {
  if (why_not) *why_not = "this build has no CUDA toolkit";
  return nullptr;
}

#endif

}  // namespace fusetune::backend
