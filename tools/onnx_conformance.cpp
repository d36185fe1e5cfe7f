// onnx_conformance DIR [--exclusions FILE] [--filter TEXT] [--verbose] [--refusals]
//                  [--compiled DEVICE [--cases FILE [--draw N --seed S]]] [--attribute-defaults FILE]: runs ONNX's own operator conformance cases (DIR
// holds test_*/model.onnx with test_data_set_N/ folders, as shipped in the onnx Python package
// under onnx/backend/test/data/node) through the importer and the reference interpreter and
// compares with the numpy-computed outputs, with ONNX's own criterion (rtol 1e-3, atol 1e-7;
// wider for float16; float8 and float4 codes exactly).
//
// A case runs when every op in its model is one fusetune supports; it is left out when its name
// matches an entry of the exclusion file, each of which gives the reason. Prints one line per
// failure, then counts, and closes with "N passed, M failed". Exit code 1 if any case failed.
// --refusals also prints, before the counts, the ops that keep cases from running, in name order
// with their case counts ("refused: Op (N), ..."): docs/conformance.md's list, which
// scripts/conformance_page.sh rewrites from it.
// --compiled DEVICE runs each case twice: on the reference interpreter, and compiled for DEVICE (a
// built-in name: the pipeline of `fusetune compile`, its host verification of every kernel under
// the four checks included) then run on the host executor, each compared with the expected
// outputs by the same criterion; with --cases, only the cases named in that file (one a line, '#'
// comments; a name no case has is an error); with --draw N --seed S, N of those drawn by S (a
// shuffle by std::mt19937 seeded with S, the first N in name order; the draw's line names S, and
// the same S draws the same cases): CI's tier compiles a third of the list each run, the full
// tier all of it.
// --attribute-defaults FILE (scripts/onnx_attribute_defaults.py's JSON of onnx's schemas) first
// adds to every node of the default domain each attribute with a default value that the schema
// version the case's opset selects defines and the node does not set, at that default: no such
// attribute may be refused, and the outputs must still match (issue 31, Required 1).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <memory>
#include <random>
#include <set>
#include <sstream>

#include "backend/backend.h"
#include "compiler/pipeline.h"
#include "core/error.h"
#include "fusetune_proto/onnx_subset.pb.h"
#include "importer/importer.h"
#include "importer/lower.h"
#include "importer/onnx_io.h"
#include "importer/test_data.h"
#include "reference/compare.h"
#include "reference/interpreter.h"
#include "runtime/plan_runner.h"

namespace fs = std::filesystem;
using namespace fusetune;

namespace {

struct Exclusion {
  std::string pattern;  // a case name, or a prefix ending in '*'
  std::string reason;
  int hits = 0;
};

std::vector<Exclusion> read_exclusions(const fs::path& path) {
  std::vector<Exclusion> out;
  std::ifstream in(path);
  check(in.good(), path.string(), ": cannot read the exclusion list");
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    Exclusion e;
    ss >> e.pattern;
    std::getline(ss, e.reason);
    e.reason.erase(0, e.reason.find_first_not_of(" \t"));
    check(!e.pattern.empty() && !e.reason.empty(), path.string(), ":", lineno, ": an exclusion needs a case and a reason");
    out.push_back(e);
  }
  return out;
}

Exclusion* find_exclusion(std::vector<Exclusion>& list, const std::string& name) {
  for (Exclusion& e : list) {
    const bool prefix = !e.pattern.empty() && e.pattern.back() == '*';
    if (prefix ? name.rfind(e.pattern.substr(0, e.pattern.size() - 1), 0) == 0 : name == e.pattern) return &e;
  }
  return nullptr;
}

// The case names of a --cases file: one a line, blank lines and '#' comments skipped.
std::set<std::string> read_case_list(const fs::path& path) {
  std::ifstream in(path);
  check(in.good(), path.string(), ": cannot read the case list");
  std::set<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    line.erase(std::min(line.size(), line.find('#')));
    std::istringstream ss(line);
    if (std::string name; ss >> name) out.insert(name);
  }
  check(!out.empty(), path.string(), ": no case listed");
  return out;
}

// What differs between a data set's expected outputs and `outs`; empty when they agree.
std::string compare_outputs(const fs::path& set, const importer::TestData& data, const std::vector<Tensor>& outs) {
  check(outs.size() == data.outputs.size(), set.filename().string(), ": ", outs.size(), " outputs, expected ", data.outputs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& want = data.outputs[k].tensor;
    reference::Tolerance tol{1e-3, 1e-7, 0};
    const reference::Tolerance d = reference::default_tolerance(want.dtype());
    if (want.dtype() == DType::kF16 || want.dtype() == DType::kBF16) tol = d;
    if (!is_float(want.dtype())) tol = {0, 0, 0};
    if (outs[k].dtype() != want.dtype()) {
      return set.filename().string() + " output " + std::to_string(k) + ": dtype " + std::string(dtype_name(outs[k].dtype())) +
             ", expected " + std::string(dtype_name(want.dtype()));
    }
    if (is_narrow_float(want.dtype())) {  // codes, compared exactly (-0, NaN's sign, FNUZ's 0x80)
      for (int64_t i = 0; i < want.numel(); ++i) {
        const auto a = std::to_integer<int>(outs[k].data()[i]), e = std::to_integer<int>(want.data()[i]);
        if (a != e) {
          return set.filename().string() + " output " + std::to_string(k) + " element " + std::to_string(i) + ": code " +
                 std::to_string(a) + ", expected " + std::to_string(e);
        }
      }
      continue;
    }
    const reference::Comparison c = reference::compare(outs[k], want, tol);
    if (!c.ok) {
      return set.filename().string() + " output " + std::to_string(k) + ": " +
             (c.shape_ok ? c.describe() : "shape " + shape_str(outs[k].shape()) + ", expected " + shape_str(want.shape()));
    }
  }
  return "";
}

std::vector<fs::path> data_sets(const fs::path& dir) {
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  }
  std::sort(sets.begin(), sets.end());
  check(!sets.empty(), "no test_data_set_N folder");
  return sets;
}

// The attributes with defaults of onnx's schemas: by op, (since version, {name: value}) ascending.
using SchemaDefaults = std::map<std::string, std::vector<std::pair<int64_t, nlohmann::json>>>;

SchemaDefaults read_schema_defaults(const fs::path& path) {
  std::ifstream in(path);
  check(in.good(), path.string(), ": cannot read the attribute defaults");
  const nlohmann::json j = nlohmann::json::parse(in);
  SchemaDefaults out;
  for (const auto& [op, versions] : j.at("ops").items()) {
    for (const auto& v : versions) out[op].emplace_back(v.at("since").get<int64_t>(), v.at("defaults"));
  }
  return out;
}

using importer::default_opset;
using importer::is_default_domain;
using importer::read_model;

// (op, schema version) pairs.
using Versions = std::set<std::pair<std::string, int64_t>>;

// Adds to the model's default-domain nodes (of op `only`, when given) every schema default
// attribute they do not set, at the schema version the model's default opset selects; returns
// how many it added, and puts each (op, version) it added one of in *versions.
int add_default_attributes(onnx::ModelProto& proto, const SchemaDefaults& schemas, Versions* versions, const std::string& only = "") {
  const int64_t opset = default_opset(proto);
  int added = 0;
  for (auto& node : *proto.mutable_graph()->mutable_node()) {
    if (!is_default_domain(node.domain()) || (!only.empty() && node.op_type() != only)) continue;
    const auto op = schemas.find(node.op_type());
    if (op == schemas.end()) continue;
    const nlohmann::json* defaults = nullptr;
    int64_t version = 0;
    for (const auto& [since, d] : op->second) {
      if (since <= opset) {
        defaults = &d;
        version = since;
      }
    }
    if (defaults == nullptr) continue;
    for (const auto& [name, value] : defaults->items()) {
      if (std::any_of(node.attribute().begin(), node.attribute().end(), [&](const auto& a) { return a.name() == name; })) continue;
      onnx::AttributeProto* a = node.add_attribute();
      a->set_name(name);
      if (value.contains("i")) {
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(value["i"].get<int64_t>());
      } else if (value.contains("f")) {
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(value["f"].get<float>());
      } else if (value.contains("s")) {
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(value["s"].get<std::string>());
      } else if (value.contains("ints")) {
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t x : value["ints"]) a->add_ints(x);
      } else if (value.contains("floats")) {
        a->set_type(onnx::AttributeProto::FLOATS);
        for (float x : value["floats"]) a->add_floats(x);
      } else {
        a->set_type(onnx::AttributeProto::STRINGS);
        for (const nlohmann::json& x : value.at("strings")) a->add_strings(x.get<std::string>());
      }
      ++added;
      versions->insert({op->first, version});
    }
  }
  return added;
}

// The attribute an importer error refuses as unsupported ("attribute 'X' is not supported"), or "".
std::string refused_attribute(const std::string& error) {
  const std::string lead = "attribute '";
  const size_t at = error.find(lead);
  if (at == std::string::npos || error.find("' is not supported", at) == std::string::npos) return "";
  return error.substr(at + lead.size(), error.find('\'', at + lead.size()) - at - lead.size());
}

// Older schema versions of the case's ops (those with defaults, never probed successfully): the
// model restamped at that version's opset with that op's defaults added, imported. A refusal of
// an added attribute is a failure (returned as text); other errors (the rest of the graph may not
// be valid at that opset) leave the version to another case. `probed` holds (op, version) pairs
// that imported, current versions included.
std::string probe_older_versions(const fs::path& dir, const SchemaDefaults& schemas, Versions& probed) {
  const onnx::ModelProto original = read_model(dir / "model.onnx");
  const importer::GraphValues values = importer::graph_values(dir / "model.onnx");
  const std::vector<std::string> names = values.input_names();
  const importer::TestData data = importer::load_test_data(data_sets(dir).front(), &values);
  const int64_t opset = default_opset(original);
  for (const auto& node : original.graph().node()) {
    if (!is_default_domain(node.domain())) continue;
    const auto op = schemas.find(node.op_type());
    if (op == schemas.end()) continue;
    for (const auto& [since, defaults] : op->second) {
      if (since >= opset || defaults.empty() || probed.count({op->first, since})) continue;
      onnx::ModelProto proto = original;
      for (auto& o : *proto.mutable_opset_import()) {
        if (is_default_domain(o.domain())) o.set_version(since);
      }
      Versions these;
      if (add_default_attributes(proto, schemas, &these, op->first) == 0) continue;
      try {
        importer::ImportOptions opt;
        importer::bind_inputs(names, data, &opt);
        importer::import_onnx_bytes(proto.SerializeAsString(), dir, opt);
        probed.insert({op->first, since});
      } catch (const Error& e) {
        const std::string attr = refused_attribute(e.what());
        if (!attr.empty() && defaults.contains(attr)) {
          return op->first + " at opset " + std::to_string(since) + ": " + e.what();
        }
      }
    }
  }
  return "";
}

// Runs one case on the reference interpreter (its nodes given every schema default attribute
// they lack, with `schemas`); returns an empty string on success, else what went wrong.
std::string run_case(const fs::path& dir, const SchemaDefaults* schemas, int* added, Versions* covered) {
  const fs::path model = dir / "model.onnx";
  const importer::GraphValues values = importer::graph_values(model);
  const std::vector<std::string> names = values.input_names();
  std::string bytes;
  if (schemas != nullptr) {
    onnx::ModelProto proto = read_model(model);
    *added += add_default_attributes(proto, *schemas, covered);
    bytes = proto.SerializeAsString();
  }
  for (const fs::path& set : data_sets(dir)) {
    const importer::TestData data = importer::load_test_data(set, &values);
    importer::ImportOptions opt;
    const std::vector<Tensor> inputs = importer::bind_inputs(names, data, &opt);
    const importer::ImportedModel m = schemas != nullptr ? importer::import_onnx_bytes(bytes, dir, opt) : importer::import_onnx(model, opt);
    const std::vector<Tensor> outs = trim_to_counts(reference::run_graph(m.graph, inputs), m.graph.output_extents());
    if (std::string err = compare_outputs(set, data, outs); !err.empty()) return err;
  }
  return "";
}

// Runs one case compiled for `device` (the pipeline of `fusetune compile`, its host verification
// included) on the host executor; returns an empty string on success, else what went wrong.
std::string run_compiled_case(const fs::path& dir, const planner::Device& device, backend::Backend& host) {
  const fs::path model = dir / "model.onnx";
  const importer::GraphValues values = importer::graph_values(model);
  const std::vector<std::string> names = values.input_names();
  for (const fs::path& set : data_sets(dir)) {
    const importer::TestData data = importer::load_test_data(set, &values);
    compiler::PipelineOptions options;
    importer::bind_inputs(names, data, &options.import);
    const compiler::PipelineResult r = compiler::compile_model(model, device, options);
    runtime::PlanRunner runner(r.bundle, host);
    std::vector<std::string> plan_inputs;
    for (const auto& spec : runner.inputs()) plan_inputs.push_back(spec.name);
    const std::vector<Tensor> outs =
        trim_to_counts(runner.run(importer::bind_inputs(plan_inputs, data, nullptr)), runtime::output_extents(runner.outputs()));
    if (std::string err = compare_outputs(set, data, outs); !err.empty()) return "compiled: " + err;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  fs::path root;
  fs::path exclusions_path;
  std::string filter, compiled_device;
  fs::path cases_path, defaults_path;
  bool verbose = false, refusals = false;
  long draw = 0;
  unsigned long draw_seed = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--exclusions" && i + 1 < args.size()) {
      exclusions_path = args[++i];
    } else if (args[i] == "--filter" && i + 1 < args.size()) {
      filter = args[++i];
    } else if (args[i] == "--compiled" && i + 1 < args.size()) {
      compiled_device = args[++i];
    } else if (args[i] == "--attribute-defaults" && i + 1 < args.size()) {
      defaults_path = args[++i];
    } else if (args[i] == "--cases" && i + 1 < args.size()) {
      cases_path = args[++i];
    } else if (args[i] == "--draw" && i + 1 < args.size()) {
      draw = std::strtol(args[++i].c_str(), nullptr, 10);
    } else if (args[i] == "--seed" && i + 1 < args.size()) {
      draw_seed = std::strtoul(args[++i].c_str(), nullptr, 10);
    } else if (args[i] == "--verbose") {
      verbose = true;
    } else if (args[i] == "--refusals") {
      refusals = true;
    } else if (root.empty() && args[i].rfind("--", 0) != 0) {
      root = args[i];
    } else {
      std::fprintf(stderr,
                   "usage: onnx_conformance DIR [--exclusions FILE] [--filter TEXT] [--verbose] [--refusals] "
                   "[--compiled DEVICE [--cases FILE [--draw N --seed S]]] [--attribute-defaults FILE]\n");
      return 2;
    }
  }
  try {
    check(!root.empty() && fs::is_directory(root), "usage: onnx_conformance DIR (a folder of ONNX node test cases)");
    std::vector<Exclusion> exclusions;
    if (!exclusions_path.empty()) exclusions = read_exclusions(exclusions_path);
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
    }
    std::sort(cases.begin(), cases.end());
    check(!compiled_device.empty() || cases_path.empty(), "--cases FILE goes with --compiled DEVICE");
    std::unique_ptr<backend::Backend> host;
    planner::Device device;
    if (!compiled_device.empty()) {
      device = planner::find_device(compiled_device);
      host = backend::make_host_backend();
    }
    if (!cases_path.empty()) {
      const std::set<std::string> listed = read_case_list(cases_path);
      for (const std::string& name : listed) {
        check(fs::exists(root / name / "model.onnx"), cases_path.string(), ": no case '", name, "' in ", root.string());
      }
      std::erase_if(cases, [&](const fs::path& c) { return !listed.count(c.filename().string()); });
    }
    check(draw >= 0 && (draw == 0 || !cases_path.empty()), "--draw N (N >= 1) goes with --cases FILE");
    if (draw > 0 && static_cast<size_t>(draw) < cases.size()) {
      const size_t listed = cases.size();
      std::mt19937 rng(static_cast<std::mt19937::result_type>(draw_seed));
      std::shuffle(cases.begin(), cases.end(), rng);
      cases.resize(static_cast<size_t>(draw));
      std::sort(cases.begin(), cases.end());
      std::printf("drew %ld of the %zu listed cases with seed %lu (--seed %lu draws them again)\n", draw, listed, draw_seed, draw_seed);
    }
    SchemaDefaults schemas;
    if (!defaults_path.empty()) schemas = read_schema_defaults(defaults_path);
    int passed = 0, failed = 0, excluded = 0, unsupported = 0, added = 0;
    Versions probed;  // (op, schema version) pairs whose defaults were given to an imported case
    std::map<std::string, int> unsupported_ops;
    for (const fs::path& dir : cases) {
      const std::string name = dir.filename().string();
      if (!filter.empty() && name.find(filter) == std::string::npos) continue;
      std::string why_not;
      try {
        const importer::OnnxSummary s = importer::summarize_onnx(dir / "model.onnx");
        if (!s.unsupported.empty()) why_not = s.unsupported.front().op_type;
      } catch (const Error& e) {
        why_not = "(unreadable)";
      }
      if (!why_not.empty()) {
        ++unsupported;
        ++unsupported_ops[why_not];
        if (verbose) std::printf("skip %s: op %s is not supported\n", name.c_str(), why_not.c_str());
        continue;
      }
      if (Exclusion* ex = find_exclusion(exclusions, name)) {
        ++excluded;
        ++ex->hits;
        if (verbose) std::printf("excluded %s: %s\n", name.c_str(), ex->reason.c_str());
        continue;
      }
      std::string err;
      try {
        err = run_case(dir, defaults_path.empty() ? nullptr : &schemas, &added, &probed);
        if (err.empty() && !defaults_path.empty()) err = probe_older_versions(dir, schemas, probed);
        if (err.empty() && host) err = run_compiled_case(dir, device, *host);
      } catch (const Error& e) {
        err = e.what();
      }
      if (err.empty()) {
        ++passed;
        if (verbose) std::printf("pass %s\n", name.c_str());
      } else {
        ++failed;
        std::printf("FAIL %s: %s\n", name.c_str(), err.c_str());
      }
    }
    for (const Exclusion& e : exclusions) {
      if (e.hits == 0 && filter.empty() && cases_path.empty()) std::printf("note: exclusion '%s' matched no supported case\n", e.pattern.c_str());
    }
    if (refusals) {
      std::string list;
      for (const auto& [op, n] : unsupported_ops) list += (list.empty() ? "" : ", ") + op + " (" + std::to_string(n) + ")";
      std::printf("refused: %s\n", list.c_str());
    }
    std::printf("cases: %zu; with unsupported ops: %d (%zu distinct ops); excluded with a reason: %d\n", cases.size(),
                unsupported, unsupported_ops.size(), excluded);
    if (!defaults_path.empty()) {
      Versions all;  // of the ops fusetune supports, the schema versions that define defaults
      for (const auto& [op, versions] : schemas) {
        for (const auto& [since, d] : versions) {
          if (importer::is_supported_onnx_op(op) && !d.empty()) all.insert({op, since});
        }
      }
      std::string missed;
      for (const auto& v : all) {
        if (!probed.count(v)) missed += (missed.empty() ? "" : ", ") + v.first + " " + std::to_string(v.second);
      }
      std::printf("schema default attributes added to the cases' nodes: %d; schema versions with defaults of supported ops "
                  "imported with them: %zu of %zu\n", added, probed.size(), all.size());
      if (verbose && !missed.empty()) std::printf("versions no case imported at: %s\n", missed.c_str());
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "onnx_conformance: error: %s\n", e.what());
    return 2;
  }
}
