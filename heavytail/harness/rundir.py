"""The run folder: the one owner of its layout, and of the rule that says whether its files are current.

One configuration's training run, evaluation and notebook execution live in one folder::

    config.yaml          the resolved configuration (every default written out)
    metrics.jsonl        one JSON line per logged step
    checkpoints/         step_XXXXXXXX.pt: model, optimizer, scheduler and every RNG state
    model.pt             final weights
    model_best.pt        the weights of the best validation score (runs with keep_best)
    train_summary.json   steps and skipped steps of the finished training
    COMPLETE             written last by training: a run without it is unfinished, whatever else exists
    results.json         the evaluation (heavytail.harness.evaluate), written after COMPLETE
    execution.json       the grid's record of the last notebook execution (heavytail.pipeline.configuration)

Train, evaluate, the grid, the summary and the notebooks ask a :class:`RunDir` for paths and states
instead of spelling file names. Torch-free: the grid and report processes use it without loading torch.

Staleness. Two configurations are the same run when they agree on every key after
:class:`~heavytail.harness.config.RunConfig` has parsed both (so a key added since, at its default, changes
nothing) except :data:`~heavytail.harness.config.PACING_KEYS`, which change how a run is paced or logged, never
its numbers (:func:`same_run`). Training refuses to resume a folder of another run, the grid skips a
configuration whose folder holds the same finished run, and the summary reads results whose
configuration is the same run as the folder's ``config.yaml``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from heavytail.harness.config import EVALUATION_KEYS, PACING_KEYS, RunConfig
from heavytail.io import COMPLETE, is_complete, load_json, read_jsonl

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
MODEL = "model.pt"
BEST_MODEL = "model_best.pt"
TRAIN_SUMMARY = "train_summary.json"
RESULTS = "results.json"
EXECUTION = "execution.json"
CHECKPOINT_PATTERN = "step_*.pt"


def _as_config(config: "RunConfig | Mapping[str, Any]") -> RunConfig:
    return config if isinstance(config, RunConfig) else RunConfig.from_dict(config)


def config_differences(a: "RunConfig | Mapping[str, Any]", b: "RunConfig | Mapping[str, Any]") -> dict[str, tuple]:
    """The keys (pacing keys aside) on which two configurations differ: {key: (a's value, b's value)}.
    Raises ValueError when either is not a valid configuration."""
    a, b = _as_config(a).to_dict(), _as_config(b).to_dict()
    return {k: (a[k], b[k]) for k in a if k not in PACING_KEYS and a[k] != b[k]}


def same_run(a: "RunConfig | Mapping[str, Any] | None", b: "RunConfig | Mapping[str, Any] | None") -> bool:
    """Whether two configurations produce the same run (see the module docstring); an invalid or
    missing configuration (a key since removed, a bad value) is never the same run."""
    if a is None or b is None:
        return False
    try:
        return not config_differences(a, b)
    except ValueError:
        return False


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (weights: what a run's binding records)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_json(path: Path) -> Any:
    try:
        return load_json(path)
    except (OSError, ValueError):
        return None


class _InRun:
    """One file of the run folder as a read-only attribute: ``RunDir(p).config_path`` is ``p / CONFIG``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, run: "RunDir | None", owner: type | None = None) -> "Path | _InRun":
        return self if run is None else run.path / self.name


@dataclass(frozen=True)
class RunDir:
    """Paths and states of one run folder (nothing is created until someone writes there)."""

    path: Path

    def __init__(self, path: "str | os.PathLike | RunDir") -> None:
        object.__setattr__(self, "path", Path(path.path if isinstance(path, RunDir) else path))

    def __fspath__(self) -> str:
        return str(self.path)

    # ------------------------------------------------------------------------------------ paths
    config_path = _InRun(CONFIG)
    metrics_path = _InRun(METRICS)
    checkpoints_dir = _InRun(CHECKPOINTS)
    model_path = _InRun(MODEL)
    best_model_path = _InRun(BEST_MODEL)
    train_summary_path = _InRun(TRAIN_SUMMARY)
    complete_path = _InRun(COMPLETE)
    results_path = _InRun(RESULTS)
    execution_path = _InRun(EXECUTION)

    def checkpoint_path(self, step: int) -> Path:
        return self.checkpoints_dir / f"step_{step:08d}.pt"

    # ----------------------------------------------------------------------------------- states
    def exists(self) -> bool:
        return self.path.is_dir()

    def is_complete(self) -> bool:
        """Training finished: the marker training writes last exists."""
        return is_complete(self.path)

    def has_results(self) -> bool:
        return self.results_path.is_file()

    def checkpoints(self) -> list[Path]:
        """Saved checkpoints, oldest first (zero-padded step numbers sort as numbers)."""
        return sorted(self.checkpoints_dir.glob(CHECKPOINT_PATTERN)) if self.checkpoints_dir.is_dir() else []

    def latest_checkpoint(self) -> Path | None:
        found = self.checkpoints()
        return found[-1] if found else None

    def state(self) -> str:
        """'complete', 'resumable from step_XXXXXXXX' or 'new', as a notebook prints it."""
        if self.is_complete():
            return "complete"
        latest = self.latest_checkpoint()
        return f"resumable from {latest.stem}" if latest is not None else "new"

    # ------------------------------------------------------------------------------------ reads
    def config(self) -> RunConfig | None:
        """The configuration in ``config.yaml`` (None when there is none yet)."""
        return RunConfig.from_yaml(self.config_path) if self.config_path.is_file() else None

    def training_log(self) -> list[dict[str, Any]]:
        """The logged steps (complete or not); a line cut by a kill ends the log."""
        return read_jsonl(self.metrics_path)

    def results(self) -> dict[str, Any]:
        """The evaluation (``results.json``); FileNotFoundError when the run is not evaluated."""
        if not self.has_results():
            raise FileNotFoundError(f"{self.path} has no {RESULTS}: evaluate the run first "
                                    f"(python -m heavytail evaluate {self.path})")
        return load_json(self.results_path)

    def train_summary(self) -> dict[str, Any]:
        """train_summary.json (steps, skipped, runtime, where and why training stopped); {} before it exists."""
        return load_json(self.train_summary_path) if self.train_summary_path.is_file() else {}

    def execution(self) -> dict[str, Any] | None:
        """The grid's record of the last notebook execution here (None when absent or unreadable)."""
        record = _read_json(self.execution_path)
        return record if isinstance(record, dict) else None

    def stale_results(self, results: Mapping[str, Any] | None = None) -> str | None:
        """Why ``results.json`` does not belong to the run in ``config.yaml`` (None when it does, or when
        either is absent): the staleness rule of :func:`same_run`. ``results``: the file's contents when the
        caller has read them already (they are read here otherwise)."""
        if not (self.has_results() and self.config_path.is_file()):
            return None
        if results is None:
            results = _read_json(self.results_path)
        if not isinstance(results, dict) or "config" not in results:
            return f"{RESULTS} is unreadable or has no configuration"
        try:
            differ = config_differences(self.config(), results["config"])
        except ValueError as err:
            return f"{RESULTS} holds a configuration RunConfig no longer accepts ({err})"
        if differ:
            return f"{RESULTS} is stale: its config differs from {CONFIG} in {sorted(differ)}; re-run the evaluation"
        return None

    def binding(self, config: RunConfig) -> dict[str, Any]:
        """What training binds together when it finishes (train_summary.json's "binding"): the configuration it
        trained and the digests of the weights it wrote, so that a later edit of either is found."""
        out: dict[str, Any] = {"config": config.to_dict(), "weights": file_digest(self.model_path)}
        if self.best_model_path.is_file():
            out["best_weights"] = file_digest(self.best_model_path)
        return out

    def binding_refusal(self) -> str | None:
        """Why the folder's configuration or weights are not what training bound together (None when they are, or
        for a run trained before bindings were recorded): an edited ``config.yaml`` would evaluate the weights as
        another model, replaced weights would be scored as this run's. The evaluation's own keys
        (:data:`~heavytail.harness.config.EVALUATION_KEYS`) may change: that re-scores the same weights."""
        bound = self.train_summary().get("binding")
        if not isinstance(bound, dict) or not self.is_complete():
            return None
        try:
            differ = config_differences(self.config(), bound["config"])
        except (ValueError, KeyError, TypeError) as err:
            return f"{CONFIG} or the binding in {TRAIN_SUMMARY} is not a configuration ({err})"
        differ = {k: v for k, v in differ.items() if k not in EVALUATION_KEYS}  # re-scoring is allowed
        if differ:
            listing = ", ".join(f"{k}: trained {b!r}, now {a!r}" for k, (a, b) in differ.items())
            return (f"{CONFIG} was edited after training ({listing}); the weights are the trained configuration's: "
                    f"restore it, or train the new configuration in another folder")
        for key, path in (("weights", self.model_path), ("best_weights", self.best_model_path)):
            if key in bound and (not path.is_file() or file_digest(path) != bound[key]):
                return (f"{path.name} is not the file training wrote (its sha256 differs from the one in "
                        f"{TRAIN_SUMMARY}); delete it and {COMPLETE} to retrain from the last checkpoint")
        return None

    def is_finished(self, cfg: "RunConfig | Mapping[str, Any]") -> bool:
        """Trained, evaluated (``results.json`` readable and of this run: one cut short by a kill or a full disk is not
        an evaluation), and the last notebook execution succeeded for the same run as ``cfg``."""
        if not (self.is_complete() and self.has_results()) or self.stale_results() is not None:
            return False
        if self.binding_refusal() is not None:
            return False
        record = self.execution()
        return bool(record and record.get("status") == "ok" and same_run(record.get("config"), cfg))


def find_run_dirs(root: "str | os.PathLike") -> list[RunDir]:
    """Every run folder under ``root`` (searched recursively, in name order): folders holding a
    configuration or results. Folders whose path below ``root`` starts with ``_`` or ``.`` (the shared
    ``_floors`` cache, submitit logs) are not runs."""
    root = Path(root)
    found = {p.parent for name in (CONFIG, RESULTS) for p in root.rglob(name)}
    return [RunDir(folder) for folder in sorted(found)
            if not any(part.startswith(("_", ".")) for part in folder.relative_to(root).parts)]
