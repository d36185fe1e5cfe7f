"""fusetune from Python: run the plan bundles `fusetune compile` and `fusetune tune` write, and
make them.

    import fusetune
    fusetune.compile("bert.onnx", "bert-plan", device="h100", shapes={"input_ids": (1, 128)},
                     progress=lambda p: print(p.line))
    plan = fusetune.load_plan("bert-plan", device="auto")   # "auto", "host", "cuda" or "cuda:N"
    print(plan.input_names, plan.output_names, plan.backend)
    logits, = plan.run({"input_ids": ids, "attention_mask": mask})

    client = fusetune.Client("tcp://tuner:5555")             # a running `fusetune coordinator`
    job = client.submit("bert.onnx", device="h100", trials=8)
    client.wait(job, progress=lambda p: print(p.line))
    client.export(job, "bert-tuned")

load_plan and Plan are the deployment runtime (no compiler inside). compile, tune and Client
drive the fusetune command-line tool (FUSETUNE_BINARY, else `fusetune` on PATH), reporting its
progress to a callback and raising CommandError with its one-line diagnosis.

`run` takes a dict by input name or a list in `input_names` order. Each value is a NumPy array
or any object NumPy reads through DLPack on the host (a CPU torch tensor, without a copy); its
dtype and shape must be the model's (no silent casts). It returns NumPy arrays in
`output_names` order. bfloat16 and the narrow ONNX types have no NumPy dtype: they travel as
their raw bits (uint16 for bfloat16, one uint8/int8 per element for the 8-bit and smaller
types), as the C++ runtime's byte buffers do.

A Plan may be used from several threads: runs are serialized (the C++ runtime's Plan is not
reentrant), and the GIL is released while a plan loads and runs. Errors from the runtime
(a bundle file missing, a kernel failing, no GPU for "cuda") raise RuntimeError with the
runtime's message; a wrong input raises KeyError, TypeError or ValueError naming the input.
"""

from __future__ import annotations

import threading
from typing import Mapping, Sequence, Union

import numpy as np

from ._commands import Client, CommandError, Progress, compile, tune
from ._fusetune import _Plan

__all__ = ["Client", "CommandError", "Plan", "Progress", "compile", "load_plan", "tune"]

# The NumPy dtype each element type travels as (see the module docstring for the raw-bits types).
_DTYPES = {
    "float32": np.float32, "float16": np.float16, "float64": np.float64,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "bool": np.bool_, "bfloat16": np.uint16,
    "float8e4m3fn": np.uint8, "float8e4m3fnuz": np.uint8, "float8e5m2": np.uint8, "float8e5m2fnuz": np.uint8,
    "float8e8m0": np.uint8, "float4e2m1": np.uint8, "int4": np.int8, "uint4": np.uint8, "int2": np.int8, "uint2": np.uint8,
}

ArrayLike = object  # a NumPy array or an object with __dlpack__ on the host


def _dtype(type_name: str) -> np.dtype:
    try:
        return np.dtype(_DTYPES[type_name])
    except KeyError:
        raise TypeError(f"element type {type_name!r} has no NumPy form in this package") from None


class Plan:
    """A plan bundle loaded on a device (see load_plan)."""

    def __init__(self, plan: _Plan):
        self._plan = plan
        self._lock = threading.Lock()
        self._inputs = [(name, _dtype(t), tuple(shape)) for name, t, shape in plan.inputs()]
        self._outputs = [(name, _dtype(t), tuple(shape)) for name, t, shape in plan.outputs()]

    @property
    def input_names(self) -> list[str]:
        return [name for name, _, _ in self._inputs]

    @property
    def output_names(self) -> list[str]:
        return [name for name, _, _ in self._outputs]

    @property
    def backend(self) -> str:
        """"host", or "cuda:DEVICE (sm_XX)"."""
        return self._plan.backend()

    @property
    def no_gpu_reason(self) -> str:
        """Why device="auto" chose the host; empty otherwise."""
        return self._plan.no_gpu_reason()

    @property
    def launches(self) -> int:
        """Kernel launches (and library calls) per run."""
        return self._plan.launches()

    def _array(self, name: str, dtype: np.dtype, shape: tuple, value: ArrayLike) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            if not hasattr(value, "__dlpack__"):
                raise TypeError(f"input {name!r}: a NumPy array or a DLPack tensor, not {type(value).__name__}")
            try:
                value = np.from_dlpack(value)
            except (RuntimeError, BufferError, TypeError) as e:
                raise TypeError(f"input {name!r}: NumPy cannot read this tensor through DLPack ({e}); "
                                "this package takes host memory") from None
        if value.dtype != dtype:
            raise TypeError(f"input {name!r}: dtype {value.dtype}, the model's is {dtype}")
        if tuple(value.shape) != shape:
            raise ValueError(f"input {name!r}: shape {tuple(value.shape)}, the model's is {shape}")
        return np.ascontiguousarray(value)

    def run(self, inputs: Union[Mapping[str, ArrayLike], Sequence[ArrayLike]]) -> list[np.ndarray]:
        """Runs the plan on `inputs` (a dict by name, or a list in input_names order)."""
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - set(self.input_names))
            if unknown:
                raise KeyError(f"input {unknown[0]!r}: the plan's inputs are {self.input_names}")
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise KeyError(f"input {missing[0]!r} is missing")
            values = [inputs[n] for n in self.input_names]
        else:
            values = list(inputs)
            if len(values) != len(self._inputs):
                raise ValueError(f"{len(values)} inputs given, the plan takes {len(self._inputs)}: {self.input_names}")
        arrays = [self._array(n, d, s, v) for (n, d, s), v in zip(self._inputs, values)]
        with self._lock:
            for (name, _, _), a in zip(self._inputs, arrays):
                self._plan.set_input(name, a)
            self._plan.run()
            outputs = []
            for name, dtype, shape in self._outputs:
                out = np.empty(shape, dtype=dtype)
                self._plan.get_output(name, out)
                outputs.append(out)
        return outputs


def load_plan(path: str, device: str = "auto") -> Plan:
    """Loads the plan bundle in directory `path` on "auto" (the first GPU where one is usable, else
    the host), "host", "cuda" (the first GPU) or "cuda:N" (the N-th GPU the driver reports, as
    CUDA_VISIBLE_DEVICES leaves them)."""
    if not isinstance(device, str) or not (
        device in ("auto", "host", "cuda") or (device.startswith("cuda:") and device[5:].isascii() and device[5:].isdigit() and len(device) <= 9)
    ):
        raise ValueError(f"device {device!r}: one of auto, host, cuda, cuda:N")
    return Plan(_Plan.load(str(path), device))
