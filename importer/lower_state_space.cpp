#include "importer/lower_state_space.h"

#include <cmath>

#include "core/error.h"
#include "importer/lower_recurrent.h"

namespace fusetune::importer {

namespace {

int transposed(NodeLowering& L, int v, std::vector<int64_t> perm) {
  Attributes a;
  a.set("perm", std::move(perm));
  return L.emit("Transpose", {v}, a);
}

// [B, T, H * D] -> [B, H, T, D] in float32.
int heads_of(NodeLowering& L, size_t k, int64_t heads, const char* what) {
  const Shape s = L.shape(k);
  check(s.size() == 3, what, " must be [batch, time, heads x head size], got ", shape_str(s));
  check(s[2] % heads == 0, what, " ", shape_str(s), ": its last axis does not split into ", heads, " heads");
  return transposed(L, L.reshape(cast_to(L, L.input(k), DType::kF32), {s[0], s[1], heads, s[2] / heads}), {0, 2, 1, 3});
}

int step_of(NodeLowering& L, int v, int64_t t) { return slice_axis(L, v, 2, t, t + 1); }

}  // namespace

void causal_conv_with_state(NodeLowering& L) {
  const std::string activation = L.attr_s("activation", "none");
  check(activation == "none" || activation == "silu" || activation == "swish", "activation '", activation,
        "' is not one of none, silu, swish");
  const Shape xs = L.shape(0), ws = L.shape(1);
  check(xs.size() == 3, "input must be [batch, channels, length], got ", shape_str(xs));
  check(ws.size() == 3 && ws[0] == xs[1] && ws[1] == 1, "weight must be [channels, 1, k] for input ", shape_str(xs), ", got ",
        shape_str(ws));
  const int64_t B = xs[0], C = xs[1], L_ = xs[2], k = ws[2];
  const DType dt = L.val(0).dtype;
  int past;
  if (L.has_input(3)) {
    check(L.shape(3) == (Shape{B, C, k - 1}), "past_state must be ", shape_str({B, C, k - 1}), ", got ", shape_str(L.shape(3)));
    past = L.input(3);
  } else {
    past = L.constant(Tensor(dt, {B, C, k - 1}));
  }
  Attributes time;
  time.set("axis", int64_t{2});
  const int padded = L.emit("Concat", {past, L.input(0)}, time);
  Attributes conv;
  conv.set("strides", std::vector<int64_t>{1});
  conv.set("dilations", std::vector<int64_t>{1});
  conv.set("pads", std::vector<int64_t>{0, 0});
  conv.set("group", C);
  std::vector<int> ins = {padded, L.input(1)};
  if (L.has_input(2)) ins.push_back(L.input(2));
  int y = L.emit("Conv", ins, conv);
  if (activation != "none") {
    const int f = cast_to(L, y, DType::kF32);
    y = cast_to(L, L.emit("Mul", {f, L.emit("Sigmoid", {f})}), dt);
  }
  L.set_output(0, y);
  if (L.output_used(1)) L.set_output(1, slice_axis(L, padded, 2, L_, L_ + k - 1));
}

void linear_attention(NodeLowering& L) {
  const std::string rule = L.attr_s("update_rule", "gated_delta");
  check(rule == "linear" || rule == "gated" || rule == "delta" || rule == "gated_delta", "update_rule '", rule,
        "' is not one of linear, gated, delta, gated_delta");
  L.attr_i("chunk_size", 0);  // a tuning hint: the recurrence is the same
  check(L.has_attr("q_num_heads") && L.has_attr("kv_num_heads"), "q_num_heads and kv_num_heads are required");
  const int64_t hq = L.attr_i("q_num_heads", 0), hkv = L.attr_i("kv_num_heads", 0);
  check(hq > 0 && hkv > 0 && hq % hkv == 0, "q_num_heads (", hq, ") must be a positive multiple of kv_num_heads (", hkv, ")");
  const bool gated = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  check(gated == L.has_input(4), "update_rule '", rule, gated ? "' needs" : "' forbids", " the decay input");
  check(delta == L.has_input(5), "update_rule '", rule, delta ? "' needs" : "' forbids", " the beta input");
  const Shape qs = L.shape(0), vs = L.shape(2);
  const int q = heads_of(L, 0, hq, "query"), key = heads_of(L, 1, hkv, "key"), value = heads_of(L, 2, hkv, "value");
  const int64_t B = qs[0], T = qs[1], dk = qs[2] / hq, dv = vs[2] / hkv, group = hq / hkv;
  check(L.shape(1) == (Shape{B, T, hkv * dk}) && vs[0] == B && vs[1] == T, "key ", shape_str(L.shape(1)), " and value ", shape_str(vs),
        " do not match query ", shape_str(qs), " with ", hq, " query and ", hkv, " key/value heads");
  check(T >= 1 && T <= kMaxSteps, "a sequence of ", T, " steps is outside the 1 to ", kMaxSteps, " LinearAttention unrolls");
  int decay = kNoValue, beta = kNoValue;
  if (gated) {
    const Shape ds = L.shape(4);
    check(ds.size() == 3 && ds[0] == B && ds[1] == T && (ds[2] == hkv || ds[2] == hkv * dk), "decay must be [", B, ", ", T, ", ", hkv,
          " or ", hkv * dk, "], got ", shape_str(ds));
    decay = transposed(L, L.reshape(cast_to(L, L.input(4), DType::kF32), {B, T, hkv, ds[2] / hkv}), {0, 2, 1, 3});
  }
  if (delta) {
    const Shape bs = L.shape(5);
    check(bs.size() == 3 && bs[0] == B && bs[1] == T && (bs[2] == hkv || bs[2] == 1), "beta must be [", B, ", ", T, ", ", hkv,
          " or 1], got ", shape_str(bs));
    beta = transposed(L, L.reshape(cast_to(L, L.input(5), DType::kF32), {B, T, bs[2], 1}), {0, 2, 1, 3});
  }
  const Shape state_shape = {B, hkv, dk, dv};
  int state;
  DType state_type = L.val(0).dtype;
  if (L.has_input(3)) {
    check(L.shape(3) == state_shape, "past_state must be ", shape_str(state_shape), ", got ", shape_str(L.shape(3)));
    state = cast_to(L, L.input(3), DType::kF32);
    state_type = L.val(3).dtype;
  } else {
    state = L.constant(Tensor(DType::kF32, state_shape));
  }
  const float scale_attr = L.attr_f("scale", 0.0f);
  const int scale = L.constant(
      Tensor::scalar_float(DType::kF32, scale_attr == 0.0f ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk))) : scale_attr));
  const auto op = [&](const char* name, int a, int b) { return L.emit(name, {a, b}); };
  std::vector<int> outputs;
  for (int64_t t = 0; t < T; ++t) {
    const int k_t = step_of(L, key, t);  // [B, H_kv, 1, d_k]
    int v_t = step_of(L, value, t);      // [B, H_kv, 1, d_v]
    if (gated) {
      const int g = step_of(L, decay, t);  // [B, H_kv, 1, d_k or 1]
      state = op("Mul", state, L.reshape(L.emit("Exp", {g}), {B, hkv, L.shape(4)[2] / hkv, 1}));
    }
    if (delta) v_t = op("Mul", step_of(L, beta, t), op("Sub", v_t, op("MatMul", k_t, state)));
    state = op("Add", state, op("Mul", L.reshape(k_t, {B, hkv, dk, 1}), v_t));
    const int q_t = L.reshape(step_of(L, q, t), {B, hkv, group, dk});
    outputs.push_back(L.reshape(op("Mul", op("MatMul", q_t, state), scale), {B, hq, 1, dv}));
  }
  Attributes time;
  time.set("axis", int64_t{2});
  const int all = outputs.size() == 1 ? outputs[0] : L.emit("Concat", outputs, time);
  L.set_output(0, cast_to(L, L.reshape(transposed(L, all, {0, 2, 1, 3}), {B, T, hq * dv}), L.val(0).dtype));
  if (L.output_used(1)) L.set_output(1, cast_to(L, state, state_type));
}

}  // namespace fusetune::importer
