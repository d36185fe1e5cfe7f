#!/usr/bin/env python3
"""Writes ONNX's operator conformance cases (its "node" tests) for the installed onnx package.

    onnx_node_tests.py OUT_DIR

onnx wheels after 1.12 no longer carry the case files; they carry the cases' Python definitions
(onnx/backend/test/case/node), whose expected outputs numpy and onnx's reference implementation
compute. This writes each case in the layout the 1.12 wheel shipped and build/onnx_conformance
reads: OUT_DIR/node/CASE/model.onnx and OUT_DIR/node/CASE/test_data_set_N/{input,output}_K.pb.
Sequence, optional and map values are written as onnx's numpy_helper writes them, so the
importer meets them as a user's file would present them. Prints the number of cases written.
"""
import os
import sys
import warnings

import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node


def value_proto(value, value_info):
    """The protobuf for one input or output value, by the kind of value the model declares."""
    kind = value_info.type.WhichOneof("value")
    if kind == "sequence_type":
        return numpy_helper.from_list(value, value_info.name)
    if kind == "optional_type":
        return numpy_helper.from_optional(value, value_info.name)
    if kind == "map_type":
        return numpy_helper.from_dict(value, value_info.name)
    if isinstance(value, onnx.TensorProto):
        return value
    return numpy_helper.from_array(value, value_info.name)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: onnx_node_tests.py OUT_DIR")
    out = os.path.join(sys.argv[1], "node")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cases' own numpy divisions by zero
        cases = node.collect_testcases(None)
    for case in cases:
        case_dir = os.path.join(out, case.name)
        os.makedirs(case_dir, exist_ok=True)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            data_dir = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(data_dir, exist_ok=True)
            for prefix, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
                for j, value in enumerate(values):
                    with open(os.path.join(data_dir, f"{prefix}_{j}.pb"), "wb") as f:
                        f.write(value_proto(value, infos[j]).SerializeToString())
    print(f"onnx {onnx.__version__}: {len(cases)} node test cases written to {out}")


if __name__ == "__main__":
    main()
