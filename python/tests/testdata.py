"""The test models (tests/data/models: exported by PyTorch with their inputs and outputs) and how
the tests read and compare them; shared by the package's test files."""

import os
import pathlib

import numpy as np
import onnx
from onnx import numpy_helper

SOURCE = pathlib.Path(os.environ["FUSETUNE_SOURCE_DIR"])
MODELS = SOURCE / "tests" / "data" / "models"


def tensors(folder: pathlib.Path, prefix: str) -> list:
    """The arrays of folder/PREFIX_N.pb in N's order."""
    files = sorted(folder.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1]))
    out = []
    for f in files:
        t = onnx.TensorProto()
        t.ParseFromString(f.read_bytes())
        out.append(numpy_helper.to_array(t))
    return out


def expect_close(got: list, want: list, dtype_tolerance: float):
    """Same dtypes and shapes, values within dtype_tolerance of the largest magnitude (at least 1)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        scale = max(1.0, float(np.abs(w.astype(np.float64)).max()))
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=0, atol=dtype_tolerance * scale)


def tolerance(name: str) -> float:
    return 2e-2 if name.endswith("fp16") else 1e-4
