#include "importer/lower_recurrent.h"

#include <algorithm>

#include "core/error.h"

namespace fusetune::importer {

namespace {

// The lowering of one node: its element type, shapes and the helpers its steps use.
struct Recurrent {
  NodeLowering& L;
  DType t;
  int64_t hidden;

  int c(double v) const { return L.constant(Tensor::scalar_float(t, static_cast<float>(v))); }
  int op(const char* name, int a, int b) const { return L.emit(name, {a, b}); }
  int add(int a, int b) const { return op("Add", a, b); }
  int mul(int a, int b) const { return op("Mul", a, b); }
  int sub(int a, int b) const { return op("Sub", a, b); }
  int matmul(int a, int b) const { return op("MatMul", a, b); }
  int transpose(int v, std::vector<int64_t> perm) const {
    Attributes a;
    a.set("perm", std::move(perm));
    return L.emit("Transpose", {v}, a);
  }
  // Entry `index` of v's first axis, that axis dropped.
  int pick(int v, int64_t index) const {
    Attributes a;
    a.set("axis", int64_t{0});
    return L.emit("Gather", {v, L.constant(Tensor::scalar_int(DType::kI64, index))}, a);
  }
  int columns(int v, int64_t begin, int64_t end) const { return slice_last_axis(L, v, begin, end); }
  // v's last axis, g gates of `hidden` columns each ([..., g x H], gate-major as ONNX orders them),
  // made gate-minor (lower_recurrent.h): column j x g + k is gate k's column j.
  int interleave(int v, int64_t g) const {
    if (g == 1) return v;
    const Shape s = L.builder().value(v).shape;
    Shape split(s.begin(), s.end() - 1);
    split.insert(split.end(), {g, hidden});
    std::vector<int64_t> perm(split.size());
    for (size_t a = 0; a < perm.size(); ++a) perm[a] = static_cast<int64_t>(a);
    std::swap(perm[perm.size() - 2], perm.back());
    return L.reshape(transpose(L.reshape(v, split), perm), s);
  }
  // Gate k of a gate-minor v ([..., g x H]): [..., H].
  int gate(int v, int64_t k, int64_t g) const {
    Shape s = L.builder().value(v).shape;
    s.back() = hidden;
    Shape split = s;
    split.push_back(g);
    return L.reshape(slice_last_axis(L, L.reshape(v, split), k, k + 1), s);
  }
  int clip(int v, float limit) const { return clip_between(L, v, -limit, limit); }
  // Per-time-step values [B, H] stacked on a new first axis: [T, B, H].
  int stack(const std::vector<int>& steps) const {
    std::vector<int> lifted;
    for (int v : steps) {
      Shape s = L.builder().value(v).shape;
      s.insert(s.begin(), 1);
      lifted.push_back(L.reshape(v, s));
    }
    if (lifted.size() == 1) return lifted[0];
    Attributes a;
    a.set("axis", int64_t{0});
    return L.emit("Concat", lifted, a);
  }
};

struct Activation {
  std::string name;
  float alpha = 0, beta = 0;
};

// The activations (three for LSTM, two for GRU, one for RNN, per direction) with the alphas and
// betas the spec's list hands out in order to those that take them.
std::vector<Activation> activations(NodeLowering& L, const std::vector<std::string>& defaults, int64_t directions) {
  std::vector<std::string> names;
  if (L.has_attr("activations")) names = L.attr_strings("activations");
  if (names.empty()) {
    for (int64_t d = 0; d < directions; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  // A list for two directions on one (RNN's schema default, Tanh twice, is one): its first half.
  if (directions == 1 && names.size() == 2 * defaults.size()) names.resize(defaults.size());
  check(names.size() == defaults.size() * static_cast<size_t>(directions), "activations lists ", names.size(), " functions, ",
        defaults.size() * static_cast<size_t>(directions), " expected (", defaults.size(), " a direction)");
  const std::vector<float> alphas = L.attr_floats("activation_alpha"), betas = L.attr_floats("activation_beta");
  size_t na = 0, nb = 0;
  std::vector<Activation> out;
  for (const std::string& name : names) {
    Activation a{name};
    const auto take = [](const std::vector<float>& list, size_t& next, float fallback) {
      return next < list.size() ? list[next++] : fallback;
    };
    if (name == "LeakyRelu") a.alpha = take(alphas, na, 0.01f);
    else if (name == "ThresholdedRelu" || name == "Elu") a.alpha = take(alphas, na, 1.0f);
    else if (name == "HardSigmoid") {
      a.alpha = take(alphas, na, 0.2f);
      a.beta = take(betas, nb, 0.5f);
    } else if (name == "Affine" || name == "ScaledTanh") {
      a.alpha = take(alphas, na, 1.0f);
      a.beta = take(betas, nb, name == "Affine" ? 0.0f : 1.0f);
    } else {
      check(name == "Relu" || name == "Tanh" || name == "Sigmoid" || name == "Softsign" || name == "Softplus",
            "activation '", name, "' is not one the spec lists");
    }
    out.push_back(a);
  }
  return out;
}

int apply(const Recurrent& r, const Activation& a, int x) {
  NodeLowering& L = r.L;
  Attributes at;
  if (a.name == "Affine") return r.add(r.mul(r.c(a.alpha), x), r.c(a.beta));
  if (a.name == "ScaledTanh") return r.mul(r.c(a.alpha), L.emit("Tanh", {r.mul(r.c(a.beta), x)}));
  if (a.name == "LeakyRelu" || a.name == "ThresholdedRelu" || a.name == "Elu") at.set("alpha", a.alpha);
  if (a.name == "HardSigmoid") {
    at.set("alpha", a.alpha);
    at.set("beta", a.beta);
  }
  return L.emit(a.name, {x}, at);
}

}  // namespace

void recurrent(NodeLowering& L) {
  const std::string& kind = L.op();
  const int64_t gates = kind == "LSTM" ? 4 : kind == "GRU" ? 3 : 1;
  const int64_t hidden = L.attr_i("hidden_size", -1);
  check(hidden > 0, "hidden_size ", hidden, " must be given and positive");
  const int64_t layout = L.attr_i("layout", 0);
  check(layout == 0 || layout == 1, "layout ", layout, " is neither 0 nor 1");
  const std::string direction = L.attr_s("direction", "forward");
  check(direction == "forward" || direction == "reverse" || direction == "bidirectional", "direction '", direction,
        "' is not forward, reverse or bidirectional");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool clipped = L.has_attr("clip");
  const float limit = L.attr_f("clip", 0.0f);
  const bool input_forget = kind == "LSTM" && L.attr_i("input_forget", 0) != 0;
  if (L.opset() < 7) L.attr_i("output_sequence", 0);  // whether Y is wanted: it is computed when it is named
  const bool linear_before_reset = kind == "GRU" && L.attr_i("linear_before_reset", 0) != 0;
  const std::vector<std::string> defaults = kind == "LSTM"  ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                            : kind == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                            : std::vector<std::string>{"Tanh"};
  const std::vector<Activation> acts = activations(L, defaults, dirs);
  const Shape xs = L.shape(0);
  check(xs.size() == 3, "X must be 3-D, got ", shape_str(xs));
  const Recurrent r{L, L.val(0).dtype, hidden};
  const int x = layout == 1 ? r.transpose(L.input(0), {1, 0, 2}) : L.input(0);
  const int64_t steps = layout == 1 ? xs[1] : xs[0], batch = layout == 1 ? xs[0] : xs[1];
  check(steps <= kMaxSteps, steps, " time steps, more than ", kMaxSteps, " (fusetune unrolls them)");
  check(L.shape(1) == Shape({dirs, gates * hidden, xs[2]}), "W of shape ", shape_str(L.shape(1)), ", expected ",
        shape_str({dirs, gates * hidden, xs[2]}));
  check(L.shape(2) == Shape({dirs, gates * hidden, hidden}), "R of shape ", shape_str(L.shape(2)), ", expected ",
        shape_str({dirs, gates * hidden, hidden}));
  // sequence_lens: known at import; uniform lengths of T need nothing.
  std::vector<int64_t> lengths;
  if (L.has_input(4)) {
    lengths = L.const_ints(4, "sequence_lens");
    check(static_cast<int64_t>(lengths.size()) == batch, "sequence_lens has ", lengths.size(), " entries for a batch of ", batch);
    for (int64_t n : lengths) check(n >= 0 && n <= steps, "a sequence length of ", n, " is outside [0, ", steps, "]");
    if (std::all_of(lengths.begin(), lengths.end(), [&](int64_t n) { return n == steps; })) lengths.clear();
    check(lengths.empty() || direction == "forward", "sequence lengths that differ are supported forward only, not ", direction);
  }
  std::vector<int> ys, final_h, final_c;
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const auto act = [&](int64_t k) { return acts[static_cast<size_t>(d) * defaults.size() + static_cast<size_t>(k)]; };
    // The products' columns gate-minor (Recurrent::interleave): W^T [I, G x H] and R^T [H, G x H]
    // (GRU without linear_before_reset: R^T's z and r gates, [H, 2 x H], and its h gate apart).
    const int w = r.pick(L.input(1), d), rt_all = r.transpose(r.pick(L.input(2), d), {1, 0});
    const bool split_h = kind == "GRU" && !linear_before_reset;
    const int rt = split_h ? r.interleave(r.columns(rt_all, 0, 2 * hidden), 2) : r.interleave(rt_all, gates);
    const int rt_h = split_h ? r.columns(rt_all, 2 * hidden, 3 * hidden) : kNoValue;
    int projected = r.matmul(x, r.interleave(r.transpose(w, {1, 0}), gates));  // [T, B, G x H], gate-minor
    int recurrent_bias_h = kNoValue;                                          // GRU's Rbh with linear_before_reset
    if (L.has_input(3)) {
      const int bias = r.pick(L.input(3), d);
      int both = r.add(r.columns(bias, 0, gates * hidden), r.columns(bias, gates * hidden, 2 * gates * hidden));
      if (linear_before_reset) {  // Rbh stays inside the reset gate's product
        both = L.emit("Concat", {r.columns(both, 0, 2 * hidden), r.columns(bias, 2 * hidden, 3 * hidden)}, [] {
          Attributes a;
          a.set("axis", int64_t{0});
          return a;
        }());
        recurrent_bias_h = r.columns(bias, 5 * hidden, 6 * hidden);
      }
      projected = r.add(projected, r.interleave(both, gates));
    }
    const Tensor zeros(r.t, {batch, hidden});
    // The initial states, [D, B, H] ([B, D, H] in layout 1).
    const auto initial = [&](size_t k) { return r.pick(layout == 1 ? r.transpose(L.input(k), {1, 0, 2}) : L.input(k), d); };
    int h = L.has_input(5) ? initial(5) : L.constant(zeros);
    int cell = kind == "LSTM" && L.has_input(6) ? initial(6) : L.constant(zeros);
    int peep_i = kNoValue, peep_o = kNoValue, peep_f = kNoValue;
    if (kind == "LSTM" && L.has_input(7)) {
      const int p = r.pick(L.input(7), d);
      peep_i = r.columns(p, 0, hidden);
      peep_o = r.columns(p, hidden, 2 * hidden);
      peep_f = r.columns(p, 2 * hidden, 3 * hidden);
    }
    const auto pre = [&](int v) { return clipped ? r.clip(v, limit) : v; };
    std::vector<int> y(static_cast<size_t>(steps));
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t at = reverse ? steps - 1 - s : s;
      const int xt = r.pick(projected, at);
      int h_new = kNoValue, c_new = kNoValue;
      if (kind == "LSTM") {
        const int g = r.add(xt, r.matmul(h, rt));
        int i = r.gate(g, 0, 4), o = r.gate(g, 1, 4), f = r.gate(g, 2, 4), z = r.gate(g, 3, 4);
        if (peep_i != kNoValue) {
          i = r.add(i, r.mul(peep_i, cell));
          f = r.add(f, r.mul(peep_f, cell));
        }
        i = apply(r, act(0), pre(i));
        f = input_forget ? r.sub(r.c(1.0), i) : apply(r, act(0), pre(f));
        c_new = r.add(r.mul(f, cell), r.mul(i, apply(r, act(1), pre(z))));
        if (peep_o != kNoValue) o = r.add(o, r.mul(peep_o, c_new));
        h_new = r.mul(apply(r, act(0), pre(o)), apply(r, act(2), c_new));
      } else if (kind == "GRU") {
        // linear_before_reset: one product of h by all three gates; otherwise z and r first, and
        // the h gate's product of (r x h) after.
        const int hr = r.matmul(h, rt);
        const int hr_gates = split_h ? 2 : 3;
        const int z = apply(r, act(0), pre(r.add(r.gate(xt, 0, 3), r.gate(hr, 0, hr_gates))));
        const int reset = apply(r, act(0), pre(r.add(r.gate(xt, 1, 3), r.gate(hr, 1, hr_gates))));
        int candidate;
        if (linear_before_reset) {
          int lin = r.gate(hr, 2, 3);
          if (recurrent_bias_h != kNoValue) lin = r.add(lin, recurrent_bias_h);
          candidate = r.add(r.gate(xt, 2, 3), r.mul(reset, lin));
        } else {
          candidate = r.add(r.gate(xt, 2, 3), r.matmul(r.mul(reset, h), rt_h));
        }
        const int hc = apply(r, act(1), pre(candidate));
        h_new = r.add(r.mul(r.sub(r.c(1.0), z), hc), r.mul(z, h));
      } else {
        h_new = apply(r, act(0), pre(r.add(xt, r.matmul(h, rt))));
      }
      int out = h_new;
      if (!lengths.empty()) {  // entries past their length keep their state and write zeros
        std::vector<int64_t> live(static_cast<size_t>(batch));
        for (size_t b = 0; b < live.size(); ++b) live[b] = at < lengths[b] ? 1 : 0;
        const int mask = L.constant(Tensor::from_ints(DType::kBool, {batch, 1}, live));
        out = L.emit("Where", {mask, h_new, L.constant(zeros)});
        h_new = L.emit("Where", {mask, h_new, h});
        if (c_new != kNoValue) c_new = L.emit("Where", {mask, c_new, cell});
      }
      h = h_new;
      if (c_new != kNoValue) cell = c_new;
      y[static_cast<size_t>(at)] = out;
    }
    ys.push_back(L.reshape(r.stack(y), {steps, 1, batch, hidden}));
    final_h.push_back(L.reshape(h, {1, batch, hidden}));
    final_c.push_back(L.reshape(cell, {1, batch, hidden}));
  }
  const auto join = [&](const std::vector<int>& parts, int64_t axis) {
    if (parts.size() == 1) return parts[0];
    Attributes a;
    a.set("axis", axis);
    return L.emit("Concat", parts, a);
  };
  int y = join(ys, 1), yh = join(final_h, 0), yc = join(final_c, 0);
  if (layout == 1) {
    y = r.transpose(y, {2, 0, 1, 3});
    yh = r.transpose(yh, {1, 0, 2});
    yc = r.transpose(yc, {1, 0, 2});
  }
  if (L.output_used(0)) L.set_output(0, y);
  if (L.output_used(1)) L.set_output(1, yh);
  if (L.output_used(2)) L.set_output(2, yc);
}

}  // namespace fusetune::importer
