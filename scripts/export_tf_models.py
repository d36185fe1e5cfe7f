#!/usr/bin/env python3
"""Models exported by tf2onnx from Keras and from a tf.function, for tests/data/models.

    scripts/export_framework_models.sh tf [--size small|full] [--out DIR]

TensorFlow lays images out NHWC, and tf2onnx brings them to ONNX's NCHW with Transposes around the
convolutions and pools; Keras' MultiHeadAttention and LayerNormalization come as Einsum or MatMul,
Softmax and the moments' ops; a tf.function's raw ops map one by one. Each model is written as
<out>/<name>/model.onnx (tf2onnx 1.16.1 from TensorFlow 2.15.1, opset 17) with
test_data_set_0/ holding inputs drawn with numpy's default_rng(2026) and TensorFlow's own outputs;
`scripts/export_framework_models.sh tf` then replaces those by onnxruntime's (the oracle `fusetune
run` compares with) where the two agree (scripts/onnxruntime_outputs.py --agree 1e-4):

- keras_cnn: a Keras functional CNN, x [2, 24, 24, 3] (NHWC) -> probabilities [2, 10]: Conv2D
  (relu, same padding), BatchNormalization (inference), DepthwiseConv2D, MaxPooling2D, Conv2D with
  stride 2, GlobalAveragePooling2D, Dense with softmax.
- keras_attention: a Keras transformer encoder block, x [2, 12, 32] -> y [2, 12, 32]:
  LayerNormalization, self-attention MultiHeadAttention (4 heads of 8) with a residual, then
  LayerNormalization, Dense (gelu), Dense with a residual.
- tf_function_ops: a tf.function of raw ops on an image batch x [2, 16, 16, 4] -> two outputs:
  tf.image.resize (bilinear, half-pixel), tf.nn.conv2d, tf.math.reduce_mean over HW, tf.gather along
  channels, tf.where on a comparison, tf.math.cumsum; and the argmax of the result (int64).

- tf_detector_tail: a detector's tail as a tf.function, features x [1, 8, 8, 6] -> the boxes and
  scores tf.image.non_max_suppression keeps (at most 40, IoU 0.5, score over 0.5) of 64 anchors'
  decoded boxes (a 1x1 convolution's offsets around a constant anchor grid) and sigmoid scores:
  tf2onnx's NonMaxSuppression, the selection's box column sliced and squeezed, tf.gather. The
  outputs' size depends on the data.

--size full writes full-size versions instead (for bench/run_full_models.sh; not in tests/data):
- keras_resnet50: tf.keras.applications.ResNet50 (random weights), x [1, 224, 224, 3] -> [1, 1000].
- keras_bert_layer: the keras_attention block at BERT-base's width (768, 12 heads of 64,
  feed-forward 3072), x [1, 128, 768].

Runs in the environment `scripts/export_framework_models.sh tf` makes (pinned versions from PyPI).
The values are reproducible with those versions on the same CPU; the files are not byte for byte,
since tf2onnx names some nodes and initializers by Python object ids.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import onnx
import tensorflow as tf
import tf2onnx
from onnx import numpy_helper

OPSET = 17


def keras_cnn():
    tf.keras.utils.set_random_seed(2026)
    x = tf.keras.Input((24, 24, 3), batch_size=2, name="x")
    h = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    h = tf.keras.layers.BatchNormalization()(h, training=False)
    h = tf.keras.layers.DepthwiseConv2D(3, padding="same", activation="relu")(h)
    h = tf.keras.layers.MaxPooling2D(2)(h)
    h = tf.keras.layers.Conv2D(16, 3, strides=2, activation="relu")(h)
    h = tf.keras.layers.GlobalAveragePooling2D()(h)
    y = tf.keras.layers.Dense(10, activation="softmax", name="probabilities")(h)
    model = tf.keras.Model(x, y)
    # Batch statistics that are not the identity, so that the normalization is seen.
    bn = model.layers[2]
    rng = np.random.default_rng(7)
    bn.set_weights([(1 + 0.2 * rng.standard_normal(8)).astype(np.float32), (0.1 * rng.standard_normal(8)).astype(np.float32),
                    (0.1 * rng.standard_normal(8)).astype(np.float32), (1 + 0.3 * rng.random(8)).astype(np.float32)])
    return model, [("x", (2, 24, 24, 3))]


def encoder_block(batch, seq, width, heads, ff):
    tf.keras.utils.set_random_seed(2026)
    x = tf.keras.Input((seq, width), batch_size=batch, name="x")
    h = tf.keras.layers.LayerNormalization(epsilon=1e-5)(x)
    h = tf.keras.layers.MultiHeadAttention(num_heads=heads, key_dim=width // heads)(h, h)
    h = tf.keras.layers.Add()([x, h])
    f = tf.keras.layers.LayerNormalization(epsilon=1e-5)(h)
    f = tf.keras.layers.Dense(ff, activation="gelu")(f)
    f = tf.keras.layers.Dense(width)(f)
    y = tf.keras.layers.Add(name="y")([h, f])
    return tf.keras.Model(x, y), [("x", (batch, seq, width))]


def keras_attention():
    return encoder_block(2, 12, 32, 4, 64)


def keras_bert_layer():
    return encoder_block(1, 128, 768, 12, 3072)


def keras_resnet50():
    tf.keras.utils.set_random_seed(2026)
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3), classes=1000)
    return model, [("x", (1, 224, 224, 3))]


def tf_function_ops():
    rng = np.random.default_rng(11)
    kernel_values = (0.3 * rng.standard_normal((3, 3, 4, 6))).astype(np.float32)

    @tf.function(input_signature=[tf.TensorSpec((2, 16, 16, 4), tf.float32, name="x")])
    def f(x):
        # Constants made inside the function (captured tensors would become graph inputs).
        kernel = tf.constant(kernel_values)
        picks = tf.constant([5, 0, 3, 3, 1], dtype=tf.int32)
        up = tf.image.resize(x, (24, 20), method="bilinear")
        h = tf.nn.conv2d(up, kernel, strides=[1, 2, 2, 1], padding="SAME")
        m = tf.math.reduce_mean(h, axis=[1, 2])                # [2, 6]
        g = tf.gather(m, picks, axis=1)                         # [2, 5]
        s = tf.where(g > 0.0, g, 0.1 * g)
        y = tf.math.cumsum(s, axis=1)
        return tf.identity(y, name="y"), tf.identity(tf.math.argmax(y, axis=1), name="best")

    return f, [("x", (2, 16, 16, 4))]


def tf_detector_tail():
    rng = np.random.default_rng(13)
    head_values = (0.5 * rng.standard_normal((1, 1, 6, 5))).astype(np.float32)
    centers = (np.stack(np.meshgrid(np.arange(8), np.arange(8), indexing="ij"), -1).reshape(64, 2) + 0.5) / 8
    anchor_values = np.concatenate([centers - 0.2, centers + 0.2], axis=1).astype(np.float32)  # [y0, x0, y1, x1]

    @tf.function(input_signature=[tf.TensorSpec((1, 8, 8, 6), tf.float32, name="x")])
    def f(x):
        head = tf.nn.conv2d(x, tf.constant(head_values), strides=1, padding="VALID")  # [1, 8, 8, 5]
        head = tf.reshape(head, (64, 5))
        boxes = tf.constant(anchor_values) + 0.1 * tf.tanh(head[:, :4])
        scores = tf.sigmoid(head[:, 4])
        keep = tf.image.non_max_suppression(boxes, scores, max_output_size=40, iou_threshold=0.5, score_threshold=0.5)
        return tf.identity(tf.gather(boxes, keep), name="boxes"), tf.identity(tf.gather(scores, keep), name="scores")

    return f, [("x", (1, 8, 8, 6))]


def write(out_dir, name, model_proto, inputs, outputs):
    d = os.path.join(out_dir, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.checker.check_model(model_proto, full_check=True)
    onnx.save(model_proto, os.path.join(d, "model.onnx"))
    for k, (n, v) in enumerate(inputs):
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(v, n).SerializeToString())
    for k, (n, v) in enumerate(outputs):
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(v, n).SerializeToString())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/models")
    ap.add_argument("--size", choices=["small", "full"], default="small")
    args = ap.parse_args()
    rng = np.random.default_rng(2026)
    models = {"small": (("keras_cnn", keras_cnn), ("keras_attention", keras_attention), ("tf_function_ops", tf_function_ops),
                        ("tf_detector_tail", tf_detector_tail)),
              "full": (("keras_resnet50", keras_resnet50), ("keras_bert_layer", keras_bert_layer))}
    for name, make in models[args.size]:
        obj, specs = make()
        feeds = [(n, rng.standard_normal(s).astype(np.float32)) for n, s in specs]
        if isinstance(obj, tf.keras.Model):
            proto, _ = tf2onnx.convert.from_keras(obj, input_signature=[tf.TensorSpec(s, tf.float32, name=n) for n, s in specs],
                                                  opset=OPSET)
            want = obj(*[tf.constant(v) for _, v in feeds], training=False)
            want = [want] if not isinstance(want, (list, tuple)) else list(want)
        else:
            proto, _ = tf2onnx.convert.from_function(obj, input_signature=obj.input_signature, opset=OPSET)
            want = list(obj(*[tf.constant(v) for _, v in feeds]))
        # The graph's inputs by the names the feeds carry (tf2onnx may append ":0").
        names = [i.name for i in proto.graph.input]
        inputs = [(names[k], v) for k, (_, v) in enumerate(feeds)]
        outputs = [(o.name, w.numpy()) for o, w in zip(proto.graph.output, want)]
        proto.producer_name = f"tf2onnx {tf2onnx.__version__} (TensorFlow {tf.__version__})"
        write(args.out, name, proto, inputs, outputs)
        print(f"{name}: {len(proto.graph.node)} nodes, ops {sorted({n.op_type for n in proto.graph.node})}")


if __name__ == "__main__":
    main()
