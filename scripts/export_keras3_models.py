#!/usr/bin/env python3
"""Models exported by Keras 3's own ONNX export, for tests/data/models.

    scripts/export_framework_models.sh keras3 [--size small|full] [--out DIR]

Keras 3 (its PyTorch backend, KERAS_BACKEND=torch) builds each model functionally, runs it once
(Keras exports only a model that has been called), and writes it with `model.export(path,
format="onnx")`, which hands it to torch.onnx. Each model is written as <out>/<name>/model.onnx
with test_data_set_0/ holding inputs drawn with numpy's default_rng(2026) and Keras' own outputs;
`scripts/export_framework_models.sh keras3` then replaces those by onnxruntime's (the oracle
`fusetune run` compares with) where the two agree (scripts/onnxruntime_outputs.py --agree 1e-4).
The batch axis is symbolic in the files ("batch"): `fusetune run` takes it from the test data,
and <out>/<name>/shape_args holds the `--shape` that gives it to `compile` and `inspect` (the
bench scripts and tests/CMakeLists.txt pass it).

- keras3_cnn: x [2, 24, 24, 3] (NHWC) -> [2, 10]: Conv2D (relu, same), BatchNormalization
  (inference, non-trivial statistics), DepthwiseConv2D (relu), MaxPooling2D, Conv2D (stride 2,
  gelu), GlobalAveragePooling2D, Dense with softmax.
- keras3_rnn: x [2, 10, 8] -> [2, 4]: LSTM (16 units, every step's output), GRU (12 units, the
  last step's), Dense. Keras' recurrent layers reach ONNX as their cells unrolled over the steps.

--size full writes a full-size version instead (for bench/run_full_models.sh; not in tests/data):
- keras3_resnet50: keras.applications.ResNet50 (random weights), x [1, 224, 224, 3] -> [1, 1000].

Keras 3.15's export of a MultiHeadAttention under this backend fails inside torch.onnx (a traced
size converted to a Python int), so no attention model is here; Keras 2's is (keras_attention, by
tf2onnx).

Runs in the environment `scripts/export_framework_models.sh keras3` makes (pinned versions from
PyPI).
"""

import argparse
import os

os.environ["KERAS_BACKEND"] = "torch"

import keras  # noqa: E402 (after the backend is chosen)
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402


def keras3_cnn():
    x = keras.Input((24, 24, 3), batch_size=2, name="x")
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    bn = keras.layers.BatchNormalization()
    h = bn(h)
    h = keras.layers.DepthwiseConv2D(3, padding="same", activation="relu")(h)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Conv2D(16, 3, strides=2, activation="gelu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    y = keras.layers.Dense(10, activation="softmax")(h)
    rng = np.random.default_rng(7)
    gamma, beta = 1 + 0.2 * rng.standard_normal(8), 0.1 * rng.standard_normal(8)
    mean, var = 0.1 * rng.standard_normal(8), 1 + 0.3 * rng.random(8)
    bn.set_weights([w.astype(np.float32) for w in (gamma, beta, mean, var)])
    return keras.Model(x, y), (2, 24, 24, 3)


def keras3_rnn():
    x = keras.Input((10, 8), batch_size=2, name="x")
    h = keras.layers.LSTM(16, return_sequences=True)(x)
    h = keras.layers.GRU(12)(h)
    y = keras.layers.Dense(4)(h)
    return keras.Model(x, y), (2, 10, 8)


def keras3_resnet50():
    return keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3)), (1, 224, 224, 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/models")
    ap.add_argument("--size", choices=["small", "full"], default="small")
    args = ap.parse_args()
    models = {"small": (("keras3_cnn", keras3_cnn), ("keras3_rnn", keras3_rnn)),
              "full": (("keras3_resnet50", keras3_resnet50),)}
    keras.utils.set_random_seed(2026)
    rng = np.random.default_rng(2026)
    for name, make in models[args.size]:
        model, shape = make()
        x = rng.standard_normal(shape).astype(np.float32)
        want = np.asarray(model.predict(x, verbose=0))
        d = os.path.join(args.out, name)
        data = os.path.join(d, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        model.export(path, format="onnx", verbose=False)
        proto = onnx.load(path)
        proto.producer_name = f"keras {keras.__version__} ({proto.producer_name} {proto.producer_version})"
        proto.producer_version = ""
        onnx.checker.check_model(proto, full_check=True)
        onnx.save(proto, path)
        with open(os.path.join(d, "shape_args"), "w") as fh:
            fh.write(f"--shape {proto.graph.input[0].name}={'x'.join(map(str, shape))}\n")
        with open(os.path.join(data, "input_0.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(x, proto.graph.input[0].name).SerializeToString())
        with open(os.path.join(data, "output_0.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(want, proto.graph.output[0].name).SerializeToString())
        print(f"{name}: {os.path.getsize(path) / 1e6:.2f} MB, {len(proto.graph.node)} nodes, opset "
              f"{proto.opset_import[0].version}", flush=True)


if __name__ == "__main__":
    main()
