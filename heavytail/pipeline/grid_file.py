"""A grid file: the configurations of the ablation grid (Section 4.2, App. G) and how to run them.

A grid file names a set of run configurations: a ``base`` mapping of :class:`~heavytail.harness.config.RunConfig`
keys shared by all of them and ``axes`` whose Cartesian product (in the file's order) gives the
configurations; each configuration is one execution of the grid's notebook (:mod:`heavytail.pipeline.grid`).
Format::

    name: cpu                        # output folder: <output_root>/cpu/
    notebook: notebooks/04_ablation.py   # optional; relative to the repository root
    base:                            # RunConfig keys shared by every configuration
      steps: 300
      d_model: 32
    name_keys: [n_points]            # optional: keys every folder name spells even while one value is listed
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
folder. Every configuration is validated by RunConfig when the file is read, before anything runs.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from heavytail import cli
from heavytail.harness.config import RunConfig

# The keys RunConfig.name spells; any other key that varies in a grid is appended to the folder name.
NAMED_KEYS = ("benchmark", "marginals", "kernel", "norm", "symlog", "seed")
TASK_KEYS = ("benchmark", "marginals")
DEFAULT_NOTEBOOK = "notebooks/04_ablation.py"
TOP_LEVEL_KEYS = ("name", "notebook", "base", "axes", "name_keys", "local", "slurm")
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


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


def positive_int(value: Any, name: str, allow_none: bool = False) -> None:
    """Refuse ``value`` unless it is a positive integer (or None, when allowed), naming the setting."""
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
        positive_int(self.workers, "local.workers")
        positive_int(self.threads_per_worker, "local.threads_per_worker", allow_none=True)
        positive_int(self.timeout_min, "local.timeout_min")

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
            positive_int(getattr(self, name), f"slurm.{name}")
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
    """A validated grid file: its name, the notebook, the configurations (with their folder names) and the
    executor settings."""

    name: str
    configs: tuple[RunConfig, ...]
    notebook: str = DEFAULT_NOTEBOOK
    local: LocalSettings = field(default_factory=LocalSettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    source: Path | None = None
    names: tuple[str, ...] = ()  # one folder name per configuration; empty: each configuration's RunConfig.name

    def __post_init__(self) -> None:
        if not self.names:
            object.__setattr__(self, "names", tuple(cfg.name for cfg in self.configs))
        if len(self.names) != len(self.configs):
            raise ValueError("GridSpec needs one folder name per configuration")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: Path | None = None) -> "GridSpec":
        where = f" in {source}" if source else ""
        if not isinstance(data, Mapping):
            raise ValueError(f"a grid{where} must be a mapping with keys name, base, axes, local, slurm; "
                             f"got {type(data).__name__}")
        unknown = sorted(set(data) - set(TOP_LEVEL_KEYS))
        if unknown:
            raise ValueError(f"unknown top-level key(s) {unknown}{where}; allowed: {', '.join(TOP_LEVEL_KEYS)}")
        name = data.get("name")
        if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS or name.startswith("."):
            raise ValueError(f"'name'{where} must be a folder name of letters, digits, '_', '-', '.'; got {name!r}")
        notebook = data.get("notebook", DEFAULT_NOTEBOOK)
        if not isinstance(notebook, str) or not notebook.endswith(".py"):
            raise ValueError(f"'notebook'{where} must be the path of a py:percent notebook, got {notebook!r}")
        base = _mapping(data.get("base"), "base", where)
        axes = _mapping(data.get("axes"), "axes", where)
        spelled = data.get("name_keys", [])
        allowed = {f.name for f in fields(RunConfig)}
        if not isinstance(spelled, list) or not set(spelled) <= allowed:
            raise ValueError(f"'name_keys'{where} must be a list of configuration keys, got {spelled!r}")
        configs, names = _expand(name, base, axes, where, spelled)
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
        return cls.from_dict(cli.read_yaml_file(path, "grid file"), source=Path(path))

    @classmethod
    def load(cls, grid: "str | os.PathLike | Mapping[str, Any] | GridSpec") -> "GridSpec":
        if isinstance(grid, GridSpec):
            return grid
        if isinstance(grid, Mapping):
            return cls.from_dict(grid)
        return cls.from_yaml(grid)


def with_base(spec: GridSpec, overrides: Mapping[str, Any]) -> GridSpec:
    """The grid of ``spec``'s file with ``overrides`` added to its base (``--set``); a key that is an axis
    cannot be overridden for every configuration, so it is refused by name."""
    if spec.source is None:
        raise ValueError("--set needs a grid file")
    data = cli.read_yaml(spec.source) or {}
    axes = data.get("axes") or {}
    on_axes = sorted(k for k in overrides if k in axes or any(isinstance(g, Mapping) and k in g
                                                               for v in axes.values() if isinstance(v, list) for g in v))
    if on_axes:
        raise ValueError(f"--set {on_axes}: an axis of grid {spec.name!r} varies it; edit the grid file instead")
    data["base"] = {**(data.get("base") or {}), **overrides}
    return GridSpec.from_dict(data, source=spec.source)


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


def _expand(name: str, base: dict[str, Any], axes: dict[str, Any], where: str, spelled: Sequence[str] = ()
            ) -> tuple[tuple[RunConfig, ...], tuple[str, ...]]:
    """The Cartesian product of the axes over the base, each validated by RunConfig, and their folder names (which
    spell the keys that vary and those of ``spelled``)."""
    keys = {f.name for f in fields(RunConfig)}
    levels: list[list[dict[str, Any]]] = []
    varying: set[str] = set(spelled)
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
