"""compile, tune and a coordinator Client from Python, through the fusetune command-line tool.

The deployment runtime (load_plan) holds no compiler; planning, kernel generation, verification
and tuning are the `fusetune` executable's. These functions run it as a child process with the
arguments its commands document (README.md, "Commands"), report its progress lines to a callback
as they come, and raise CommandError with its one-line diagnosis when it fails. The executable is
the one named by the FUSETUNE_BINARY environment variable, else the package's own (bin/fusetune,
which `pip install .` puts there), else `fusetune` on PATH (an installed C++ package's).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence, Union

PathLike = Union[str, os.PathLike]

__all__ = ["CommandError", "Progress", "compile", "tune", "Client"]


class CommandError(RuntimeError):
    """A fusetune command failed. str() is its diagnosis (the last line it wrote to stderr, which
    names the culprit: the file, node, option or peer); `command` is its argument list,
    `returncode` its exit status (1: the work failed, 2: bad input or no coordinator), `stderr` all
    it wrote there."""

    def __init__(self, message: str, command: list[str], returncode: int, stderr: str):
        super().__init__(message)
        self.command = command
        self.returncode = returncode
        self.stderr = stderr


@dataclass(frozen=True)
class Progress:
    """One progress report of a running command: `label` (what is under way: "verifying kernels
    on the host", "tuning", "upload"), `done` of `total` units, and the line as printed."""

    label: str
    done: int
    total: int
    line: str


ProgressCallback = Callable[[Progress], None]

# tools/progress.cpp's line: "LABEL DONE/TOTAL (P%) [DETAIL, ]ELAPSEDs[, about ... left]".
_PROGRESS = re.compile(r"^(?P<label>.+?) (?P<done>\d+)/(?P<total>\d+) \(\d+%\)")


def _binary() -> str:
    named = os.environ.get("FUSETUNE_BINARY")
    if named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            raise FileNotFoundError(f"FUSETUNE_BINARY={named}: not an executable file")
        return named
    bundled = pathlib.Path(__file__).resolve().parent / "bin" / "fusetune"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    found = shutil.which("fusetune")
    if found is None:
        raise FileNotFoundError("the fusetune command-line tool was not found: this package has no bin/fusetune; "
                                "set FUSETUNE_BINARY to it (a build tree's build/fusetune) or put it on PATH")
    return found


def _run(args: Sequence[str], progress: Optional[ProgressCallback] = None) -> str:
    """Runs `fusetune ARGS...`; returns its standard output. Progress lines go to `progress`."""
    command = [_binary(), *args]
    # Every progress update as a line of its own (tools/progress.h), not every tenth of the work.
    env = dict(os.environ, FUSETUNE_PROGRESS="lines")
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env, text=True, errors="replace")
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(child.stdout.read()), daemon=True)
    reader.start()
    messages: list[str] = []
    try:
        for line in child.stderr:
            line = line.rstrip("\n")
            m = _PROGRESS.match(line)
            if m:
                if progress is not None:
                    progress(Progress(m["label"], int(m["done"]), int(m["total"]), line))
            elif line:
                messages.append(line)
        rc = child.wait()
    except BaseException:  # a callback's exception or KeyboardInterrupt: the child stops too
        child.kill()
        child.wait()
        raise
    finally:
        reader.join()
        child.stdout.close()
        child.stderr.close()
    if rc != 0:
        why = messages[-1] if messages else f"exited with status {rc} and said nothing"
        raise CommandError(why, command, rc, "\n".join(messages))
    return "".join(out)


def _shape_args(shapes: Optional[Mapping[str, Sequence[int]]]) -> list[str]:
    args: list[str] = []
    for name, dims in (shapes or {}).items():
        if not all(isinstance(d, int) and d > 0 for d in dims):
            raise ValueError(f"shape of {name!r}: positive integers, not {list(dims)}")
        args += ["--shape", f"{name}={'x'.join(str(d) for d in dims)}"]
    return args


def _options(**options) -> list[str]:
    """--name value for each option given (None: the command's default); True: the flag alone."""
    args: list[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args


def compile(model: PathLike, out: PathLike, device: str = "h100", *, device_file: Optional[PathLike] = None,
            shapes: Optional[Mapping[str, Sequence[int]]] = None, precision: Optional[str] = None,
            libraries: Optional[str] = None, verify_blocks: Optional[int] = None,
            progress: Optional[ProgressCallback] = None) -> pathlib.Path:
    """`fusetune compile`: plans MODEL for `device` (a name the planner knows: h100, h200, a100, ...;
    or `device_file`, a device description), generates its kernels, verifies each on the host on
    at most `verify_blocks` blocks of its grid (0: all) and writes the plan bundle to `out`, which
    load_plan then loads. `shapes` fixes symbolic dimensions ({"input_ids": (1, 128)}); `precision`
    is "model" or "tf32"; `libraries` "all", "none" or a list such as "cublasLt,cudnn". Returns
    `out`. Writes nothing when a kernel fails its verification (CommandError names it)."""
    args = ["compile", os.fspath(model), "--out", os.fspath(out)]
    args += ["--device-file", os.fspath(device_file)] if device_file is not None else ["--device", device]
    args += _shape_args(shapes)
    args += _options(precision=precision, libraries=libraries, verify_blocks=verify_blocks)
    _run(args, progress)
    return pathlib.Path(out)


def tune(model: PathLike, out: Optional[PathLike] = None, device: str = "auto", *, db: Optional[PathLike] = None,
         shapes: Optional[Mapping[str, Sequence[int]]] = None, candidates: Optional[int] = None,
         trials: Optional[int] = None, time_s: Optional[float] = None, precision: Optional[str] = None,
         libraries: Optional[str] = None, no_timing: bool = False, verify_blocks: Optional[int] = None,
         progress: Optional[ProgressCallback] = None) -> str:
    """`fusetune tune`: tunes MODEL on `device` ("auto": this machine's first GPU, or a dry run for
    the default target without one; "host": times on the host's executor; or a device name: a dry
    run where this machine lacks it) with a coordinator and a worker in this process's child, the
    measurements kept in the search database `db` (default: the user's cache directory), and writes
    the tuned plan bundle to `out` when given. `candidates`, `trials` and `time_s` bound the search
    as the command's --candidates, --trials and --time do. Returns the job's table as printed."""
    args = ["tune", os.fspath(model), "--device", device]
    if out is not None:
        args += ["--out", os.fspath(out)]
    if db is not None:
        args += ["--db", os.fspath(db)]
    args += _shape_args(shapes)
    args += _options(candidates=candidates, trials=trials, time=time_s, precision=precision, libraries=libraries,
                     no_timing=no_timing, verify_blocks=verify_blocks)
    return _run(args, progress)


class Client:
    """Jobs on a running coordinator (`fusetune coordinator`), at `coordinator` ("tcp://HOST:PORT").
    With `key` and `coordinator_key` (the files of `fusetune keys generate`) it talks CURVE.
    `timeout_s`: how long each request waits for the coordinator's reply (default: the command's,
    submit 120 s, status and cancel 10 s, export 600 s); past it, CommandError."""

    def __init__(self, coordinator: str, *, key: Optional[PathLike] = None, coordinator_key: Optional[PathLike] = None,
                 timeout_s: Optional[float] = None):
        if not isinstance(coordinator, str) or not coordinator.startswith("tcp://"):
            raise ValueError(f"coordinator {coordinator!r}: an endpoint tcp://HOST:PORT")
        if (key is None) != (coordinator_key is None):
            raise ValueError("key and coordinator_key go together (CURVE needs both)")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s {timeout_s!r}: seconds, more than 0")
        self.coordinator = coordinator
        self._common = ["--coordinator", coordinator]
        if key is not None:
            self._common += ["--key", os.fspath(key), "--coordinator-key", os.fspath(coordinator_key)]
        if timeout_s is not None:
            self._common += ["--timeout-s", str(timeout_s)]

    def _run(self, args: list[str], progress: Optional[ProgressCallback] = None) -> str:
        return _run([*args, *self._common], progress)

    def submit(self, model: PathLike, device: str = "host", *, shapes: Optional[Mapping[str, Sequence[int]]] = None,
               candidates: Optional[int] = None, trials: Optional[int] = None, time_s: Optional[float] = None,
               precision: Optional[str] = None, libraries: Optional[str] = None,
               progress: Optional[ProgressCallback] = None) -> int:
        """Uploads MODEL (and its external data files) and queues a tuning job for `device` (the
        name of the GPU the workers time on, or "host"); returns the job's id."""
        args = ["submit", os.fspath(model), "--device", device, *_shape_args(shapes)]
        args += _options(candidates=candidates, trials=trials, time=time_s, precision=precision, libraries=libraries)
        return int(self._run(args, progress).split()[0])

    def status(self, job: Optional[int] = None) -> dict:
        """The coordinator's status as the HTTP API's /api/jobs gives it (docs/dashboards.md):
        {"jobs": [...], "workers": N}; only job `job` when given."""
        args = ["status"] + ([str(int(job))] if job is not None else []) + ["--json"]
        return json.loads(self._run(args))

    def job(self, job: int) -> dict:
        """One job's status: job_id, model_name, its state ("queued", "running", "done", "failed",
        "cancelled"), tasks, tasks_done, tasks_failed, candidates_measured, error, and its summary
        once done."""
        return self.status(job)["jobs"][0]

    def wait(self, job: int, *, poll_s: float = 0.5, timeout_s: Optional[float] = None,
             progress: Optional[ProgressCallback] = None) -> dict:
        """Polls job `job` until it leaves "queued" and "running"; `progress` hears of each change:
        ("tasks", done of total in the search's current round: each round queues the job's tasks
        again), its line also giving the candidates measured so far. Returns its final status;
        raises TimeoutError after `timeout_s` seconds, leaving the job running."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        reported = None
        while True:
            st = self.job(job)
            done, total = int(st["tasks_done"]) + int(st["tasks_failed"]), int(st["tasks"])
            measured = int(st["candidates_measured"])
            if progress is not None and total > 0 and (done, measured, st["state"]) != reported:
                reported = (done, measured, st["state"])
                progress(Progress("tasks", done, total,
                                  f"job {job}: {done}/{total} tasks, {measured} candidates measured, {st['state']}"))
            if st["state"] not in ("queued", "running"):
                return st
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job} still {st['state']} after {timeout_s} s")
            time.sleep(poll_s)

    def cancel(self, job: int) -> None:
        """Cancels job `job` (a finished job stays as it ended); what its tasks measured stays in
        the search database."""
        self._run(["cancel", str(int(job))])

    def export(self, job: int, out: PathLike) -> pathlib.Path:
        """Writes the tuned plan bundle of finished job `job` to `out` (for load_plan); returns `out`."""
        self._run(["export", str(int(job)), "--out", os.fspath(out)])
        return pathlib.Path(out)
