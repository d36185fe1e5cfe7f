#!/usr/bin/env python3
"""Quantized models made by onnxruntime's quantizer from the small float models of tests/data/models.

    scripts/export_quantized_models.sh [--out tests/data/models]
    scripts/export_quantized_models.sh --full DIR

Each model is written as <out>/<name>/model.onnx with test_data_set_0/ holding the float model's
test inputs and onnxruntime's outputs for the quantized model (CPU, graph optimizations off: the
graph as the quantizer wrote it), the oracle `fusetune run` compares with:

- cnn_small_qdq: cnn_small quantized statically in the QDQ format (QuantizeLinear/DequantizeLinear
  pairs around every Conv, MatMul and Gemm; uint8 activations, int8 weights per output channel),
  calibrated on 8 inputs drawn with numpy's default_rng(1234);
- cnn_small_qop: the same calibration in the QOperator format for its Convs (QLinearConv between
  QuantizeLinear and DequantizeLinear); the other ops stay float (the quantizer writes them as ops
  of its com.microsoft domain otherwise);
- bert_dynamic: the small BERT quantized dynamically (DynamicQuantizeLinear of each MatMul's input,
  MatMulInteger with int8 weights, the scales multiplied back in float), as `quantize_dynamic`
  does for transformer deployments.

With `--full DIR` (a folder of full-size models from `scripts/export_models.py --size full`), it
writes DIR/resnet50_qdq instead: DIR/resnet50 quantized as cnn_small_qdq is (QDQ, uint8
activations, int8 weights per output channel), calibrated on its test input and 7 normal ones
from default_rng(1234), with the test input and onnxruntime's logits, for the bench scripts
(bench/run_full_models.sh, bench/run_full_compiled.sh). A value on a rounding boundary of one of
its 50-odd QuantizeLinears goes either way with the summation order, and the flips add up through
the layers: the reference interpreter and the compiled plan (run on the host) each differ from
onnxruntime by 0.171, 11 quanta of the logits (a scale of 0.0156; logits up to 1.9; the same
five classes on top, the third and fifth swapped). So the folder gets a `run_args` file that the
bench scripts pass to `fusetune run`: an absolute tolerance of 32 quanta of the logits'
DequantizeLinear scale, read from the model.

Runs in the environment scripts/export_quantized_models.sh makes (onnxruntime 1.32.0, onnx
1.23.2, numpy 2.2.6, ml_dtypes 0.5.4 from PyPI); the output is reproducible with those versions.
"""

import argparse
import glob
import os
import shutil
import tempfile

import numpy as np
import onnx
import onnxruntime
from onnx import numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

SOURCE = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models")


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def test_inputs(name):
    paths = sorted(glob.glob(os.path.join(SOURCE, name, "test_data_set_0", "input_*.pb")),
                   key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
    return [read_tensor(p) for p in paths]


class Calibration(CalibrationDataReader):
    """8 inputs of the model's first input's shape, normal values from default_rng(1234)."""

    def __init__(self, name, shape):
        rng = np.random.default_rng(1234)
        self.feeds = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

    def get_next(self):
        return next(self.feeds, None)


def write_case(model_path, inputs, out_dir):
    """Copies the quantized model and writes the inputs with onnxruntime's outputs for them."""
    os.makedirs(out_dir, exist_ok=True)
    shutil.copyfile(model_path, os.path.join(out_dir, "model.onnx"))
    data = os.path.join(out_dir, "test_data_set_0")
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    feeds = {}
    for i, (spec, t) in enumerate(zip(session.get_inputs(), inputs)):
        t.name = spec.name
        feeds[spec.name] = numpy_helper.to_array(t)
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for k, (spec, value) in enumerate(zip(session.get_outputs(), session.run(None, feeds))):
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(value, spec.name).SerializeToString())
    ops = sorted({n.op_type for n in onnx.load(model_path).graph.node})
    print(f"{out_dir}: {', '.join(ops)}")


class FullCalibration(CalibrationDataReader):
    """The test input, then 7 normal inputs of its shape from default_rng(1234)."""

    def __init__(self, name, first):
        rng = np.random.default_rng(1234)
        feeds = [first] + [rng.standard_normal(first.shape).astype(np.float32) for _ in range(7)]
        self.feeds = iter([{name: x} for x in feeds])

    def get_next(self):
        return next(self.feeds, None)


# The bench's tolerance for the quantized ResNet-50, in quanta of its logits (see the docstring).
LOGIT_QUANTA = 32


def output_quantum(model_path):
    """The scale of the DequantizeLinear that produces the model's first output."""
    model = onnx.load(model_path)
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear", f"{out} is made by {node.op_type}, not a DequantizeLinear"
    scale = next(i for i in model.graph.initializer if i.name == node.input[1])
    return float(numpy_helper.to_array(scale))


def quantize_full(full_dir):
    source = os.path.join(full_dir, "resnet50")
    inputs = [read_tensor(p) for p in sorted(glob.glob(os.path.join(source, "test_data_set_0", "input_*.pb")))]
    assert len(inputs) == 1, f"{source}: expected one test input, found {len(inputs)}"
    model = os.path.join(source, "model.onnx")
    name = onnx.load(model, load_external_data=False).graph.input[0].name
    out_dir = os.path.join(full_dir, "resnet50_qdq")
    with tempfile.TemporaryDirectory() as tmp:
        qdq = os.path.join(tmp, "qdq.onnx")
        quantize_static(model, qdq, FullCalibration(name, numpy_helper.to_array(inputs[0])), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        write_case(qdq, inputs, out_dir)
        atol = LOGIT_QUANTA * output_quantum(qdq)
    with open(os.path.join(out_dir, "run_args"), "w") as f:
        f.write(f"--atol {atol:.6g}\n")
    print(f"{out_dir}/run_args: --atol {atol:.6g} ({LOGIT_QUANTA} quanta of the logits)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=SOURCE)
    parser.add_argument("--full", metavar="DIR", help="quantize DIR/resnet50 into DIR/resnet50_qdq instead")
    args = parser.parse_args()
    if args.full:
        quantize_full(args.full)
        return
    with tempfile.TemporaryDirectory() as tmp:
        cnn = os.path.join(SOURCE, "cnn_small", "model.onnx")
        cnn_inputs = test_inputs("cnn_small")
        first = onnx.load(cnn).graph.input[0]
        shape = [d.dim_value for d in first.type.tensor_type.shape.dim]
        qdq = os.path.join(tmp, "qdq.onnx")
        quantize_static(cnn, qdq, Calibration(first.name, shape), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        write_case(qdq, cnn_inputs, os.path.join(args.out, "cnn_small_qdq"))
        qop = os.path.join(tmp, "qop.onnx")
        quantize_static(cnn, qop, Calibration(first.name, shape), quant_format=QuantFormat.QOperator,
                        op_types_to_quantize=["Conv"], activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8)
        write_case(qop, test_inputs("cnn_small"), os.path.join(args.out, "cnn_small_qop"))
        dyn = os.path.join(tmp, "dynamic.onnx")
        quantize_dynamic(os.path.join(SOURCE, "bert", "model.onnx"), dyn, op_types_to_quantize=["MatMul"],
                         weight_type=QuantType.QInt8)
        write_case(dyn, test_inputs("bert"), os.path.join(args.out, "bert_dynamic"))


if __name__ == "__main__":
    main()
