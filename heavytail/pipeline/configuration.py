"""One configuration of a grid: what a pool worker or a submitit job runs, and the record it leaves.

A configuration is ONE papermill execution of the grid's notebook (through
:func:`heavytail.pipeline.notebook.run_notebook`) whose run folder ``<output_root>/<grid>/<folder_name>/``
holds the training run (config.yaml, metrics.jsonl, checkpoints/, COMPLETE), ``results.json``, the executed
notebook and its HTML, the notebook's figures, and ``execution.json``: this module's record of the last
execution (status, failing code cell, error, host, SLURM job). A failure inside the notebook or around it is
that record, never an exception. The process executing a configuration holds the run folder's lock
(:mod:`heavytail.pipeline.lock`), so two grid commands never run one configuration at once.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from heavytail.harness.artifacts import repo_root
from heavytail.harness.rundir import RunDir
from heavytail.io import save_json
from heavytail.pipeline import lock
from heavytail.pipeline.grid_file import GridSpec
from heavytail.pipeline.notebook import check_parameters, run_notebook

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


@dataclass(frozen=True)
class ConfigurationJob:
    """Everything one execution needs, as plain picklable data."""

    grid: str
    name: str
    config: dict[str, Any]
    run_dir: str
    floor_cache: str
    notebook: str
    cwd: str
    threads: int | None = None

    def parameters(self) -> dict[str, Any]:
        """The notebook's papermill parameters: the run configuration and where to write."""
        return {"config": self.config, "run_dir": self.run_dir, "floor_cache": self.floor_cache, "progress": False}


# The names ConfigurationJob.parameters passes; the grid's notebook must take every one of them.
JOB_PARAMETERS = tuple(ConfigurationJob("", "", {}, "", "", "", "").parameters())


def grid_notebook(spec: GridSpec) -> Path:
    """The grid's notebook, after checking that it exists and takes the parameters every job passes."""
    notebook = (repo_root() / spec.notebook).resolve()
    if not notebook.is_file():
        raise FileNotFoundError(f"grid {spec.name!r}: notebook {notebook} does not exist")
    check_parameters(notebook, JOB_PARAMETERS, f"grid {spec.name!r}")
    return notebook


def configuration_jobs(spec: GridSpec, grid_dir: Path, threads: int | None) -> list[ConfigurationJob]:
    """One job per configuration of ``spec``, writing under ``grid_dir``."""
    root, notebook = repo_root(), grid_notebook(spec)
    return [
        ConfigurationJob(grid=spec.name, name=folder, config=cfg.to_dict(), run_dir=str(grid_dir / folder),
                         floor_cache=str(grid_dir / "_floors"), notebook=str(notebook), cwd=str(root), threads=threads)
        for cfg, folder in zip(spec.configs, spec.names)
    ]


def execute_configuration(job: ConfigurationJob) -> dict[str, Any]:
    """Run the notebook for one configuration; returns (and writes to run_dir) its execution record.

    Never raises for a failure inside the notebook or around it: the failure is the record.
    """
    run_dir = Path(job.run_dir)
    if job.threads:
        # The papermill kernel inherits this environment; torch reads OMP_NUM_THREADS at start-up, so
        # N workers x T threads stay within the cores they were given.
        for var in THREAD_VARIABLES:
            os.environ[var] = str(job.threads)
    try:
        held = lock.acquire(run_dir)
    except lock.Locked as err:  # another grid command runs it: leave its folder and records alone
        return {"name": job.name, "status": "locked", "config": job.config, "error": f"not run here: {err}",
                "holder": dataclasses.asdict(err.holder)}
    except OSError as exc:  # an unwritable folder: still a record, returned to the parent
        return {"name": job.name, "status": "failed", "config": job.config, "started": now(), "finished": now(),
                "error": f"cannot create {run_dir / lock.LOCK_FILE}: {type(exc).__name__}: {exc}"}
    try:  # released also on SystemExit, which is how submitit leaves a job it has just requeued
        return _execute_held(job, run_dir)
    finally:
        lock.release(run_dir, held)


def _execute_held(job: ConfigurationJob, run_dir: Path) -> dict[str, Any]:
    execution = RunDir(run_dir).execution_path
    record: dict[str, Any] = {"name": job.name, "status": "running", "config": job.config, "started": now(),
                              "host": socket.gethostname(), "threads": job.threads,
                              "slurm_job_id": os.environ.get("SLURM_JOB_ID")}
    try:
        # Replace the previous record first: a kill from here on must not leave an old 'ok' behind.
        save_json(record, execution)
        result = run_notebook(Path(job.notebook), run_dir, job.parameters(), cwd=Path(job.cwd),
                              report=job.grid, progress=False)
        record.update(status=result.status, elapsed_s=result.elapsed_s, failed_cell=result.failed_cell,
                      error=result.error, html=result.html, ipynb=result.ipynb, artifacts=result.artifacts)
    except Exception as exc:  # noqa: BLE001  (an unwritable folder, a missing notebook: still a record)
        record.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    record["finished"] = now()
    try:
        save_json(record, execution)
    except Exception:  # noqa: BLE001  the parent still gets the record through the return value
        pass
    return record


class SubmititTask(submitit.helpers.Checkpointable):
    """The callable each submitit job runs. Checkpointable: on a timeout submitit requeues it with the
    same job, which executes the notebook again and resumes training from the run's checkpoints."""

    def __call__(self, job: ConfigurationJob) -> dict[str, Any]:
        return execute_configuration(job)


def job_record(handle, run_dir: Path) -> dict[str, Any]:
    """The execution record of a finished submitit job: its return value, else what the run folder says
    (a job that died after its notebook finished), else the failure with the job's log."""
    try:
        return handle.result()
    except Exception as exc:  # noqa: BLE001  the job died outside the notebook (timeout, node failure)
        record = RunDir(run_dir).execution()
        if record and record.get("status") in ("ok", "failed"):
            return record
        where = ""
        try:
            where = f"; job log: {handle.paths.stderr}"
        except Exception:  # noqa: BLE001
            pass
        return {"status": "failed", "error": f"{type(exc).__name__}: {str(exc).strip()[-2000:]}{where}"}
