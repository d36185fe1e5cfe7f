#include "importer/sequences.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/ops.h"

namespace fusetune::importer {

namespace {

const std::set<std::string>& sequence_ops() {
  static const std::set<std::string> ops = {"ConcatFromSequence", "Optional",    "OptionalGetElement", "OptionalHasElement",
                                            "SequenceAt",         "SequenceConstruct", "SequenceEmpty",  "SequenceErase",
                                            "SequenceInsert",     "SequenceLength",    "SequenceMap",    "SplitToSequence"};
  return ops;
}

struct Op {
  const onnx::NodeProto& n;
  const std::vector<int>& ins;
  GraphBuilder& b;

  std::string name() const { return n.name().empty() ? (n.output_size() ? n.output(0) : n.op_type()) : n.name(); }
  bool has(size_t k) const { return k < ins.size() && ins[k] != kNoValue; }
  const std::vector<int>& seq(size_t k) const {
    check(has(k), "input ", k, " is required");
    const std::vector<int>* s = b.sequence_of(ins[k]);
    check(s != nullptr, "input ", k, " ('", n.input(static_cast<int>(k)), "') is not a sequence");
    return *s;
  }
  int tensor(size_t k) const {
    check(has(k), "input ", k, " is required");
    check(b.sequence_of(ins[k]) == nullptr && b.optional_of(ins[k]) == nullptr, "input ", k, " ('", n.input(static_cast<int>(k)),
          "') is a ", b.sequence_of(ins[k]) ? "sequence" : "optional", ", not a tensor");
    return ins[k];
  }
  // A position into a sequence of `length` (insertion: up to length), negative from the end.
  size_t position(size_t k, size_t length, bool insertion) const {
    const int64_t p = known_scalar(n, b, ins, k, "position");
    const auto len = static_cast<int64_t>(length);
    const int64_t hi = insertion ? len : len - 1;
    check(p >= -len && p <= hi, "position ", p, " is outside [", -len, ", ", hi, "] for a sequence of ", length);
    return static_cast<size_t>(p < 0 ? p + len : p);
  }
  int emit(const std::string& op, std::vector<int> inputs, Attributes a, const std::string& suffix) const {
    return b.emit(op, std::move(inputs), std::move(a), name() + "/" + suffix);
  }
};

std::vector<int> split_to_sequence(const Op& o) {
  check_attributes(o.n, {"axis", "keepdims"});
  const int x = o.tensor(0);
  const Shape s = o.b.value(x).shape;
  const auto axis = static_cast<size_t>(normalize_axis(int_attr(o.n, "axis", 0), static_cast<int64_t>(s.size()), "axis"));
  const int64_t extent = s[axis];
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (!o.has(1)) {  // one part per index
    sizes.assign(static_cast<size_t>(extent), 1);
    squeeze = int_attr(o.n, "keepdims", 1) == 0;
  } else {
    const Tensor* t = o.b.value(o.ins[1]).is_constant() ? o.b.value(o.ins[1]).data.get() : o.b.known(o.ins[1]);
    check(t != nullptr, "input 1 ('", o.n.input(1), "', the split) is not known at import");
    const std::vector<int64_t> split = t->to_ints();
    if (t->rank() == 0) {  // parts of that size, the last one smaller
      check(split[0] >= 1, "split ", split[0], " is not a positive size");
      for (int64_t at = 0; at < extent; at += split[0]) sizes.push_back(std::min(split[0], extent - at));
    } else {
      sizes = split;
      int64_t sum = 0;
      for (int64_t v : sizes) {
        check(v >= 0, "split holds a negative size ", v);
        sum += v;
      }
      check(sum == extent, "split adds up to ", sum, ", the axis has ", extent);
    }
  }
  std::vector<int> parts;
  int64_t at = 0;
  for (int64_t size : sizes) {
    Attributes slice;
    std::vector<int64_t> starts(s.size(), 0), ends = s, steps(s.size(), 1);
    starts[axis] = at;
    ends[axis] = at + size;
    slice.set("starts", starts);
    slice.set("ends", ends);
    slice.set("steps", steps);
    int part = o.emit("Slice", {x}, slice, "part" + std::to_string(parts.size()));
    if (squeeze) {
      Shape sq = s;
      sq.erase(sq.begin() + static_cast<std::ptrdiff_t>(axis));
      Attributes r;
      r.set("shape", sq);
      part = o.emit("Reshape", {part}, r, "squeeze" + std::to_string(parts.size()));
    }
    parts.push_back(part);
    at += size;
  }
  return {o.b.sequence(parts, o.n.output(0))};
}

int concat_from_sequence(const Op& o) {
  check_attributes(o.n, {"axis", "new_axis"});
  check(std::any_of(o.n.attribute().begin(), o.n.attribute().end(), [](const auto& a) { return a.name() == "axis"; }),
        "attribute 'axis' is required");
  const std::vector<int>& parts = o.seq(0);
  check(!parts.empty(), "input 0 ('", o.n.input(0), "') is an empty sequence: ConcatFromSequence has no type to give");
  const bool stacked = int_attr(o.n, "new_axis", 0) != 0;
  const Shape s = o.b.value(parts[0]).shape;
  const auto rank = static_cast<int64_t>(s.size()) + (stacked ? 1 : 0);
  const int64_t axis = normalize_axis(int_attr(o.n, "axis", 0), rank, "axis");
  std::vector<int> inputs;
  for (int p : parts) {
    if (!stacked) {
      inputs.push_back(p);
      continue;
    }
    Shape lifted = o.b.value(p).shape;
    lifted.insert(lifted.begin() + axis, 1);
    Attributes r;
    r.set("shape", lifted);
    inputs.push_back(o.emit("Reshape", {p}, r, "lift" + std::to_string(inputs.size())));
  }
  if (inputs.size() == 1) return inputs[0];
  Attributes c;
  c.set("axis", axis);
  return o.emit("Concat", inputs, c, "concat");
}

std::vector<int> sequence_map(const Op& o, const Scope& scope, const SubgraphImporter& import) {
  const onnx::GraphProto* body = nullptr;
  for (const auto& a : o.n.attribute()) {
    check(a.name() == "body", "attribute '", a.name(), "' is not supported (fusetune reads SequenceMap without it)");
    body = &a.g();
  }
  check(body != nullptr, "attribute 'body' is required");
  const size_t length = o.seq(0).size();
  for (size_t k = 1; k < o.ins.size(); ++k) {
    if (const std::vector<int>* s = o.b.sequence_of(o.ins[k])) {
      check(s->size() == length, "input ", k, " ('", o.n.input(static_cast<int>(k)), "') has ", s->size(), " elements, input 0 ", length);
    }
  }
  std::vector<std::vector<int>> outputs(static_cast<size_t>(o.n.output_size()));
  for (size_t i = 0; i < length; ++i) {
    std::vector<int> inputs;
    for (size_t k = 0; k < o.ins.size(); ++k) {
      const std::vector<int>* s = o.b.sequence_of(o.ins[k]);
      inputs.push_back(s != nullptr ? (*s)[i] : o.tensor(k));
    }
    const std::vector<int> outs = import(*body, scope, inputs, o.name() + "/" + std::to_string(i) + "/");
    check(outs.size() == outputs.size(), "the body gives ", outs.size(), " outputs, the node has ", outputs.size());
    for (size_t k = 0; k < outs.size(); ++k) outputs[k].push_back(outs[k]);
  }
  std::vector<int> out;
  for (size_t k = 0; k < outputs.size(); ++k) out.push_back(o.b.sequence(outputs[k], o.n.output(static_cast<int>(k))));
  return out;
}

}  // namespace

bool is_sequence_op(const std::string& op_type) { return sequence_ops().count(op_type) != 0; }

std::vector<int> lower_sequence_op(const onnx::NodeProto& n, const std::vector<int>& ins, const Scope& scope, GraphBuilder& b,
                                   const SubgraphImporter& import) {
  const Op o{n, ins, b};
  const std::string& op = n.op_type();
  const std::string out = n.output_size() > 0 ? n.output(0) : op;
  if (op == "SequenceMap") return sequence_map(o, scope, import);
  if (op == "SplitToSequence") return split_to_sequence(o);
  if (op == "ConcatFromSequence") return {concat_from_sequence(o)};
  if (op == "SequenceEmpty") {
    check_attributes(n, {"dtype"});
    return {b.sequence({}, out)};
  }
  if (op == "SequenceConstruct") {
    check_attributes(n, {});
    std::vector<int> parts;
    for (size_t k = 0; k < ins.size(); ++k) parts.push_back(o.tensor(k));
    for (int p : parts) {
      check(b.value(p).dtype == b.value(parts[0]).dtype, "the elements are of types ", dtype_name(b.value(parts[0]).dtype), " and ",
            dtype_name(b.value(p).dtype));
    }
    return {b.sequence(parts, out)};
  }
  if (op == "SequenceInsert" || op == "SequenceErase" || op == "SequenceAt" || op == "SequenceLength") {
    check_attributes(n, {});
    std::vector<int> parts = o.seq(0);
    if (op == "SequenceLength") return {b.constant(Tensor::scalar_int(DType::kI64, static_cast<int64_t>(parts.size())), out)};
    if (op == "SequenceAt") {
      check(!parts.empty(), "input 0 ('", n.input(0), "') is an empty sequence");
      return {parts[o.position(1, parts.size(), false)]};
    }
    if (op == "SequenceErase") {
      check(!parts.empty(), "input 0 ('", n.input(0), "') is an empty sequence");
      const size_t at = o.has(1) ? o.position(1, parts.size(), false) : parts.size() - 1;
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at));
      return {b.sequence(parts, out)};
    }
    const int t = o.tensor(1);
    if (!parts.empty()) {
      check(b.value(t).dtype == b.value(parts[0]).dtype, "input 1 is ", dtype_name(b.value(t).dtype), ", the sequence holds ",
            dtype_name(b.value(parts[0]).dtype));
    }
    const size_t at = o.has(2) ? o.position(2, parts.size(), true) : parts.size();
    parts.insert(parts.begin() + static_cast<std::ptrdiff_t>(at), t);
    return {b.sequence(parts, out)};
  }
  if (op == "Optional") {
    check_attributes(n, {"type"});
    return {b.optional(o.has(0) ? ins[0] : kNoValue, out)};
  }
  check_attributes(n, {});
  const int* held = o.has(0) ? b.optional_of(ins[0]) : nullptr;
  if (op == "OptionalHasElement") {  // an absent input, an empty optional: false; a tensor or a sequence: true
    const bool has = o.has(0) && (held == nullptr || *held != kNoValue);
    return {b.constant(Tensor::from_ints(DType::kBool, {}, std::vector<int64_t>{has ? 1 : 0}), out)};
  }
  // OptionalGetElement: the optional's value; a tensor or a sequence is its own.
  check(o.has(0), "input 0 is required");
  if (held == nullptr) return {ins[0]};
  check(*held != kNoValue, "input 0 ('", n.input(0), "') is an empty optional");
  return {*held};
}

}  // namespace fusetune::importer
