# Type stubs of the fusetune package (python/fusetune/__init__.py).
import os
import pathlib
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

__all__ = ["Client", "CommandError", "Plan", "Progress", "compile", "load_plan", "tune"]

ArrayLike = object
PathLike = Union[str, os.PathLike]

class CommandError(RuntimeError):
    command: list[str]
    returncode: int
    stderr: str
    def __init__(self, message: str, command: list[str], returncode: int, stderr: str) -> None: ...

class Progress:
    label: str
    done: int
    total: int
    line: str
    def __init__(self, label: str, done: int, total: int, line: str) -> None: ...

ProgressCallback = Callable[[Progress], None]

def compile(model: PathLike, out: PathLike, device: str = "h100", *, device_file: Optional[PathLike] = None,
            shapes: Optional[Mapping[str, Sequence[int]]] = None, precision: Optional[str] = None,
            libraries: Optional[str] = None, verify_blocks: Optional[int] = None,
            progress: Optional[ProgressCallback] = None) -> pathlib.Path: ...
def tune(model: PathLike, out: Optional[PathLike] = None, device: str = "auto", *, db: Optional[PathLike] = None,
         shapes: Optional[Mapping[str, Sequence[int]]] = None, candidates: Optional[int] = None,
         trials: Optional[int] = None, time_s: Optional[float] = None, precision: Optional[str] = None,
         libraries: Optional[str] = None, no_timing: bool = False, verify_blocks: Optional[int] = None,
         progress: Optional[ProgressCallback] = None) -> str: ...

class Client:
    coordinator: str
    def __init__(self, coordinator: str, *, key: Optional[PathLike] = None,
                 coordinator_key: Optional[PathLike] = None, timeout_s: Optional[float] = None) -> None: ...
    def submit(self, model: PathLike, device: str = "host", *, shapes: Optional[Mapping[str, Sequence[int]]] = None,
               candidates: Optional[int] = None, trials: Optional[int] = None, time_s: Optional[float] = None,
               precision: Optional[str] = None, libraries: Optional[str] = None,
               progress: Optional[ProgressCallback] = None) -> int: ...
    def status(self, job: Optional[int] = None) -> dict: ...
    def job(self, job: int) -> dict: ...
    def wait(self, job: int, *, poll_s: float = 0.5, timeout_s: Optional[float] = None,
             progress: Optional[ProgressCallback] = None) -> dict: ...
    def cancel(self, job: int) -> None: ...
    def export(self, job: int, out: PathLike) -> pathlib.Path: ...

class Plan:
    @property
    def input_names(self) -> list[str]: ...
    @property
    def output_names(self) -> list[str]: ...
    @property
    def output_counts(self) -> dict[str, tuple[str, int]]: ...
    def trim(self, results: Sequence[Any]) -> list[Any]: ...
    @property
    def backend(self) -> str: ...
    @property
    def no_gpu_reason(self) -> str: ...
    @property
    def launches(self) -> int: ...
    def run(self, inputs: Union[Mapping[str, ArrayLike], Sequence[ArrayLike]],
            out: Optional[Sequence[ArrayLike]] = None) -> list[Any]: ...

def load_plan(path: str, device: str = "auto", host_checked_blocks: int = 64) -> Plan: ...
