#include "reference/kernels.h"

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::reference {

std::vector<Tensor> run_node(const Node& node, std::span<const Tensor* const> inputs) {
  std::vector<TensorType> types;
  for (const Tensor* t : inputs) types.push_back(t ? TensorType{t->dtype(), t->shape()} : TensorType{});
  const std::vector<TensorType> out_types = infer_types(node, types);
  std::vector<Tensor> outs;
  for (const TensorType& t : out_types) outs.emplace_back(t.dtype, t.shape);
  // An empty output is complete as constructed. Skipping the kernel also spares it per-shape work
  // (window tables, broadcast offsets over sub-shapes) that can be huge for an empty tensor whose
  // other extents are large.
  if (outs[0].numel() == 0) return outs;
  try {
    switch (find_op(node.op)->kind) {
      case OpKind::kElementwise: run_elementwise(node, inputs, outs[0]); break;
      case OpKind::kReduction: run_reduction(node, inputs, outs[0]); break;
      case OpKind::kNormalization: run_normalization(node, inputs, outs[0]); break;
      case OpKind::kContraction: run_contraction(node, inputs, outs[0]); break;
      case OpKind::kPooling: run_pooling(node, inputs, outs[0]); break;
      case OpKind::kDataMovement: run_data_movement(node, inputs, outs[0]); break;
    }
  } catch (const Error& e) {
    fail("node '", node.name, "' (", node.op, "): ", e.what());
  }
  return outs;
}

}  // namespace fusetune::reference
