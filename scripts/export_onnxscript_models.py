#!/usr/bin/env python3
"""Models written in onnxscript, Microsoft's Python authoring of ONNX, for tests/data/models.

    scripts/export_onnxscript_models.sh [--out tests/data/models]

onnxscript writes a script function that another calls as a model-local function of the model
(ModelProto.functions), with its attributes and their defaults (IR 10), at opset 18. Each model is
written as <out>/<name>/model.onnx with test_data_set_0/ holding inputs drawn with numpy's
default_rng(2026); scripts/export_onnxscript_models.sh then adds onnxruntime's outputs
(scripts/onnxruntime_outputs.py), the oracle `fusetune run` compares with:

- onnxscript_block: a transformer-style MLP block, x [2, 8, 16] -> y [2, 8, 16]:
  y = x + Dense(Gelu(Dense(LayerNorm(x)))), where LayerNorm (epsilon an attribute with a default),
  Gelu (tanh form) and Dense (MatMul + bias) are script functions of the domain "this" and the
  block's weights are initializers.

Runs in the environment scripts/export_onnxscript_models.sh makes (pinned versions from PyPI); the
output is reproducible with those versions.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import numpy_helper
from onnxscript import FLOAT, script
from onnxscript import opset18 as op
from onnxscript.values import Opset

this = Opset("this", 1)


@script(this, default_opset=op)
def LayerNorm(x, scale, bias, epsilon: float = 1e-5):
    mean = op.ReduceMean(x, [-1], keepdims=1)
    centered = op.Sub(x, mean)
    var = op.ReduceMean(op.Mul(centered, centered), [-1], keepdims=1)
    eps = op.CastLike(op.Constant(value_float=epsilon), x)
    return op.Add(op.Mul(op.Div(centered, op.Sqrt(op.Add(var, eps))), scale), bias)


@script(this, default_opset=op)
def Gelu(x):
    inner = op.Mul(op.Add(x, op.Mul(op.Mul(op.Mul(x, x), x), 0.044715)), 0.7978845608)
    return op.Mul(op.Mul(x, 0.5), op.Add(op.Tanh(inner), 1.0))


@script(this, default_opset=op)
def Dense(x, w, b):
    return op.Add(op.MatMul(x, w), b)


@script(default_opset=op)
def block(x: FLOAT[2, 8, 16], ln_scale: FLOAT[16], ln_bias: FLOAT[16], w1: FLOAT[16, 32], b1: FLOAT[32],
          w2: FLOAT[32, 16], b2: FLOAT[16]) -> FLOAT[2, 8, 16]:
    h = LayerNorm(x, ln_scale, ln_bias, epsilon=1e-6)
    y = op.Add(x, Dense(Gelu(Dense(h, w1, b1)), w2, b2))
    return y


def export_block(out_dir):
    rng = np.random.default_rng(2026)
    weights = {
        "ln_scale": (1.0 + 0.1 * rng.standard_normal(16)).astype(np.float32),
        "ln_bias": (0.1 * rng.standard_normal(16)).astype(np.float32),
        "w1": (0.25 * rng.standard_normal((16, 32))).astype(np.float32),
        "b1": (0.1 * rng.standard_normal(32)).astype(np.float32),
        "w2": (0.18 * rng.standard_normal((32, 16))).astype(np.float32),
        "b2": (0.1 * rng.standard_normal(16)).astype(np.float32),
    }
    x = rng.standard_normal((2, 8, 16)).astype(np.float32)
    model = block.to_model_proto()
    # The weights as initializers: the graph's one input is x.
    kept = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in weights.items())
    assert len(model.functions) == 3, [f.name for f in model.functions]
    onnx.checker.check_model(model)
    model_dir = os.path.join(out_dir, "onnxscript_block")
    data_dir = os.path.join(model_dir, "test_data_set_0")
    os.makedirs(data_dir, exist_ok=True)
    onnx.save(model, os.path.join(model_dir, "model.onnx"))
    with open(os.path.join(data_dir, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    print(f"onnxscript_block: {len(model.graph.node)} nodes, functions "
          f"{', '.join(f.domain + ':' + f.name for f in model.functions)}, IR {model.ir_version}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/models")
    args = ap.parse_args()
    export_block(args.out)


if __name__ == "__main__":
    main()
