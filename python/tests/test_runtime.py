"""The fusetune Python package against PyTorch's outputs: plans compiled by fusetune.compile (the
test models of tests/data/models, exported by PyTorch with their inputs and outputs), loaded with
fusetune.load_plan on the host and run from NumPy arrays, dicts and lists, CPU torch tensors
through DLPack, into the caller's output arrays (written in place), and from several threads at
once; every wrong input and output refused naming it, CUDA arrays refused by a plan on the host;
on a GPU, torch CUDA tensors in and out without a copy; the type stubs declaring what the package
exports. Run by ctest (python.runtime) with PYTHONPATH at
the build tree's python/ folder, FUSETUNE_BINARY the CLI (which fusetune.compile runs) and
FUSETUNE_SOURCE_DIR the checkout."""

import ast
import pathlib
import re
import threading

import numpy as np
import onnx
import pytest

import fusetune
from testdata import MODELS, expect_close, tensors, tolerance


@pytest.fixture(scope="module", params=["cnn_small", "distilbert_fp16"])
def compiled(request, tmp_path_factory):
    """(model name, plan directory): the model compiled for the H100 by fusetune.compile."""
    out = tmp_path_factory.mktemp(request.param)
    return request.param, fusetune.compile(MODELS / request.param / "model.onnx", out, device="h100")


def loaded(compiled):
    """(plan on the host, the model's test inputs)."""
    name, plan_dir = compiled
    return fusetune.load_plan(plan_dir, device="host"), tensors(MODELS / name / "test_data_set_0", "input")


def assert_identical(got: list, want: list):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_plan_matches_pytorch_from_a_dict_and_from_a_list(compiled):
    name, plan_dir = compiled
    plan = fusetune.load_plan(plan_dir, device="host")
    model = onnx.load(str(MODELS / name / "model.onnx"), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    assert plan.input_names == [i.name for i in model.graph.input if i.name not in initializers]
    assert plan.output_names == [o.name for o in model.graph.output]
    assert plan.backend == "host" and plan.launches >= 1
    inputs = tensors(MODELS / name / "test_data_set_0", "input")
    want = tensors(MODELS / name / "test_data_set_0", "output")
    by_list = plan.run(inputs)
    expect_close(by_list, want, tolerance(name))
    assert_identical(plan.run(dict(zip(plan.input_names, inputs))), by_list)


def test_torch_tensors_are_read_through_dlpack(compiled):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")
    plan, inputs = loaded(compiled)
    assert_identical(plan.run([torch.from_numpy(a) for a in inputs]), plan.run(inputs))


def test_outputs_are_written_into_the_callers_arrays(compiled):
    plan, inputs = loaded(compiled)
    want = plan.run(inputs)
    # Aligned to 256 bytes (in place) and 4 bytes past (copied), each poisoned before the run.
    for offset in (0, 4):
        out = []
        for w in want:
            raw = np.empty(w.nbytes + 512, np.uint8)
            start = (-raw.ctypes.data) % 256 + offset
            out.append(raw[start:start + w.nbytes].view(w.dtype).reshape(w.shape))
            out[-1].view(np.uint8)[:] = 0xFF
        got = plan.run(inputs, out=out)
        assert all(g is o for g, o in zip(got, out))
        assert_identical(got, want)
    with pytest.raises(ValueError, match="outputs given"):
        plan.run(inputs, out=want + want)
    first = plan.output_names[0]
    with pytest.raises(ValueError, match=f"output {first!r}: the array must be C-contiguous"):
        plan.run(inputs, out=[np.empty((*want[0].shape, 2), want[0].dtype)[..., 0]] + want[1:])
    with pytest.raises(ValueError, match=f"output {first!r}: shape"):
        plan.run(inputs, out=[want[0].reshape(-1)[:-1]] + want[1:])
    with pytest.raises(TypeError, match=repr(first)):
        plan.run(inputs, out=[want[0].astype(np.float64 if want[0].dtype != np.float64 else np.float32)] + want[1:])


class _FakeCudaArray:
    """An object that says it is CUDA memory (the interface torch CUDA tensors and CuPy give)."""

    def __init__(self, a: np.ndarray):
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
                                         "strides": None, "version": 3}


def test_cuda_arrays_are_refused_by_a_plan_on_the_host(compiled):
    plan, inputs = loaded(compiled)
    first = plan.input_names[0]
    with pytest.raises(TypeError, match=f"input {first!r}: CUDA memory, but this plan runs on host"):
        plan.run([_FakeCudaArray(a) for a in inputs])


def test_dlpack_capsules_are_read_without_a_copy():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")
    from fusetune._fusetune import _dlpack_info
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    view = base[1]  # 48 bytes into its storage
    address, device_type, _, shape, strides, dtype = _dlpack_info(view.__dlpack__())
    assert (address, device_type, shape, dtype) == (view.data_ptr(), 1, (3, 4), (2, 32, 1))
    assert strides in (None, (4, 1))
    assert _dlpack_info(view.t().__dlpack__())[4] == (1, 4)  # transposed: strides in elements
    assert _dlpack_info(torch.zeros(5, dtype=torch.int64).__dlpack__())[5] == (0, 64, 1)
    capsule = view.__dlpack__()
    _rename(capsule, b"used_dltensor")  # as a consumer leaves it
    with pytest.raises(ValueError, match="not an unconsumed DLPack capsule"):
        _dlpack_info(capsule)
    _rename(capsule, b"dltensor")  # so that its producer frees it


def _rename(capsule, name: bytes):
    import ctypes
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
    set_name.restype = ctypes.c_int
    _rename.names = getattr(_rename, "names", []) + [name]  # PyCapsule keeps the pointer: keep the bytes alive
    assert set_name(capsule, _rename.names[-1]) == 0


def test_torch_cuda_tensors_run_in_place_on_a_gpu(compiled):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for PyTorch on this machine")
    name, plan_dir = compiled
    plan = fusetune.load_plan(plan_dir, device="cuda")
    inputs = tensors(MODELS / name / "test_data_set_0", "input")
    on_host = plan.run(inputs)
    got = plan.run([torch.from_numpy(a).cuda() for a in inputs])
    assert all(g.is_cuda for g in got)
    assert_identical([g.cpu().numpy() for g in got], on_host)
    out = [torch.full(g.shape, float("nan"), dtype=g.dtype, device="cuda") for g in got]
    again = plan.run([torch.from_numpy(a).cuda() for a in inputs], out=out)
    assert all(a is b for a, b in zip(again, out))
    assert_identical([g.cpu().numpy() for g in again], on_host)


def test_several_threads_share_one_plan(compiled):
    plan, inputs = loaded(compiled)
    want = plan.run(inputs)
    results, errors = [], []

    def worker():
        try:
            for _ in range(3):
                results.append(plan.run(inputs))
        except Exception as e:  # reported below, with the thread's error
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 12
    for r in results:
        assert_identical(r, want)


def test_wrong_inputs_are_refused_naming_the_input(compiled):
    plan, inputs = loaded(compiled)
    first = plan.input_names[0]
    with pytest.raises(KeyError, match="'nope'"):
        plan.run({**dict(zip(plan.input_names, inputs)), "nope": inputs[0]})
    with pytest.raises(KeyError, match=repr(first)):
        plan.run({n: a for n, a in zip(plan.input_names[1:], inputs[1:])})
    with pytest.raises(TypeError, match=repr(first)):
        plan.run([inputs[0].astype(np.float64 if inputs[0].dtype != np.float64 else np.float32)] + inputs[1:])
    with pytest.raises(ValueError, match=repr(first)):
        plan.run([np.concatenate([inputs[0], inputs[0]])] + inputs[1:])
    with pytest.raises(TypeError, match=repr(first)):
        plan.run([[1, 2, 3]] + inputs[1:])
    with pytest.raises(ValueError, match="inputs given"):
        plan.run(inputs + [inputs[0]])


def test_a_missing_bundle_and_an_unknown_device_are_refused(tmp_path):
    with pytest.raises(RuntimeError, match=str(tmp_path)):
        fusetune.load_plan(tmp_path, device="host")
    for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:\u00b2", "cuda:123456"]:
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            fusetune.load_plan(tmp_path, device=bad)
    # A device number is passed on: here it names a GPU this machine lacks (no driver, or fewer
    # devices), or, where there is one, the empty directory is the error.
    with pytest.raises(RuntimeError) as refused:
        fusetune.load_plan(tmp_path, device="cuda:1")
    assert "cuda:1" in str(refused.value) or "manifest.json" in str(refused.value), str(refused.value)


def test_every_block_race_checked_on_the_host_gives_the_same_outputs(compiled):
    """host_checked_blocks=0 race-checks every block of every launch (the default, 64 a launch);
    a count that is not one is refused naming it."""
    name, plan_dir = compiled
    inputs = tensors(MODELS / name / "test_data_set_0", "input")
    every = fusetune.load_plan(plan_dir, device="host", host_checked_blocks=0)
    assert_identical(every.run(inputs), fusetune.load_plan(plan_dir, device="host").run(inputs))
    assert_identical(fusetune.load_plan(plan_dir, device="host", host_checked_blocks=np.int64(0)).run(inputs), every.run(inputs))
    for bad in [-1, 2.5, True, "64", 2**63]:
        with pytest.raises(ValueError, match="host_checked_blocks " + re.escape(repr(bad))):
            fusetune.load_plan(plan_dir, device="host", host_checked_blocks=bad)


def test_the_stubs_declare_what_the_package_exports():
    stub = pathlib.Path(fusetune.__file__).with_suffix(".pyi")
    tree = ast.parse(stub.read_text())
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert set(fusetune.__all__) <= declared
    plan_stub = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Plan")
    stubbed = {n.name for n in plan_stub.body if isinstance(n, ast.FunctionDef)}
    public = {n for n in dir(fusetune.Plan) if not n.startswith("_")}
    assert stubbed == public


def test_outputs_of_data_dependent_size_are_trimmed_to_their_counts(tmp_path):
    """NonMaxSuppression's selections (onnx's center_point_box example: boxes 3, 0 and 5 of six)
    and the boxes gathered at them: padded to the bound (one class, three selections), counted by
    an output of their own, cut by Plan.trim."""
    from onnx import TensorProto, helper, numpy_helper
    boxes = np.array([[[0.5, 0.5, 1.0, 1.0], [0.5, 0.6, 1.0, 1.0], [0.5, 0.4, 1.0, 1.0],
                       [0.5, 10.5, 1.0, 1.0], [0.5, 10.6, 1.0, 1.0], [0.5, 100.5, 1.0, 1.0]]], np.float32)
    scores = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], np.float32)
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou"], ["sel"], center_point_box=1),
         helper.make_node("Gather", ["sel", "col"], ["index"], axis=1),
         helper.make_node("Reshape", ["boxes", "flat"], ["all"]),
         helper.make_node("Gather", ["all", "index"], ["picked"])],
        "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 6, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 6])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, ["n", 3]),
         helper.make_tensor_value_info("picked", TensorProto.FLOAT, ["n", 4])],
        [numpy_helper.from_array(np.array([4], np.int64), "k"), numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
         numpy_helper.from_array(np.array(2, np.int64), "col"), numpy_helper.from_array(np.array([6, 4], np.int64), "flat")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(tmp_path / "nms.onnx"))
    plan = fusetune.load_plan(fusetune.compile(tmp_path / "nms.onnx", tmp_path / "plan", device="h100"), device="host")
    assert plan.output_names == ["sel", "picked", "sel.count"]
    assert plan.output_counts == {"sel": ("sel.count", 0), "picked": ("sel.count", 0)}
    results = plan.run([boxes, scores])
    assert [r.shape for r in results] == [(4, 3), (4, 4), ()]  # the bound: min(k, boxes) rows
    sel, picked = plan.trim(results)
    np.testing.assert_array_equal(sel, [[0, 0, 3], [0, 0, 0], [0, 0, 5]])
    np.testing.assert_array_equal(picked, boxes[0, [3, 0, 5]])
    with pytest.raises(ValueError, match="results given"):
        plan.trim(results[:2])


def test_a_branch_decided_at_run_time_follows_its_condition_from_run_to_run(tmp_path):
    """gated_block's If is decided by data: one plan runs the then branch for test_data_set_0 and
    the else branch for test_data_set_1, alternately, each matching PyTorch."""
    plan = fusetune.load_plan(fusetune.compile(MODELS / "gated_block" / "model.onnx", tmp_path / "plan", device="h100"), device="host")
    for data_set in [0, 1, 0, 1]:
        data = MODELS / "gated_block" / f"test_data_set_{data_set}"
        expect_close(plan.run(tensors(data, "input")), tensors(data, "output"), tolerance("gated_block"))
