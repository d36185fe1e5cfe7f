#!/usr/bin/env python3
"""Writes ONNX's operator conformance cases (its "node" tests) for the installed onnx package.

    onnx_node_tests.py OUT_DIR

onnx wheels after 1.12 no longer carry the case files; they carry the cases' Python definitions
(onnx/backend/test/case/node), whose expected outputs numpy and onnx's reference implementation
compute. This writes each case in the layout the 1.12 wheel shipped and build/onnx_conformance
reads: OUT_DIR/node/CASE/model.onnx and OUT_DIR/node/CASE/test_data_set_N/{input,output}_K.pb.
Sequence, optional and map values are written as onnx's numpy_helper writes them, so the
importer meets them as a user's file would present them. Prints the number of cases written.

It also writes OUT_DIR/narrow: sweeps of Cast to and from ONNX 1.23's narrow types (float8,
E8M0 with each round_mode, float4, 4- and 2-bit integers), saturating and not, over every float16
value, every midpoint between neighbouring float8/float4 values and seeded random floats, with
outputs computed by onnx's own ReferenceEvaluator: the node tests hold a dozen values per type.
"""
import os
import sys
import warnings

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.backend.test.case import node
from onnx.reference import ReferenceEvaluator

NARROW_SEED = 20261124  # the random part of the sweeps' inputs; fixed so that a failure replays
NARROW_FLOATS = {  # ONNX type name: ml_dtypes type
    "FLOAT8E4M3FN": ml_dtypes.float8_e4m3fn,
    "FLOAT8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
    "FLOAT8E5M2": ml_dtypes.float8_e5m2,
    "FLOAT8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
    "FLOAT4E2M1": ml_dtypes.float4_e2m1fn,
    "FLOAT8E8M0": ml_dtypes.float8_e8m0fnu,
}
NARROW_INTS = {"INT4": ml_dtypes.int4, "UINT4": ml_dtypes.uint4, "INT2": ml_dtypes.int2, "UINT2": ml_dtypes.uint2}
NARROW_BITS = {"FLOAT4E2M1": 4, "INT4": 4, "UINT4": 4, "INT2": 2, "UINT2": 2}  # the rest: 8


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


def sweep_inputs(rng):
    """float32 values: every float16, the midpoints of every narrow float's ladder and their
    neighbours, specials, and random bit patterns."""
    parts = [np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)]
    for name, t in NARROW_FLOATS.items():
        codes = np.arange(1 << NARROW_BITS.get(name, 8), dtype=np.uint8)
        values = np.sort(np.unique(codes.view(t).astype(np.float32)))
        values = values[np.isfinite(values)]
        mids = ((values[1:].astype(np.float64) + values[:-1]) / 2).astype(np.float32)
        parts += [mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))]
    parts.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, 2.0**-127], dtype=np.float32))
    parts.append(rng.integers(0, 2**32, size=8192, dtype=np.uint64).astype(np.uint32).view(np.float32))
    return np.concatenate(parts)


def write_case(out, name, model, inputs, outputs):
    case_dir = os.path.join(out, name)
    data_dir = os.path.join(case_dir, "test_data_set_0")
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for prefix, values, infos in (("input", inputs, model.graph.input), ("output", outputs, model.graph.output)):
        for j, value in enumerate(values):
            with open(os.path.join(data_dir, f"{prefix}_{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(value, infos[j].name).SerializeToString())


def cast_model(src, dst, count, **attrs):
    node_ = helper.make_node("Cast", ["x"], ["y"], to=dst, **attrs)
    graph = helper.make_graph([node_], "sweep", [helper.make_tensor_value_info("x", src, [count])],
                              [helper.make_tensor_value_info("y", dst, [count])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])


def write_narrow_sweeps(out):
    warnings.simplefilter("ignore")  # numpy's "invalid value in cast" for the NaNs swept on purpose
    rng = np.random.default_rng(NARROW_SEED)
    xs = sweep_inputs(rng)
    small = xs[np.abs(np.nan_to_num(xs, nan=0.0)) < 2.0**31]  # float to int: ONNX leaves the rest undefined
    written = 0
    for name, t in list(NARROW_FLOATS.items()) + list(NARROW_INTS.items()):
        code = getattr(onnx.TensorProto, name)
        variants = [("", {})]
        if name.startswith("FLOAT8"):
            variants.append(("_no_saturate", {"saturate": 0}))
        if name == "FLOAT8E8M0":
            variants = [(f"_{mode}{suffix}", dict(a, round_mode=mode)) for mode in ("up", "down", "nearest")
                        for suffix, a in variants]
        inputs = small if name in NARROW_INTS else xs
        for suffix, attrs in variants:
            model = cast_model(onnx.TensorProto.FLOAT, code, inputs.size, **attrs)
            (y,) = ReferenceEvaluator(model).run(None, {"x": inputs})
            write_case(out, f"test_sweep_cast_FLOAT_to_{name}{suffix}", model, [inputs], [y])
            written += 1
        bits = NARROW_BITS.get(name, 8)
        if name in NARROW_INTS:  # every value
            low = -(1 << (bits - 1)) if name.startswith("INT") else 0
            x = np.arange(low, low + (1 << bits), dtype=np.int8).astype(t)
        else:  # every code
            x = np.arange(1 << bits, dtype=np.uint8).view(t)
        model = cast_model(code, onnx.TensorProto.FLOAT, x.size)
        (y,) = ReferenceEvaluator(model).run(None, {"x": x})
        write_case(out, f"test_sweep_cast_{name}_to_FLOAT", model, [x], [y])
        written += 1
    return written, xs.size


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
    narrow = os.path.join(sys.argv[1], "narrow")
    count, values = write_narrow_sweeps(narrow)
    print(f"onnx {onnx.__version__}: {count} narrow-type Cast sweeps of up to {values} values (seed {NARROW_SEED}) "
          f"written to {narrow}")


if __name__ == "__main__":
    main()
