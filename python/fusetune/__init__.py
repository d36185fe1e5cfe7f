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

`run` takes a dict by input name or a list in `input_names` order; each value's dtype and shape
must be the model's (no silent casts). A value is either
- host memory: a NumPy array or any object NumPy reads through DLPack on the host (a CPU torch
  tensor, without a copy). Outputs are NumPy arrays. On a plan on "host", host memory is the
  device's: aligned arrays are read and written in place by the kernels;
- or, on a plan on a GPU, CUDA memory of that GPU, C-contiguous: a DLPack tensor on a CUDA device
  (a torch CUDA tensor, JAX, CuPy: asked for with stream=1, so that its producer's pending work is
  ordered before the legacy default stream, which the plan's stream follows), or any object with
  `__cuda_array_interface__` (whose work the caller synchronizes first). Nothing is copied where
  the memory is 256-byte aligned and stays where it was in the run before (PyTorch's and CuPy's
  allocators align so); other memory is copied on the device. Outputs are torch tensors on the
  inputs' device when the inputs are torch tensors; otherwise pass `out`. It returns when the
  outputs are written.
`out` (optional, a list in `output_names` order) gives the outputs' places, on the same side as
the inputs: they are written in place (no copy where aligned) and returned.
An output whose size depends on the data (NonMaxSuppression, Unique, NonZero) comes padded to
the bound fusetune derived, with its count as another output (`output_counts` names it);
`trim(results)` gives the model's outputs, each cut to its count (a view, no copy), the counts
left out.
bfloat16 and the narrow ONNX types have no NumPy dtype: they travel as their raw bits (uint16
for bfloat16, one uint8/int8 per element for the 8-bit and smaller types), as the C++ runtime's
byte buffers do.

A Plan may be used from several threads: the C++ runtime serializes runs of one plan, and the
GIL is released while a plan loads and runs. Errors from the runtime (a bundle file missing, a
kernel failing, no GPU for "cuda", a pointer that is not the plan's GPU memory) raise
RuntimeError with the runtime's message; a wrong input raises KeyError, TypeError or ValueError
naming the input.
"""

from __future__ import annotations

import numbers
import sys
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from ._commands import Client, CommandError, Progress, compile, tune
from ._fusetune import _dlpack_info, _Plan

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

ArrayLike = object  # a NumPy array, an object with __dlpack__ on the host, or with __cuda_array_interface__


def _dtype(type_name: str) -> np.dtype:
    try:
        return np.dtype(_DTYPES[type_name])
    except KeyError:
        raise TypeError(f"element type {type_name!r} has no NumPy form in this package") from None


class Plan:
    """A plan bundle loaded on a device (see load_plan)."""

    def __init__(self, plan: _Plan):
        self._plan = plan
        self._inputs = [(name, _dtype(t), tuple(shape)) for name, t, shape in plan.inputs()]
        self._outputs = [(name, _dtype(t), tuple(shape)) for name, t, shape in plan.outputs()]
        self._counts = {name: (count, axis) for name, count, axis in plan.output_counts()}

    @property
    def input_names(self) -> list[str]:
        return [name for name, _, _ in self._inputs]

    @property
    def output_names(self) -> list[str]:
        return [name for name, _, _ in self._outputs]

    @property
    def output_counts(self) -> dict[str, tuple[str, int]]:
        """For each output of data-dependent size: (the output holding its count, the axis counted)."""
        return dict(self._counts)

    def trim(self, results: Sequence) -> list:
        """The model's outputs of a run's `results` (in output_names order): each output of
        data-dependent size cut to its count along its axis (a view), the counts left out."""
        if len(results) != len(self._outputs):
            raise ValueError(f"{len(results)} results given, the plan gives {len(self._outputs)}: {self.output_names}")
        by_name = dict(zip(self.output_names, results))
        counts = {count for count, _ in self._counts.values()}
        model = []
        for name, value in by_name.items():
            if name in counts:
                continue
            if name in self._counts:
                count, axis = self._counts[name]
                n = int(by_name[count].item() if hasattr(by_name[count], "item") else by_name[count])
                index = [slice(None)] * len(self._outputs[self.output_names.index(name)][2])
                index[axis] = slice(0, n)
                value = value[tuple(index)]
            model.append(value)
        return model

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

    def _array(self, what: str, name: str, dtype: np.dtype, shape: tuple, value: ArrayLike) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            if not hasattr(value, "__dlpack__"):
                raise TypeError(f"{what} {name!r}: a NumPy array, a DLPack tensor or a CUDA array, not {type(value).__name__}")
            try:
                value = np.from_dlpack(value)
            except (RuntimeError, BufferError, TypeError) as e:
                raise TypeError(f"{what} {name!r}: NumPy cannot read this tensor through DLPack ({e})") from None
        if value.dtype != dtype:
            raise TypeError(f"{what} {name!r}: dtype {value.dtype}, the model's is {dtype}")
        if tuple(value.shape) != shape:
            raise ValueError(f"{what} {name!r}: shape {tuple(value.shape)}, the model's is {shape}")
        if what == "output":
            if not (value.flags.c_contiguous and value.flags.writeable):
                raise ValueError(f"output {name!r}: the array must be C-contiguous and writable")
            return value
        return np.ascontiguousarray(value)

    @staticmethod
    def _cuda_pointer(what: str, name: str, dtype: np.dtype, shape: tuple, value: ArrayLike, keep: list) -> int:
        """The device address of a CUDA array whose dtype, shape and layout are the model's (what
        must stay alive until the run returns is appended to `keep`)."""
        if _on_cuda_by_dlpack(value):
            capsule = value.__dlpack__(stream=1)
            keep.append(capsule)
            address, _, _, dl_shape, strides, (code, bits, lanes) = _dlpack_info(capsule)
            got = _DLPACK_DTYPES.get((code, bits)) if lanes == 1 else None
            if got != dtype:
                raise TypeError(f"{what} {name!r}: DLPack type (code {code}, {bits} bits, {lanes} lanes), the model's is {dtype}")
            if tuple(dl_shape) != shape:
                raise ValueError(f"{what} {name!r}: shape {tuple(dl_shape)}, the model's is {shape}")
            if strides is not None and not _c_contiguous(shape, [s * dtype.itemsize for s in strides], dtype.itemsize):
                raise ValueError(f"{what} {name!r}: the CUDA tensor is not C-contiguous")
            return int(address)
        cai = value.__cuda_array_interface__
        if np.dtype(cai["typestr"]) != dtype:
            raise TypeError(f"{what} {name!r}: dtype {np.dtype(cai['typestr'])}, the model's is {dtype}")
        if tuple(cai["shape"]) != shape:
            raise ValueError(f"{what} {name!r}: shape {tuple(cai['shape'])}, the model's is {shape}")
        strides = cai.get("strides")
        if strides is not None and not _c_contiguous(shape, strides, dtype.itemsize):
            raise ValueError(f"{what} {name!r}: the CUDA array is not C-contiguous")
        address, readonly = cai["data"]
        if what == "output" and readonly:
            raise ValueError(f"output {name!r}: the CUDA array is read-only")
        return int(address)

    def run(self, inputs: Union[Mapping[str, ArrayLike], Sequence[ArrayLike]],
            out: Optional[Sequence[ArrayLike]] = None) -> list:
        """Runs the plan on `inputs` (a dict by name, or a list in input_names order); returns the
        outputs in output_names order (`out`'s arrays where given)."""
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
        if out is not None and len(out) != len(self._outputs):
            raise ValueError(f"{len(out)} outputs given, the plan gives {len(self._outputs)}: {self.output_names}")
        on_gpu = self.backend.startswith("cuda")
        cuda = [_on_cuda(v) for v in values]
        keep: list = []  # DLPack capsules, alive until the run returns
        if any(cuda):
            first = self._inputs[cuda.index(True)][0]
            if not on_gpu:
                raise TypeError(f"input {first!r}: CUDA memory, but this plan runs on {self.backend}")
            if not all(cuda):
                host = self._inputs[cuda.index(False)][0]
                raise TypeError(f"input {host!r} is host memory and input {first!r} CUDA memory: give every input on one side")
            pointers = [self._cuda_pointer("input", n, d, s, v, keep) for (n, d, s), v in zip(self._inputs, values)]
            if out is None:
                out = self._torch_outputs(values)
            for (n, _, _), o in zip(self._outputs, out):
                if not _on_cuda(o):
                    raise TypeError(f"output {n!r}: the inputs are CUDA memory, so the outputs must be too")
            results = list(out)
            places = [self._cuda_pointer("output", n, d, s, o, keep) for (n, d, s), o in zip(self._outputs, results)]
            device = True
        else:
            arrays = [self._array("input", n, d, s, v) for (n, d, s), v in zip(self._inputs, values)]
            pointers = [a.ctypes.data for a in arrays]
            if out is None:
                results = [np.empty(s, dtype=d) for _, d, s in self._outputs]
            else:
                results = [self._array("output", n, d, s, o) for (n, d, s), o in zip(self._outputs, out)]
            places = [a.ctypes.data for a in results]
            device = not on_gpu  # on the host, host memory is the device's: aligned arrays in place
        self._plan.run_memory(pointers, places, device)
        return results

    def _torch_outputs(self, values: list) -> list:
        """Outputs of torch CUDA inputs: torch tensors on their device."""
        torch = sys.modules.get("torch")
        if torch is None or not all(isinstance(v, torch.Tensor) for v in values):
            raise TypeError("the inputs are CUDA arrays other than torch tensors: pass `out`, a CUDA array per output")
        device = values[0].device
        return [torch.empty(s, dtype=torch.from_numpy(np.empty(0, d)).dtype, device=device) for _, d, s in self._outputs]


# DLPack's (type code, bits) of each NumPy dtype the package uses (kDLInt 0, kDLUInt 1, kDLFloat 2,
# kDLBool 6 from DLPack 0.8; bfloat16, kDLBfloat 4, travels as uint16 here).
_DLPACK_DTYPES = {
    (0, 8): np.dtype(np.int8), (0, 16): np.dtype(np.int16), (0, 32): np.dtype(np.int32), (0, 64): np.dtype(np.int64),
    (1, 8): np.dtype(np.uint8), (1, 16): np.dtype(np.uint16), (1, 32): np.dtype(np.uint32), (1, 64): np.dtype(np.uint64),
    (2, 16): np.dtype(np.float16), (2, 32): np.dtype(np.float32), (2, 64): np.dtype(np.float64),
    (6, 8): np.dtype(np.bool_), (4, 16): np.dtype(np.uint16),
}
_DL_CUDA, _DL_CUDA_MANAGED = 2, 13


def _on_cuda_by_dlpack(value) -> bool:
    if not (hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__")):
        return False
    return value.__dlpack_device__()[0] in (_DL_CUDA, _DL_CUDA_MANAGED)


def _on_cuda(value) -> bool:
    """Whether `value` is CUDA memory: a DLPack tensor on a CUDA device, or a CUDA array."""
    return _on_cuda_by_dlpack(value) or hasattr(value, "__cuda_array_interface__")


def _c_contiguous(shape: tuple, strides_bytes, itemsize: int) -> bool:
    expect = itemsize
    for d, s in zip(reversed(shape), reversed(tuple(strides_bytes))):
        if d > 1 and s != expect:
            return False
        expect *= d
    return True


def load_plan(path: str, device: str = "auto", host_checked_blocks: int = 64) -> Plan:
    """Loads the plan bundle in directory `path` on "auto" (the first GPU where one is usable, else
    the host), "host", "cuda" (the first GPU) or "cuda:N" (the N-th GPU the driver reports, as
    CUDA_VISIBLE_DEVICES leaves them). On the host, `host_checked_blocks` blocks of each launch run
    under the race and initialisation checks (0: every block; all run under the memory and
    synchronisation checks)."""
    if not isinstance(device, str) or not (
        device in ("auto", "host", "cuda") or (device.startswith("cuda:") and device[5:].isascii() and device[5:].isdigit() and len(device) <= 9)
    ):
        raise ValueError(f"device {device!r}: one of auto, host, cuda, cuda:N")
    if isinstance(host_checked_blocks, bool) or not isinstance(host_checked_blocks, numbers.Integral) or not 0 <= host_checked_blocks < 2**63:
        raise ValueError(f"host_checked_blocks {host_checked_blocks!r}: a count of blocks, 0 for all")
    return Plan(_Plan.load(str(path), device, int(host_checked_blocks)))
