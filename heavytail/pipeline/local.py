"""Running a grid's configurations on this machine, at most ``workers`` at once.

``local`` drives them from a process pool (``concurrent.futures``, 'spawn' workers); ``submitit-local``
runs them as submitit jobs in local processes: the SLURM path's jobs (requeued on a timeout, resumed from
the run's checkpoints) without a cluster, which is what the tests use. Each finished configuration is
recorded at once (:meth:`heavytail.pipeline.grid_record.GridReport.finish`).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import submitit

from heavytail.pipeline import lock
from heavytail.pipeline.configuration import ConfigurationJob, SubmititTask, execute_configuration, job_record
from heavytail.pipeline.grid_record import GridEntry, GridReport

Todo = list[tuple[GridEntry, ConfigurationJob]]


def _die_with_parent() -> None:
    """Pool-worker initializer: on Linux, ask the kernel to send SIGTERM when the grid process dies.

    Without it a killed grid leaves its spawned workers alive, and they go on taking queued
    configurations from the dead pool's pipe, training runs that nobody records (and that a restarted
    grid then trains a second time in the same folders)."""
    import signal

    # Ctrl-C reaches the whole foreground process group; the grid process alone handles it (it stops the workers
    # and records them), so a worker prints no traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        except OSError:
            pass
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


def run_local(report: GridReport, todo: Todo, workers: int) -> None:
    # Each configuration runs in its own kernel process; the pool only drives them. 'spawn' keeps the
    # workers free of whatever state (threads, torch) this process holds.
    context = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_die_with_parent) as pool:
        futures = {pool.submit(execute_configuration, job): entry for entry, job in todo}
        run_dirs = {id(entry): Path(job.run_dir) for entry, job in todo}
        try:
            remaining = set(futures)
            while remaining:
                # Poll twice a second: a configuration shorter than the poll would never be seen running (the
                # lock check below samples the run folders only when the loop wakes).
                done, remaining = cf.wait(remaining, timeout=0.5, return_when=cf.FIRST_COMPLETED)
                # The pool pre-queues an item per worker and calls it 'running' already; a configuration
                # runs once its worker holds the run folder's lock.
                started = [futures[f] for f in remaining if f.running() and futures[f].status == "pending"
                           and lock.holder(run_dirs[id(futures[f])]) is not None]
                for entry in started:
                    entry.status = "running"
                for future in done:
                    try:
                        record = future.result()
                    except Exception as exc:  # noqa: BLE001  a worker that died (killed, out of memory)
                        record = {"status": "failed", "error": f"worker process failed: {type(exc).__name__}: {exc}"}
                    report.finish(futures[future], record)
                if started:
                    report.write()
        except BaseException:
            # The workers ignore Ctrl-C and would finish their configurations unrecorded: stop them now.
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            _stop(processes)
            raise


def _stop(workers: list) -> None:
    """Stop the workers, then the notebook kernels they started: each that outlives the other notices ("kernel
    died", "parent appears to have exited") and says so on this terminal after the grid's own last line."""
    try:
        import psutil  # a dependency of ipykernel, which runs every configuration
    except ImportError:
        psutil = None
    kernels = []
    for worker in workers:
        try:
            kernels += psutil.Process(worker.pid).children(recursive=True) if psutil else []
        except psutil.Error:
            pass
        worker.terminate()
    for worker in workers:
        worker.join(timeout=10)
        if worker.is_alive():  # SIGTERM not acted on in 10 s (a loaded machine, a handler): the pool's shutdown
            worker.kill()      # would wait on it for ever
            worker.join(timeout=5)
    if psutil is None:
        return
    for kernel in kernels:
        try:
            kernel.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(kernels, timeout=10)
    for kernel in alive:
        try:
            kernel.kill()
        except psutil.Error:
            pass


def run_submitit_local(report: GridReport, todo: Todo, workers: int, timeout_min: int) -> None:
    """submitit's LocalExecutor starts every submitted job at once, so at most ``workers`` are in flight."""
    executor = submitit.AutoExecutor(folder=report.directory / "_submitit" / "%j", cluster="local")
    executor.update_parameters(timeout_min=timeout_min, name=f"heavytail-{report.name}")
    task = SubmititTask()
    waiting = list(todo)
    running: list[tuple[Any, GridEntry, ConfigurationJob]] = []
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                entry, job = waiting.pop(0)
                submitted = executor.submit(task, job)
                entry.status, entry.job_id = "running", str(submitted.job_id)
                running.append((submitted, entry, job))
                report.write()
            done = [item for item in running if item[0].done()]
            for item in done:
                running.remove(item)
                submitted, entry, job = item
                report.finish(entry, job_record(submitted, Path(job.run_dir)))
            if not done:
                time.sleep(0.5)
    except BaseException:
        for submitted, _, _ in running:
            submitted.cancel(check=False)
        raise
