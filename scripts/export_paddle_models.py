#!/usr/bin/env python3
"""Models exported by paddle2onnx from PaddlePaddle, for tests/data/models.

    scripts/export_framework_models.sh paddle [--size small|full] [--out DIR]

PaddlePaddle saves a layer as a static program (paddle.jit.save, its PIR JSON form in 3.x) that
paddle2onnx converts (paddle.onnx.export, opset 17). Each model is written as
<out>/<name>/model.onnx with test_data_set_0/ holding inputs drawn with numpy's default_rng(2026)
and PaddlePaddle's own outputs; `scripts/export_framework_models.sh paddle` then replaces those by
onnxruntime's (the oracle `fusetune run` compares with) where the two agree
(scripts/onnxruntime_outputs.py --agree 1e-4):

- paddle_cnn: x [2, 3, 24, 24] -> logits [2, 10]: Conv2D, BatchNorm2D (inference, non-trivial
  statistics), ReLU, MaxPool2D, Conv2D with stride 2, Hardswish, AdaptiveAvgPool2D(1), Flatten,
  Linear.
- paddle_encoder: x [2, 12, 32] -> y [2, 12, 32]: paddle.nn.TransformerEncoderLayer (4 heads,
  feed-forward 64, pre-norm, GELU, no dropout at inference).

--size full writes full-size versions instead (for bench/run_full_models.sh; not in tests/data):
- paddle_resnet50: paddle.vision.models.resnet50 (random weights), x [1, 3, 224, 224] -> [1, 1000].
- paddle_encoder_base: the encoder layer at BERT-base's width (768, 12 heads, feed-forward 3072),
  x [1, 128, 768].

Runs in the environment `scripts/export_framework_models.sh paddle` makes (pinned versions from
PyPI); the output is byte-reproducible with those versions.
"""

import argparse
import os
import shutil
import tempfile

import numpy as np
import onnx
import paddle
from onnx import numpy_helper

OPSET = 17


class Cnn(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv1 = paddle.nn.Conv2D(3, 8, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(8)
        self.pool = paddle.nn.MaxPool2D(2)
        self.conv2 = paddle.nn.Conv2D(8, 16, 3, stride=2)
        self.gap = paddle.nn.AdaptiveAvgPool2D(1)
        self.fc = paddle.nn.Linear(16, 10)

    def forward(self, x):
        h = self.pool(paddle.nn.functional.relu(self.bn(self.conv1(x))))
        h = paddle.nn.functional.hardswish(self.conv2(h))
        return self.fc(paddle.flatten(self.gap(h), 1))


def paddle_cnn():
    m = Cnn()
    rng = np.random.default_rng(7)
    m.bn.weight.set_value((1 + 0.2 * rng.standard_normal(8)).astype(np.float32))
    m.bn.bias.set_value((0.1 * rng.standard_normal(8)).astype(np.float32))
    m.bn._mean.set_value((0.1 * rng.standard_normal(8)).astype(np.float32))
    m.bn._variance.set_value((1 + 0.3 * rng.random(8)).astype(np.float32))
    return m, [("x", (2, 3, 24, 24))]


def encoder(batch, seq, width, heads, ff):
    layer = paddle.nn.TransformerEncoderLayer(d_model=width, nhead=heads, dim_feedforward=ff, dropout=0.0,
                                              activation="gelu", normalize_before=True)
    return layer, [("x", (batch, seq, width))]


def paddle_encoder():
    return encoder(2, 12, 32, 4, 64)


def paddle_encoder_base():
    return encoder(1, 128, 768, 12, 3072)


def paddle_resnet50():
    return paddle.vision.models.resnet50(), [("x", (1, 3, 224, 224))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/models")
    ap.add_argument("--size", choices=["small", "full"], default="small")
    args = ap.parse_args()
    paddle.seed(2026)
    rng = np.random.default_rng(2026)
    models = {"small": (("paddle_cnn", paddle_cnn), ("paddle_encoder", paddle_encoder)),
              "full": (("paddle_resnet50", paddle_resnet50), ("paddle_encoder_base", paddle_encoder_base))}
    for name, make in models[args.size]:
        layer, specs = make()
        layer.eval()
        feeds = [(n, rng.standard_normal(s).astype(np.float32)) for n, s in specs]
        want = layer(*[paddle.to_tensor(v) for _, v in feeds])
        want = [want] if not isinstance(want, (list, tuple)) else list(want)
        work = tempfile.mkdtemp()
        try:
            spec = [paddle.static.InputSpec(shape=list(s), dtype="float32", name=n) for n, s in specs]
            prefix = os.path.join(work, name)
            paddle.onnx.export(layer, prefix, input_spec=spec, opset_version=OPSET)
            proto = onnx.load(prefix + ".onnx")
        finally:
            shutil.rmtree(work)
        import paddle2onnx  # noqa: E402 (paddle.onnx imports it lazily)
        proto.producer_name = f"paddle2onnx {paddle2onnx.__version__} (PaddlePaddle {paddle.__version__})"
        d = os.path.join(args.out, name)
        data = os.path.join(d, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        onnx.checker.check_model(proto, full_check=True)
        onnx.save(proto, os.path.join(d, "model.onnx"))
        names = [i.name for i in proto.graph.input]
        for k, (_, v) in enumerate(feeds):
            with open(os.path.join(data, f"input_{k}.pb"), "wb") as fh:
                fh.write(numpy_helper.from_array(v, names[k]).SerializeToString())
        for k, (o, w) in enumerate(zip(proto.graph.output, want)):
            with open(os.path.join(data, f"output_{k}.pb"), "wb") as fh:
                fh.write(numpy_helper.from_array(w.numpy(), o.name).SerializeToString())
        print(f"{name}: {len(proto.graph.node)} nodes, opset {proto.opset_import[0].version}, "
              f"ops {sorted({n.op_type for n in proto.graph.node})}")


if __name__ == "__main__":
    main()
