#include "core/signature.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "core/sha256.h"

namespace fusetune {

namespace {

// FNV-1a, 64-bit: a fixed, platform-independent hash used only to order nodes.
uint64_t fnv(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t mix(uint64_t h, uint64_t v) { return fnv(std::string_view(reinterpret_cast<const char*>(&v), sizeof v), h); }

std::string float_text(double f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", f);  // exact, locale-free
  return buf;
}

std::string type_text(DType t, const Shape& s) {
  std::string out(dtype_name(t));
  out += '[';
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  return out + ']';
}

std::string attrs_text(const Attributes& attrs) {
  if (attrs.all().empty()) return "";
  std::ostringstream out;
  out << '[';
  bool first = true;
  for (const auto& [name, value] : attrs.all()) {
    if (!first) out << ';';
    first = false;
    out << name << '=';
    if (const auto* i = std::get_if<int64_t>(&value)) out << *i;
    if (const auto* f = std::get_if<float>(&value)) out << float_text(*f);
    if (const auto* s = std::get_if<std::string>(&value)) out << '"' << *s << '"';
    if (const auto* is = std::get_if<std::vector<int64_t>>(&value)) {
      out << '(';
      for (size_t k = 0; k < is->size(); ++k) out << (k ? "," : "") << (*is)[k];
      out << ')';
    }
    if (const auto* fs = std::get_if<std::vector<float>>(&value)) {
      out << '(';
      for (size_t k = 0; k < fs->size(); ++k) out << (k ? "," : "") << float_text((*fs)[k]);
      out << ')';
    }
  }
  out << ']';
  return out.str();
}

// How a boundary tensor enters the canonical form.
std::string boundary_text(const Value& v) {
  if (!v.is_constant()) return "input " + type_text(v.dtype, v.shape);
  if (v.data->numel() > kInlineConstantElements) return "param " + type_text(v.dtype, v.shape);
  std::string out = "const " + type_text(v.dtype, v.shape) + " {";
  const std::vector<double> vals = v.data->to_doubles();
  for (size_t i = 0; i < vals.size(); ++i) out += (i ? "," : "") + float_text(vals[i]);
  return out + "}";
}

}  // namespace

Signature subgraph_signature(const Graph& g, std::span<const int> node_ids) {
  std::vector<int> nodes(node_ids.begin(), node_ids.end());
  std::sort(nodes.begin(), nodes.end());  // graph order is topological
  check(std::adjacent_find(nodes.begin(), nodes.end()) == nodes.end(), "signature: a node is listed twice");
  const size_t n = nodes.size();
  std::map<int, size_t> local_of_value;  // value id -> local index of its producer
  std::map<int, int> slot_of_value;      // value id -> output slot of its producer
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes().at(static_cast<size_t>(nodes[i]));
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      local_of_value[node.outputs[o]] = i;
      slot_of_value[node.outputs[o]] = static_cast<int>(o);
    }
  }
  // Bottom-up structural hash: what each node computes from what.
  std::vector<uint64_t> up(n);
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes()[static_cast<size_t>(nodes[i])];
    uint64_t h = fnv(node.op + attrs_text(node.attrs));
    for (int in : node.inputs) {
      if (in == kNoValue) {
        h = mix(h, 0);
      } else if (auto it = local_of_value.find(in); it != local_of_value.end()) {
        h = mix(mix(h, up[it->second]), static_cast<uint64_t>(slot_of_value[in]));
      } else {
        h = fnv(boundary_text(g.value(in)), h);
      }
    }
    for (int o : node.outputs) h = fnv(type_text(g.value(o).dtype, g.value(o).shape), h);
    up[i] = h;
  }
  // Top-down context: how each node's results are used inside the sub-graph.
  std::vector<uint64_t> down(n, 0);
  for (size_t i = n; i-- > 0;) {
    const Node& node = g.nodes()[static_cast<size_t>(nodes[i])];
    std::vector<uint64_t> uses;
    for (size_t j = i + 1; j < n; ++j) {
      const Node& user = g.nodes()[static_cast<size_t>(nodes[j])];
      for (size_t slot = 0; slot < user.inputs.size(); ++slot) {
        for (size_t o = 0; o < node.outputs.size(); ++o) {
          if (user.inputs[slot] == node.outputs[o]) uses.push_back(mix(mix(mix(up[j], down[j]), slot), o));
        }
      }
    }
    std::sort(uses.begin(), uses.end());
    uint64_t h = 7;
    for (uint64_t u : uses) h = mix(h, u);
    down[i] = h;
  }
  // Canonical topological order: among ready nodes, the smallest (up, down) first.
  std::vector<int> pending(n, 0);
  std::vector<std::vector<size_t>> users(n);
  for (size_t j = 0; j < n; ++j) {
    const Node& user = g.nodes()[static_cast<size_t>(nodes[j])];
    std::vector<size_t> deps;
    for (int in : user.inputs) {
      if (auto it = local_of_value.find(in); in != kNoValue && it != local_of_value.end()) deps.push_back(it->second);
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    pending[j] = static_cast<int>(deps.size());
    for (size_t d : deps) users[d].push_back(j);
  }
  using Key = std::tuple<uint64_t, uint64_t, size_t>;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
  for (size_t j = 0; j < n; ++j) {
    if (pending[j] == 0) ready.emplace(up[j], down[j], j);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t j = std::get<2>(ready.top());
    ready.pop();
    order.push_back(j);
    for (size_t u : users[j]) {
      if (--pending[u] == 0) ready.emplace(up[u], down[u], u);
    }
  }
  // Emit the canonical text.
  std::vector<size_t> position(n);
  for (size_t p = 0; p < order.size(); ++p) position[order[p]] = p;
  std::ostringstream text;
  text << "fusetune-signature v" << kSignatureVersion << '\n';
  std::map<int, std::string> boundary;
  std::ostringstream body;
  auto ref = [&](int value) -> std::string {
    if (value == kNoValue) return "none";
    if (auto it = local_of_value.find(value); it != local_of_value.end()) {
      std::string r = "n" + std::to_string(position[it->second]);
      if (slot_of_value[value] != 0) r += "." + std::to_string(slot_of_value[value]);
      return r;
    }
    auto [it, fresh] = boundary.emplace(value, "");
    if (fresh) {
      it->second = "in" + std::to_string(boundary.size() - 1);
      text << it->second << " = " << boundary_text(g.value(value)) << '\n';
    }
    return it->second;
  };
  std::vector<bool> is_output(g.values().size(), false);
  for (int o : g.outputs()) is_output[static_cast<size_t>(o)] = true;
  std::vector<bool> in_set(g.nodes().size(), false);
  for (int id : nodes) in_set[static_cast<size_t>(id)] = true;
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    if (in_set[k]) continue;
    for (int in : g.nodes()[k].inputs) {
      if (in != kNoValue) is_output[static_cast<size_t>(in)] = true;
    }
  }
  std::vector<std::string> outs;
  for (size_t p = 0; p < order.size(); ++p) {
    const Node& node = g.nodes()[static_cast<size_t>(nodes[order[p]])];
    std::string args;
    for (size_t k = 0; k < node.inputs.size(); ++k) args += (k ? ", " : "") + ref(node.inputs[k]);
    body << 'n' << p << " = " << node.op << attrs_text(node.attrs) << '(' << args << ") ->";
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const Value& v = g.value(node.outputs[o]);
      body << ' ' << type_text(v.dtype, v.shape);
      if (is_output[static_cast<size_t>(node.outputs[o])]) outs.push_back(ref(node.outputs[o]));
    }
    body << '\n';
  }
  text << body.str() << "out";
  for (const std::string& o : outs) text << ' ' << o;
  text << '\n';
  Signature sig;
  sig.canonical_form = text.str();
  sig.digest = "v" + std::to_string(kSignatureVersion) + ":" + sha256_hex(sig.canonical_form);
  return sig;
}

Signature node_signature(const Graph& g, int node_id) {
  const int ids[] = {node_id};
  return subgraph_signature(g, ids);
}

Signature graph_signature(const Graph& g) {
  std::vector<int> all(g.nodes().size());
  std::iota(all.begin(), all.end(), 0);
  return subgraph_signature(g, all);
}

}  // namespace fusetune
