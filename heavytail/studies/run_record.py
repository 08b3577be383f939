"""One finished run as every study reads it: :class:`RunRecord`, the typed form of a run summary
(:func:`heavytail.studies.run_summary.run_summary`) and of each run of a shipped map
(:mod:`heavytail.studies.reference_maps`).

A record is made once, where a summary enters the studies (a map file read, a grid folder collected), and checked
there completely: a run without its name, configuration, eq. 36's median ratio or its collapse label is a one-line
ValueError naming the run, never a KeyError in a figure far away. Its typed fields and properties are what the
studies read (``run.seed``, ``run.ratio``, ``run.label``); the summary's other parts (traces, per-trial records, the
ratios at the training N) stay in the summary's JSON shape, read by key (``run["trace"]``), so a record is also a
read-only mapping of exactly the summary it came from, and :meth:`RunRecord.to_summary` gives that summary back
for a map file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

from heavytail.harness.config import RunConfig

# What every reader of a run takes: its name, configuration, eq. 36-37's ratios (median and mean) and the collapse
# label with the share of collapsed trials (App. I).
RUN_KEYS = ("name", "config", "median", "mean", "collapse")
# The configuration keys the readers of runs look up (task, variant, seed, size, recipe): a run without one would
# fail far from its file, or be read at RunConfig's default for it.
CONFIG_KEYS = ("benchmark", "marginals", "kernel", "norm", "symlog", "attention_backend", "seed", "n_points",
               "eval_n_points", "steps", "lr", "trials_per_step")


def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


# What a run took for a setting it did not record (one added to RunConfig after it ran): RunConfig's default then.
_TOOK = MappingProxyType(RunConfig.with_defaults({}))


class _Configured:
    """A typed read of the configuration setting of the attribute's name: ``run.seed`` is ``int(run.config["seed"])``;
    a setting the run did not record reads the default it took (:meth:`RunConfig.with_defaults`)."""

    def __init__(self, cast: Any) -> None:
        self.cast = cast

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    def __get__(self, run: Any, owner: type | None = None) -> Any:
        if run is None:
            return self
        return self.cast(run.config[self.key] if self.key in run.config else _TOOK[self.key])


@dataclass(frozen=True, eq=False)
class RunRecord(Mapping[str, Any]):
    """One finished run: its name, its configuration (``results.json``'s, read-only), eq. 36's median and mean
    ratios to the sampling floor with eq. 37's intervals (``{"ratio", "low", "high", ...}``), the collapse label,
    its share of collapsed trials and onset (App. I), and ``parts``: the rest of the summary by name. Compares
    equal to a mapping with the same summary."""

    name: str
    config: Mapping[str, Any]
    median: Mapping[str, Any]
    mean: Mapping[str, Any]
    collapse: Mapping[str, Any]
    parts: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for part in ("config", "median", "mean", "collapse", "parts"):
            object.__setattr__(self, part, _frozen(getattr(self, part)))

    # -------------------------------------------------------------------------------- made once, checked once
    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> "RunRecord":
        """The record of a run summary; ValueError naming the run and what it lacks when the summary is not one."""
        if isinstance(summary, RunRecord):
            return summary
        problem = shape_problem(summary)
        if problem:
            name = summary.get("name", "?") if isinstance(summary, Mapping) else "?"
            raise ValueError(f"run {name} is not a run summary: it {problem}")
        return cls(**{k: summary[k] for k in RUN_KEYS}, parts={k: v for k, v in summary.items() if k not in RUN_KEYS})

    def to_summary(self) -> dict[str, Any]:
        """The summary this record was made from, as plain dicts (what a map file holds)."""
        return {k: _plain(v) for k, v in self.items()}

    def with_parts(self, **changes: Any) -> "RunRecord":
        """This run with some of its summary's parts replaced (``median=...``, ``trace=...``): a derived view of
        the run (its best weights' ratios, a shortened trace), never an edit of the record."""
        own = {k: changes.pop(k) for k in list(changes) if k in RUN_KEYS}
        return replace(self, **own, parts={**self.parts, **changes}) if changes else replace(self, **own)

    # -------------------------------------------------------------------------------- what the studies read
    # The task, model variant, seed and recipe of the run (RunConfig's settings of these names, typed).
    benchmark = _Configured(str)
    marginals = _Configured(str)
    kernel = _Configured(str)
    attention_backend = _Configured(str)
    split_kernel = _Configured(str)  # "" unless one block's kernel differs (an intervention)
    qk_norm = _Configured(bool)  # queries and keys layer-normalised before the score (an intervention)
    norm = _Configured(str)
    symlog = _Configured(bool)
    precision = _Configured(str)
    flush_subnormals = _Configured(bool)
    tail_regime = _Configured(str)
    seed = _Configured(int)
    n_points = _Configured(int)  # the training N
    trials_per_step = _Configured(int)
    steps = _Configured(int)  # the budget (the cap, under a stopping rule)
    stop_min_steps = _Configured(int)
    lr = _Configured(float)
    log_every = _Configured(int)  # the training trace's logging grid
    eval_n_points = _Configured(int)  # the common evaluation N at which ``median`` and ``mean`` were scored
    collapse_spread = _Configured(float)  # the spread below which a trial counts as collapsed (App. I)

    @property
    def ratio(self) -> float:
        """Eq. 36's median ratio to the sampling floor at the common evaluation N."""
        return float(self.median["ratio"])

    @property
    def label(self) -> str:
        """The collapse label: ``collapse``, ``ok`` or ``diverged`` (App. I)."""
        return self.collapse["label"]

    @property
    def collapsed(self) -> bool:
        return self.label == "collapse"

    # -------------------------------------------------------------------------------- the summary's shape
    def __getitem__(self, key: str) -> Any:
        if key in RUN_KEYS:
            return getattr(self, key)
        return self.parts[key]

    def __iter__(self) -> Iterator[str]:
        yield from RUN_KEYS
        yield from self.parts

    def __len__(self) -> int:
        return len(RUN_KEYS) + len(self.parts)

    def __repr__(self) -> str:
        return f"RunRecord({self.name!r}, kernel={self.config.get('kernel')!r}, seed={self.config.get('seed')!r})"


def records(runs: Iterable[Mapping[str, Any]]) -> list[RunRecord]:
    """The runs as records, each checked (a record passes unchanged): what a study calls on the runs handed to it."""
    return [RunRecord.from_summary(r) for r in runs]


def shape_problem(run: Any) -> str | None:
    """Why ``run`` is not a run summary, as a predicate ("has no config.seed"; None when it is one): a missing part
    of :data:`RUN_KEYS`, a configuration without one of :data:`CONFIG_KEYS`, no median ratio or collapse label."""
    if not isinstance(run, Mapping):
        return f"is a JSON {type(run).__name__}, not an object"
    missing = [k for k in RUN_KEYS if k not in run]
    if missing:
        return f"has no {', '.join(missing)}"
    if not all(isinstance(run[k], Mapping) for k in RUN_KEYS[1:]):
        return "has a config, median, mean or collapse that is not an object"
    lacks = [f"config.{k}" for k in CONFIG_KEYS if k not in run["config"]]
    ratio = run["median"].get("ratio")
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool):
        lacks.append("median.ratio (a number)")
    if "label" not in run["collapse"]:
        lacks.append("collapse.label")
    return f"has no {', '.join(lacks)}" if lacks else None


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
