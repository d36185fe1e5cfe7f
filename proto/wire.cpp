#include "proto/wire.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/inert_text.h"
#include "core/signature.h"

namespace fusetune::wire {

void make_strings_valid(google::protobuf::Message& m) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection& r = *m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r.ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      // Read in place and rewritten only when not valid: a task's kernel sources are megabytes,
      // and every message the coordinator sends passes here.
      const int n = f->is_repeated() ? r.FieldSize(m, f) : 1;
      std::string scratch;
      for (int i = 0; i < n; ++i) {
        const std::string& text =
            f->is_repeated() ? r.GetRepeatedStringReference(m, f, i, &scratch) : r.GetStringReference(m, f, &scratch);
        if (is_valid_utf8(text)) continue;
        std::string valid = valid_utf8(text);
        if (f->is_repeated()) {
          r.SetRepeatedString(&m, f, i, std::move(valid));
        } else {
          r.SetString(&m, f, std::move(valid));
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < r.FieldSize(m, f); ++i) make_strings_valid(*r.MutableRepeatedMessage(&m, f, i));
      } else {
        make_strings_valid(*r.MutableMessage(&m, f));
      }
    }
  }
}

std::string encode(Envelope e) {
  e.set_version(kProtocolVersion);
  make_strings_valid(e);
  std::string out;
  check(e.SerializeToString(&out), "cannot serialize a ", body_name(e), " message");
  return out;
}

Envelope decode(const void* data, size_t size) {
  Envelope e;
  check(size <= static_cast<size_t>(INT32_MAX) && e.ParseFromArray(data, static_cast<int>(size)),
        "malformed message (", size, " bytes that are not a fusetune envelope)");
  check(e.body_case() != Envelope::BODY_NOT_SET, "message without a body (", size, " bytes, protocol version ",
        e.version(), ")");
  check(e.version() >= kMinProtocolVersion && e.version() <= kProtocolVersion, "message of protocol version ",
        e.version(), "; this fusetune speaks versions ", kMinProtocolVersion, " to ", kProtocolVersion);
  return e;
}

std::string body_name(const Envelope& e) {
  switch (e.body_case()) {
    case Envelope::kHello: return "hello";
    case Envelope::kWelcome: return "welcome";
    case Envelope::kRefused: return "refused";
    case Envelope::kHeartbeat: return "heartbeat";
    case Envelope::kTask: return "task";
    case Envelope::kResult: return "result";
    case Envelope::kSubmit: return "submit";
    case Envelope::kJob: return "job";
    case Envelope::kStatus: return "status";
    case Envelope::kStatusReply: return "status_reply";
    case Envelope::kCancel: return "cancel";
    case Envelope::kExportRequest: return "export_request";
    case Envelope::kExportReply: return "export_reply";
    case Envelope::kUpload: return "upload";
    case Envelope::kUploadAck: return "upload_ack";
    case Envelope::kRevoke: return "revoke";
    case Envelope::kError: return "error";
    case Envelope::kBye: return "bye";
    case Envelope::BODY_NOT_SET: break;
  }
  return "empty";
}

void poll(zmq::pollitem_t* items, size_t count, int timeout_ms) {
  try {
    zmq::poll(items, count, std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
    for (size_t k = 0; k < count; ++k) items[k].revents = 0;
  }
}

namespace {

void put_attr(Attribute& a, const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) a.set_i(*i);
  if (const auto* f = std::get_if<float>(&v)) a.set_f(*f);
  if (const auto* s = std::get_if<std::string>(&v)) a.set_s(*s);
  if (const auto* is = std::get_if<std::vector<int64_t>>(&v)) {
    for (int64_t x : *is) a.mutable_ints()->add_v(x);
  }
  if (const auto* fs = std::get_if<std::vector<float>>(&v)) {
    for (float x : *fs) a.mutable_floats()->add_v(x);
  }
}

AttrValue get_attr(const Attribute& a) {
  switch (a.value_case()) {
    case Attribute::kI: return a.i();
    case Attribute::kF: return a.f();
    case Attribute::kS: return a.s();
    case Attribute::kInts: return std::vector<int64_t>(a.ints().v().begin(), a.ints().v().end());
    case Attribute::kFloats: return std::vector<float>(a.floats().v().begin(), a.floats().v().end());
    case Attribute::VALUE_NOT_SET: break;
  }
  fail("sub-graph attribute '", a.name(), "' has no value");
}

// A weight's draws: uniform over mean ± sqrt(3) stddev (the same mean and standard deviation),
// one splitmix64 step per element from the seed, so every receiver draws the same values.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::optional<Generated> weight_draws(const Tensor& t, uint64_t seed) {
  if (!is_float(t.dtype()) || t.numel() <= kInlineConstantElements) return std::nullopt;
  const std::vector<double> x = t.to_doubles();
  t.release_pages();  // a mapped weight read once here: its pages go back (the file keeps it)
  double sum = 0, squares = 0;
  std::vector<double> distinct;  // up to kMaskValues + 1 of the values
  for (double e : x) {
    if (!std::isfinite(e) || std::fabs(e) >= kMaxDrawnMagnitude) return std::nullopt;  // a mask's -inf, a sentinel
    if (distinct.size() <= kMaskValues && std::find(distinct.begin(), distinct.end(), e) == distinct.end()) {
      distinct.push_back(e);
    }
    sum += e;
    squares += e * e;
  }
  if (distinct.size() <= kMaskValues) return std::nullopt;  // a mask (0 and -10000), a constant fill
  const double n = static_cast<double>(x.size());
  Generated g;
  g.set_seed(seed);
  g.set_mean(sum / n);
  g.set_stddev(std::sqrt(std::max(0.0, squares / n - g.mean() * g.mean())));
  return g;
}

Tensor draw_weight(const std::string& name, DType dtype, const Shape& shape, const Generated& gen) {
  check(std::isfinite(gen.mean()) && std::isfinite(gen.stddev()) && gen.stddev() >= 0 &&
            std::fabs(gen.mean()) + std::sqrt(3.0) * gen.stddev() <= 2 * kMaxDrawnMagnitude,
        "sub-graph constant '", name, "' is drawn with mean ", gen.mean(), " and standard deviation ", gen.stddev(),
        ", which no weight has");
  Tensor t(dtype, shape);
  std::vector<double> x(static_cast<size_t>(t.numel()));
  const double half_width = std::sqrt(3.0) * gen.stddev();
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = static_cast<double>(splitmix64(gen.seed() * 0x100000001B3ull + i) >> 11) * 0x1.0p-53;  // [0, 1)
    x[i] = gen.mean() + half_width * (2 * u - 1);
  }
  t.set_doubles(x);
  return t;
}

Subgraph to_subgraph(const Graph& g, const planner::FusionGroup& group) {
  Subgraph s;
  std::map<int, int> index;  // graph value -> sub-graph value
  auto add_value = [&](int v) {
    auto [it, fresh] = index.emplace(v, s.values_size());
    if (!fresh) return it->second;
    const Value& val = g.value(v);
    ValueDef& d = *s.add_values();
    d.set_name(val.name);
    d.set_dtype(dtype_to_onnx(val.dtype));
    for (int64_t x : val.shape) d.add_shape(x);
    if (val.is_constant()) {
      d.set_constant(true);
      if (const std::optional<Generated> gen = weight_draws(*val.data, static_cast<uint64_t>(it->second))) {
        *d.mutable_generated() = *gen;
      } else {
        d.set_data(reinterpret_cast<const char*>(val.data->data()), val.data->nbytes());
      }
    }
    return it->second;
  };
  // describe_group lists the group's external inputs by first use and its exported values in node
  // order: the sub-graph numbers its values the same way.
  for (int v : group.inputs) {
    const int id = add_value(v);
    if (!g.value(v).is_constant()) s.add_inputs(id);
  }
  for (int n : group.nodes) {
    const Node& node = g.nodes()[static_cast<size_t>(n)];
    NodeDef& d = *s.add_nodes();
    d.set_name(node.name);
    d.set_op(node.op);
    for (int v : node.inputs) d.add_inputs(v == kNoValue ? -1 : add_value(v));
    for (int v : node.outputs) d.add_outputs(add_value(v));
    for (const auto& [name, value] : node.attrs.all()) {
      Attribute& a = *d.add_attrs();
      a.set_name(name);
      put_attr(a, value);
    }
  }
  for (int v : group.outputs) s.add_outputs(index.at(v));
  return s;
}

Graph from_subgraph(const Subgraph& s) {
  Graph g;
  const int nvalues = s.values_size();
  auto value_ref = [&](int v, const std::string& what) {
    check(v >= -1 && v < nvalues, "sub-graph ", what, " refers to value ", v, " of ", nvalues);
    return v;
  };
  for (const ValueDef& d : s.values()) {
    Value v;
    v.name = d.name();
    v.dtype = dtype_from_onnx(d.dtype());
    check(v.dtype != DType::kUndefined, "sub-graph value '", d.name(), "' has unknown dtype code ", d.dtype());
    v.shape.assign(d.shape().begin(), d.shape().end());
    for (int64_t x : v.shape) check(x >= 0, "sub-graph value '", d.name(), "' has a negative dimension");
    checked_numel(v.shape, "sub-graph value '" + d.name() + "'");
    if (d.constant() && d.has_generated()) {
      check(is_float(v.dtype) && d.data().empty(), "sub-graph constant '", d.name(),
            "' is generated but is not a float weight without data");
      v.data = std::make_shared<const Tensor>(draw_weight(d.name(), v.dtype, v.shape, d.generated()));
    } else if (d.constant()) {
      std::vector<std::byte> bytes(d.data().size());
      std::memcpy(bytes.data(), d.data().data(), bytes.size());
      check(bytes.size() == static_cast<size_t>(numel(v.shape)) * dtype_size(v.dtype), "sub-graph constant '",
            d.name(), "' holds ", bytes.size(), " bytes for shape ", shape_str(v.shape));
      v.data = std::make_shared<const Tensor>(Tensor::from_bytes(v.dtype, v.shape, std::move(bytes)));
    }
    g.add_value(std::move(v));
  }
  for (const NodeDef& d : s.nodes()) {
    Node n;
    n.name = d.name();
    n.op = d.op();
    for (int v : d.inputs()) n.inputs.push_back(value_ref(v, "node '" + d.name() + "' input"));
    for (int v : d.outputs()) n.outputs.push_back(value_ref(v, "node '" + d.name() + "' output"));
    for (const Attribute& a : d.attrs()) n.attrs.set(a.name(), get_attr(a));
    g.add_node(std::move(n));
  }
  for (int v : s.inputs()) g.inputs().push_back(value_ref(v, "input"));
  for (int v : s.outputs()) g.outputs().push_back(value_ref(v, "output"));
  g.validate();
  return g;
}

}  // namespace fusetune::wire
