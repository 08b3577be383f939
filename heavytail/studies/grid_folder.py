"""The finished runs of a grid folder, and their record: the one reader every study reads runs through (notebooks 05
and 06 directly; the shipped maps through their summaries, :func:`heavytail.studies.run_summary.collect`:
``ship-map``, ``select-lr``, notebooks 07 to 09), and :class:`FinishedRun`, the one record of a run.

A run folder counts when every rule below holds, and every other folder is listed with the first rule it breaks:

- training finished: ``COMPLETE`` exists (written last by training);
- it was evaluated: ``results.json`` exists and holds a configuration, a collapse label and energy distances;
- its results belong to it: their configuration is the same run as ``config.yaml``
  (:meth:`heavytail.harness.rundir.RunDir.stale_results`);
- where the folder holds the grid runner's record ``grid.json`` (:mod:`heavytail.pipeline.grid_record`): the
  record lists the folder, with the status ``ok`` or ``skipped`` (finished by this grid command or an earlier
  one); a configuration that failed (its notebook, say, after evaluation), is pending or still running is not
  counted, nor a folder the grid no longer lists (its grid file changed since).

With ``grid.json`` the runs come in the grid's order (a shipped map keeps its order), and a configuration the
record lists but that has no folder yet is not listed among the skipped: there is nothing on disk to skip, and
``grid.json`` itself says it did not run (:func:`grid_status`). Without one (runs made by hand, or a folder above
several grids) every run folder below is read, searched recursively in name order; folders starting with ``_`` or
``.``, such as the shared ``_floors`` cache, are not runs (:func:`heavytail.harness.rundir.find_run_dirs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Mapping

from heavytail.harness.rundir import RunDir, find_run_dirs
from heavytail.io import load_json

GRID_JSON = "grid.json"  # the grid runner's record (heavytail.pipeline.grid_record writes it)
FINISHED = ("ok", "skipped")  # the grid.json statuses of a configuration that finished
RESULTS_KEYS = ("config", "collapse", "energy")  # what every reader of a run's results takes


@dataclass(frozen=True)
class FinishedRun:
    """One finished, evaluated run, the record every study reads: ``name`` (relative to the grid folder), its
    folder (None for results made by hand) and its ``results.json``; its configuration, training log and the
    attention paths its training and evaluation recorded are read from them. A shipped map keeps each run as a
    summary of this record (:func:`heavytail.studies.run_summary.run_summary`)."""

    name: str
    run_dir: RunDir | None
    results: Mapping[str, Any]

    @classmethod
    def from_results(cls, results: Mapping[str, Any], run_dir: str | Path | None = None) -> "FinishedRun":
        """The record of an evaluation results dict (the structure of ``results.json``); ValueError when it is
        not one."""
        missing = [k for k in RESULTS_KEYS if k not in results]
        if missing:
            raise ValueError(f"results of {run_dir or results.get('name')} lack {missing}; "
                             "expected the dict written by heavytail.harness.evaluate.evaluate")
        folder = RunDir(run_dir) if run_dir is not None else None
        return cls(str(results.get("name") or (folder.path.name if folder else "run")), folder, results)

    @property
    def config(self) -> Mapping[str, Any]:
        return self.results["config"]

    @cached_property
    def log(self) -> tuple[Mapping[str, Any], ...]:
        """The training log (``metrics.jsonl``), read once; () for results made by hand."""
        return tuple(self.run_dir.training_log()) if self.run_dir is not None else ()

    @cached_property
    def attention(self) -> dict[str, str | None]:
        """The attention paths the run recorded, as :func:`heavytail.harness.precision.backend_label` wrote them
        (``"sdpa"``, ``"tiled"``, ``"flash:native"``, ``"flex+flash"``): ``{"train": ..., "eval": ...}``, from
        ``results.json``'s runtime (training's from ``train_summary.json`` when evaluation did not copy it); None
        where none was recorded (runs trained before training recorded it)."""
        runtime = self.results.get("runtime") or {}
        trained = runtime.get("training") or {}
        if not trained and self.run_dir is not None:
            trained = self.run_dir.train_summary().get("runtime") or {}
        return {"train": trained.get("attention_backend") or None,
                "eval": (runtime.get("evaluation") or {}).get("attention_backend") or None}


@dataclass(frozen=True)
class FinishedRuns:
    """The counted runs of a grid folder, and every folder not counted as ``{"run": name, "reason": why}``."""

    runs: tuple[FinishedRun, ...]
    skipped: tuple[dict[str, str], ...] = field(default_factory=tuple)
    record: Mapping[str, Any] | None = None  # grid.json, when the folder has one


def grid_status(grid_dir: str | Path) -> dict[str, Any] | None:
    """The grid runner's record ``<grid_dir>/grid.json`` (:mod:`heavytail.pipeline.grid_record`), or None when absent:
    {"grid", "finished", "counts", "configurations": [{"name", "status", "failed_cell", "error", ...}]}. The one
    reader of that file (the grid runner, the shipper, the studies and the landing page read it here): a damaged one
    is a one-line ValueError naming it, never an empty record."""
    path = Path(grid_dir) / GRID_JSON
    if not path.is_file():
        return None
    fix = "delete it: the grid runner writes it again from the run folders (python -m heavytail grid FILE --list)"
    try:
        record = load_json(path)
    except (OSError, ValueError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ValueError(f"{path}: not a readable grid record ({type(err).__name__}: {reason}); {fix}") from None
    if not isinstance(record, Mapping) or not isinstance(record.get("configurations"), list):
        raise ValueError(f"{path}: not a grid record (expected a mapping with a 'configurations' list); {fix}")
    return dict(record)


def folder_refusal(folder: RunDir) -> tuple[str | None, dict[str, Any] | None]:
    """(why the run in ``folder`` is not counted, or None; its results when readable): the folder's own rules."""
    if not folder.is_complete():
        return "training not finished (no COMPLETE marker)", None
    if not folder.has_results():
        return "trained but not evaluated (no results.json)", None
    try:
        results = folder.results()
    except (ValueError, OSError) as exc:
        return f"unreadable results.json: {exc}", None
    missing = [k for k in RESULTS_KEYS if not isinstance(results, dict) or k not in results]
    if missing:
        return (f"unreadable results.json: it lacks {missing}; expected the dict written by "
                "heavytail.harness.evaluate.evaluate"), None
    stale = folder.stale_results(results)  # the same rule the grid and training apply (heavytail.harness.rundir)
    return folder.binding_refusal() or stale, results


def _status_refusal(entry: Mapping[str, Any]) -> str | None:
    status = entry.get("status")
    if status in FINISHED:
        return None
    error = f": {entry['error']}" if entry.get("error") else ""
    return f"the grid did not finish it: {GRID_JSON} records it {status!r}{error}"


def finished_runs(grid_dir: str | Path) -> FinishedRuns:
    """The finished, evaluated runs of ``grid_dir`` whose results are current, with the reason for every other
    folder (the rules of the module docstring). FileNotFoundError when ``grid_dir`` does not exist, ValueError when
    its ``grid.json`` is not a grid record."""
    grid_dir = Path(grid_dir)
    if not grid_dir.is_dir():
        raise FileNotFoundError(f"grid folder {grid_dir} does not exist; run the grid first "
                                "(python -m heavytail grid <grid.yaml>) or point grid_dir at its output folder")
    record = grid_status(grid_dir)
    runs: list[FinishedRun] = []
    skipped: list[dict[str, str]] = []

    def read(name: str, folder: RunDir, entry: Mapping[str, Any] | None) -> None:
        why, results = folder_refusal(folder)
        if why is None and entry is not None:
            why = _status_refusal(entry)
        if why is None:
            runs.append(FinishedRun(name, folder, results))
        else:
            skipped.append({"run": name, "reason": why})

    found = {str(f.path.relative_to(grid_dir)): f for f in find_run_dirs(grid_dir)}
    if record is None:
        for name, folder in found.items():
            read(name, folder, None)
        return FinishedRuns(tuple(runs), tuple(skipped))
    listed = set()
    for entry in record["configurations"]:
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("run_dir") or entry.get("name"))
        listed.add(name)
        folder = RunDir(grid_dir / name)
        if folder.exists():
            read(name, folder, entry)
    for name in found:
        if name not in listed:
            skipped.append({"run": name, "reason": f"not a configuration of the grid: {GRID_JSON} does not list it "
                                                   "(its grid file changed since it ran?)"})
    return FinishedRuns(tuple(runs), tuple(skipped), record)


def filter_runs(runs: Iterable[FinishedRun], **equal: Any) -> list[FinishedRun]:
    """The runs whose configuration has ``config[key] == value`` for every given key (unknown keys: error)."""
    runs = list(runs)
    for key in equal:
        if runs and key not in runs[0].config:
            raise ValueError(f"filter key {key!r} is not a configuration key; allowed: {', '.join(sorted(runs[0].config))}")
    return [r for r in runs if all(r.config.get(k) == v for k, v in equal.items())]
