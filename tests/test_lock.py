"""One process at a time per configuration: the run folder's lock, and two grid commands at once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
import yaml

from heavytail.harness.artifacts import repo_root
from heavytail.pipeline import lock
from heavytail.pipeline.configuration import configuration_jobs, execute_configuration
from heavytail.pipeline.grid import EXIT_LOCKED, main
from heavytail.pipeline.grid_file import GridSpec


def test_a_live_holder_keeps_the_lock_and_is_named(tmp_path):
    me = lock.acquire(tmp_path)
    assert json.loads((tmp_path / lock.LOCK_FILE).read_text())["pid"] == me.pid
    # A second acquirer (here: this process again, as another grid command would be) is refused by name.
    with pytest.raises(lock.Locked, match=rf"held by pid {me.pid} on {socket.gethostname()}"):
        lock.acquire(tmp_path)
    assert lock.holder(tmp_path) == me
    lock.release(tmp_path, me)
    assert not (tmp_path / lock.LOCK_FILE).exists() and lock.holder(tmp_path) is None


def test_a_dead_holder_is_stale_and_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid is free now (and if reused, the start time differs)
    (tmp_path / lock.LOCK_FILE).write_text(json.dumps(
        {"pid": dead.pid, "host": socket.gethostname(), "job_id": None, "since": "2026-01-01T00:00:00",
         "pid_start": "1"}))
    assert lock.holder(tmp_path) is None
    me = lock.acquire(tmp_path)
    assert lock.read(tmp_path) == me


def test_an_earlier_attempt_of_the_same_slurm_job_is_stale(tmp_path, monkeypatch):
    # A requeued job runs again under the same job id, possibly on another node: its old lock is its own.
    (tmp_path / lock.LOCK_FILE).write_text(json.dumps(
        {"pid": 1, "host": "another-node", "job_id": "41_3", "since": "2026-01-01T00:00:00"}))
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert lock.holder(tmp_path) is None
    assert lock.acquire(tmp_path).job_id == "41_3"


def test_a_holder_on_another_host_without_a_job_counts_as_alive(tmp_path):
    (tmp_path / lock.LOCK_FILE).write_text(json.dumps(
        {"pid": 1, "host": "another-host", "job_id": None, "since": "2026-01-01T00:00:00"}))
    with pytest.raises(lock.Locked, match="pid 1 on another-host"):
        lock.acquire(tmp_path)


def test_a_locked_configuration_is_not_executed_and_its_folder_left_alone(tmp_path):
    grid = yaml.safe_load((repo_root() / "params" / "grid_smoke.yaml").read_text())
    spec = GridSpec.from_dict(grid)
    job = configuration_jobs(spec, tmp_path / spec.name, threads=1)[0]
    held = lock.acquire(tmp_path / spec.name / job.name)
    record = execute_configuration(job)
    assert record["status"] == "locked" and f"pid {held.pid}" in record["error"]
    assert not (tmp_path / spec.name / job.name / "execution.json").exists()


@pytest.mark.slow
def test_two_grid_commands_never_run_one_configuration_at_once(tmp_path, capsys):
    grid = yaml.safe_load((repo_root() / "params" / "grid_smoke.yaml").read_text())
    grid["axes"]["tasks"] = grid["axes"]["tasks"][:1]
    spec = GridSpec.from_dict(grid)
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(grid))
    run_dir = tmp_path / spec.name / spec.names[0]
    first = subprocess.Popen([sys.executable, "-m", "heavytail", "grid", str(grid_file), "--executor", "local",
                              "--output-root", str(tmp_path)], cwd=repo_root(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while lock.holder(run_dir) is None:
            assert first.poll() is None and time.monotonic() < deadline, "the first command never took the lock"
            time.sleep(0.2)
        holder = lock.holder(run_dir)
        # Not failed, but not finished by this command either: its own exit code.
        assert main([str(grid_file), "--executor", "local", "--output-root", str(tmp_path)]) == EXIT_LOCKED
        out = capsys.readouterr()
        assert f"locked  being run by another grid command: pid {holder.pid}" in out.out
        assert f"pid {holder.pid} on {holder.host}" in out.err
        out_first, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, out_first
    record = json.loads((run_dir / "execution.json").read_text())
    assert record["status"] == "ok"
    assert not (run_dir / lock.LOCK_FILE).exists()
