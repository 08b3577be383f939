"""Shared fixtures: tiny configurations that exercise the real code paths in seconds."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from heavytail.harness.artifacts import repo_root
from heavytail.harness.config import RunConfig

# Under pytest-xdist the workers share the cores: each worker's torch, and the processes its tests start (notebook
# kernels read OMP_NUM_THREADS), gets its share of the threads instead of all of them each, which oversubscribes the
# cores. A test that needs a thread count sets it itself; a thread count set outside the run is kept.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    import torch

    _SHARE = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(_SHARE)
        torch.set_num_threads(_SHARE)

TINY = dict(
    d_model=16, n_blocks=1, d_ff=32, n_points=64, trials_per_step=4, steps=12, warmup_steps=2,
    eval_trials=8, eval_n_points=256, eval_batch_trials=4, bootstrap_resamples=200,
    checkpoint_every=4, log_every=1, kernel="linear_elu", attention_backend="dense",
    # eq. 10 in eager tiles: torch.compile's seconds per process outweigh these tiny runs; the compiled loss is
    # checked against float64 references in test_energy.py and end to end in test_train.py's resume test.
    energy_backend="eager",
)


@pytest.fixture
def tiny_cfg() -> RunConfig:
    return RunConfig.from_dict(TINY)


# ------------------------------------------------------------------------------ tiers and workers
# What each test file starts beyond Python: a marker per system, so `pytest -m "not slurm"` leaves it out.
# `make test` runs the files side by side (pytest-xdist, --dist loadfile: a file's tests on one worker, so a
# module's fixtures are built once).
SYSTEMS = {"test_slurm.py": "slurm", "test_browser.py": "browser", "test_report.py": "notebooks",
           "test_flash_native.py": "native"}


# The files with the longest chains (the smoke report's notebooks, SLURM jobs that wait on timeouts and requeues, C++
# builds, the grids' subprocesses), started first: xdist hands files to workers in collection order, and a long file
# collected last (alphabetically, test_report and test_slurm are) runs alone at the end while the other workers idle.
FIRST = ("test_report.py", "test_slurm.py", "test_flash_native.py", "test_grid.py", "test_browser.py", "test_lock.py",
         "test_phase_diagram.py", "test_train.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = Path(str(item.fspath)).name
        if name in SYSTEMS:
            item.add_marker(getattr(pytest.mark, SYSTEMS[name]))
    # Stable: within a file, and among the other files, the collection order stays (the same on every worker).
    items.sort(key=lambda item: FIRST.index(n) if (n := Path(str(item.fspath)).name) in FIRST else len(FIRST))


# ------------------------------------------------------------------------- the smoke report, once
@dataclasses.dataclass(frozen=True)
class SmokeReport:
    out: Path  # the report folder
    params: object  # heavytail.pipeline.report.ReportParams of params/smoke.yaml
    results: dict  # notebook name -> heavytail.pipeline.notebook.NotebookResult


@pytest.fixture(scope="session")
def smoke_report() -> SmokeReport:
    """params/smoke.yaml through the report runner, once per test run (minutes: every notebook and its grids),
    into ``outputs/smoke/`` or ``$HEAVYTAIL_SMOKE_DIR``, where a person can open afterwards what the tests
    checked. An earlier run's report there is removed first, so that no file of it passes for this one's.

    Workers of one run share it: the first to ask builds it under a lock and stamps the folder with the run's
    id (PYTEST_XDIST_TESTRUNUID); a worker that finds its run's stamp reads the results from ``index.json``."""
    import fcntl

    from heavytail.pipeline.grid_file import GridSpec
    from heavytail.pipeline.notebook import NotebookResult
    from heavytail.pipeline.report import ReportParams, run_report

    root = repo_root(Path(__file__).parent)
    out = Path(os.environ.get("HEAVYTAIL_SMOKE_DIR") or root / "outputs" / "smoke")
    params = ReportParams.from_yaml(root / "params" / "smoke.yaml")
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"
    stamp = out / ".test-run"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == run_id:
            index = json.loads((out / "index.json").read_text())
            return SmokeReport(out, params, {d["name"]: NotebookResult(**d) for d in index["notebooks"]})
        if out.is_dir() and ((out / "index.json").is_file() or not any(out.iterdir())):
            shutil.rmtree(out)
        elif out.exists():
            pytest.fail(f"{out} exists and is not a report folder; point HEAVYTAIL_SMOKE_DIR elsewhere")
        # Its grids' folders too (beside it, one per grid name): an earlier run's finished runs would be skipped,
        # so this run's code would not train them, and an earlier version's configuration is refused.
        for file in params.grids.values():
            shutil.rmtree(out.parent / GridSpec.load(root / file).name, ignore_errors=True)
        results = run_report(params, output_dir=out, progress=False)
        stamp.write_text(run_id)
    return SmokeReport(out, params, {r.name: r for r in results})


# ------------------------------------------------------------------------- a real SLURM cluster
# .ci/slurm-up starts a single-node cluster and writes SLURM_CONF=... into this file.
SLURM_DIR = Path(os.environ.get("HEAVYTAIL_SLURM_DIR", "/tmp/heavytail-slurm"))


@dataclasses.dataclass(frozen=True)
class SlurmCluster:
    partition: str
    cpus: int
    mem_mb: int


def _slurm_cluster() -> tuple[SlurmCluster | None, str]:
    env_file = SLURM_DIR / "env"
    if "SLURM_CONF" not in os.environ and env_file.is_file():
        for line in env_file.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "SLURM_CONF" and value.strip():
                os.environ["SLURM_CONF"] = value.strip()  # sbatch, squeue and the jobs read it
    if shutil.which("sbatch") is None:
        return None, "sbatch is not installed"
    try:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%P|%t|%c|%m"], capture_output=True, text=True,
                              timeout=20)
    except subprocess.TimeoutExpired:
        return None, "sinfo did not answer in 20 s"
    if done.returncode != 0:
        return None, f"sinfo failed: {done.stderr.strip() or done.stdout.strip()}"
    for line in done.stdout.splitlines():
        partition, state, cpus, mem = line.strip().split("|")
        if state.rstrip("*~#") in ("idle", "mix", "alloc", "comp"):
            return SlurmCluster(partition.rstrip("*"), int(cpus), int(mem)), ""
    return None, f"no node is up (sinfo: {done.stdout.strip() or 'no nodes'})"


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """The cluster `.ci/slurm-up` started. Elsewhere the SLURM tests are skipped, saying how to start
    one; under CI (CI=true) they fail instead, so a CI log can never show them skipped."""
    cluster, reason = _slurm_cluster()
    if cluster is None:
        message = (f"no SLURM cluster to test against ({reason}); start one with `.ci/slurm-up` "
                   f"(as root: installs slurm-wlm, starts slurmctld and slurmd on this host), then rerun")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return cluster
