"""Running a grid: every configuration of a grid file (:mod:`heavytail.pipeline.grid_file`), one notebook
execution each (:mod:`heavytail.pipeline.configuration`), on the executor asked for.

A configuration is *finished*, and skipped on a re-run, when its run is COMPLETE, ``results.json``
exists, and its last notebook execution succeeded with the same configuration. Anything else runs
(again): train() resumes from the last checkpoint, so an interrupted or timed-out configuration continues
where it stopped. A failing configuration is recorded with its failing code cell and error and never stops
the others; a configuration another grid command is executing (it holds the run folder's lock) is left to
it and recorded as 'locked'. ``grid.json`` and ``index.html`` (:mod:`heavytail.pipeline.grid_record`) are
rewritten as configurations finish.

Executors: ``local`` runs configurations in a process pool and ``submitit-local`` as submitit jobs on this
machine (:mod:`heavytail.pipeline.local`); ``slurm`` submits a submitit job array with the grid file's
resources (:mod:`heavytail.pipeline.slurm`).

``python -m heavytail grid`` (:func:`main`) exits 0 when every configuration ran or had finished earlier (or,
with ``--no-wait``, is submitted), 1 when one failed or was cancelled, 2 for bad input (the grid file, its
notebook, the cluster's limits), and 3 (:data:`EXIT_LOCKED`) when none failed but one was left to another
grid command that holds its lock: the grid is not finished, so a script must not read it as complete.
Ctrl-C is one line and exit 130: the configurations it stopped are recorded 'cancelled' (in grid.json and their
execution.json) and the same command resumes them.

Refused before anything is created, listed or overwritten (exit 2): a configuration folder that holds a run of
another configuration (the grid run with a ``--set`` this command lacks: its figures and records would be deleted
before training refused the folder), a CPU configuration whose estimated memory does not fit
(:mod:`heavytail.harness.memory`), and an output folder that cannot be written. Said, not refused: configurations
under bf16 autocast about to train on a CPU without native bf16 matmuls, whose bf16 matmuls are emulated in float32
(:mod:`heavytail.harness.cpu_bf16`; one line, and each run records it).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from heavytail import cli
from heavytail.harness import cpu_bf16, memory
from heavytail.harness.artifacts import repo_root
from heavytail.harness.rundir import RunDir, config_differences
from heavytail.io import save_json
from heavytail.pipeline import cluster, lock, slurm
from heavytail.pipeline.configuration import ConfigurationJob, configuration_jobs, now
from heavytail.pipeline.grid_file import GridSpec, positive_int, with_base
from heavytail.pipeline.grid_record import GridEntry, GridReport, log, previous_entries
from heavytail.pipeline.local import run_local, run_submitit_local
from heavytail.studies import grid_checks

EXECUTORS = ("local", "slurm", "submitit-local")
# Not finished from this command's point of view: still to run, or run by someone else right now.
UNFINISHED = ("pending", "running", "submitted", "locked")
EXIT_LOCKED = 3  # the command's exit code when a configuration was left to the grid command holding its lock


def run_grid(grid_file_or_dict: "str | os.PathLike | Mapping[str, Any] | GridSpec", executor: str = "local",
             workers: int | None = None, output_root: str | os.PathLike | None = None,
             only: Sequence[str] | None = None, threads: int | None = None, wait: bool = True,
             dry_run: bool = False) -> GridReport:
    """Run every unfinished configuration of a grid; returns the report (also in grid.json / index.html).

    ``only``: shell patterns of configuration names to run (the others are listed but not touched).
    ``dry_run``: record the state on disk (finished or pending) and run nothing.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r} is not allowed; choose one of: {', '.join(EXECUTORS)}")
    spec = GridSpec.load(grid_file_or_dict)
    problem = grid_checks.problem(spec.name, [cfg.to_dict() for cfg in spec.configs])
    if problem:
        raise ValueError(f"grid {spec.name!r}: {problem}; nothing was run")
    if workers is not None:
        positive_int(workers, "workers")
    if threads is not None:
        positive_int(threads, "--threads")
    workers = workers or spec.local.workers
    if threads is None:
        threads = spec.slurm.cpus_per_task if executor == "slurm" else spec.local.threads(workers)
    root = Path(output_root).resolve() if output_root is not None else repo_root() / "outputs"
    grid_dir = root / spec.name
    jobs = configuration_jobs(spec, grid_dir, threads)

    selected = set(spec.names)
    if only:
        selected = {n for n in spec.names if any(fnmatch.fnmatchcase(n, pat) for pat in only)}
        if not selected:
            raise ValueError(f"--only {list(only)} matches no configuration of grid {spec.name!r}; "
                             f"configurations: {spec.names}")
    _check_run_folders(spec, jobs)  # before anything is listed, deleted or overwritten
    _check_memory(spec, executor)

    if executor == "slurm" and not dry_run:
        slurm.check_slurm(spec)  # one line and exit 2 before anything is submitted
        cluster.quiet_sacct_warnings()
    # Created only now, when nothing above refused the grid: a refusal leaves no empty folder behind.
    cli.check_writable(grid_dir, "grid folder")
    grid_dir.mkdir(parents=True, exist_ok=True)
    active = slurm.active_jobs(grid_dir, spec.names) if executor == "slurm" and not dry_run else {}
    before = previous_entries(grid_dir)
    report = GridReport(name=spec.name, directory=grid_dir, executor=executor, entries=[], source=spec.source)
    todo: list[tuple[GridEntry, ConfigurationJob]] = []
    earlier: list[tuple[GridEntry, ConfigurationJob]] = []
    for cfg, job in zip(spec.configs, jobs):
        entry = GridEntry(name=job.name, run_dir=job.name, config=job.config)
        run = RunDir(job.run_dir)
        previous = run.execution()
        earlier_job = before.get(job.name, {})
        if run.is_finished(cfg):
            entry.absorb(previous, grid_dir)
            if earlier_job.get("status") in ("submitted", "running") and earlier_job.get("job_id"):
                entry.job_id = earlier_job["job_id"]  # collected: it finished since the --no-wait submission
            else:
                entry.status = "skipped"
        elif job.name in active:
            entry.status, entry.job_id = "submitted", active[job.name]
            earlier.append((entry, job))
        elif job.name in selected and not dry_run and (holder := lock.holder(run.path)) is not None:
            entry.status, entry.error = "locked", f"being run by another grid command: {holder.describe()}"
        elif job.name in selected and not dry_run:
            todo.append((entry, job))
        elif dry_run and previous and previous.get("status") == "running" and previous.get("config") == job.config:
            entry.status = "running"  # as its own record says; a killed run also reads 'running' here
        elif previous and previous.get("status") in ("failed", "cancelled") and previous.get("config") == job.config:
            entry.absorb(previous, grid_dir)  # not run this time: its last failure stays visible
        report.entries.append(entry)
    report.write()
    n_skip = len(report.by_status("skipped"))
    if earlier:
        log(f"not submitted again, still queued or running from an earlier submission: "
            f"{', '.join(f'{e.name} (job {e.job_id})' for e, _ in earlier)}")
    for entry in report.by_status("locked"):
        log(f"{entry.name}: not run, {entry.error}")
    # --list runs nothing: it says what the same command without it would run (the selected, unfinished ones).
    report.selected = frozenset(selected)
    to_run = (f"{sum(e.name in selected and e.status == 'pending' for e in report.entries)} would run (--list: "
              f"nothing runs)" if dry_run else f"{len(todo)} to run")
    log(f"{spec.name}: {len(spec.configs)} configurations, {n_skip} finished earlier, {to_run} "
        f"({executor}, {workers if executor != 'slurm' else spec.slurm.array_parallelism} at once, "
        f"{threads} threads each) -> {grid_dir}")
    if executor != "slurm" and todo:  # a SLURM node's processor is not known from here
        _note_cpu_bf16(spec, {job.name for _, job in todo})

    try:
        if executor == "slurm" and (todo or earlier):
            slurm.run_slurm(report, todo, spec, wait, earlier)
        elif todo and executor == "local":
            run_local(report, todo, workers)
        elif todo:
            run_submitit_local(report, todo, workers, spec.local.timeout_min)
    except KeyboardInterrupt:
        if executor != "slurm":  # SLURM's jobs run on without this process; a rerun collects them
            _interrupted(report, [job for _, job in todo])
        report.write()
        raise
    report.refresh()
    report.finished = not any(e.status in UNFINISHED for e in report.entries)
    report.write()
    return report


INTERRUPTED = "interrupted; rerun the same command to resume"


def _interrupted(report: GridReport, jobs: Sequence[ConfigurationJob]) -> None:
    """Ctrl-C: the configurations this command was executing are stopped (their workers are gone), so their records
    say so instead of 'running'; training resumes from their checkpoints on the rerun."""
    by_name = {job.name: job for job in jobs}
    for entry in report.entries:
        if entry.status != "running" or entry.name not in by_name:
            continue
        entry.status, entry.error = "cancelled", INTERRUPTED
        run = RunDir(by_name[entry.name].run_dir)
        record = run.execution()
        if record is not None and record.get("status") == "running":
            save_json({**record, "status": "cancelled", "error": INTERRUPTED, "finished": now()}, run.execution_path)


def _local_gpu() -> bool:
    return Path("/proc/driver/nvidia").exists()


def _on_cpu(cfg, no_gpu: bool) -> bool:
    """Whether a configuration trains on the CPU where it runs (``device: auto`` does where there is no GPU)."""
    return cfg.device == "cpu" or (cfg.device == "auto" and no_gpu)


def _check_memory(spec: GridSpec, executor: str) -> None:
    """Refuse, before anything runs, a CPU configuration whose estimated memory exceeds where it will run: a SLURM
    task's ``slurm.mem_gb``, else this machine (a GPU's memory is not known from here)."""
    if executor == "slurm":
        limit, where, cpu = spec.slurm.mem_gb * 2**30, f"a task of slurm.mem_gb={spec.slurm.mem_gb}", \
            spec.slurm.gpus_per_node == 0
    else:
        limit, where, cpu = memory.machine_memory(), "this machine", not _local_gpu()
    for cfg, name in zip(spec.configs, spec.names):
        if _on_cpu(cfg, cpu):
            why = memory.refusal(cfg, limit, where)
            if why:
                raise ValueError(f"grid {spec.name!r}: {name}: {why}")


def _note_cpu_bf16(spec: GridSpec, names: set[str]) -> None:
    """One line when configurations about to train on this machine's CPU run under bf16 autocast and the CPU has
    no native bf16 matmuls: their bf16 matmuls are emulated in float32 (:mod:`heavytail.harness.cpu_bf16`)."""
    no_gpu = not _local_gpu()
    n = sum(1 for cfg, name in zip(spec.configs, spec.names)
            if name in names and cfg.precision == "bf16" and _on_cpu(cfg, no_gpu))
    if (notice := cpu_bf16.emulation_notice(n)) is not None:
        log(notice)


def _check_run_folders(spec: GridSpec, jobs: Sequence[ConfigurationJob]) -> None:
    """Refuse the grid when a configuration's folder holds a run of another configuration (the grid run with a
    ``--set`` this command lacks, or its file edited since): running it would delete that run's figures and
    overwrite its records before training refuses the folder, and listing it would record a finished run as
    pending. One line naming the first such folder and what differs; nothing is touched."""
    clashes = []
    for cfg, job in zip(spec.configs, jobs):
        run = RunDir(job.run_dir)
        if not run.config_path.is_file():
            continue
        try:
            differ = config_differences(run.config(), cfg)
        except ValueError as err:
            raise ValueError(f"grid {spec.name!r}: {run.config_path} is not a readable configuration ({err}); "
                             f"nothing was run") from None
        if differ:
            clashes.append((job.name, differ))
    if not clashes:
        return
    name, differ = clashes[0]
    there = ", ".join(f"{k}: {a!r} there, {b!r} here" for k, (a, b) in differ.items())
    sets = " ".join(f"{k}={cli.yaml_scalar(a)}" for k, (a, _) in differ.items())
    more = f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else ""
    raise ValueError(f"grid {spec.name!r}: {name}{more} holds a run of another configuration ({there}); nothing was "
                     f"run or changed: rerun with the settings it was run with (--set {sets}) or another output root")


def unshipped(spec: GridSpec, patterns: Sequence[str] | None = None) -> list[str]:
    """The configurations of ``spec`` (matching ``patterns``, when given) that the shipped map of its grid file
    does not hold: what a later session runs to resume a grid whose folder is gone (shipping the new folder keeps
    the runs already shipped)."""
    from heavytail.studies import reference_maps, ship_map

    name = ship_map.map_of_grid(spec.source or "")
    if name is None:
        raise ValueError(f"--unshipped: {spec.source} is not the grid file of a shipped map; the maps' grid files: "
                         + ", ".join(m.grid for m in reference_maps.MAPS.values()))
    shipped = reference_maps.load(name)
    held = {r["name"] for r in shipped["runs"]} if shipped else set()
    names = [n for n in spec.names if n not in held
             and (not patterns or any(fnmatch.fnmatchcase(n, pat) for pat in patterns))]
    if not names:
        raise ValueError(f"--unshipped: map {name!r} already holds every configuration of grid {spec.name!r}"
                         + (f" matching --only {list(patterns)}" if patterns else ""))
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m heavytail grid",
        description="Run every configuration of a grid file: one papermill execution of the ablation notebook "
                    "each, writing <output-root>/<grid>/<config>/, grid.json and index.html.")
    parser.add_argument("grid", help="grid YAML (e.g. params/grid_cpu.yaml); see heavytail.pipeline.grid_file for "
                                     "the format")
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="local: process pool here; slurm: submitit job array; submitit-local: submitit jobs "
                             "as local processes")
    parser.add_argument("--workers", type=int, default=None, help="configurations at once (default: local.workers)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads per notebook kernel (default: local.threads_per_worker, or cores / workers; "
                             "slurm: slurm.cpus_per_task)")
    cli.add_output(parser, "folder holding <grid>/ (default: <repo>/outputs)", "--output-root")
    cli.add_only(parser, "configurations")
    parser.add_argument("--unshipped", action="store_true",
                        help="run only the configurations the grid's shipped map (outputs/reference/) does not hold "
                             "(with --only: those of them that match)")
    cli.add_set(parser, "configuration keys of every configuration (as if set in the file's base)")
    cli.add_quiet(parser)
    parser.add_argument("--no-wait", action="store_true",
                        help="slurm: submit and return; run the same command later to collect (finished ones are skipped)")
    parser.add_argument("--list", action="store_true", dest="dry_run",
                        help="run nothing: list the configurations with their state and write grid.json / index.html")
    return parser


def _print_states(report: GridReport) -> None:
    width = max(len(e.name) for e in report.entries)
    for e in report.entries:
        line = f"  {e.name:<{width}}  {e.status}"
        if e.status == "pending" and e.name not in report.selected:
            line += "  (not selected: --only / --unshipped leave it out)"
        if e.status == "failed":
            line += f"  code cell {e.failed_cell}: {e.error}" if e.failed_cell else f"  {e.error}"
        elif e.status in ("cancelled", "locked"):
            line += f"  {e.error}"
        print(line)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heavytail grid params/grid_cpu.yaml --executor local``; the exit codes are in the module's
    docstring."""
    args = build_parser().parse_args(argv)
    try:
        grid = with_base(GridSpec.from_yaml(args.grid), cli.parse_sets(args.set)) if args.set else args.grid
        only = unshipped(GridSpec.load(grid), args.only) if args.unshipped else args.only
        report = run_grid(grid, executor=args.executor, workers=args.workers, output_root=args.output,
                          only=only, threads=args.threads, wait=not args.no_wait, dry_run=args.dry_run)
    except cli.BAD_INPUT as err:
        return cli.bad_input("grid", err)
    except KeyboardInterrupt:
        print(f"[grid] {INTERRUPTED}", file=sys.stderr)
        return 130  # the shell's code for a command ended by Ctrl-C
    if not args.quiet:
        _print_states(report)
    failed, cancelled = report.failed, report.by_status("cancelled")
    total = sum(e.elapsed_s or 0.0 for e in report.entries if e.status == "ok")
    others = "".join(f", {len(report.by_status(s))} {s}" for s in ("cancelled", "locked", "submitted")
                     if report.by_status(s))
    print(f"[grid] {report.name}: {len(report.by_status('ok'))} ran, {len(report.by_status('skipped'))} finished earlier, "
          f"{len(failed)} failed{others}; {total:.1f} s of notebook time; index: {report.index_path}")
    return 1 if failed or cancelled else EXIT_LOCKED if report.by_status("locked") else 0


if __name__ == "__main__":
    sys.exit(main())
