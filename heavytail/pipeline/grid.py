"""The ablation grid (Section 4.2, App. G): every configuration of a grid file, one notebook execution each.

A grid file names a set of run configurations: a ``base`` mapping of :class:`~heavytail.harness.config.RunConfig`
keys shared by all of them and ``axes`` whose Cartesian product (in the file's order) gives the
configurations. Each configuration is ONE papermill execution of ``notebooks/04_ablation.py`` (through
:func:`heavytail.pipeline.notebook.run_notebook`) whose run folder ``<output_root>/<grid>/<folder_name>/`` holds
the training run (config.yaml, metrics.jsonl, checkpoints/, COMPLETE), ``results.json``, the executed
notebook and its HTML, the notebook's figures, and ``execution.json`` (this module's record of the
last execution). Grid file format::

    name: cpu                        # output folder: <output_root>/cpu/
    notebook: notebooks/04_ablation.py   # optional; relative to the repository root
    base:                            # RunConfig keys shared by every configuration
      steps: 300
      d_model: 32
    axes:                            # product of these lists, in this order
      tasks:                         # operator and marginal family travel together
        - {benchmark: sheared_swap, marginals: mirrored_pareto}
        - {benchmark: matrix_inverse, marginals: mirrored_pareto}
      norm: [post]
      kernel: [softmax, squared_elu, linear_elu, log_elu]
      symlog: [false, true]
      seed: [0]
    local:                           # --executor local and submitit-local
      workers: 2                     # configurations run at once
      threads_per_worker: 1          # OMP/MKL/torch threads of each notebook kernel
      timeout_min: 120               # submitit-local only: a job past it is requeued and resumes
    slurm:                           # --executor slurm (submitit job array)
      partition: gpu
      gpus_per_node: 1
      cpus_per_task: 16              # also the notebook kernel's thread count
      mem_gb: 128
      timeout_min: 1440              # per submission; a timed-out job is requeued and resumes
      max_num_timeout: 3             # requeues allowed after timeouts
      array_parallelism: 16          # array tasks running at once
      setup: []                      # shell lines run before the job (module load ..., conda activate ...)
      additional: {}                 # extra #SBATCH options, e.g. {account: proj, qos: normal}
      signal_delay_s: 90             # SLURM signals the job this long before its time limit (to requeue)
      poll_s: 30                     # how often a waiting grid asks squeue for its jobs' states

An axis is either a :class:`~heavytail.harness.config.RunConfig` key with a list of values (``lr: [1e-3, 3e-3]``,
``attention_backend: [sdpa, tiled]``), or any other name with a list of mappings of RunConfig keys that
travel together (``tasks`` above; ``sizes: [{n_points: 256, trials_per_step: 16}, ...]``). Each
configuration's folder name is its :attr:`RunConfig.name` followed by ``-key=value`` for every other key
that varies in the grid (:func:`folder_name`), so every configuration gets its own stable, filesystem-safe
folder. Every configuration is validated by RunConfig before anything runs.

A configuration is *finished*, and skipped on a re-run, when its run is COMPLETE, ``results.json``
exists, and its last notebook execution succeeded with exactly the same configuration. Anything
else runs (again): train() resumes from the last checkpoint, so an interrupted or timed-out
configuration continues where it stopped. A failing configuration is recorded with its failing
code cell and error and never stops the others. ``<output_root>/<grid>/grid.json`` (status per
configuration, written atomically after every change) and ``index.html`` (a link to every
configuration's rendered notebook) are rewritten as configurations finish, so an interrupted grid
never looks complete.

Executors: ``local`` runs configurations in a process pool (``concurrent.futures``); ``slurm``
submits a submitit job array with the grid file's resources, and ``submitit-local`` runs the same
submitit jobs as local processes (what the tests use). Submitted jobs are checkpointable: on a
timeout submitit requeues the job, which re-executes the notebook and resumes training from the
run's checkpoints.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import datetime as _dt
import fnmatch
import itertools
import multiprocessing
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import submitit
import yaml

from heavytail import cli
from heavytail.harness.artifacts import repo_root
from heavytail.harness.config import RunConfig
from heavytail.io import load_json, save_json
from heavytail.harness.rundir import EXECUTION, RESULTS, RunDir
from heavytail.pipeline import lock
from heavytail.pipeline import cluster
from heavytail.pipeline.notebook import NotebookResult, run_notebook, write_index

EXECUTORS = ("local", "slurm", "submitit-local")
STATUSES = ("ok", "skipped", "failed", "cancelled", "locked", "running", "submitted", "pending")
# Not finished from this command's point of view: still to run, or run by someone else right now.
UNFINISHED = ("pending", "running", "submitted", "locked")
EXIT_LOCKED = 3  # the command's exit code when a configuration was left to the grid command holding its lock
# The keys RunConfig.name spells; any other key that varies in a grid is appended to the folder name.
NAMED_KEYS = ("benchmark", "marginals", "kernel", "norm", "symlog", "seed")
TASK_KEYS = ("benchmark", "marginals")
DEFAULT_NOTEBOOK = "notebooks/04_ablation.py"
EXECUTION_FILE = EXECUTION  # the run folder's names live in heavytail.harness.rundir
RESULTS_FILE = RESULTS
# Parameters the notebook takes besides the run configuration (its `parameters` cell).
NOTEBOOK_EXTRAS = ("config", "run_dir", "floor_cache", "progress")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


# --------------------------------------------------------------------------------------------------
# The grid file
# --------------------------------------------------------------------------------------------------
def _mapping(value: Any, what: str, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"'{what}'{where} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _settings(cls, data: Any, what: str, where: str):
    values = _mapping(data, what, where)
    allowed = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in '{what}'{where}; allowed: {', '.join(allowed)}")
    return cls(**values)


def _positive_int(value: Any, name: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is not allowed; it must be a positive integer")


@dataclass(frozen=True)
class LocalSettings:
    """Parallelism on one machine. ``threads_per_worker`` None: the machine's cores split among workers."""

    workers: int = 1
    threads_per_worker: int | None = None
    timeout_min: int = 24 * 60  # submitit-local only (its own default is 2 minutes)

    def __post_init__(self) -> None:
        _positive_int(self.workers, "local.workers")
        _positive_int(self.threads_per_worker, "local.threads_per_worker", allow_none=True)
        _positive_int(self.timeout_min, "local.timeout_min")

    def threads(self, workers: int) -> int:
        if self.threads_per_worker is not None:
            return self.threads_per_worker
        return max(1, (os.cpu_count() or 1) // max(1, workers))


@dataclass(frozen=True)
class SlurmSettings:
    """One array task per configuration; resources per task. ``timeout_min`` is per submission."""

    partition: str | None = None
    gpus_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: int = 64
    timeout_min: int = 24 * 60
    max_num_timeout: int = 3
    array_parallelism: int = 16
    setup: tuple[str, ...] = ()
    additional: Mapping[str, Any] = field(default_factory=dict)
    signal_delay_s: int = 90  # submitit's default: time to checkpoint and requeue before the kill
    poll_s: int = 30

    def __post_init__(self) -> None:
        if self.partition is not None and not isinstance(self.partition, str):
            raise ValueError(f"slurm.partition={self.partition!r} must be a partition name (string)")
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 0:
            raise ValueError(f"slurm.gpus_per_node={self.gpus_per_node!r} must be an integer >= 0")
        for name in ("cpus_per_task", "mem_gb", "timeout_min", "array_parallelism", "signal_delay_s", "poll_s"):
            _positive_int(getattr(self, name), f"slurm.{name}")
        if self.signal_delay_s >= self.timeout_min * 60:
            raise ValueError(f"slurm.signal_delay_s={self.signal_delay_s} must be shorter than the time limit "
                             f"(slurm.timeout_min={self.timeout_min} min), or the job is signalled as it starts")
        if isinstance(self.max_num_timeout, bool) or not isinstance(self.max_num_timeout, int) or self.max_num_timeout < 0:
            raise ValueError(f"slurm.max_num_timeout={self.max_num_timeout!r} must be an integer >= 0")
        setup = self.setup if self.setup is not None else ()
        if isinstance(setup, str) or not all(isinstance(line, str) for line in setup):
            raise ValueError(f"slurm.setup must be a list of shell lines, got {self.setup!r}")
        object.__setattr__(self, "setup", tuple(setup))
        if not isinstance(self.additional, Mapping):
            raise ValueError(f"slurm.additional must map sbatch option names to values, got {self.additional!r}")
        object.__setattr__(self, "additional", dict(self.additional))

    def executor_parameters(self, job_name: str) -> dict[str, Any]:
        """Keyword arguments for ``submitit.AutoExecutor(cluster="slurm").update_parameters``."""
        params: dict[str, Any] = {
            "name": job_name,
            "timeout_min": self.timeout_min,
            "gpus_per_node": self.gpus_per_node,
            "cpus_per_task": self.cpus_per_task,
            "mem_gb": self.mem_gb,
            "nodes": 1,
            "tasks_per_node": 1,
            "slurm_array_parallelism": self.array_parallelism,
            "slurm_signal_delay_s": self.signal_delay_s,
        }
        if self.partition:
            params["slurm_partition"] = self.partition
        if self.setup:
            params["slurm_setup"] = list(self.setup)
        if self.additional:
            params["slurm_additional_parameters"] = dict(self.additional)
        return params


@dataclass(frozen=True)
class GridSpec:
    """A validated grid file: its name, the notebook, the configurations and the executor settings."""

    name: str
    configs: tuple[RunConfig, ...]
    notebook: str = DEFAULT_NOTEBOOK
    local: LocalSettings = field(default_factory=LocalSettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    source: Path | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: Path | None = None) -> "GridSpec":
        where = f" in {source}" if source else ""
        if not isinstance(data, Mapping):
            raise ValueError(f"a grid{where} must be a mapping with keys name, base, axes, local, slurm; "
                             f"got {type(data).__name__}")
        allowed = ("name", "notebook", "base", "axes", "local", "slurm")
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise ValueError(f"unknown top-level key(s) {unknown}{where}; allowed: {', '.join(allowed)}")
        name = data.get("name")
        if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS or name.startswith("."):
            raise ValueError(f"'name'{where} must be a folder name of letters, digits, '_', '-', '.'; got {name!r}")
        notebook = data.get("notebook", DEFAULT_NOTEBOOK)
        if not isinstance(notebook, str) or not notebook.endswith(".py"):
            raise ValueError(f"'notebook'{where} must be the path of a py:percent notebook, got {notebook!r}")
        base = _mapping(data.get("base"), "base", where)
        axes = _mapping(data.get("axes"), "axes", where)
        configs, names = _expand(name, base, axes, where)
        return cls(
            name=name,
            configs=configs,
            names=names,
            notebook=notebook,
            local=_settings(LocalSettings, data.get("local"), "local", where),
            slurm=_settings(SlurmSettings, data.get("slurm"), "slurm", where),
            source=source,
        )

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "GridSpec":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"grid file {path} does not exist")
        return cls.from_dict(yaml.safe_load(path.read_text(encoding="utf-8")) or {}, source=path)

    @classmethod
    def load(cls, grid: "str | os.PathLike | Mapping[str, Any] | GridSpec") -> "GridSpec":
        if isinstance(grid, GridSpec):
            return grid
        if isinstance(grid, Mapping):
            return cls.from_dict(grid)
        return cls.from_yaml(grid)

    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.names:
            object.__setattr__(self, "names", tuple(cfg.name for cfg in self.configs))
        if len(self.names) != len(self.configs):
            raise ValueError("GridSpec needs one folder name per configuration")


def format_value(value: Any) -> str:
    """A configuration value as it appears in a folder name: stable and filesystem-safe."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value).replace("+", "")  # 0.003, 1e-05, 50000.0
    return str(value)


def folder_name(cfg: RunConfig, varying: Sequence[str]) -> str:
    """``cfg.name`` plus ``-key=value`` for each varying key it does not already spell (RunConfig order)."""
    order = [f.name for f in fields(RunConfig)]
    extra = [k for k in order if k in varying and k not in NAMED_KEYS]
    name = cfg.name + "".join(f"-{k}={format_value(getattr(cfg, k))}" for k in extra)
    if not set(name) <= _NAME_CHARS | {"="}:
        raise ValueError(f"configuration folder name {name!r} has characters outside letters, digits, '_.=-'; "
                         f"use simpler values for {extra}")
    return name


def _expand(name: str, base: dict[str, Any], axes: dict[str, Any], where: str
            ) -> tuple[tuple[RunConfig, ...], tuple[str, ...]]:
    """The Cartesian product of the axes over the base, each validated by RunConfig, and their folder names."""
    keys = {f.name for f in fields(RunConfig)}
    levels: list[list[dict[str, Any]]] = []
    varying: set[str] = set()
    for axis, values in axes.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"axis '{axis}'{where} must be a non-empty list, got {values!r}")
        if axis in keys:
            level = [{axis: v} for v in values]
        else:
            level = []
            for group in values:
                if not isinstance(group, Mapping) or not group or not set(group) <= keys:
                    raise ValueError(
                        f"axis '{axis}'{where} is not a configuration key, so each of its entries must be a "
                        f"mapping of configuration keys that vary together (like 'tasks'); got {group!r}. "
                        f"Configuration keys: {', '.join(sorted(keys))}")
                level.append(dict(group))
            if axis == "tasks" and any(set(g) != set(TASK_KEYS) for g in level):
                raise ValueError(f"each entry of axis 'tasks'{where} must be a mapping with exactly the keys "
                                 f"{', '.join(TASK_KEYS)}; got {values!r}")
        covered = {k for group in level for k in group}
        clash = sorted(covered & (set(base) | {k for lv in levels for g in lv for k in g}))
        if clash:
            raise ValueError(f"key(s) {clash}{where} are set in more than one place ('base' or another axis); "
                             f"set each in one place")
        varying |= {k for k in covered if len({repr(g.get(k)) for g in level}) > 1}
        levels.append(level)
    configs, seen = [], {}
    for combo in itertools.product(*levels):
        values = dict(base)
        for part in combo:
            values.update(part)
        try:
            cfg = RunConfig.from_dict(values)
        except ValueError as err:
            raise ValueError(f"grid '{name}'{where}: configuration {combo} is invalid: {err}") from None
        folder = folder_name(cfg, sorted(varying))
        if folder in seen:
            raise ValueError(f"grid '{name}'{where}: two configurations share the folder {folder!r}; "
                             f"an axis lists a value twice")
        seen[folder] = cfg
        configs.append(cfg)
    if not configs:
        raise ValueError(f"grid '{name}'{where} has no configurations")
    return tuple(configs), tuple(seen)


# --------------------------------------------------------------------------------------------------
# One configuration: what a worker or a SLURM array task runs
# --------------------------------------------------------------------------------------------------
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


def _now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


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
        return {"name": job.name, "status": "failed", "config": job.config, "started": _now(), "finished": _now(),
                "error": f"cannot create {run_dir / lock.LOCK_FILE}: {type(exc).__name__}: {exc}"}
    try:  # released also on SystemExit, which is how submitit leaves a job it has just requeued
        return _execute_held(job, run_dir)
    finally:
        lock.release(run_dir, held)


def _execute_held(job: ConfigurationJob, run_dir: Path) -> dict[str, Any]:
    record: dict[str, Any] = {"name": job.name, "status": "running", "config": job.config, "started": _now(),
                              "host": socket.gethostname(), "threads": job.threads,
                              "slurm_job_id": os.environ.get("SLURM_JOB_ID")}
    try:
        # Replace the previous record first: a kill from here on must not leave an old 'ok' behind.
        save_json(record, run_dir / EXECUTION_FILE)
        result = run_notebook(Path(job.notebook), run_dir, job.parameters(), cwd=Path(job.cwd),
                              report=job.grid, progress=False)
        record.update(status=result.status, elapsed_s=result.elapsed_s, failed_cell=result.failed_cell,
                      error=result.error, html=result.html, ipynb=result.ipynb, artifacts=result.artifacts)
    except Exception as exc:  # noqa: BLE001  (an unwritable folder, a missing notebook: still a record)
        record.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    record["finished"] = _now()
    try:
        save_json(record, run_dir / EXECUTION_FILE)
    except Exception:  # noqa: BLE001  the parent still gets the record through the return value
        pass
    return record


class SubmititTask(submitit.helpers.Checkpointable):
    """The callable each submitit job runs. Checkpointable: on a timeout submitit requeues it with the
    same job, which executes the notebook again and resumes training from the run's checkpoints."""

    def __call__(self, job: ConfigurationJob) -> dict[str, Any]:
        return execute_configuration(job)


# --------------------------------------------------------------------------------------------------
# State of a configuration on disk
# --------------------------------------------------------------------------------------------------
def _read(path: Path) -> dict[str, Any] | None:
    try:
        return load_json(path)
    except (OSError, ValueError):
        return None


def is_finished(run_dir: Path, cfg: RunConfig) -> bool:
    """COMPLETE, results.json present, and the last notebook execution succeeded for the same run as
    ``cfg`` (compared through RunConfig, pacing keys aside: :func:`heavytail.harness.rundir.same_run`)."""
    return RunDir(run_dir).is_finished(cfg)


def _summary(run_dir: Path) -> dict[str, Any] | None:
    """The headline numbers of results.json, for grid.json (None when there are none)."""
    results = _read(run_dir / RESULTS_FILE)
    if not results:
        return None
    try:
        energy = results["energy"]
        return {
            "median_ratio": energy["median"]["ratio"], "median_interval": [energy["median"]["low"], energy["median"]["high"]],
            "median_bold": energy["median"]["bold"],
            "mean_ratio": energy["mean"]["ratio"], "mean_interval": [energy["mean"]["low"], energy["mean"]["high"]],
            "mean_bold": energy["mean"]["bold"],
            "collapse": results["collapse"]["label"], "collapsed_fraction": results["collapse"]["fraction"],
        }
    except (KeyError, TypeError):
        return None


# --------------------------------------------------------------------------------------------------
# The report of a grid run
# --------------------------------------------------------------------------------------------------
@dataclass
class GridEntry:
    """One configuration's state in ``grid.json``. status: ok (ran now, or collected from an earlier
    submission), skipped (finished earlier), failed, cancelled (its SLURM job was cancelled: it runs
    again on the next run), locked (another grid command is executing it: ``error`` says which
    process), running, submitted, pending."""

    name: str
    status: str = "pending"
    run_dir: str = ""  # relative to the grid folder
    elapsed_s: float | None = None
    failed_cell: int | None = None
    error: str | None = None
    html: str | None = None  # relative to the grid folder
    ipynb: str | None = None
    job_id: str | None = None
    summary: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def absorb(self, record: Mapping[str, Any], grid_dir: Path) -> None:
        """Take the status, failing cell, error and files from an execution record."""
        self.status = record.get("status", "failed")
        self.elapsed_s = record.get("elapsed_s")
        self.failed_cell = record.get("failed_cell")
        self.error = record.get("error")
        run_dir = grid_dir / self.run_dir
        self.html = f"{self.run_dir}/{record['html']}" if record.get("html") else None
        self.ipynb = f"{self.run_dir}/{record['ipynb']}" if record.get("ipynb") else None
        self.summary = _summary(run_dir)


@dataclass
class GridReport:
    name: str
    directory: Path
    executor: str
    entries: list[GridEntry]
    finished: bool = False
    source: Path | None = None

    def by_status(self, status: str) -> list[GridEntry]:
        return [e for e in self.entries if e.status == status]

    @property
    def failed(self) -> list[GridEntry]:
        return self.by_status("failed")

    @property
    def ok(self) -> bool:
        """Every configuration finished (now or earlier)."""
        return all(e.status in ("ok", "skipped") for e in self.entries)

    @property
    def json_path(self) -> Path:
        return self.directory / "grid.json"

    @property
    def index_path(self) -> Path:
        return self.directory / "index.html"

    def write(self) -> None:
        """grid.json and index.html, each written atomically; called after every change of state."""
        counts = {s: len(self.by_status(s)) for s in STATUSES}
        save_json({"grid": self.name, "source": str(self.source or ""), "executor": self.executor,
                   "finished": self.finished, "written": _now(), "counts": counts,
                   "configurations": [asdict(e) for e in self.entries]}, self.json_path)
        # The runner's index shows a detail only for failed (cell and error) and skipped rows; the ratios
        # are in grid.json ('summary') and in the summary notebook.
        rows = [NotebookResult(name=e.name, status=e.status, elapsed_s=e.elapsed_s, failed_cell=e.failed_cell,
                               error="finished earlier, not rerun" if e.status == "skipped" else e.error,
                               html=e.html, ipynb=e.ipynb) for e in self.entries]
        write_index(self.directory, f"grid {self.name}", rows, self.source, finished=self.finished)
        # write_index also writes index.json in the runner's notebook format; grid.json is this grid's record.


# --------------------------------------------------------------------------------------------------
# Running a grid
# --------------------------------------------------------------------------------------------------
def _jobs(spec: GridSpec, grid_dir: Path, threads: int | None) -> list[ConfigurationJob]:
    root = repo_root()
    notebook = (root / spec.notebook).resolve()
    if not notebook.is_file():
        raise FileNotFoundError(f"grid {spec.name!r}: notebook {notebook} does not exist")
    return [
        ConfigurationJob(grid=spec.name, name=folder, config=cfg.to_dict(), run_dir=str(grid_dir / folder),
                         floor_cache=str(grid_dir / "_floors"), notebook=str(notebook), cwd=str(root), threads=threads)
        for cfg, folder in zip(spec.configs, spec.names)
    ]


def _log(msg: str) -> None:
    print(f"[grid] {msg}", file=sys.stderr, flush=True)


def _finish(report: GridReport, entry: GridEntry, record: Mapping[str, Any]) -> None:
    entry.absorb(record, report.directory)
    msg = f"{entry.name}: {entry.status}"
    if entry.elapsed_s is not None:
        msg += f" in {entry.elapsed_s:.1f} s"
    if entry.status == "failed":
        msg += f" (code cell {entry.failed_cell}: {entry.error})" if entry.failed_cell else f" ({entry.error})"
    elif entry.status in ("cancelled", "locked"):
        msg += f" ({entry.error})"
    _log(msg)
    report.write()


def _die_with_parent() -> None:
    """Pool-worker initializer: on Linux, ask the kernel to send SIGTERM when the grid process dies.

    Without it a killed grid leaves its spawned workers alive, and they go on taking queued
    configurations from the dead pool's pipe, training runs that nobody records (and that a restarted
    grid then trains a second time in the same folders)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        except OSError:
            pass
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


def _run_local(report: GridReport, todo: list[tuple[GridEntry, ConfigurationJob]], workers: int) -> None:
    # Each configuration runs in its own kernel process; the pool only drives them. 'spawn' keeps the
    # workers free of whatever state (threads, torch) this process holds.
    context = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_die_with_parent) as pool:
        futures = {pool.submit(execute_configuration, job): entry for entry, job in todo}
        run_dirs = {id(entry): Path(job.run_dir) for entry, job in todo}
        try:
            remaining = set(futures)
            while remaining:
                done, remaining = cf.wait(remaining, timeout=5, return_when=cf.FIRST_COMPLETED)
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
                    _finish(report, futures[future], record)
                if started and not done:
                    report.write()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _submitit_failure(job, exc: BaseException) -> dict[str, Any]:
    where = ""
    try:
        where = f"; job log: {job.paths.stderr}"
    except Exception:  # noqa: BLE001
        pass
    return {"status": "failed", "error": f"{type(exc).__name__}: {str(exc).strip()[-2000:]}{where}"}


def _job_record(job, run_dir: Path) -> dict[str, Any]:
    try:
        return job.result()
    except Exception as exc:  # noqa: BLE001  the job died outside the notebook (timeout, node failure)
        record = _read(run_dir / EXECUTION_FILE)
        if record and record.get("status") in ("ok", "failed"):
            return record
        return _submitit_failure(job, exc)


def _run_submitit_local(report: GridReport, todo: list[tuple[GridEntry, ConfigurationJob]], workers: int,
                        spec: GridSpec) -> None:
    """submitit's LocalExecutor starts every submitted job at once, so at most ``workers`` are in flight."""
    executor = submitit.AutoExecutor(folder=report.directory / "_submitit" / "%j", cluster="local")
    executor.update_parameters(timeout_min=spec.local.timeout_min, name=f"heavytail-{spec.name}")
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
                _finish(report, entry, _job_record(submitted, Path(job.run_dir)))
            if not done:
                time.sleep(0.5)
    except BaseException:
        for submitted, _, _ in running:
            submitted.cancel(check=False)
        raise


def slurm_executor(spec: GridSpec, grid_dir: Path) -> "submitit.AutoExecutor":
    """A submitit SLURM executor with the grid file's resources; job logs under ``<grid_dir>/_submitit/``.
    (submitit refuses to build one where ``srun`` is not on the PATH.)"""
    executor = submitit.AutoExecutor(folder=grid_dir / "_submitit" / "%j", cluster="slurm",
                                     slurm_max_num_timeout=spec.slurm.max_num_timeout)
    executor.update_parameters(**spec.slurm.executor_parameters(f"heavytail-{spec.name}"))
    return executor


# States in which a job still holds, or will again hold, its run folder.
ACTIVE_SLURM_STATES = cluster.ACTIVE_STATES


def _slurm_state(grid_dir: Path, job_id: str) -> str:
    """The job's state as squeue reports it (``UNKNOWN`` when the cluster no longer knows the job).
    Raises when squeue itself fails."""
    return cluster.job_states([job_id]).get(str(job_id), "UNKNOWN")


def active_slurm_jobs(grid_dir: Path, names: Sequence[str]) -> dict[str, str]:
    """Configurations an earlier submission of this grid still runs or queues: {name: job id}.

    Submitting them again would train one run folder twice at once, so a re-run (e.g. after ``--no-wait``)
    waits for these jobs instead. A job whose state cannot be read counts as active: never train twice.
    """
    previous = _read(grid_dir / "grid.json") or {}
    active = {}
    for entry in previous.get("configurations", []):
        name, job_id = entry.get("name"), entry.get("job_id")
        if name not in names or not job_id or entry.get("status") not in ("submitted", "running"):
            continue
        try:
            state = _slurm_state(grid_dir, str(job_id))
        except Exception as exc:  # noqa: BLE001
            _log(f"{name}: could not read the state of SLURM job {job_id} ({exc}); not submitting it again")
            state = "RUNNING"
        if cluster.is_active(state):
            active[name] = str(job_id)
        elif state not in ("COMPLETED", "UNKNOWN"):
            _log(f"{name}: SLURM job {job_id} of an earlier submission ended as {state}")
    return active


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def _ended_without_result(handle, state: str, run_dir: Path) -> dict[str, Any]:
    """The record of a job SLURM reports as ended (or no longer knows) that left no result file."""
    record = _read(run_dir / EXECUTION_FILE)
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


def _wait_slurm(report: GridReport, owners: dict[str, tuple[Any, GridEntry, ConfigurationJob]], poll_s: int) -> None:
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
                _log(f"cannot read job states ({err}); waiting for result files only")
            squeue_failed, states = True, {}
        changed = False
        for job_id, (handle, entry, job) in list(waiting.items()):
            run_dir = Path(job.run_dir)
            state = states.get(job_id) or last_seen.get(job_id, "UNKNOWN")
            if not cluster.is_active(state):
                last_seen[job_id] = state  # an end state, kept: the job may vanish by the next poll
            if handle.paths.result_pickle.exists():
                del waiting[job_id]
                _finish(report, entry, _job_record(handle, run_dir))
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
                    _finish(report, entry, _ended_without_result(handle, state, run_dir))
                    if entry.status == "cancelled":
                        _record_cancelled(run_dir, job.config, entry.error)
        if changed:
            report.write()
        if waiting:
            time.sleep(poll_s if not unexplained else min(poll_s, 2))


def _record_cancelled(run_dir: Path, config: Mapping[str, Any], error: str | None) -> None:
    """The run folder says so too: its record was left at 'running' by the killed job."""
    record = _read(run_dir / EXECUTION_FILE) or {}
    if record.get("status") in ("ok", "failed") or lock.holder(run_dir) is not None:
        return
    record.update(status="cancelled", error=error, finished=_now(), config=record.get("config") or dict(config))
    try:
        save_json(record, run_dir / EXECUTION_FILE)
    except OSError:
        pass


def _submit_slurm(report: GridReport, todo: list[tuple[GridEntry, ConfigurationJob]], spec: GridSpec) -> list:
    """One job array for ``todo``; a refusal by sbatch is one line (ValueError), not a traceback."""
    executor = slurm_executor(spec, report.directory)
    try:
        return executor.map_array(SubmititTask(), [job for _, job in todo])
    except Exception as exc:  # noqa: BLE001  sbatch refused the job (submitit wraps its error)
        message = _last_line_of(str(exc)) or type(exc).__name__
        raise ValueError(f"sbatch refused the job array: {message}") from exc


def _last_line_of(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        if line.strip() and not line.strip().startswith("-"):
            return line.strip()
    return ""


def check_slurm(spec: GridSpec) -> "cluster.Partition":
    """Before submitting: sbatch exists, the partition exists and one task fits on one of its nodes."""
    s = spec.slurm
    return cluster.check_resources(s.partition, s.cpus_per_task, s.mem_gb, s.gpus_per_node, s.timeout_min)


def _run_slurm(report: GridReport, todo: list[tuple[GridEntry, ConfigurationJob]], spec: GridSpec,
               wait: bool, earlier: list[tuple[GridEntry, ConfigurationJob]]) -> None:
    """Submit ``todo`` as one job array; with ``wait``, also wait for ``earlier`` (jobs of a previous
    submission that are still queued or running, their entries holding the job id)."""
    owners: dict[str, tuple[Any, GridEntry, ConfigurationJob]] = {}
    if todo:
        submitted = _submit_slurm(report, todo, spec)
        for (entry, job), handle in zip(todo, submitted):
            entry.status, entry.job_id = "submitted", str(handle.job_id)
            owners[str(handle.job_id)] = (handle, entry, job)
        report.write()
        _log(f"submitted {len(submitted)} array tasks: {', '.join(str(j.job_id) for j in submitted)}; "
             f"job logs: {report.directory / '_submitit'}/<job id>/")
    for entry, job in earlier:
        handle = submitit.SlurmJob(folder=report.directory / "_submitit" / "%j", job_id=entry.job_id)
        owners[str(handle.job_id)] = (handle, entry, job)
    if not wait or not owners:
        return
    _wait_slurm(report, owners, spec.slurm.poll_s)


def with_base(spec: GridSpec, overrides: Mapping[str, Any]) -> GridSpec:
    """The grid of ``spec``'s file with ``overrides`` added to its base (``--set``); a key that is an axis
    cannot be overridden for every configuration, so it is refused by name."""
    if spec.source is None:
        raise ValueError("--set needs a grid file")
    data = yaml.safe_load(spec.source.read_text(encoding="utf-8")) or {}
    axes = data.get("axes") or {}
    on_axes = sorted(k for k in overrides if k in axes or any(isinstance(g, Mapping) and k in g
                                                               for v in axes.values() if isinstance(v, list) for g in v))
    if on_axes:
        raise ValueError(f"--set {on_axes}: an axis of grid {spec.name!r} varies it; edit the grid file instead")
    data["base"] = {**(data.get("base") or {}), **overrides}
    return GridSpec.from_dict(data, source=spec.source)


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
    if workers is not None:
        _positive_int(workers, "workers")
    workers = workers or spec.local.workers
    if threads is None:
        threads = spec.slurm.cpus_per_task if executor == "slurm" else spec.local.threads(workers)
    root = Path(output_root).resolve() if output_root is not None else repo_root() / "outputs"
    grid_dir = root / spec.name
    grid_dir.mkdir(parents=True, exist_ok=True)
    jobs = _jobs(spec, grid_dir, threads)

    selected = set(spec.names)
    if only:
        selected = {n for n in spec.names if any(fnmatch.fnmatchcase(n, pat) for pat in only)}
        if not selected:
            raise ValueError(f"--only {list(only)} matches no configuration of grid {spec.name!r}; "
                             f"configurations: {spec.names}")

    if executor == "slurm" and not dry_run:
        check_slurm(spec)  # one line and exit 2 before anything is submitted
        cluster.quiet_sacct_warnings()
    active = active_slurm_jobs(grid_dir, spec.names) if executor == "slurm" and not dry_run else {}
    before = {e.get("name"): e for e in (_read(grid_dir / "grid.json") or {}).get("configurations", [])
              if isinstance(e, Mapping)}
    report = GridReport(name=spec.name, directory=grid_dir, executor=executor, entries=[], source=spec.source)
    todo: list[tuple[GridEntry, ConfigurationJob]] = []
    earlier: list[tuple[GridEntry, ConfigurationJob]] = []
    for cfg, job in zip(spec.configs, jobs):
        entry = GridEntry(name=job.name, run_dir=job.name, config=job.config)
        run_dir = Path(job.run_dir)
        previous = _read(run_dir / EXECUTION_FILE)
        earlier_job = before.get(job.name, {})
        if is_finished(run_dir, cfg):
            entry.absorb(previous, grid_dir)
            if earlier_job.get("status") in ("submitted", "running") and earlier_job.get("job_id"):
                entry.job_id = earlier_job["job_id"]  # collected: it finished since the --no-wait submission
            else:
                entry.status = "skipped"
        elif job.name in active:
            entry.status, entry.job_id = "submitted", active[job.name]
            earlier.append((entry, job))
        elif job.name in selected and not dry_run and (holder := lock.holder(run_dir)) is not None:
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
        _log(f"not submitted again, still queued or running from an earlier submission: "
             f"{', '.join(f'{e.name} (job {e.job_id})' for e, _ in earlier)}")
    for entry in report.by_status("locked"):
        _log(f"{entry.name}: not run, {entry.error}")
    _log(f"{spec.name}: {len(spec.configs)} configurations, {n_skip} finished earlier, {len(todo)} to run "
         f"({executor}, {workers if executor != 'slurm' else spec.slurm.array_parallelism} at once, "
         f"{threads} threads each) -> {grid_dir}")

    if executor == "slurm" and (todo or earlier):
        _run_slurm(report, todo, spec, wait, earlier)
    elif todo and executor == "local":
        _run_local(report, todo, workers)
    elif todo:
        _run_submitit_local(report, todo, workers, spec)
    report.finished = not any(e.status in UNFINISHED for e in report.entries)
    report.write()
    return report


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m heavytail grid",
        description="Run every configuration of a grid file: one papermill execution of the ablation notebook "
                    "each, writing <output-root>/<grid>/<config>/, grid.json and index.html.")
    parser.add_argument("grid", help="grid YAML (e.g. params/grid_cpu.yaml); see heavytail.pipeline.grid for the format")
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="local: process pool here; slurm: submitit job array; submitit-local: submitit jobs "
                             "as local processes")
    parser.add_argument("--workers", type=int, default=None, help="configurations at once (default: local.workers)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads per notebook kernel (default: local.threads_per_worker, or cores / workers; "
                             "slurm: slurm.cpus_per_task)")
    cli.add_output(parser, "folder holding <grid>/ (default: <repo>/outputs)", "--output-root")
    cli.add_only(parser, "configurations")
    cli.add_set(parser, "configuration keys of every configuration (as if set in the file's base)")
    cli.add_quiet(parser)
    parser.add_argument("--no-wait", action="store_true",
                        help="slurm: submit and return; run the same command later to collect (finished ones are skipped)")
    parser.add_argument("--list", action="store_true", dest="dry_run",
                        help="run nothing: list the configurations with their state and write grid.json / index.html")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heavytail grid params/grid_cpu.yaml --executor local``; 0 when every configuration ran
    or had finished earlier (or, with ``--no-wait``, is submitted), 1 when one failed or was cancelled, 2 for
    bad input (the grid file, the cluster's limits), 3 when none failed but one was left to another grid
    command that holds its lock: the grid is not finished, so a script must not read it as complete."""
    args = build_parser().parse_args(argv)
    try:
        grid = with_base(GridSpec.from_yaml(args.grid), cli.parse_sets(args.set)) if args.set else args.grid
        report = run_grid(grid, executor=args.executor, workers=args.workers, output_root=args.output,
                          only=args.only, threads=args.threads, wait=not args.no_wait, dry_run=args.dry_run)
    except cli.BAD_INPUT as err:
        return cli.bad_input("grid", err)
    width = max(len(e.name) for e in report.entries)
    for e in ([] if args.quiet else report.entries):
        line = f"  {e.name:<{width}}  {e.status}"
        if e.status == "failed":
            line += f"  code cell {e.failed_cell}: {e.error}" if e.failed_cell else f"  {e.error}"
        elif e.status in ("cancelled", "locked"):
            line += f"  {e.error}"
        print(line)
    failed, cancelled = report.failed, report.by_status("cancelled")
    total = sum(e.elapsed_s or 0.0 for e in report.entries if e.status == "ok")
    others = "".join(f", {len(report.by_status(s))} {s}" for s in ("cancelled", "locked", "submitted")
                     if report.by_status(s))
    print(f"[grid] {report.name}: {len(report.by_status('ok'))} ran, {len(report.by_status('skipped'))} finished earlier, "
          f"{len(failed)} failed{others}; {total:.1f} s of notebook time; index: {report.index_path}")
    return 1 if failed or cancelled else EXIT_LOCKED if report.by_status("locked") else 0


if __name__ == "__main__":
    sys.exit(main())
