"""The grid's cluster path against a real SLURM cluster (`.ci/slurm-up`): submit, time out, requeue,
resume, collect, cancel. Every test here needs the `slurm_cluster` fixture: without a cluster they are
skipped with the command that starts one (and fail under CI)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch
import yaml

from heavytail.harness.artifacts import repo_root
from heavytail.pipeline.grid import main
from heavytail.pipeline.grid_file import GridSpec

from executed import train_cell

PARAMS = repo_root() / "params"
# Long enough for a busy 2-core machine (startup, two jobs sharing it), never reached when all is well.
DEADLINE_S = 900

pytestmark = pytest.mark.slow


def _grid(cluster, name: str, **slurm) -> dict:
    grid = yaml.safe_load((PARAMS / "grid_smoke.yaml").read_text())
    grid["name"] = name
    grid["slurm"] = {"partition": cluster.partition, "gpus_per_node": 0, "cpus_per_task": 1, "mem_gb": 2,
                     "timeout_min": 30, "poll_s": 2, **slurm}
    return grid


def _write(tmp_path: Path, grid: dict) -> str:
    path = tmp_path / f"{grid['name']}.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return str(path)


def _grid_json(grid_dir: Path) -> dict:
    return json.loads((grid_dir / "grid.json").read_text())


def _squeue(job_ids) -> dict[str, str]:
    out = subprocess.run(["squeue", "-h", "-r", "--states=all", "-o", "%i|%T"], capture_output=True, text=True,
                         check=True).stdout
    states = dict(line.split("|", 1) for line in out.split())
    return {j: states.get(j, "GONE") for j in job_ids}


def _grid_command(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "heavytail", "grid", *args], cwd=repo_root(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(condition, what: str, timeout_s: float = DEADLINE_S, every_s: float = 1.0,
              process: subprocess.Popen | None = None):
    """``condition()``'s first truthy value; fails at once when ``process`` (the grid command that should make it
    true) has exited first, with what it printed, rather than after the whole deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            out = process.stdout.read() if process.stdout else ""
            raise AssertionError(f"the grid command exited ({process.returncode}) before {what}:\n{out}")
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def _job_ids(grid_dir: Path) -> dict[str, str]:
    try:
        return {c["name"]: c["job_id"] for c in _grid_json(grid_dir)["configurations"] if c.get("job_id")}
    except (OSError, ValueError, KeyError):
        return {}


# --------------------------------------------------------------------------------- bad requests
def test_an_impossible_request_is_one_line_and_exit_2(slurm_cluster, tmp_path, capsys):
    too_many = slurm_cluster.cpus + 1
    for slurm, message in [({"partition": "no_such_partition"}, r"slurm.partition='no_such_partition' does not exist"),
                           ({"cpus_per_task": too_many}, rf"cpus_per_task={too_many} exceeds"),
                           ({"mem_gb": slurm_cluster.mem_mb // 1024 + 1}, r"mem_gb=\d+ exceeds"),
                           ({"gpus_per_node": 1}, r"gpus_per_node=1 exceeds")]:
        grid = _grid(slurm_cluster, "grid-refused", **slurm)
        assert main([_write(tmp_path, grid), "--executor", "slurm", "--output-root", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and re.search(message, err[0]), err
        assert "Traceback" not in err[0]
    assert not (tmp_path / "grid-refused" / "_submitit").exists()  # nothing was submitted


def test_sinfo_time_limits_and_gres_are_read():
    from heavytail.pipeline.cluster import _gpus, _minutes

    assert [_minutes(t) for t in ("infinite", "UNLIMITED", "30", "30:00", "1:00:00", "2-00:00:00", "2-12", "1-2:30")] \
        == [None, None, 30, 30, 60, 2880, 3600, 1590]
    assert [_gpus(g) for g in ("(null)", "gpu:4", "gpu:a100:4(S:0-1)", "gpu:a100:2,gpu:v100:2", "gpu:1,shard:8")] \
        == [0, 4, 4, 4, 1]


def test_without_sbatch_the_grid_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no SLURM commands on it
    grid = yaml.safe_load((PARAMS / "grid_smoke.yaml").read_text())
    assert main([_write(tmp_path, grid), "--executor", "slurm", "--output-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sbatch is not on the PATH" in err[0] and "--executor local" in err[0], err


# --------------------------------------------------------------------------------- the smoke grid
def test_the_smoke_grid_runs_to_ok_on_slurm(slurm_cluster, tmp_path, capfd):
    grid = _grid(slurm_cluster, "grid-slurm-smoke")
    spec = GridSpec.from_dict(grid)
    assert main([_write(tmp_path, grid), "--executor", "slurm", "--output-root", str(tmp_path)]) == 0
    err = capfd.readouterr().err
    grid_dir = tmp_path / spec.name
    recorded = _grid_json(grid_dir)
    assert recorded["finished"] and recorded["executor"] == "slurm"
    assert [c["status"] for c in recorded["configurations"]] == ["ok", "ok"]
    index = (grid_dir / "index.html").read_text()
    for name, entry in zip(spec.names, recorded["configurations"]):
        run_dir = grid_dir / name
        record = json.loads((run_dir / "execution.json").read_text())
        assert record["slurm_job_id"], "ran outside SLURM"
        assert re.fullmatch(r"\d+_\d", entry["job_id"])
        for file in ("COMPLETE", "model.pt", "results.json", "04_ablation.ipynb", "04_ablation.html"):
            assert (run_dir / file).is_file(), file
        assert "image/png" in (run_dir / "04_ablation.ipynb").read_text()
        assert f'href="{name}/04_ablation.html"' in index
        assert not (run_dir / "grid.lock").exists()  # released when the job ended
        assert (grid_dir / "_submitit" / entry["job_id"] / f"{entry['job_id']}_0_log.out").is_file()
    # accounting is off on this cluster: no sacct call, so no warning per poll
    assert err.count("sacct") <= 1, err


# --------------------------------------------------------------------------------- timeout and requeue
def _submitit_log(grid_dir: Path, job_id: str) -> list[tuple[str, str]]:
    """(time, message) of submitit's lines in the job's stdout log (every level; appended across requeues)."""
    lines = []
    for log in sorted((grid_dir / "_submitit" / job_id).glob("*_log.out")):
        for line in log.read_text(errors="replace").splitlines():
            match = re.match(r"submitit \w+ \((\d{4}-\d\d-\d\d [\d:]+),\d+\) - (.*)", line)
            if match:
                lines.append((match.group(1), match.group(2)))
    return lines


def test_a_timed_out_job_is_requeued_and_resumes_to_the_same_weights(slurm_cluster, tmp_path):
    """A configuration whose training outlasts the job's time limit: SLURM signals it (USR2, ``signal_delay_s``
    before the limit), submitit checkpoints the task and requeues the job, and the requeued job executes the
    notebook again, which resumes training from the run's last checkpoint. The final weights must be bitwise
    those of the same configuration run uninterrupted with ``--executor local``.

    Where the time limit falls in the training depends on how fast this machine is right now (startup alone
    takes from seconds to minutes on a busy 2-core box), so the job is submitted with a generous
    ``timeout_min`` and, once its training has written a checkpoint, the test lowers the job's time limit
    with ``scontrol update`` so it runs out mid-training. The signal, the requeue and the resume are
    SLURM's and submitit's own. SLURM holds a requeued job for two minutes before it may start again;
    the test releases it at once (``StartTime=now``)."""
    # The signal window (150 s) is wider than the time left once the limit is lowered (60-120 s, below), so
    # the window is open at once and slurmctld signals at its next time-limit check (every 30 s).
    grid = _grid(slurm_cluster, "grid-slurm-requeue", timeout_min=10, signal_delay_s=150, max_num_timeout=3)
    grid["axes"]["tasks"] = grid["axes"]["tasks"][:1]
    # 8-16 ms a step on one core (quiet to busy): 12000 steps keep training going for over 90 s after the
    # first checkpoint, three times that 30 s wait. At 6000 steps with a 90 s window (signal up to a minute
    # after the update) a quiet machine finished training first and the requeued notebook had nothing to resume.
    grid["base"].update(steps=12000, checkpoint_every=20, log_every=1)
    spec = GridSpec.from_dict(grid)
    (name,), cfg = spec.names, spec.configs[0]
    grid_file = _write(tmp_path, grid)
    cluster_root, local_root = tmp_path / "slurm", tmp_path / "local"
    grid_dir = cluster_root / spec.name
    run_dir = grid_dir / name

    timeline = []

    def note(event: str) -> None:
        timeline.append((time.strftime("%Y-%m-%d %H:%M:%S"), event))

    slurm_run = _grid_command(grid_file, "--executor", "slurm", "--output-root", str(cluster_root))
    note("grid command started (--executor slurm)")
    # The uninterrupted reference on the other core, meanwhile.
    local_run = _grid_command(grid_file, "--executor", "local", "--workers", "1", "--threads", "1",
                              "--output-root", str(local_root))
    try:
        job_id = _wait_for(lambda: _job_ids(grid_dir).get(name), "the submission", process=slurm_run)
        note(f"submitted as SLURM job {job_id}")
        first = _wait_for(lambda: sorted((run_dir / "checkpoints").glob("step_*.pt")), "a first checkpoint",
                          every_s=0.5)
        state = _squeue([job_id])[job_id]
        assert state == "RUNNING", f"the job ended before its training did ({state}); give it more steps"
        # Elapsed whole minutes plus two: the limit is 60-120 s away, inside the 150 s signal window, and far
        # enough for submitit to checkpoint and requeue before the kill.
        elapsed = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%M"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        parts = [int(p) for p in elapsed.split("-")[-1].split(":")]
        minutes = (parts[-2] if len(parts) >= 2 else 0) + 60 * (parts[-3] if len(parts) >= 3 else 0)
        subprocess.run(["scontrol", "update", f"JobId={job_id}", f"TimeLimit={minutes + 2}"], check=True)
        note(f"training at {first[-1].stem}; job time limit lowered to {minutes + 2} min (elapsed {elapsed})")

        def requeued():
            return any("Requeued job" in msg for _, msg in _submitit_log(grid_dir, job_id))

        _wait_for(requeued, "the timeout signal and the requeue", timeout_s=300)
        # Released at once instead of after SLURM's two-minute hold; the limit back to the grid's.
        _wait_for(lambda: _squeue([job_id])[job_id] == "PENDING", "the requeued job to be pending", timeout_s=60)
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now", "TimeLimit=10"], check=True)
        note("requeued job released (StartTime=now)")
        out, _ = slurm_run.communicate(timeout=DEADLINE_S)
        assert slurm_run.returncode == 0, out
        note("grid command finished")
        local_out, _ = local_run.communicate(timeout=DEADLINE_S)
        assert local_run.returncode == 0, local_out
    finally:
        for process in (slurm_run, local_run):
            if process.poll() is None:
                process.kill()

    log = _submitit_log(grid_dir, job_id)
    events = {"signalled": "Caught signal SIGUSR2", "requeued": "Requeued job",
              "started": "Starting with JobEnvironment", "finished": "Job completed successfully"}
    found = {key: [t for t, msg in log if pattern in msg] for key, pattern in events.items()}
    assert len(found["started"]) >= 2, log  # the first attempt and at least one after a requeue
    assert found["signalled"] and found["requeued"] and len(found["finished"]) == 1, log
    assert any("this job is timed-out" in msg for _, msg in log), log
    executed = nbformat.read(run_dir / "04_ablation.ipynb", as_version=4)
    text = "\n".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    resumed = re.search(r"training: resuming from (step_\d+)", text)
    said = re.search(r"training: .*", text)
    assert resumed, (f"the requeued notebook did not resume from a checkpoint; it said {said and said.group(0)!r}; "
                     f"timeline: {timeline + log}")

    timeline += [(t, f"submitit: {msg}") for t, msg in log
                 if any(p in msg for p in ("Starting with", "Caught signal", "Requeued job", "completed", "Exiting"))]
    timeline.append((json.loads((run_dir / "execution.json").read_text())["started"].replace("T", " "),
                     f"notebook executed again: training resuming from {resumed.group(1)}"))
    report = "\n".join(f"  {t}  {event}" for t, event in sorted(timeline, key=lambda item: item[0]))
    (grid_dir / "requeue_timeline.txt").write_text(report + "\n")
    print(f"requeue timeline of SLURM job {job_id} ({name}):\n{report}")

    # Bitwise the uninterrupted run's weights, and every logged step exactly once.
    ours = torch.load(run_dir / "model.pt", map_location="cpu", weights_only=False)
    reference = torch.load(local_root / spec.name / name / "model.pt", map_location="cpu", weights_only=False)
    ours, reference = (w.get("model", w) if isinstance(w, dict) else w for w in (ours, reference))
    assert ours.keys() == reference.keys()
    for key in reference:
        assert torch.equal(ours[key], reference[key]), key
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert steps == list(range(1, cfg.steps + 1)), (steps[:5], len(steps))


# --------------------------------------------------------------------------------- --no-wait
def test_no_wait_submits_returns_and_a_rerun_neither_resubmits_nor_loses_the_jobs(slurm_cluster, tmp_path):
    grid = _grid(slurm_cluster, "grid-slurm-nowait")
    spec = GridSpec.from_dict(grid)
    grid_file, grid_dir = _write(tmp_path, grid), tmp_path / spec.name
    command = [grid_file, "--executor", "slurm", "--output-root", str(tmp_path)]

    assert main(command + ["--no-wait"]) == 0
    submitted = _job_ids(grid_dir)
    assert sorted(submitted) == sorted(spec.names)
    states = _squeue(submitted.values())
    assert all(s in ("PENDING", "RUNNING") for s in states.values()), states  # returned while they run
    assert [c["status"] for c in _grid_json(grid_dir)["configurations"]] == ["submitted", "submitted"]

    # Again while they are pending or running: the same jobs, nothing new in the queue.
    assert main(command + ["--no-wait"]) == 0
    assert _job_ids(grid_dir) == submitted
    names = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%j"], capture_output=True, text=True, check=True).stdout
    ours = [line for line in names.split() if line.endswith(f"heavytail-{spec.name}")]
    assert sorted(line.split("|")[0] for line in ours) == sorted(submitted.values())

    # Once they have finished, the same command collects them.
    _wait_for(lambda: all(s not in ("PENDING", "RUNNING", "COMPLETING") for s in _squeue(submitted.values()).values()),
              "the jobs to finish", every_s=2)
    assert main(command) == 0
    collected = _grid_json(grid_dir)
    assert [c["status"] for c in collected["configurations"]] == ["ok", "ok"] and collected["finished"]
    assert _job_ids(grid_dir) == submitted
    assert main(command) == 0  # and afterwards they are finished runs, not run again
    assert [c["status"] for c in _grid_json(grid_dir)["configurations"]] == ["skipped", "skipped"]


# --------------------------------------------------------------------------------- failure and scancel


def test_a_failing_notebook_and_a_cancelled_task_are_reported_and_the_others_finish(slurm_cluster, tmp_path):
    grid = _grid(slurm_cluster, "grid-slurm-failures", array_parallelism=2)
    grid["base"].update(benchmark="sheared_swap", marginals="mirrored_pareto")
    grid["base"].pop("seed")
    grid["axes"] = {"seed": [0, 1, 2]}
    spec = GridSpec.from_dict(grid)
    good, bad, cancelled = spec.names
    grid_file, grid_dir = _write(tmp_path, grid), tmp_path / spec.name
    # A folder whose checkpoints/ is a file: this configuration fails inside its training cell, at its first
    # checkpoint. (A folder of another configuration's run is refused before anything runs: test_reliability_probes.)
    (grid_dir / bad).mkdir(parents=True)
    (grid_dir / bad / "checkpoints").write_text("")

    run = _grid_command(grid_file, "--executor", "slurm", "--output-root", str(tmp_path))
    try:
        job_id = _wait_for(lambda: _job_ids(grid_dir).get(cancelled), "the submission", process=run)
        subprocess.run(["scancel", job_id], check=True)
        out, _ = run.communicate(timeout=DEADLINE_S)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, out  # a configuration failed (and one was cancelled)
    entries = {c["name"]: c for c in _grid_json(grid_dir)["configurations"]}
    assert entries[good]["status"] == "ok"
    assert entries[bad]["status"] == "failed"
    assert "File exists" in entries[bad]["error"] and "checkpoints" in entries[bad]["error"], entries[bad]["error"]
    assert entries[bad]["failed_cell"] == train_cell(grid_dir / entries[bad]["ipynb"])
    assert (grid_dir / entries[bad]["html"]).is_file()
    assert entries[cancelled]["status"] == "cancelled" and "cancelled" in entries[cancelled]["error"]
    assert re.search(rf"{re.escape(cancelled)}\s+cancelled", out), out
    assert _grid_json(grid_dir)["counts"]["cancelled"] == 1

    # A rerun runs the cancelled configuration again (the failed one fails again; the ok one is skipped).
    assert main([grid_file, "--executor", "slurm", "--output-root", str(tmp_path)]) == 1
    entries = {c["name"]: c for c in _grid_json(grid_dir)["configurations"]}
    assert [entries[n]["status"] for n in spec.names] == ["skipped", "failed", "ok"]
    assert entries[cancelled]["job_id"] != job_id
