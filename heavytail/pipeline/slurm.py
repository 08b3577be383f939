"""Running a grid's configurations on a SLURM cluster: one submitit job array, then waiting and collecting.

Before anything is submitted, the partition and resources of the grid file's ``slurm`` section are checked
against what the cluster offers (:mod:`heavytail.pipeline.cluster`). Each array task runs one
configuration; submitted jobs are checkpointable: on a timeout submitit requeues the job, which
re-executes the notebook and resumes training from the run's checkpoints. With ``--no-wait`` the grid
returns after submitting; a later run of the same command collects what finished and waits for the jobs
still queued or running (:func:`active_jobs`) instead of submitting them twice.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import submitit

from heavytail.harness.rundir import RunDir
from heavytail.io import save_json
from heavytail.pipeline import cluster, lock
from heavytail.pipeline.configuration import ConfigurationJob, SubmititTask, job_record, now
from heavytail.pipeline.grid_file import GridSpec
from heavytail.pipeline.grid_record import GridEntry, GridReport, log, previous_entries

Todo = list[tuple[GridEntry, ConfigurationJob]]


def check_slurm(spec: GridSpec) -> cluster.Partition:
    """Before submitting: sbatch exists, the partition exists and one task fits on one of its nodes."""
    s = spec.slurm
    return cluster.check_resources(s.partition, s.cpus_per_task, s.mem_gb, s.gpus_per_node, s.timeout_min)


def slurm_executor(spec: GridSpec, grid_dir: Path) -> submitit.AutoExecutor:
    """A submitit SLURM executor with the grid file's resources; job logs under ``<grid_dir>/_submitit/``.
    (submitit refuses to build one where ``srun`` is not on the PATH.)"""
    executor = submitit.AutoExecutor(folder=grid_dir / "_submitit" / "%j", cluster="slurm",
                                     slurm_max_num_timeout=spec.slurm.max_num_timeout)
    executor.update_parameters(**spec.slurm.executor_parameters(f"heavytail-{spec.name}"))
    return executor


def active_jobs(grid_dir: Path, names: Sequence[str]) -> dict[str, str]:
    """Configurations an earlier submission of this grid still runs or queues: {name: job id}.

    Submitting them again would train one run folder twice at once, so a re-run (e.g. after ``--no-wait``)
    waits for these jobs instead. A job whose state cannot be read counts as active: never train twice.
    """
    submitted = {name: str(entry["job_id"]) for name, entry in previous_entries(grid_dir).items()
                 if name in names and entry.get("job_id") and entry.get("status") in ("submitted", "running")}
    if not submitted:
        return {}
    try:
        states = cluster.job_states(submitted.values())
    except Exception as exc:  # noqa: BLE001
        log(f"could not read the state of SLURM jobs {', '.join(submitted.values())} ({exc}); "
            f"not submitting them again")
        return submitted
    active = {}
    for name, job_id in submitted.items():
        state = states.get(job_id, "UNKNOWN")
        if cluster.is_active(state):
            active[name] = job_id
        elif state not in ("COMPLETED", "UNKNOWN"):
            log(f"{name}: SLURM job {job_id} of an earlier submission ended as {state}")
    return active


def run_slurm(report: GridReport, todo: Todo, spec: GridSpec, wait: bool, earlier: Todo) -> None:
    """Submit ``todo`` as one job array; with ``wait``, also wait for ``earlier`` (jobs of a previous
    submission that are still queued or running, their entries holding the job id)."""
    owners: dict[str, tuple[Any, GridEntry, ConfigurationJob]] = {}
    if todo:
        submitted = _submit(report, todo, spec)
        for (entry, job), handle in zip(todo, submitted):
            entry.status, entry.job_id = "submitted", str(handle.job_id)
            owners[str(handle.job_id)] = (handle, entry, job)
        report.write()
        log(f"submitted {len(submitted)} array tasks: {', '.join(str(j.job_id) for j in submitted)}; "
            f"job logs: {report.directory / '_submitit'}/<job id>/")
    for entry, job in earlier:
        handle = submitit.SlurmJob(folder=report.directory / "_submitit" / "%j", job_id=entry.job_id)
        owners[str(handle.job_id)] = (handle, entry, job)
    if wait and owners:
        _wait(report, owners, spec.slurm.poll_s)


def _submit(report: GridReport, todo: Todo, spec: GridSpec) -> list:
    """One job array for ``todo``; a refusal by sbatch is one line (ValueError), not a traceback."""
    executor = slurm_executor(spec, report.directory)
    try:
        return executor.map_array(SubmititTask(), [job for _, job in todo])
    except Exception as exc:  # noqa: BLE001  sbatch refused the job (submitit wraps its error)
        lines = [line.strip() for line in str(exc).strip().splitlines()
                 if line.strip() and not line.strip().startswith("-")]
        raise ValueError(f"sbatch refused the job array: {lines[-1] if lines else type(exc).__name__}") from exc


def _wait(report: GridReport, owners: dict[str, tuple[Any, GridEntry, ConfigurationJob]], poll_s: int) -> None:
    """Wait for every job in ``owners`` ({job id: (handle, entry, job)}), recording each as it ends.

    A job is done when submitit's result file appears; squeue (not sacct, which needs accounting) tells
    running from pending, and reports jobs that ended without a result (cancelled, killed, failed
    outside Python). A job that neither squeue nor a result file accounts for is given a few polls (a
    result file may lag on a network file system) before it is recorded as failed.
    """
    waiting = dict(owners)
    unexplained: dict[str, int] = {}
    last_seen: dict[str, str] = {}  # a finished job may drop out of squeue between two polls
    squeue_failed = False
    while waiting:
        try:
            states = cluster.job_states(waiting)
            squeue_failed = False
        except ValueError as err:
            if not squeue_failed:
                log(f"cannot read job states ({err}); waiting for result files only")
            squeue_failed, states = True, {}
        changed = False
        for job_id, (handle, entry, job) in list(waiting.items()):
            run_dir = Path(job.run_dir)
            state = states.get(job_id) or last_seen.get(job_id, "UNKNOWN")
            if not cluster.is_active(state):
                last_seen[job_id] = state  # an end state, kept: the job may vanish by the next poll
            if handle.paths.result_pickle.exists():
                del waiting[job_id]
                report.finish(entry, job_record(handle, run_dir))
            elif squeue_failed or cluster.is_active(state):
                unexplained.pop(job_id, None)
                if state.startswith("RUNNING") and entry.status != "running":
                    entry.status, changed = "running", True
                elif state.startswith("PENDING") and entry.status == "running":
                    entry.status, changed = "submitted", True  # requeued after a timeout: queued again
            else:
                unexplained[job_id] = unexplained.get(job_id, 0) + 1
                if unexplained[job_id] >= 3:
                    del waiting[job_id]
                    report.finish(entry, _ended_without_result(handle, state, run_dir))
                    if entry.status == "cancelled":
                        _record_cancelled(run_dir, job.config, entry.error)
        if changed:
            report.write()
        if waiting:
            time.sleep(poll_s if not unexplained else min(poll_s, 2))


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def _ended_without_result(handle, state: str, run_dir: Path) -> dict[str, Any]:
    """The record of a job SLURM reports as ended (or no longer knows) that left no result file."""
    record = RunDir(run_dir).execution()
    if record and record.get("status") in ("ok", "failed") and record.get("slurm_job_id"):
        return record  # it finished its notebook; only submitit's own result file is missing
    if state == cluster.CANCELLED:
        return {"status": "cancelled", "error": f"SLURM job {handle.job_id} was cancelled (scancel or an "
                f"administrator); the next run of the grid runs it again"}
    if state == "UNKNOWN" and not Path(handle.paths.stdout).exists():
        # A pending array task cancelled before it started may vanish from squeue at once; nothing else
        # takes a job out of the queue without it ever writing its log.
        return {"status": "cancelled", "error": f"SLURM job {handle.job_id} left the queue before it started "
                f"(cancelled); the next run of the grid runs it again"}
    what = "is no longer known to SLURM" if state == "UNKNOWN" else f"ended as {state}"
    tail = _log_tail(Path(handle.paths.stderr))
    return {"status": "failed", "error": f"SLURM job {handle.job_id} {what} without a result"
            f"{f' ({tail})' if tail else ''}; job log: {handle.paths.stderr}"}


def _record_cancelled(run_dir: Path, config: Mapping[str, Any], error: str | None) -> None:
    """The run folder says so too: its record was left at 'running' by the killed job."""
    run = RunDir(run_dir)
    record = run.execution() or {}
    if record.get("status") in ("ok", "failed") or lock.holder(run_dir) is not None:
        return
    record.update(status="cancelled", error=error, finished=now(), config=record.get("config") or dict(config))
    try:
        save_json(record, run.execution_path)
    except OSError:
        pass
