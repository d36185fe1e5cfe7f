// fusetune inspect (its options: tools/command_table.cpp): what the model holds and what an
// unfused execution of it costs.
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/model_stats.h"
#include "importer/importer.h"
#include "importer/lower.h"
#include "tools/cli_args.h"
#include "tools/command_table.h"
#include "tools/commands.h"

namespace fusetune::cli {

namespace {

std::string histogram_text(const std::map<std::string, int>& h) {
  std::string out;
  for (const auto& [op, n] : h) out += (out.empty() ? "" : ", ") + op + " " + std::to_string(n);
  return out;
}

nlohmann::json io_json(const Graph& g, const std::vector<int>& ids) {
  nlohmann::json arr = nlohmann::json::array();
  for (int id : ids) {
    const Value& v = g.value(id);
    arr.push_back({{"name", v.name}, {"dtype", dtype_name(v.dtype)}, {"shape", v.shape}});
    if (auto e = g.extents().find(id); e != g.extents().end()) {  // of data-dependent size: the shape is its bound
      arr.back()["counted_by"] = g.value(e->second.count).name;
      arr.back()["counted_axis"] = e->second.axis;
    }
  }
  return arr;
}

nlohmann::json unsupported_json(const importer::OnnxSummary& s) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& u : s.unsupported) {
    arr.push_back({{"node", u.node_name}, {"op_type", u.op_type}, {"domain", u.domain}, {"opset", u.opset}});
  }
  return arr;
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& argv) {
  const CommandSpec& spec = command_spec("inspect");
  const Args args = parse_args(spec, argv);
  check_usage(args.positional().size() == 1, spec);
  const std::string path = args.positional()[0];
  const bool json = args.has("json");
  const importer::OnnxSummary summary = importer::summarize_onnx(path);
  if (!summary.unsupported.empty()) {
    if (json) {
      std::cout << nlohmann::json{{"model", path},
                                  {"onnx_ops", summary.op_histogram},
                                  {"unsupported", unsupported_json(summary)}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << "model: " << path << " (opset " << summary.opset << ", " << summary.nodes << " nodes)\n";
      std::cout << "ONNX ops: " << histogram_text(summary.op_histogram) << "\n";
      std::cout << "unsupported ops (" << summary.unsupported.size() << "):\n";
      for (const auto& u : summary.unsupported) {
        const std::string why = u.domain == "ai.onnx" ? importer::unsupported_op_reason(u.op_type) : "";
        std::cout << "  node '" << u.node_name << "': " << u.op_type << " (domain " << u.domain << ", opset " << u.opset
                  << ")" << (why.empty() ? "" : ": " + why) << "\n";
      }
    }
    std::cerr << "fusetune: error: " << path << ": " << summary.unsupported.size() << " unsupported node(s), first '"
              << summary.unsupported[0].node_name << "' (" << summary.unsupported[0].op_type << ")\n";
    return 2;
  }
  importer::ImportOptions opt;
  opt.input_shapes = shape_overrides(args);
  const importer::ImportedModel m = importer::import_onnx(path, opt);
  const ModelStats s = compute_stats(m.graph);
  if (json) {
    nlohmann::json j = {
        {"model", path},
        {"producer", m.onnx.producer},
        {"ir_version", m.onnx.ir_version},
        {"opset", m.onnx.opset},
        {"onnx_nodes", m.onnx.nodes},
        {"canonical_nodes", s.nodes},
        {"folded_constants", m.folded},
        {"inputs", io_json(m.graph, m.graph.inputs())},
        {"outputs", io_json(m.graph, m.graph.outputs())},
        {"onnx_ops", m.onnx.op_histogram},
        {"canonical_ops", s.op_histogram},
        {"unsupported", nlohmann::json::array()},
        {"flops", s.flops},
        {"parameter_bytes", s.param_bytes},
        {"dram_bytes_unfused", s.unfused_dram_bytes},
        {"dram_bytes_minimum", s.min_dram_bytes},
        {"unique_op_signatures", s.unique_op_signatures},
    };
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "model: " << path << "\n";
  std::cout << "  producer " << (m.onnx.producer.empty() ? "?" : m.onnx.producer) << ", IR " << m.onnx.ir_version
            << ", opset " << m.onnx.opset << "\n";
  auto io = [&](const char* title, const std::vector<int>& ids) {
    std::cout << title << ":\n";
    for (int id : ids) {
      const Value& v = m.graph.value(id);
      std::cout << "  " << v.name << "  " << dtype_name(v.dtype) << " " << shape_str(v.shape);
      if (auto e = m.graph.extents().find(id); e != m.graph.extents().end()) {
        std::cout << " (a bound: the first '" << m.graph.value(e->second.count).name << "' entries along axis " << e->second.axis
                  << " hold data)";
      }
      std::cout << "\n";
    }
  };
  io("inputs", m.graph.inputs());
  io("outputs", m.graph.outputs());
  std::cout << "ONNX nodes: " << m.onnx.nodes << "  canonical nodes: " << s.nodes << "  folded into constants: "
            << m.folded << "\n";
  std::cout << "ONNX ops: " << histogram_text(m.onnx.op_histogram) << "\n";
  std::cout << "canonical ops: " << histogram_text(s.op_histogram) << "\n";
  std::cout << "unsupported ops: none\n";
  std::cout << "FLOPs: " << human_count(static_cast<double>(s.flops), "FLOP") << "\n";
  std::cout << "parameters: " << human_bytes(static_cast<double>(s.param_bytes)) << "\n";
  std::cout << "DRAM traffic unfused: " << human_bytes(static_cast<double>(s.unfused_dram_bytes))
            << "  minimum: " << human_bytes(static_cast<double>(s.min_dram_bytes));
  if (s.min_dram_bytes > 0) {
    std::cout << "  (unfused/minimum " << static_cast<double>(s.unfused_dram_bytes) / static_cast<double>(s.min_dram_bytes)
              << "x)";
  }
  std::cout << "\nunique single-op signatures: " << s.unique_op_signatures << " of " << s.nodes << " nodes\n";
  return 0;
}

}  // namespace fusetune::cli
