#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "backend/cublas_lt.h"
#include "backend/cuda.h"
#include "backend/cudnn.h"
#include "backend/nvrtc.h"
#include "core/error.h"
#include "core/kernel_text.h"

#ifdef FUSETUNE_HAVE_NVRTC
#include <cuda.h>
#endif

namespace fusetune::backend {

std::string usable_ptx(const std::map<std::string, std::string>& ptx, const std::string& arch) {
  // "sm_" digits, then what makes a target specific to one architecture or family ("a", "f").
  const auto parse = [](const std::string& a, int& cc, std::string& suffix) {
    if (a.rfind("sm_", 0) != 0) return false;
    size_t i = 3;
    while (i < a.size() && a[i] >= '0' && a[i] <= '9') ++i;
    if (i == 3 || i - 3 > 4) return false;
    cc = std::stoi(a.substr(3, i - 3));
    suffix = a.substr(i);
    return true;
  };
  int device = 0;
  std::string device_suffix;
  if (!parse(arch, device, device_suffix)) return "";
  std::string best;
  int best_cc = -1;
  for (const auto& [target, text] : ptx) {
    int cc = 0;
    std::string suffix;
    if (text.empty() || !parse(target, cc, suffix)) continue;
    const bool fits = suffix.empty() ? cc <= device : cc == device;
    if (fits && (cc > best_cc || (cc == best_cc && !suffix.empty()))) {
      best = target;
      best_cc = cc;
    }
  }
  return best;
}

#ifdef FUSETUNE_HAVE_NVRTC

namespace {

// The driver API, resolved at run time from libcuda.so.1 so that binaries run where there is no
// driver (and say so) instead of failing to start.
struct Driver {
  void* lib = nullptr;
  CUcontext context = nullptr;  // the device's primary context, retained by the backend
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned int);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuPointerGetAttribute)(void*, CUpointer_attribute, CUdeviceptr);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
  CUresult (*cuEventCreate)(CUevent*, unsigned int);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuStreamCreate)(CUstream*, unsigned int);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphInstantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecUpdate)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo*);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  // Optional (CUDA 12+): launches with attributes, for programmatic dependent launch.
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  // Optional: the device's memory, for its identity (planner/device_identity.h).
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;
  // Optional (CUDA 12+): tensor maps of the kernels' TMA copies (FT_TENSOR_MAP parameters).
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                     const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill) = nullptr;

  template <typename F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    return f != nullptr;
  }
  bool open(std::string& why) {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      why = "no CUDA driver (libcuda.so.1 not found)";
      return false;
    }
    const bool ok = sym(cuInit, "cuInit") && sym(cuDriverGetVersion, "cuDriverGetVersion") && sym(cuDeviceGetCount, "cuDeviceGetCount") && sym(cuDeviceGet, "cuDeviceGet") &&
                    sym(cuDeviceGetName, "cuDeviceGetName") && sym(cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
                    sym(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
                    sym(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") &&
                    sym(cuCtxPushCurrent, "cuCtxPushCurrent_v2") && sym(cuCtxPopCurrent, "cuCtxPopCurrent_v2") &&
                    sym(cuCtxSynchronize, "cuCtxSynchronize") && sym(cuModuleLoadData, "cuModuleLoadData") &&
                    sym(cuModuleUnload, "cuModuleUnload") && sym(cuModuleGetFunction, "cuModuleGetFunction") &&
                    sym(cuFuncSetAttribute, "cuFuncSetAttribute") && sym(cuMemAlloc, "cuMemAlloc_v2") &&
                    sym(cuMemFree, "cuMemFree_v2") && sym(cuMemcpyHtoD, "cuMemcpyHtoD_v2") &&
                    sym(cuMemcpyDtoH, "cuMemcpyDtoH_v2") && sym(cuMemsetD8, "cuMemsetD8_v2") &&
                    sym(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2") && sym(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2") &&
                    sym(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2") && sym(cuMemHostAlloc, "cuMemHostAlloc") &&
                    sym(cuMemFreeHost, "cuMemFreeHost") && sym(cuPointerGetAttribute, "cuPointerGetAttribute") &&
                    sym(cuLaunchKernel, "cuLaunchKernel") && sym(cuEventCreate, "cuEventCreate") &&
                    sym(cuEventDestroy, "cuEventDestroy_v2") && sym(cuEventRecord, "cuEventRecord") &&
                    sym(cuEventSynchronize, "cuEventSynchronize") && sym(cuEventElapsedTime, "cuEventElapsedTime") &&
                    sym(cuStreamCreate, "cuStreamCreate") && sym(cuStreamDestroy, "cuStreamDestroy_v2") &&
                    sym(cuStreamSynchronize, "cuStreamSynchronize") &&
                    sym(cuStreamBeginCapture, "cuStreamBeginCapture_v2") && sym(cuStreamEndCapture, "cuStreamEndCapture") &&
                    sym(cuGraphInstantiate, "cuGraphInstantiateWithFlags") && sym(cuGraphLaunch, "cuGraphLaunch") &&
                    sym(cuGraphExecUpdate, "cuGraphExecUpdate_v2") && sym(cuGraphExecDestroy, "cuGraphExecDestroy") && sym(cuGraphDestroy, "cuGraphDestroy") &&
                    sym(cuGetErrorString, "cuGetErrorString");
    if (!ok) why = "the CUDA driver lacks an expected entry point";
    if (ok && !sym(cuLaunchKernelEx, "cuLaunchKernelEx")) cuLaunchKernelEx = nullptr;
    if (ok && !sym(cuDeviceTotalMem, "cuDeviceTotalMem_v2")) cuDeviceTotalMem = nullptr;
    if (ok && !sym(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")) cuTensorMapEncodeTiled = nullptr;
    return ok;
  }
  void check_cu(CUresult r, const char* what) const {
    if (r == CUDA_SUCCESS) return;
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    fail("CUDA ", what, " failed: ", s ? s : "unknown error", " (", static_cast<int>(r), ")");
  }
  // check_cu where nothing may throw (destructors): a failure is one line on stderr.
  void report_cu(CUresult r, const char* what) const noexcept {
    if (r == CUDA_SUCCESS) return;
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    std::fprintf(stderr, "fusetune: CUDA %s failed: %s (%d)\n", what, s ? s : "unknown error", static_cast<int>(r));
  }
};

// The backend's context made current on the calling thread for a scope, and the one before
// restored after: every entry point of the backend's objects opens one, so buffers, modules and
// sequences work from whichever thread calls them, whatever that thread had current.
class Current {
 public:
  explicit Current(const Driver& d) : d_(d) {
    d_.check_cu(d_.cuCtxPushCurrent(d_.context), "context activation");
    pushed_ = true;
  }
  // For destructors: a failure is reported, not thrown (and nothing is popped after it).
  Current(const Driver& d, std::nothrow_t) : d_(d) {
    const CUresult r = d_.cuCtxPushCurrent(d_.context);
    d_.report_cu(r, "context activation");
    pushed_ = r == CUDA_SUCCESS;
  }
  ~Current() {
    if (!pushed_) return;
    CUcontext popped = nullptr;
    d_.report_cu(d_.cuCtxPopCurrent(&popped), "context restore");
  }
  Current(const Current&) = delete;
  Current& operator=(const Current&) = delete;

 private:
  const Driver& d_;
  bool pushed_ = false;
};

class CudaBuffer : public Buffer {
 public:
  CudaBuffer(const Driver& d, size_t bytes) : d_(d), bytes_(bytes), owned_(true) {
    const Current current(d_);
    d_.check_cu(d_.cuMemAlloc(&ptr_, std::max<size_t>(bytes, 1)), "allocation");
  }
  CudaBuffer(const Driver& d, CUdeviceptr ptr, size_t bytes) : d_(d), bytes_(bytes), ptr_(ptr), owned_(false) {}
  ~CudaBuffer() override {
    if (!owned_) return;
    const Current current(d_, std::nothrow);
    d_.report_cu(d_.cuMemFree(ptr_), "memory release");
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  CUdeviceptr address() const { return ptr_; }
  size_t bytes() const override { return bytes_; }
  void upload(const void* data, size_t n) override {
    const Current current(d_);
    d_.check_cu(d_.cuMemcpyHtoD(ptr_, data, n), "upload");
  }
  void download(void* data, size_t n) const override {
    const Current current(d_);
    d_.check_cu(d_.cuMemcpyDtoH(data, ptr_, n), "download");
  }
  void fill_byte(unsigned char v) override {
    const Current current(d_);
    d_.check_cu(d_.cuMemsetD8(ptr_, v, bytes_), "memset");
  }
  void* handle() override { return &ptr_; }

 private:
  const Driver& d_;
  size_t bytes_;
  CUdeviceptr ptr_ = 0;
  bool owned_;
};

// A device buffer allocated on first use, once, from any thread: what only some uses need (the
// L2-flush buffer for timed runs, the library calls' workspace), so that a deployment that neither
// times nor calls a library allocates neither.
class LazyBuffer {
 public:
  LazyBuffer(const Driver& d, size_t bytes) : d_(d), bytes_(bytes) {}
  CudaBuffer& get() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!buf_) buf_ = std::make_unique<CudaBuffer>(d_, bytes_);
    return *buf_;
  }

 private:
  const Driver& d_;
  size_t bytes_;
  std::mutex mu_;
  std::unique_ptr<CudaBuffer> buf_;
};

// `n` events, destroyed however the scope is left (a failed launch throws between records).
class Events {
 public:
  // Made and destroyed with the backend's context current (the caller's scope holds it).
  Events(const Driver& d, size_t n) : d_(d), events_(n, nullptr) {
    try {
      for (CUevent& e : events_) d_.check_cu(d_.cuEventCreate(&e, 0), "event creation");
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~Events() { destroy(); }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  CUevent operator[](size_t i) const { return events_[i]; }
  size_t size() const { return events_.size(); }

 private:
  void destroy() {
    for (CUevent e : events_) {
      if (e != nullptr) d_.report_cu(d_.cuEventDestroy(e), "event release");
    }
  }
  const Driver& d_;
  std::vector<CUevent> events_;
};

struct Launch {
  CUfunction fn = nullptr;
  int64_t grid = 0;
  int threads = 0;
  int64_t shared = 0;
  std::shared_ptr<GpuLibraryCall> library;  // set: a library call instead of a kernel
  // Launched with programmatic stream serialization (sm_90+): the kernel may begin launching while
  // the one before it in the stream finishes; its first statement waits for that one (codegen's
  // FT_GRID_DEPENDENCY).
  bool programmatic = false;
  // Scratch buffers (codegen/kernel_ir.h: blocks that cooperate), zeroed at load, bound after the
  // launch's arguments; every launch leaves them zero again.
  std::vector<std::shared_ptr<CudaBuffer>> scratch;
  // Tensor maps (FT_TENSOR_MAP parameters, after the scratch buffers): each encoded at binding
  // from the address of the argument it maps, whose element size is `map_element_bytes`.
  std::vector<TensorMapSpec> maps;
  std::vector<int> map_element_bytes;
};

// The driver's tensor map for `t` over `element_bytes`-byte elements at `address`: the elements'
// bits as they are (an unsigned type of their size), zeros outside the tensor, L2 lines of 128 bytes.
CUtensorMap encode_tensor_map(const Driver& d, const TensorMapSpec& t, int element_bytes, CUdeviceptr address) {
  check(d.cuTensorMapEncodeTiled != nullptr, "the plan copies tiles with tensor maps (TMA), and this CUDA driver has no cuTensorMapEncodeTiled");
  const CUtensorMapDataType type = element_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                   : element_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                                                        : CU_TENSOR_MAP_DATA_TYPE_UINT64;
  const CUtensorMapSwizzle swizzle = t.swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : t.swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                     : t.swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                       : CU_TENSOR_MAP_SWIZZLE_NONE;
  cuuint64_t dims[5] = {}, strides[5] = {};
  cuuint32_t box[5] = {}, element_strides[5] = {1, 1, 1, 1, 1};
  for (size_t i = 0; i < t.dims.size(); ++i) {
    dims[i] = static_cast<cuuint64_t>(t.dims[i]);
    box[i] = static_cast<cuuint32_t>(t.box[i]);
  }
  for (size_t i = 0; i < t.strides.size(); ++i) strides[i] = static_cast<cuuint64_t>(t.strides[i]);
  CUtensorMap m;
  d.check_cu(d.cuTensorMapEncodeTiled(&m, type, static_cast<cuuint32_t>(t.dims.size()), reinterpret_cast<void*>(address), dims, strides,
                                      box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             "tensor map encoding");
  return m;
}

// A launch's parameters: the arguments' device addresses (`addresses`: where each is kept), its
// scratch buffers', then its tensor maps, encoded here; `pointers` is what cuLaunchKernel takes.
struct BoundParams {
  std::vector<CUtensorMap> maps;
  std::vector<void*> pointers;
};
BoundParams bind_params(const Driver& d, const Launch& l, const std::vector<CUdeviceptr*>& addresses) {
  BoundParams p;
  p.maps.reserve(l.maps.size());  // no reallocation: pointers into it are taken below
  for (size_t i = 0; i < l.maps.size(); ++i) {
    p.maps.push_back(encode_tensor_map(d, l.maps[i], l.map_element_bytes[i], *addresses.at(static_cast<size_t>(l.maps[i].source))));
  }
  for (CUdeviceptr* a : addresses) p.pointers.push_back(a);
  for (const auto& b : l.scratch) p.pointers.push_back(b->handle());
  for (CUtensorMap& m : p.maps) p.pointers.push_back(&m);
  return p;
}
std::vector<CUdeviceptr*> addresses_of(const std::vector<Buffer*>& args) {
  std::vector<CUdeviceptr*> out;
  for (Buffer* b : args) out.push_back(static_cast<CUdeviceptr*>(b->handle()));
  return out;
}

// Enqueues a kernel launch or a library call on `stream`; `params` point at the buffers' device
// addresses (Buffer::handle()).
CUresult enqueue_launch(const Driver& d, const Launch& l, std::vector<void*>& params, CUstream stream) {
  if (l.library) {
    std::vector<uint64_t> addresses;
    for (void* p : params) addresses.push_back(static_cast<uint64_t>(*static_cast<CUdeviceptr*>(p)));
    return l.library->enqueue(stream, addresses) ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
  }
  if (l.programmatic) {
    CUlaunchAttribute overlap = {};
    overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    overlap.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config = {};
    config.gridDimX = static_cast<unsigned>(l.grid);
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = static_cast<unsigned>(l.threads);
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = static_cast<unsigned>(l.shared);
    config.hStream = stream;
    config.attrs = &overlap;
    config.numAttrs = 1;
    return d.cuLaunchKernelEx(&config, l.fn, params.data(), nullptr);
  }
  return d.cuLaunchKernel(l.fn, static_cast<unsigned>(l.grid), 1, 1, static_cast<unsigned>(l.threads), 1, 1,
                          static_cast<unsigned>(l.shared), stream, params.data(), nullptr);
}

// A launch of a sequence: its buffers, and the device addresses it passes for them (a buffer's
// own, or the caller's memory bound in its place).
struct BoundLaunch {
  std::string kernel;
  Launch launch;
  std::vector<Buffer*> args;
  std::vector<CUdeviceptr> addresses;  // by argument
};

// Pinned host memory, grown on demand: where a run stages its host inputs and outputs, so that
// their copies are asynchronous on the sequence's stream.
class PinnedStaging {
 public:
  explicit PinnedStaging(const Driver& d) : d_(d) {}
  ~PinnedStaging() {
    if (data_ == nullptr) return;
    const Current current(d_, std::nothrow);
    d_.report_cu(d_.cuMemFreeHost(data_), "pinned memory release");
  }
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  // At least `bytes` of pinned memory (its context current); earlier contents are not kept.
  unsigned char* reserve(size_t bytes) {
    if (bytes <= bytes_) return static_cast<unsigned char*>(data_);
    if (data_ != nullptr) d_.check_cu(d_.cuMemFreeHost(data_), "pinned memory release");
    data_ = nullptr;
    bytes_ = 0;
    d_.check_cu(d_.cuMemHostAlloc(&data_, bytes, 0), "pinned memory allocation");
    bytes_ = bytes;
    return static_cast<unsigned char*>(data_);
  }

 private:
  const Driver& d_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

CUdeviceptr address_of(Buffer* b) { return static_cast<CudaBuffer*>(b)->address(); }

// A stream of the backend's context, destroyed with its owner.
class Stream {
 public:
  Stream(const Driver& d, unsigned int flags) : d_(d) {
    const Current current(d_);
    d_.check_cu(d_.cuStreamCreate(&s_, flags), "stream creation");
  }
  ~Stream() {
    const Current current(d_, std::nothrow);
    d_.report_cu(d_.cuStreamDestroy(s_), "stream release");
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return s_; }

 private:
  const Driver& d_;
  CUstream s_ = nullptr;
};

// A prepared sequence on its own stream (a blocking one, so it stays ordered after uploads on the
// default stream). The launches are captured once into a CUDA graph that run() replays; where
// capture or instantiation fails, run() launches the kernels one by one instead. Captures go on a
// second, non-blocking stream that runs nothing: capturing a blocking stream would forbid the
// legacy default stream to the whole process (PyTorch's default stream, uploads) until it ends. A
// run that finds its bindings changed records the launches again and updates the graph in place
// (cuGraphExecUpdate: same kernels, new parameters), or instantiates it anew where the driver
// refuses the update.
class CudaSequence : public Sequence {
 public:
  CudaSequence(const Driver& d, std::vector<BoundLaunch> steps)
      : d_(d), steps_(std::move(steps)), staging_(d), stream_(d, CU_STREAM_DEFAULT), capture_(d, CU_STREAM_NON_BLOCKING) {
    const Current current(d_);
    exec_ = instantiate(record());
  }
  ~CudaSequence() override {
    const Current current(d_, std::nothrow);
    if (exec_ != nullptr) d_.report_cu(d_.cuGraphExecDestroy(exec_), "graph release");
  }

  void run() override { run({}, {}); }
  void run(const std::vector<Transfer>& inputs, const std::vector<Transfer>& outputs) override {
    const Current current(d_);
    try {
      exchange(inputs, outputs);
    } catch (...) {
      // Nothing queued may still be moving through the staging memory when the error leaves.
      d_.report_cu(d_.cuStreamSynchronize(stream_.get()), "stream drain after an error");
      throw;
    }
  }
  void bind(Buffer* buffer, void* address) override {
    if (address == nullptr && bound_.count(buffer) == 0) return;  // its own memory already: every host run asks
    const CUdeviceptr to = address != nullptr ? reinterpret_cast<CUdeviceptr>(address) : address_of(buffer);
    if (address != nullptr) {
      bound_[buffer] = to;
    } else {
      bound_.erase(buffer);
    }
    for (BoundLaunch& s : steps_) {
      for (size_t j = 0; j < s.args.size(); ++j) {
        if (s.args[j] == buffer && s.addresses[j] != to) {
          s.addresses[j] = to;
          stale_ = true;
        }
      }
    }
  }
  bool cuda_graph() const override { return exec_ != nullptr; }
  std::vector<double> time_runs(int n) override {
    const Current current(d_);
    const Events events(d_, static_cast<size_t>(n) + 1);
    std::vector<double> us;
    d_.check_cu(d_.cuEventRecord(events[0], stream_.get()), "event record");
    for (size_t i = 1; i < events.size(); ++i) {
      submit();
      d_.check_cu(d_.cuEventRecord(events[i], stream_.get()), "event record");
    }
    d_.check_cu(d_.cuEventSynchronize(events[events.size() - 1]), "kernel execution");
    for (size_t i = 1; i < events.size(); ++i) {
      float ms = 0;
      d_.check_cu(d_.cuEventElapsedTime(&ms, events[i - 1], events[i]), "event timing");
      us.push_back(static_cast<double>(ms) * 1000.0);
    }
    return us;
  }

 private:
  // One run: the inputs' copies, the launches, the outputs' copies on the stream, then one wait.
  void exchange(const std::vector<Transfer>& inputs, const std::vector<Transfer>& outputs) {
    const CUstream stream = stream_.get();
    size_t staged = 0;  // host bytes, each transfer at a 64-byte aligned offset
    for (const auto* list : {&inputs, &outputs}) {
      for (const Transfer& t : *list) staged += t.device ? 0 : (t.bytes + 63) / 64 * 64;
    }
    unsigned char* pinned = staged > 0 ? staging_.reserve(staged) : nullptr;
    size_t offset = 0;
    for (const Transfer& t : inputs) {
      const CUdeviceptr to = bound_address(t.buffer);
      if (t.device) {
        d_.check_cu(d_.cuMemcpyDtoDAsync(to, reinterpret_cast<CUdeviceptr>(t.memory), t.bytes, stream), "input copy");
      } else {
        std::memcpy(pinned + offset, t.memory, t.bytes);
        d_.check_cu(d_.cuMemcpyHtoDAsync(to, pinned + offset, t.bytes, stream), "input upload");
        offset += (t.bytes + 63) / 64 * 64;
      }
    }
    submit();
    const size_t outputs_at = offset;
    for (const Transfer& t : outputs) {
      const CUdeviceptr from = bound_address(t.buffer);
      if (t.device) {
        d_.check_cu(d_.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(t.memory), from, t.bytes, stream), "output copy");
      } else {
        d_.check_cu(d_.cuMemcpyDtoHAsync(pinned + offset, from, t.bytes, stream), "output download");
        offset += (t.bytes + 63) / 64 * 64;
      }
    }
    d_.check_cu(d_.cuStreamSynchronize(stream), "kernel execution");
    offset = outputs_at;
    for (const Transfer& t : outputs) {
      if (t.device) continue;
      std::memcpy(t.memory, pinned + offset, t.bytes);
      offset += (t.bytes + 63) / 64 * 64;
    }
  }
  CUdeviceptr bound_address(Buffer* b) const {
    auto it = bound_.find(b);
    return it == bound_.end() ? address_of(b) : it->second;
  }
  CUresult enqueue(BoundLaunch& s, CUstream stream) {
    std::vector<CUdeviceptr*> addresses;
    for (CUdeviceptr& a : s.addresses) addresses.push_back(&a);
    BoundParams params = bind_params(d_, s.launch, addresses);
    return enqueue_launch(d_, s.launch, params.pointers, stream);
  }
  // Queues one run on the stream: the graph (updated first where bindings changed), or each launch.
  void submit() {
    if (exec_ != nullptr && stale_) {
      CUgraph graph = record();
      CUgraphExecUpdateResultInfo info = {};
      if (graph != nullptr && d_.cuGraphExecUpdate(exec_, graph, &info) == CUDA_SUCCESS) {
        d_.report_cu(d_.cuGraphDestroy(graph), "graph release");
      } else {  // a new graph, or launches one by one where recording failed
        const CUgraphExec old = exec_;
        exec_ = nullptr;
        d_.report_cu(d_.cuGraphExecDestroy(old), "graph release");
        exec_ = instantiate(graph);
      }
    }
    stale_ = false;
    if (exec_ != nullptr) {
      d_.check_cu(d_.cuGraphLaunch(exec_, stream_.get()), "CUDA graph launch");
    } else {
      for (BoundLaunch& s : steps_) d_.check_cu(enqueue(s, stream_.get()), ("launch of kernel " + s.kernel).c_str());
    }
  }
  // The launches recorded on the capture stream as one graph; nullptr where that fails.
  CUgraph record() {
    if (d_.cuStreamBeginCapture(capture_.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return nullptr;
    bool recorded = true;
    try {
      for (BoundLaunch& s : steps_) {
        if (enqueue(s, capture_.get()) != CUDA_SUCCESS) {
          recorded = false;
          break;
        }
      }
    } catch (...) {  // a library call's error: the capture ends before it leaves
      CUgraph partial = nullptr;
      d_.report_cu(d_.cuStreamEndCapture(capture_.get(), &partial), "capture end");
      if (partial != nullptr) d_.report_cu(d_.cuGraphDestroy(partial), "graph release");
      throw;
    }
    CUgraph graph = nullptr;  // ending the capture is needed even after a failed launch
    recorded = d_.cuStreamEndCapture(capture_.get(), &graph) == CUDA_SUCCESS && recorded && graph != nullptr;
    if (!recorded && graph != nullptr) {
      d_.report_cu(d_.cuGraphDestroy(graph), "graph release");
      graph = nullptr;
    }
    return graph;
  }
  // `graph` instantiated (and destroyed); nullptr where either fails.
  CUgraphExec instantiate(CUgraph graph) {
    if (graph == nullptr) return nullptr;
    CUgraphExec exec = nullptr;
    if (d_.cuGraphInstantiate(&exec, graph, 0) != CUDA_SUCCESS) exec = nullptr;
    d_.report_cu(d_.cuGraphDestroy(graph), "graph release");
    return exec;
  }

  const Driver& d_;
  std::vector<BoundLaunch> steps_;
  std::map<Buffer*, CUdeviceptr> bound_;  // buffers bound to a caller's memory
  bool stale_ = false;                    // bindings changed since the graph was recorded
  PinnedStaging staging_;
  Stream stream_;   // runs: blocking, ordered after the legacy default stream
  Stream capture_;  // records: non-blocking, runs nothing
  CUgraphExec exec_ = nullptr;
};

class CudaModule : public Module {
 public:
  CudaModule(const Driver& d, CUmodule m, std::map<std::string, Launch> fns, LazyBuffer* flush)
      : d_(d), module_(m), fns_(std::move(fns)), flush_(flush) {}
  ~CudaModule() override {
    const Current current(d_, std::nothrow);
    fns_.clear();  // library calls and scratch buffers, with the context current
    d_.report_cu(d_.cuModuleUnload(module_), "module unload");
  }

  void launch(const std::string& kernel, const std::vector<Buffer*>& args) override {
    const Current current(d_);
    const Launch& l = find(kernel);
    BoundParams params = bind_params(d_, l, addresses_of(args));
    d_.check_cu(enqueue_launch(d_, l, params.pointers, nullptr), l.library ? "library call" : "kernel launch");
    d_.check_cu(d_.cuCtxSynchronize(), "kernel execution");
  }

  Timing time(const std::string& kernel, const std::vector<Buffer*>& args, const TimingPolicy& policy) override {
    const Current current(d_);
    for (int w = 0; w < policy.warmup; ++w) launch(kernel, args);
    const Events events(d_, 2);
    const CUevent start = events[0], stop = events[1];
    std::vector<double> times;
    double total_ms = 0;
    const Launch& l = find(kernel);
    BoundParams params = bind_params(d_, l, addresses_of(args));
    while (static_cast<int>(times.size()) < std::max(1, policy.max_repeats) &&
           (static_cast<int>(times.size()) < policy.min_repeats || total_ms < policy.min_time_ms)) {
      // Evict the L2 between runs, so every run reads its inputs from DRAM as in a model.
      if (policy.flush_l2 && flush_ != nullptr) flush_->get().fill_byte(static_cast<unsigned char>(times.size()));
      d_.check_cu(d_.cuEventRecord(start, nullptr), "event record");
      d_.check_cu(enqueue_launch(d_, l, params.pointers, nullptr), l.library ? "library call" : "kernel launch");
      d_.check_cu(d_.cuEventRecord(stop, nullptr), "event record");
      d_.check_cu(d_.cuEventSynchronize(stop), "kernel execution");
      float ms = 0;
      d_.check_cu(d_.cuEventElapsedTime(&ms, start, stop), "event timing");
      times.push_back(static_cast<double>(ms) * 1000.0);
      total_ms += static_cast<double>(ms);
    }
    return summarize_times(std::move(times));
  }

  std::unique_ptr<Sequence> prepare(std::vector<Step> steps) override {
    std::vector<BoundLaunch> bound;
    for (const Step& s : steps) {
      BoundLaunch b{s.kernel, find(s.kernel), s.args, {}};
      for (Buffer* a : s.args) b.addresses.push_back(address_of(a));
      bound.push_back(std::move(b));
    }
    return std::make_unique<CudaSequence>(d_, std::move(bound));
  }

 private:
  const Launch& find(const std::string& kernel) const {
    auto it = fns_.find(kernel);
    check(it != fns_.end(), "no kernel '", kernel, "' in the module");
    return it->second;
  }
  const Driver& d_;
  CUmodule module_;
  std::map<std::string, Launch> fns_;
  LazyBuffer* flush_;
};

class CudaBackend : public Backend {
 public:
  // `d` has the primary context of `device` (retained once for this backend) as its context.
  CudaBackend(Driver d, CUdevice device, int ordinal, std::string arch, planner::DriverAttributes attributes)
      : d_(std::move(d)), device_(device), ordinal_(ordinal), arch_(std::move(arch)),
        name_(attributes.name), sms_(attributes.sms), attributes_(std::move(attributes)) {
    int optin = 0;
    d_.check_cu(d_.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device_),
                "shared memory limit query");
    shared_optin_ = optin;
    const int l2_bytes = static_cast<int>(attributes_.l2_bytes);
    int version = 0;
    d_.check_cu(d_.cuDriverGetVersion(&version), "driver version query");
    driver_ = std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
    toolkit_ = "nvrtc " + nvrtc_version();
    for (const std::string& library : {cublaslt_version(), cudnn_version()}) {
      if (!library.empty()) toolkit_ += ", " + library;
    }
    flush_ = std::make_unique<LazyBuffer>(d_, static_cast<size_t>(std::max(l2_bytes, 1 << 20)) * 2);
    workspace_ = std::make_unique<LazyBuffer>(d_, size_t{32} << 20);  // the library calls' workspace
    // Programmatic dependent launch where the device has it (sm_90+) and the driver can launch
    // with attributes; FUSETUNE_PDL=0 turns it off (the kernels' wait is then a no-op).
    const char* pdl = std::getenv("FUSETUNE_PDL");
    programmatic_ = std::stoi(arch_.substr(3)) >= 90 && d_.cuLaunchKernelEx != nullptr &&
                    !(pdl != nullptr && std::string(pdl) == "0");
  }
  // Everything made on the context goes first; then the hold on it is released, so a process that
  // is done with a GPU keeps no context (nor its memory) there.
  ~CudaBackend() override {
    {
      const Current current(d_, std::nothrow);
      flush_.reset();
      workspace_.reset();
      release_cudnn_handle(this);
    }
    d_.report_cu(d_.cuDevicePrimaryCtxRelease(device_), "context release");
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda:" + name_ + " (" + arch_ + ")"; }
  DeviceProperties properties() const override {
    return {name_, arch_, std::stoi(arch_.substr(3)), sms_, driver_, toolkit_, attributes_};
  }

  std::unique_ptr<Module> load_source(const ModuleSource& module) override {
    const Current current(d_);
    CUmodule m = nullptr;
    // The architecture the loaded code was compiled for: a kernel's wait for its predecessor
    // (FT_GRID_DEPENDENCY) exists in code for sm_90 and later only, so only such code may launch
    // with programmatic serialization.
    int compiled_for = std::stoi(arch_.substr(3));
    if (auto it = module.cubins.find(arch_); it != module.cubins.end()) {
      d_.check_cu(d_.cuModuleLoadData(&m, it->second.data()), "module load");
    } else if (const std::string target = usable_ptx(module.ptx, arch_); !target.empty()) {
      const CUresult r = d_.cuModuleLoadData(&m, module.ptx.at(target).c_str());  // compiled by the driver
      check(r != CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "kernels.", target, ".ptx: its PTX is of a newer ISA than this GPU's driver (CUDA ",
            driver_, ") compiles: update the NVIDIA driver, or compile the plan with a CUDA toolkit of at most ", driver_);
      d_.check_cu(r, ("module load (kernels." + target + ".ptx, compiled by the driver for " + arch_ + ")").c_str());
      compiled_for = std::stoi(target.substr(3, 3));
    } else {
      const std::vector<char> cubin = compile_cuda(module.cuda_source, arch_).cubin;
      d_.check_cu(d_.cuModuleLoadData(&m, cubin.data()), "module load");
    }
    std::map<std::string, Launch> fns;
    try {
      fns = functions(module, m, programmatic_ && compiled_for >= 90);
    } catch (...) {
      fns.clear();
      d_.report_cu(d_.cuModuleUnload(m), "module unload");
      throw;
    }
    return std::make_unique<CudaModule>(d_, m, std::move(fns), flush_.get());
  }

  std::unique_ptr<Buffer> allocate(size_t bytes) override { return std::make_unique<CudaBuffer>(d_, bytes); }
  std::unique_ptr<Buffer> view(Buffer& parent, size_t offset, size_t bytes) override {
    check(offset + bytes <= parent.bytes(), "view outside its buffer");
    return std::make_unique<CudaBuffer>(d_, static_cast<CudaBuffer&>(parent).address() + offset, bytes);
  }

  std::string device_memory_problem(const void* address, size_t bytes) const override {
    const Current current(d_);
    const auto p = reinterpret_cast<CUdeviceptr>(address);
    unsigned int type = 0;
    int ordinal = -1;
    CUdeviceptr start = 0;
    size_t size = 0;
    if (d_.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE) {
      return "is not CUDA device memory (a host pointer?)";
    }
    if (d_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == CUDA_SUCCESS && ordinal != ordinal_) {
      return "is memory of CUDA device " + std::to_string(ordinal) + ", not of this plan's device " + std::to_string(ordinal_);
    }
    if (d_.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) == CUDA_SUCCESS &&
        d_.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) == CUDA_SUCCESS && p + bytes > start + size) {
      return "runs " + std::to_string(p + bytes - start - size) + " bytes past the end of its allocation";
    }
    return "";
  }

 private:
  // The module's kernels and library calls, by name.
  // The module's kernels and library calls, by name; `programmatic`: kernels that wait for their
  // predecessor may launch with programmatic serialization.
  std::map<std::string, Launch> functions(const ModuleSource& module, CUmodule m, bool programmatic) {
    std::map<std::string, Launch> fns;
    // The kernels' signatures (their scratch buffers), read once from the text when it has any.
    std::vector<KernelSignature> signatures;
    const auto signature = [&](const std::string& name) -> const KernelSignature& {
      if (signatures.empty()) signatures = kernel_signatures(module.cuda_source);
      for (const KernelSignature& r : signatures) {
        if (r.name == name) return r;
      }
      fail("kernel ", name, ": no signature in the module's CUDA text");
    };
    for (const ModuleSource::KernelInfo& k : module.kernels) {
      if (fns.count(k.name)) continue;  // launches that run one kernel (compiler/compile_bundle.h) name it each
      if (!k.library.empty()) {
        std::string why;
        const planner::LibraryCall lc = planner::LibraryCall::from_json(k.library);
        std::shared_ptr<GpuLibraryCall> call =
            lc.op != planner::LibraryOp::kGemm
                ? make_cudnn_call(lc, this, std::stoi(arch_.substr(3)), workspace_->get().address(),
                                  workspace_->get().bytes(), &why)
                : make_cublaslt_call(lc, workspace_->get().address(), workspace_->get().bytes(), &why);
        check(call != nullptr, "library call ", k.name, ": ", why);
        fns[k.name] = {nullptr, 0, 0, 0, std::move(call), false, {}, {}, {}};
        continue;
      }
      CUfunction f = nullptr;
      d_.check_cu(d_.cuModuleGetFunction(&f, m, k.name.c_str()), "kernel lookup");
      check(k.shared_bytes <= shared_optin_, "kernel ", k.name, " needs ", k.shared_bytes, " bytes of shared memory a block; ", name_,
            " allows ", shared_optin_, ": compile the plan for this GPU");
      if (k.shared_bytes > 48 * 1024) {
        d_.check_cu(d_.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(k.shared_bytes)),
                    "shared memory opt-in");
      }
      Launch& l = fns[k.name];
      l = {f, k.grid, k.threads, k.shared_bytes, nullptr, programmatic && waits_for_predecessor(module.cuda_source, k.name), {}, {}, {}};
      const std::vector<KernelParam>& params = signature(k.name).params;
      for (const KernelParam& p : params) {  // FT_SCRATCH parameters: Kernel::scratch; FT_TENSOR_MAP: Kernel::tensor_maps
        if (p.tensor_map.source >= 0) {
          l.maps.push_back(p.tensor_map);
          l.map_element_bytes.push_back(params[static_cast<size_t>(p.tensor_map.source)].element_bytes);
        }
        if (p.scratch_elements == 0) continue;
        l.scratch.push_back(std::make_shared<CudaBuffer>(d_, static_cast<size_t>(p.scratch_elements * p.element_bytes)));
        l.scratch.back()->fill_byte(0);
      }
    }
    return fns;
  }

  Driver d_;
  CUdevice device_;
  int ordinal_;  // as the driver numbers it (CUDA_VISIBLE_DEVICES applied)
  bool programmatic_ = false;
  std::string arch_;
  std::string name_;
  int sms_;
  int64_t shared_optin_ = 0;  // the most dynamic shared memory a block may opt into
  planner::DriverAttributes attributes_;
  std::string driver_, toolkit_;
  std::unique_ptr<LazyBuffer> flush_;      // allocated by the first timed run
  std::unique_ptr<LazyBuffer> workspace_;  // allocated by the first library call
};

}  // namespace

int cuda_device_count(std::string* why_not) {
  Driver d;
  std::string why;
  if (!d.open(why)) {
    if (why_not) *why_not = why;
    return 0;
  }
  int count = 0;
  if (d.cuInit(0) != CUDA_SUCCESS || d.cuDeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
  if (count == 0 && why_not) *why_not = "the CUDA driver reports no device";
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device, std::string* why_not) {
  Driver d;
  std::string why;
  if (!d.open(why)) {
    if (why_not) *why_not = why;
    return nullptr;
  }
  int count = 0;
  if (d.cuInit(0) != CUDA_SUCCESS || d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= device) {
    if (why_not) *why_not = "no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " found)";
    return nullptr;
  }
  CUdevice dev = 0;
  d.check_cu(d.cuDeviceGet(&dev, device), "device lookup");
  char name[256] = {0};
  d.check_cu(d.cuDeviceGetName(name, sizeof name, dev), "device name query");
  const auto attribute = [&](CUdevice_attribute what) {
    int v = 0;
    return d.cuDeviceGetAttribute(&v, what, dev) == CUDA_SUCCESS ? v : 0;
  };
  planner::DriverAttributes a;
  a.compute_capability = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 + attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  a.sms = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  a.l2_bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  a.memory_clock_khz = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  a.bus_width_bits = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  a.clock_khz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  size_t memory = 0;
  if (d.cuDeviceTotalMem != nullptr && d.cuDeviceTotalMem(&memory, dev) == CUDA_SUCCESS) a.memory_bytes = static_cast<int64_t>(memory);
  a.name = name;
  const std::string arch = "sm_" + std::to_string(a.compute_capability);
  d.check_cu(d.cuDevicePrimaryCtxRetain(&d.context, dev), "context creation");
  try {
    return std::make_unique<CudaBackend>(std::move(d), dev, device, arch, std::move(a));
  } catch (...) {  // the backend did not take the hold on the context
    d.report_cu(d.cuDevicePrimaryCtxRelease(dev), "context release");
    throw;
  }
}

#else

int cuda_device_count(std::string* why_not) {
  if (why_not) *why_not = "this build has no CUDA toolkit";
  return 0;
}

std::unique_ptr<Backend> make_cuda_backend(int, std::string* why_not) {
  if (why_not) *why_not = "this build has no CUDA toolkit";
  return nullptr;
}

#endif

}  // namespace fusetune::backend
