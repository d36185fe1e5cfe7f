// Model-local functions (ONNX IR 8+, ModelProto.functions) inlined before import: what torch.onnx
// writes with export_modules_as_functions, and onnxscript for a script that calls another.
//
// Takes a parsed model. Guarantees on return: no node of its graph, or of any subgraph of it,
// calls one of the model's functions (matched by domain, name and overload); each call was
// replaced by a copy of the function's body in which
//   - the formal inputs are the call's inputs (a formal input past the call's, or given as "", is
//     an absent optional input) and the formal outputs the call's outputs;
//   - every other value, and every node, is named under the call: "CALL/NAME", CALL being the
//     call node's name (else its first output's), made unique with "#2", "#3"... where two calls
//     share it; subgraphs of the body's nodes are renamed alike;
//   - an attribute that refers to one of the function's (ref_attr_name) takes the call's value of
//     it, else the function's default (attribute_proto), else is left out, as ONNX defines;
//   - calls inside a body are inlined the same way, after its references are resolved;
// and model.functions is empty. Fails (Error, naming the call node and the function) on a function
// that calls itself, directly or through others; a call with more inputs or outputs than the
// function declares; a function that imports a default-domain opset other than the model's (its
// body would be read at another version); more than 1,000,000 nodes once inlined.
#pragma once

#include "fusetune_proto/onnx_subset.pb.h"

namespace fusetune::importer {

void inline_local_functions(onnx::ModelProto& model);

}  // namespace fusetune::importer
