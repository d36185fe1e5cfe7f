#!/usr/bin/python3
"""Writes the seed corpus of the fuzz_import target (tests/fuzz/corpus/*.onnx).

Tiny ONNX models (a few hundred bytes to a few KB each) that together use most ops the importer
lowers, its folding of shape arithmetic, old-opset forms, external data and symbolic dimensions.
Shapes are small so that the fuzz target also runs each graph on the reference interpreter.
Run with Debian's python3 (python3-onnx, python3-numpy):  /usr/bin/python3 tests/fuzz/make_seeds.py
It also copies tests/data/models/cnn_small/model.onnx (19 KB) into the corpus.
"""
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
REPO = os.path.dirname(os.path.dirname(HERE))
RNG = np.random.default_rng(0)

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def ints(name, values):
    return init(name, np.asarray(values, dtype=np.int64))


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def save(name, nodes, inputs, outputs, inits=(), opset=13, value_info=(), functions=(), domains=()):
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(inits), value_info=list(value_info))
    model = helper.make_model(graph, producer_name="fusetune-fuzz-seeds",
                              opset_imports=[helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains],
                              functions=list(functions))
    model.ir_version = 8
    data = model.SerializeToString()
    assert len(data) < 20000, (name, len(data))
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(data)


def conv_relu_maxpool():
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["bn"], name="bn", epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2"], ["c2"], name="dw", group=4, auto_pad="SAME_UPPER",
                         kernel_shape=[3, 3], dilations=[1, 1]),
        helper.make_node("AveragePool", ["c2"], ["ap"], name="avg", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         ceil_mode=1, count_include_pad=1, strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["ap"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["fl"], name="flatten", axis=1),
        helper.make_node("Gemm", ["fl", "fw", "fb"], ["y"], name="fc", transB=1, alpha=0.5, beta=2.0),
    ]
    inits = [init("w", f32(4, 3, 3, 3)), init("b", f32(4)), init("s", f32(4)), init("bb", f32(4)),
             init("m", f32(4)), init("v", np.abs(f32(4)) + 0.5), init("w2", f32(4, 1, 3, 3)),
             init("fw", f32(5, 4)), init("fb", f32(5))]
    save("conv_relu_maxpool", nodes, [vi("x", F, [1, 3, 8, 8])], [vi("y", F, [1, 5])], inits)


def matmul_add_softmax():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "b"], ["a"], name="add"),
        helper.make_node("Softmax", ["a"], ["sm"], name="softmax", axis=-1),
        helper.make_node("LogSoftmax", ["a"], ["lsm"], name="logsoftmax", axis=1),
        helper.make_node("Sub", ["sm", "lsm"], ["d"], name="sub"),
        helper.make_node("Tanh", ["d"], ["t"], name="tanh"),
        helper.make_node("MatMul", ["t", "v"], ["y"], name="mv"),
    ]
    inits = [init("w", f32(4, 6)), init("b", f32(6)), init("v", f32(6))]
    save("matmul_add_softmax", nodes, [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 3])], inits)


def shape_arithmetic():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["d0"], name="g0", axis=0),
        helper.make_node("Gather", ["s", "i1"], ["d1"], name="g1", axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax0"], ["u0"], name="u0"),
        helper.make_node("Unsqueeze", ["d1", "ax0"], ["u1"], name="u1"),
        helper.make_node("Concat", ["u0", "u1", "minus1"], ["target"], name="cat_shape", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        helper.make_node("Transpose", ["r"], ["t"], name="transpose", perm=[2, 0, 1]),
        helper.make_node("Slice", ["t", "starts", "ends", "axes", "steps"], ["sl"], name="slice"),
        helper.make_node("Gather", ["sl", "idx"], ["ga"], name="gather", axis=1),
        helper.make_node("Split", ["ga", "split"], ["p0", "p1"], name="split", axis=3),
        helper.make_node("Concat", ["p1", "p0"], ["c"], name="concat", axis=-1),
        helper.make_node("Squeeze", ["c", "ax1"], ["sq"], name="squeeze"),
        helper.make_node("Size", ["sq"], ["n"], name="size"),
        helper.make_node("Cast", ["n"], ["nf"], name="cast", to=F),
        helper.make_node("Mul", ["sq", "nf"], ["y"], name="scale"),
    ]
    inits = [ints("i0", 0), ints("i1", 1), ints("ax0", [0]), ints("minus1", [-1]), ints("starts", [0, -1]),
             ints("ends", [100, -100]), ints("axes", [0, 2]), ints("steps", [1, -2]), ints("idx", [[0]]),
             ints("split", [1, 1]), ints("ax1", [1])]
    save("shape_arithmetic", nodes, [vi("x", F, [2, 3, 2, 2])], [vi("y", F, None)], inits)


def layer_norm():
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], name="ln", axis=-1, epsilon=1e-6),
        helper.make_node("Div", ["ln", "sqrt2"], ["h"], name="div"),
        helper.make_node("Erf", ["h"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["e1"], name="add1"),
        helper.make_node("Mul", ["ln", "e1"], ["gl"], name="mul"),
        helper.make_node("LayerNormalization", ["gl", "g"], ["y", "mean", "inv"], name="ln_stats", axis=1),
        helper.make_node("ReduceMean", ["x"], ["rm"], name="rmean", axes=[-1], keepdims=1),
        helper.make_node("Pow", ["rm", "two"], ["p"], name="pow"),
        helper.make_node("Sqrt", ["p"], ["z"], name="sqrt"),
    ]
    inits = [init("g", f32(8)), init("b", f32(8)), init("sqrt2", np.float32(1.4142135)),
             init("one", np.float32(1.0)), init("two", np.float32(2.0))]
    save("layer_norm_gelu", nodes, [vi("x", F, [2, 8])],
         [vi("y", F, [2, 8]), vi("mean", F, [2, 1]), vi("z", F, [2, 1])], inits, opset=17)


def resize():
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["up"], name="nearest", mode="nearest",
                         nearest_mode="floor", coordinate_transformation_mode="asymmetric"),
        helper.make_node("Resize", ["up", "roi", "", "sizes"], ["y"], name="linear", mode="linear",
                         coordinate_transformation_mode="align_corners"),
        helper.make_node("Resize", ["x", "roi8", "", "sizes"], ["z"], name="crop", mode="linear",
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=1.5),
    ]
    inits = [init("scales", np.array([1, 1, 2, 2], np.float32)), init("roi", np.zeros(0, np.float32)),
             ints("sizes", [1, 2, 3, 5]),
             init("roi8", np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 1.2], np.float32))]
    save("resize", nodes, [vi("x", F, [1, 2, 3, 3])], [vi("y", F, [1, 2, 3, 5]), vi("z", F, [1, 2, 3, 5])],
         inits)


def pad():
    nodes = [
        helper.make_node("Pad", ["x", "pads", "cv"], ["p0"], name="pad_const", mode="constant"),
        helper.make_node("Pad", ["p0", "pads2"], ["p1"], name="pad_reflect", mode="reflect"),
        helper.make_node("Pad", ["p1", "crop"], ["p2"], name="pad_edge", mode="edge"),
        helper.make_node("Tile", ["p2", "reps"], ["y"], name="tile"),
    ]
    inits = [ints("pads", [0, 0, 1, 2, 0, 0, 2, 1]), init("cv", np.float32(0.5)),
             ints("pads2", [0, 0, 1, 1, 0, 0, 1, 1]), ints("crop", [0, 0, -1, 1, 0, 0, 1, -2]),
             ints("reps", [1, 2, 1, 1])]
    save("pad_tile", nodes, [vi("x", F, [1, 2, 3, 3])], [vi("y", F, None)], inits)


def reductions():
    nodes = [
        helper.make_node("ReduceMean", ["x", "ax"], ["m"], name="mean", keepdims=0),
        helper.make_node("ReduceSum", ["x", "ax2"], ["s"], name="sum", keepdims=1),
        helper.make_node("ReduceMax", ["x"], ["mx"], name="max", keepdims=0),
        helper.make_node("ReduceL2", ["x", "ax"], ["l2"], name="l2"),
        helper.make_node("ReduceLogSumExp", ["x", "ax"], ["lse"], name="lse"),
        helper.make_node("ReduceProd", ["x", "empty"], ["pr"], name="prod", noop_with_empty_axes=1),
        helper.make_node("ArgMax", ["x"], ["am"], name="argmax", axis=1, keepdims=0, select_last_index=1),
        helper.make_node("ArgMin", ["x"], ["an"], name="argmin", axis=-1),
        helper.make_node("Split", ["x"], ["q0", "q1"], name="split18", axis=2, num_outputs=2),
        helper.make_node("Pad", ["q1", "padsax", "", "padaxes"], ["qp"], name="pad_axes"),
    ]
    inits = [ints("ax", [1]), ints("ax2", [0, -1]), ints("empty", np.zeros(0, np.int64)),
             ints("padsax", [1, 1]), ints("padaxes", [-1])]
    save("reductions_opset18", nodes, [vi("x", F, [2, 3, 5])],
         [vi(n, F, None) for n in ["m", "s", "mx", "l2", "lse", "pr", "q0", "qp"]] +
         [vi("am", I64, None), vi("an", I64, None)], inits, opset=18)


def where_equal_expand():
    nodes = [
        helper.make_node("Equal", ["x", "zero"], ["eq"], name="equal"),
        helper.make_node("Not", ["eq"], ["ne"], name="not"),
        helper.make_node("Expand", ["one", "shape"], ["ones"], name="expand"),
        helper.make_node("Where", ["ne", "x", "ones"], ["w"], name="where"),
        helper.make_node("ConstantOfShape", ["shape"], ["cs"], name="cos",
                         value=helper.make_tensor("v", F, [1], [2.0])),
        helper.make_node("Range", ["r0", "r1", "r2"], ["rg"], name="range"),
        helper.make_node("Cast", ["rg"], ["rgf"], name="cast", to=F),
        helper.make_node("Add", ["w", "cs"], ["a"], name="add"),
        helper.make_node("Add", ["a", "rgf"], ["b"], name="add_range"),
        helper.make_node("Greater", ["b", "zero"], ["gt"], name="greater"),
        helper.make_node("And", ["gt", "ne"], ["both"], name="and"),
        helper.make_node("NonZero", ["nzin"], ["nz"], name="nonzero"),
        helper.make_node("Clip", ["b", "lo", "hi"], ["y"], name="clip"),
        helper.make_node("ScatterND", ["y", "nz_idx", "upd"], ["sc"], name="scatter"),
        helper.make_node("Constant", [], ["k"], name="const", value_ints=[1, 2, 3]),
    ]
    inits = [init("zero", np.float32(0)), init("one", np.float32(1)), ints("shape", [2, 3]),
             ints("r0", 0), ints("r1", 3), ints("r2", 1), init("nzin", np.array([[1, 0], [0, 3]], np.float32)),
             init("lo", np.float32(-1)), init("hi", np.float32(4)), ints("nz_idx", [[0, 1], [1, 2]]),
             init("upd", np.array([7, 8], np.float32))]
    save("where_equal_expand", nodes, [vi("x", F, [2, 3])],
         [vi("sc", F, [2, 3]), vi("both", TensorProto.BOOL, [2, 3]), vi("nz", I64, None), vi("k", I64, [3])],
         inits)


def elementwise_zoo():
    unary = ["Abs", "Sigmoid", "HardSwish", "Softplus", "Softsign", "Neg", "Floor", "Ceil", "Round", "Sign",
             "Exp", "Log", "Reciprocal", "Sin", "Cos", "Tan", "Atan", "IsNaN"]
    nodes, prev = [], "x"
    for k, op in enumerate(unary):
        out = "u%d" % k
        nodes.append(helper.make_node(op, [prev], [out], name=op.lower()))
        prev = out if op != "IsNaN" else prev
    nodes += [
        helper.make_node("LeakyRelu", [prev], ["lr"], name="leaky", alpha=0.1),
        helper.make_node("Elu", ["lr"], ["el"], name="elu"),
        helper.make_node("Selu", ["el"], ["se"], name="selu"),
        helper.make_node("HardSigmoid", ["se"], ["hs"], name="hsig"),
        helper.make_node("ThresholdedRelu", ["hs"], ["tr"], name="trelu", alpha=0.2),
        helper.make_node("PRelu", ["tr", "slope"], ["pr"], name="prelu"),
        helper.make_node("Sum", ["pr", "x", "lr"], ["sum"], name="sum"),
        helper.make_node("Mean", ["sum", "x"], ["mean"], name="mean"),
        helper.make_node("Max", ["mean", "x"], ["max"], name="max"),
        helper.make_node("Min", ["max"], ["min"], name="min"),
        helper.make_node("Mod", ["min", "modb"], ["mod"], name="fmod", fmod=1),
        helper.make_node("Dropout", ["mod"], ["dr", "mask"], name="dropout"),
        helper.make_node("Identity", ["dr"], ["id"], name="identity"),
        helper.make_node("IsInf", ["id"], ["inf"], name="isinf", detect_negative=0),
        helper.make_node("CastLike", ["inf", "x"], ["infl"], name="castlike"),
        helper.make_node("InstanceNormalization", ["id", "isc", "ib"], ["in"], name="instnorm"),
        helper.make_node("DepthToSpace", ["in"], ["d2s"], name="d2s", blocksize=2, mode="CRD"),
        helper.make_node("SpaceToDepth", ["d2s"], ["y"], name="s2d", blocksize=2),
    ]
    inits = [init("slope", f32(4, 1, 1)), init("modb", np.float32(1.5)), init("isc", f32(4)), init("ib", f32(4))]
    save("elementwise_zoo", nodes, [vi("x", F, [1, 4, 2, 2])], [vi("y", F, [1, 4, 2, 2]), vi("infl", F, None)],
         inits)


def old_opset():
    nodes = [
        helper.make_node("Slice", ["x"], ["s"], name="slice_attr", starts=[0, 1], ends=[2, 100], axes=[0, 1]),
        helper.make_node("Pad", ["s"], ["p"], name="pad_attr", pads=[0, 1, 0, 1], value=2.0),
        helper.make_node("Softmax", ["p"], ["sm"], name="softmax2d", axis=0),
        helper.make_node("Unsqueeze", ["sm"], ["u"], name="unsq", axes=[0]),
        helper.make_node("Squeeze", ["u"], ["sq"], name="sq", axes=[0]),
        helper.make_node("Clip", ["sq"], ["c"], name="clip_attr", min=0.1, max=0.9),
        helper.make_node("ReduceSum", ["c"], ["y"], name="rsum_attr", axes=[1], keepdims=0),
        helper.make_node("Split", ["x"], ["a", "b"], name="split_attr", axis=1, split=[1, 2]),
        helper.make_node("Resize", ["a", "sc"], ["z"], name="resize10"),
    ]
    inits = [init("sc", np.array([1, 2], np.float32))]
    save("old_opset9", nodes, [vi("x", F, [2, 3])], [vi("y", F, [2]), vi("b", F, [2, 2]), vi("z", F, None)],
         inits, opset=9)


def external_data():
    w = TensorProto()
    w.name, w.data_type = "w", F
    w.dims.extend([2, 2])
    w.data_location = TensorProto.EXTERNAL
    for k, v in [("location", "weights.bin"), ("offset", "0"), ("length", "16")]:
        e = w.external_data.add()
        e.key, e.value = k, v
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    save("external_data", nodes, [vi("x", F, [1, 2])], [vi("y", F, [1, 2])], [w])


def symbolic_dims():
    # Symbolic dims on outputs and value_info import fine; the second input has a symbolic dim,
    # which import must reject cleanly (no --shape given).
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Transpose", ["r"], ["y"], name="t"),
    ]
    save("symbolic_output_dims", nodes, [vi("x", F, [2, 3])], [vi("y", F, ["cols", "rows"])],
         value_info=[vi("r", F, ["N", 3])])
    save("symbolic_input_dim", nodes, [vi("x", F, ["batch", 3])], [vi("y", F, [3, "batch"])])


def int_types():
    nodes = [
        helper.make_node("Cast", ["x"], ["xi"], name="to_i32", to=TensorProto.INT32),
        helper.make_node("Mul", ["xi", "k"], ["m"], name="mul"),
        helper.make_node("Div", ["m", "d"], ["dv"], name="div"),
        helper.make_node("Mod", ["dv", "d"], ["md"], name="mod"),
        helper.make_node("Abs", ["md"], ["ab"], name="abs"),
        helper.make_node("Cast", ["ab"], ["h"], name="to_f16", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["h"], ["bf"], name="to_bf16", to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["bf"], ["u8"], name="to_u8", to=TensorProto.UINT8),
        helper.make_node("Cast", ["u8"], ["y"], name="to_f64", to=TensorProto.DOUBLE),
        helper.make_node("Xor", ["b0", "b1"], ["xo"], name="xor"),
    ]
    inits = [init("k", np.array([3, -2, 5], np.int32)), init("d", np.int32(4)),
             init("b0", np.array([True, False])), init("b1", np.array([True, True])),
             helper.make_tensor("unused_f16", TensorProto.FLOAT16, [2], [1.0, 2.0])]
    save("int_types", nodes, [vi("x", F, [2, 3])], [vi("y", TensorProto.DOUBLE, [2, 3]), vi("xo", TensorProto.BOOL, [2])],
         inits)


def ref(name, kind, to):
    a = onnx.AttributeProto()
    a.name, a.type, a.ref_attr_name = name, kind, to
    return a


def local_functions():
    # local:Act(a, b) = LeakyRelu(a, alpha=@alpha) + b; local:Pair(p) = Act(Act(p, p) {alpha=@gain}, p),
    # its second call without alpha; a call node with an If whose branch reads a formal input.
    leaky = helper.make_node("LeakyRelu", ["a"], ["t"])
    leaky.attribute.append(ref("alpha", onnx.AttributeProto.FLOAT, "alpha"))
    act = helper.make_function("local", "Act", ["a", "b"], ["y"], [leaky, helper.make_node("Add", ["t", "b"], ["y"])],
                               [helper.make_opsetid("", 13)], ["alpha"])
    inner = helper.make_node("Act", ["p", "p"], ["q"], domain="local")
    inner.attribute.append(ref("alpha", onnx.AttributeProto.FLOAT, "gain"))
    branch = helper.make_node("If", ["c"], ["r"],
                              then_branch=helper.make_graph([helper.make_node("Neg", ["p"], ["n"])], "then", [], [vi("n", F, [2, 3])]),
                              else_branch=helper.make_graph([helper.make_node("Abs", ["p"], ["m"])], "else", [], [vi("m", F, [2, 3])]))
    pair = helper.make_function("local", "Pair", ["p"], ["s"], [
        inner, helper.make_node("Act", ["q", "p"], ["a2"], domain="local"),
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
        branch, helper.make_node("Add", ["a2", "r"], ["s"])], [helper.make_opsetid("", 13), helper.make_opsetid("local", 1)],
        ["gain"])
    nodes = [helper.make_node("Act", ["x", "x"], ["y1"], name="first", domain="local", alpha=0.5),
             helper.make_node("Pair", ["y1"], ["y"], name="second", domain="local", gain=0.25)]
    save("local_functions", nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], functions=[act, pair], domains=["local"])


def main():
    os.makedirs(OUT, exist_ok=True)
    for gen in [conv_relu_maxpool, matmul_add_softmax, shape_arithmetic, layer_norm, resize, pad, reductions,
                where_equal_expand, elementwise_zoo, old_opset, external_data, symbolic_dims, int_types, local_functions]:
        gen()
    src = os.path.join(REPO, "tests", "data", "models", "cnn_small", "model.onnx")
    if os.path.getsize(src) < 20000:
        shutil.copyfile(src, os.path.join(OUT, "cnn_small.onnx"))
    print("wrote", len(os.listdir(OUT)), "seeds to", OUT)


if __name__ == "__main__":
    main()
