"""fusetune.compile, fusetune.tune and fusetune.Client against the real command-line tool: a
coordinator and a host worker started on loopback (ports the system chooses, read back from
--endpoint-file), a job submitted, watched with progress, exported and run against PyTorch's
outputs, cancelled, and every mistake answered with CommandError and the tool's diagnosis; a tune
without a GPU; compile's progress and its refusals. Run by ctest (python.runtime) with
FUSETUNE_BINARY the CLI and FUSETUNE_SOURCE_DIR the checkout."""

import json
import os
import pathlib
import subprocess
import time

import numpy as np
import pytest

import fusetune
from testdata import MODELS, expect_close, tensors


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory):
    """A Client of a coordinator with one host worker, both stopped after the module."""
    work = tmp_path_factory.mktemp("service")
    binary = os.environ["FUSETUNE_BINARY"]
    endpoint_file = work / "endpoint.json"
    logs = []
    children = []

    def start(args, log_name):
        log = open(work / log_name, "w")
        logs.append(log)
        children.append(subprocess.Popen([binary, *args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

    start(["coordinator", "--listen", "tcp://127.0.0.1:0", "--db", str(work / "search.db"),
           "--endpoint-file", str(endpoint_file)], "coordinator.log")
    deadline = time.monotonic() + 60
    while not endpoint_file.exists():  # written (whole, by a rename) once the socket is bound
        assert children[0].poll() is None, (work / "coordinator.log").read_text()
        assert time.monotonic() < deadline, "the coordinator never listened"
        time.sleep(0.05)
    endpoint = json.loads(endpoint_file.read_text())["listen"]
    start(["worker", "--coordinator", endpoint, "--device", "host", "--compile-jobs", "1", "--id", "python-worker"],
          "worker.log")
    yield fusetune.Client(endpoint), work
    for child in reversed(children):
        child.terminate()
    for child in children:
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    for log in logs:
        log.close()


def test_a_submitted_job_is_watched_exported_and_runs(coordinator, tmp_path):
    client, _ = coordinator
    model = MODELS / "cnn_small"
    uploads = []
    job = client.submit(model / "model.onnx", device="host", candidates=1, progress=uploads.append)
    assert isinstance(job, int) and job > 0
    seen = []
    final = client.wait(job, progress=seen.append, timeout_s=600)
    assert final["state"] == "done", final
    assert seen and seen[-1].label == "tasks" and seen[-1].done == seen[-1].total == final["tasks"] > 0
    # Each search round queues the job's tasks again: done counts the round's, not monotone.
    assert all(0 <= p.done <= p.total for p in seen) and "candidates measured" in seen[-1].line
    assert client.job(job)["state"] == "done"
    assert any(j["job_id"] == job for j in client.status()["jobs"])

    plan = fusetune.load_plan(client.export(job, tmp_path / "plan"), device="host")
    outputs = plan.run(tensors(model / "test_data_set_0", "input"))
    expect_close(outputs, tensors(model / "test_data_set_0", "output"), 1e-4)

    client.cancel(job)  # a finished job stays as it ended
    assert client.job(job)["state"] == "done"


def test_mistakes_raise_the_tools_diagnosis(coordinator, tmp_path):
    client, _ = coordinator
    with pytest.raises(fusetune.CommandError) as unknown:
        client.status(999)
    assert unknown.value.returncode == 2 and "no job 999" in str(unknown.value), unknown.value.stderr
    with pytest.raises(fusetune.CommandError) as missing:
        client.submit(tmp_path / "absent.onnx")
    assert missing.value.returncode == 2 and "absent.onnx" in str(missing.value), missing.value.stderr
    # Port 1 on loopback: nothing listens there (below 1024, no test service binds it).
    with pytest.raises(fusetune.CommandError) as nobody:
        fusetune.Client("tcp://127.0.0.1:1", timeout_s=2).export(1, tmp_path / "x")
    assert nobody.value.returncode == 2 and "no reply from the coordinator" in str(nobody.value), nobody.value.stderr
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError):
        fusetune.Client("127.0.0.1:5555")
    with pytest.raises(ValueError):
        fusetune.Client("tcp://127.0.0.1:5555", key="w.key")
    with pytest.raises(ValueError):
        fusetune.Client("tcp://127.0.0.1:5555", timeout_s=0)


def test_compile_reports_progress_and_its_refusals(tmp_path):
    model = MODELS / "nerf_mlp" / "model.onnx"
    seen = []
    out = fusetune.compile(model, tmp_path / "plan", device="h100", verify_blocks=0, progress=seen.append)
    assert (out / "manifest.json").is_file()
    verifying = [p for p in seen if p.label == "verifying kernels on the host"]
    assert verifying and verifying[-1].done == verifying[-1].total > 0, [p.line for p in seen]

    with pytest.raises(fusetune.CommandError) as unknown_device:
        fusetune.compile(model, tmp_path / "none", device="no-such-gpu")
    assert unknown_device.value.returncode == 2 and "no-such-gpu" in str(unknown_device.value)
    assert not (tmp_path / "none").exists()
    with pytest.raises(ValueError):
        fusetune.compile(model, tmp_path / "none", shapes={"x": (1, 0)})


def test_tune_without_a_gpu_is_a_dry_run_that_writes_a_plan(tmp_path):
    model = MODELS / "nerf_mlp"
    table = fusetune.tune(model / "model.onnx", tmp_path / "plan", device="h100", db=tmp_path / "search.db",
                          candidates=1, no_timing=True)
    assert "nothing was timed" in table, table
    plan = fusetune.load_plan(tmp_path / "plan", device="host")
    inputs = tensors(model / "test_data_set_0", "input")
    expect_close(plan.run(inputs), tensors(model / "test_data_set_0", "output"), 1e-4)
    assert all(isinstance(o, np.ndarray) for o in plan.run(inputs))
