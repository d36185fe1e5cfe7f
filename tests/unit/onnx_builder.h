// Test helper: builds small ONNX models in memory with fusetune's ONNX protobuf messages, so tests
// can state a model in a few lines and feed the bytes to the importer (or write them to a file).
#pragma once

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "fusetune_proto/onnx_subset.pb.h"

namespace fusetune::testing {

class OnnxBuilder {
 public:
  explicit OnnxBuilder(int64_t opset = 17) {
    model_.set_ir_version(8);
    model_.set_producer_name("fusetune-tests");
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  // Imports `domain` at `version` besides the default domain (for nodes of other domains).
  OnnxBuilder& opset_import(const std::string& domain, int64_t version) {
    auto* o = model_.add_opset_import();
    o->set_domain(domain);
    o->set_version(version);
    return *this;
  }
  // dims: a negative entry becomes a symbolic dimension named "dN".
  OnnxBuilder& input(const std::string& name, int elem_type, std::vector<int64_t> dims) {
    value_info(model_.mutable_graph()->add_input(), name, elem_type, dims);
    return *this;
  }
  OnnxBuilder& output(const std::string& name, int elem_type, std::vector<int64_t> dims) {
    value_info(model_.mutable_graph()->add_output(), name, elem_type, dims);
    return *this;
  }
  OnnxBuilder& output_untyped(const std::string& name) {
    model_.mutable_graph()->add_output()->set_name(name);
    return *this;
  }
  OnnxBuilder& initializer(const std::string& name, const Tensor& t) {
    auto* p = model_.mutable_graph()->add_initializer();
    p->set_name(name);
    p->set_data_type(dtype_to_onnx(t.dtype()));
    for (int64_t d : t.shape()) p->add_dims(d);
    p->set_raw_data(reinterpret_cast<const char*>(t.data()), t.nbytes());
    return *this;
  }
  // An initializer whose data lives in an external file (ONNX external data).
  OnnxBuilder& external_initializer(const std::string& name, std::vector<int64_t> dims,
                                    std::vector<std::pair<std::string, std::string>> entries) {
    auto* init = model_.mutable_graph()->add_initializer();
    init->set_name(name);
    init->set_data_type(1);
    for (int64_t d : dims) init->add_dims(d);
    init->set_data_location(1);
    for (const auto& [k, v] : entries) {
      auto* e = init->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, std::initializer_list<std::string> ins,
                        std::initializer_list<std::string> outs, const std::string& name = "") {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(model_.graph().node_size()) : name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return *n;
  }
  static void attr_i(onnx::NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_f(onnx::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr_s(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  // A subgraph attribute (If's branches, Loop's and Scan's body): `body`'s graph.
  static void attr_graph(onnx::NodeProto& n, const std::string& name, const OnnxBuilder& body) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = body.model_.graph();
  }
  static void attr_floats(onnx::NodeProto& n, const std::string& name, const std::vector<float>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOATS);
    for (float f : v) a->add_floats(f);
  }
  static void attr_strings(onnx::NodeProto& n, const std::string& name, const std::vector<std::string>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRINGS);
    for (const std::string& s : v) a->add_strings(s);
  }
  static void attr_ints(onnx::NodeProto& n, const std::string& name, std::vector<int64_t> v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  // A model-local function (domain, name) over `inputs` giving `outputs`, whose calls may give the
  // attributes `attributes`; add its body with fnode and defaults to function.attribute_proto.
  onnx::FunctionProto& function(const std::string& domain, const std::string& name, std::initializer_list<std::string> inputs,
                                std::initializer_list<std::string> outputs, std::initializer_list<std::string> attributes = {}) {
    auto* f = model_.add_functions();
    f->set_domain(domain);
    f->set_name(name);
    for (const auto& i : inputs) f->add_input(i);
    for (const auto& o : outputs) f->add_output(o);
    for (const auto& a : attributes) f->add_attribute(a);
    auto* o = f->add_opset_import();
    o->set_domain("");
    o->set_version(model_.opset_import(0).version());
    return *f;
  }
  static onnx::NodeProto& fnode(onnx::FunctionProto& f, const std::string& op, std::initializer_list<std::string> ins,
                                std::initializer_list<std::string> outs, const std::string& domain = "") {
    auto* n = f.add_node();
    n->set_op_type(op);
    n->set_domain(domain);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return *n;
  }
  // An attribute of a function's node that takes the call's attribute `ref` (ref_attr_name).
  static void attr_ref(onnx::NodeProto& n, const std::string& name, onnx::AttributeProto::AttributeType type,
                       const std::string& ref) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(type);
    a->set_ref_attr_name(ref);
  }

  onnx::ModelProto& proto() { return model_; }
  std::string bytes() const { return model_.SerializeAsString(); }
  void write(const std::filesystem::path& p) const {
    std::ofstream out(p, std::ios::binary);
    out << bytes();
  }

 private:
  static void value_info(onnx::ValueInfoProto* vi, const std::string& name, int elem_type,
                         const std::vector<int64_t>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    auto* shape = tt->mutable_shape();
    for (size_t i = 0; i < dims.size(); ++i) {
      auto* d = shape->add_dim();
      if (dims[i] < 0) {
        d->set_dim_param("d" + std::to_string(i));
      } else {
        d->set_dim_value(dims[i]);
      }
    }
  }
  onnx::ModelProto model_;
};

inline constexpr int kFloat = 1;
inline constexpr int kUInt8 = 2;
inline constexpr int kInt8 = 3;
inline constexpr int kUInt16 = 4;
inline constexpr int kInt32 = 6;
inline constexpr int kInt64 = 7;
inline constexpr int kBool = 9;
inline constexpr int kFloat16 = 10;
inline constexpr int kDouble = 11;

}  // namespace fusetune::testing
