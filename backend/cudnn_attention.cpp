#include "backend/cudnn_attention.h"

#include "core/dtype.h"

#ifdef FUSETUNE_HAVE_CUDNN_FRONTEND
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <array>
#include <exception>
#include <unordered_map>
#include <vector>

// The frontend calls cuDNN through this handle of the library (dynamic loading).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend
#endif

namespace fusetune::backend {

#ifdef FUSETUNE_HAVE_CUDNN_FRONTEND

namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kBias };

std::vector<int64_t> dims4(int64_t a, int64_t b, int64_t c, int64_t d) { return {a, b, c, d}; }

std::vector<int64_t> strides4(const planner::OperandLayout& l) { return {l.strides.begin(), l.strides.end()}; }

// The frontend's graph of the call, validated against the support surface of compute capability
// `sm`; the reason where the frontend refuses it.
std::string build_graph(const planner::LibraryCall& call, void* library, int sm, fe::graph::Graph& graph) {
  fe::cudnn_dlhandle = library;
  const planner::AttentionShape& a = call.attention;
  const fe::DataType_t io = call.dtype == DType::kBF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
  graph.set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  graph.set_sm_version(sm);
  const auto tensor = [&](const char* name, Uid uid, std::vector<int64_t> dims, const planner::OperandLayout& l) {
    return graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dims)).set_stride(strides4(l)));
  };
  const auto q = tensor("Q", kQ, dims4(call.batch, a.heads, a.queries, a.head), a.q);
  const auto k = tensor("K", kK, dims4(call.batch, a.heads, a.keys, a.head), a.k);
  const auto v = tensor("V", kV, dims4(call.batch, a.heads, a.keys, a.value_head), a.v);
  auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(false).set_attn_scale(a.scale);
  if (a.causal) {
    if (a.queries == a.keys) {
      options.set_causal_mask(true);
    } else {
      options.set_causal_mask_bottom_right(true);
    }
  }
  if (call.bias) options.set_bias(tensor("bias", kBias, dims4(call.batch, a.heads, a.queries, a.keys), a.bias));
  auto [o, stats] = graph.sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim(dims4(call.batch, a.heads, a.queries, a.value_head)).set_stride(strides4(a.o));
  auto status = graph.validate();
  return status.is_good() ? "" : "cuDNN frontend: " + status.get_message();
}

class AttentionCall : public GpuLibraryCall {
 public:
  AttentionCall(const planner::LibraryCall& call, void* library, cudnnHandle_t handle, uint64_t workspace)
      : call_(call), library_(library), handle_(handle), workspace_(workspace) {}

  std::string init(int sm, size_t workspace_bytes) {
    if (std::string why = build_graph(call_, library_, sm, graph_); !why.empty()) return why;
    const auto failed = [](const char* step, fe::error_t e) { return std::string("cuDNN ") + step + ": " + e.get_message(); };
    if (auto e = graph_.build_operation_graph(handle_); e.is_bad()) return failed("operation graph", e);
    if (auto e = graph_.create_execution_plans({fe::HeurMode_t::A}); e.is_bad()) return failed("heuristics", e);
    if (auto e = graph_.check_support(handle_); e.is_bad()) return failed("support", e);
    if (call_.algorithm >= graph_.get_execution_plan_count()) {
      return "cuDNN proposes " + std::to_string(graph_.get_execution_plan_count()) + " plans for this attention; algorithm " +
             std::to_string(call_.algorithm) + " asked";
    }
    if (auto e = graph_.build_plan_at_index(handle_, call_.algorithm); e.is_bad()) return failed("plan", e);
    int64_t need = 0;
    if (auto e = graph_.get_workspace_size_plan_at_index(call_.algorithm, need); e.is_bad()) return failed("workspace", e);
    if (static_cast<size_t>(need) > workspace_bytes) {
      return "cuDNN's attention plan needs " + std::to_string(need) + " bytes of workspace, more than the " +
             std::to_string(workspace_bytes) + " given";
    }
    return "";
  }

  bool enqueue(void* stream, const std::vector<uint64_t>& args) override {
    fe::cudnn_dlhandle = library_;
    if (fe::detail::set_stream(handle_, static_cast<cudaStream_t>(stream)) != CUDNN_STATUS_SUCCESS) return false;
    const planner::AttentionShape& a = call_.attention;
    const size_t esize = dtype_size(call_.dtype);
    const auto at = [&](size_t arg, const planner::OperandLayout& l) {
      return reinterpret_cast<void*>(static_cast<uintptr_t>(args[arg] + static_cast<uint64_t>(l.offset) * esize));
    };
    std::unordered_map<int64_t, void*> pack = {{kQ, at(0, a.q)}, {kK, at(1, a.k)}, {kV, at(2, a.v)}};
    if (call_.bias) pack[kBias] = at(3, a.bias);
    pack[kO] = at(call_.bias ? 4 : 3, a.o);
    return graph_.execute_plan_at_index(handle_, pack, reinterpret_cast<void*>(static_cast<uintptr_t>(workspace_)), call_.algorithm)
        .is_good();
  }

 private:
  planner::LibraryCall call_;
  void* library_;
  cudnnHandle_t handle_;
  uint64_t workspace_;
  fe::graph::Graph graph_;
};

}  // namespace

bool cudnn_frontend_built() { return true; }

std::string check_cudnn_attention(const planner::LibraryCall& call, void* library, int sm) {
  try {
    fe::graph::Graph graph;
    return build_graph(call, library, sm, graph);
  } catch (const std::exception& e) {  // the frontend throws where it cannot reach a library
    return std::string("cuDNN frontend: ") + e.what();
  }
}

std::unique_ptr<GpuLibraryCall> make_cudnn_attention_call(const planner::LibraryCall& call, void* library, void* handle,
                                                          int sm, uint64_t workspace, size_t workspace_bytes,
                                                          std::string* why_not) {
  try {
    auto c = std::make_unique<AttentionCall>(call, library, static_cast<cudnnHandle_t>(handle), workspace);
    if (std::string why = c->init(sm, workspace_bytes); !why.empty()) {
      if (why_not) *why_not = why;
      return nullptr;
    }
    return c;
  } catch (const std::exception& e) {
    if (why_not) *why_not = std::string("cuDNN frontend: ") + e.what();
    return nullptr;
  }
}

#else

bool cudnn_frontend_built() { return false; }

std::string check_cudnn_attention(const planner::LibraryCall&, void*, int) {
  return "this build has no cudnn-frontend headers (scripts/setup.sh fetches them)";
}

std::unique_ptr<GpuLibraryCall> make_cudnn_attention_call(const planner::LibraryCall&, void*, void*, int, uint64_t, size_t,
                                                          std::string* why_not) {
  if (why_not) *why_not = "this build has no cudnn-frontend headers (scripts/setup.sh fetches them)";
  return nullptr;
}

#endif

}  // namespace fusetune::backend
