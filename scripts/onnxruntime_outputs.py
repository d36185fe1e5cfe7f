#!/usr/bin/env python3
"""Writes onnxruntime's outputs for a model's test inputs: the oracle for models from other exporters.

    python scripts/onnxruntime_outputs.py [--agree TOL] MODEL_DIR [OUT_DIR]

Reads MODEL_DIR/model.onnx and MODEL_DIR/test_data_set_0/input_<i>.pb (ONNX's backend test data
layout), runs the model with onnxruntime on the CPU (all graph optimizations off, so that what is
computed is the graph as exported) and writes OUT_DIR (default MODEL_DIR/test_data_set_ort) with
the same inputs and onnxruntime's outputs as output_<k>.pb, for `fusetune run PLAN --inputs
OUT_DIR`; OUT_DIR may be MODEL_DIR/test_data_set_0 itself (the outputs are added beside the inputs).
--agree TOL first reads the outputs OUT_DIR holds (the exporting framework's own) and fails unless
onnxruntime's agree with them within TOL x max(1, the largest magnitude of the framework's output)
and have their shapes, so that an exporter's fault is not taken for the oracle. Needs onnx, onnxruntime and numpy (scripts/export_hf_models.sh's environment has them).
"""

import glob
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime
from onnx import numpy_helper


def main():
    args = sys.argv[1:]
    agree = None
    if args[:1] == ["--agree"] and len(args) >= 2:
        agree = float(args[1])
        args = args[2:]
    if len(args) not in (1, 2):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    model_dir = args[0]
    out_dir = args[1] if len(args) == 2 else os.path.join(model_dir, "test_data_set_ort")
    model_path = os.path.join(model_dir, "model.onnx")
    inputs_dir = os.path.join(model_dir, "test_data_set_0")
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    paths = sorted(glob.glob(os.path.join(inputs_dir, "input_*.pb")), key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
    feeds = {}
    for spec, path in zip(session.get_inputs(), paths):
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        feeds[spec.name] = numpy_helper.to_array(t)
    if len(feeds) != len(session.get_inputs()):
        sys.exit(f"{inputs_dir}: {len(paths)} input files for {len(session.get_inputs())} model inputs")
    outputs = session.run(None, feeds)
    if agree is not None:
        for k, value in enumerate(outputs):
            t = onnx.TensorProto()
            with open(os.path.join(out_dir, f"output_{k}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            source = numpy_helper.to_array(t)
            diff = float(np.max(np.abs(source.astype(np.float64) - value.astype(np.float64)))) if value.size else 0.0
            scale = max(1.0, float(np.max(np.abs(source.astype(np.float64))))) if source.size else 1.0
            print(f"{model_dir}: output {k}: the exporter's framework and onnxruntime differ by at most {diff:.2e} "
                  f"(outputs up to {scale:.3g} in magnitude)")
            if source.shape != value.shape or diff > agree * scale:
                sys.exit(f"{model_dir}: output {k}: onnxruntime disagrees with the exporting framework "
                         f"(shapes {source.shape} and {value.shape}, difference {diff:.2e} > {agree} x {scale:.3g})")
    os.makedirs(out_dir, exist_ok=True)
    if os.path.abspath(out_dir) != os.path.abspath(inputs_dir):
        for path in paths:
            shutil.copy(path, out_dir)
    for k, (spec, value) in enumerate(zip(session.get_outputs(), outputs)):
        with open(os.path.join(out_dir, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.ascontiguousarray(value), spec.name).SerializeToString())
    print(f"{model_dir}: onnxruntime {onnxruntime.__version__}, {len(outputs)} outputs in {out_dir}")


if __name__ == "__main__":
    main()
