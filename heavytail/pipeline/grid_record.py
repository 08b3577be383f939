"""The record of a grid run on disk: ``<output_root>/<grid>/grid.json`` and ``index.html``.

``grid.json`` holds every configuration's state (:class:`GridEntry`), with the headline numbers of its
``results.json``; ``index.html`` (and ``index.json``, in the report's notebook format) links every
configuration's rendered notebook. Both are rewritten atomically after every change of state, so an
interrupted grid never looks complete. Two grid commands may share a folder (each runs what the other has
not locked): every write takes the folder's record lock and first re-reads, from the run folders, the
configurations this command left to others, so neither ever records a configuration the other finished as
pending or 'locked' by a process that has since exited. This module is the one writer and reader of that layout; the
grid's progress lines on stderr (:func:`log`) say the same as the records, as they change.
"""

from __future__ import annotations

import contextlib
import fcntl
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from heavytail.harness.rundir import RunDir
from heavytail.io import load_json, save_json
from heavytail.pipeline import lock
from heavytail.pipeline.configuration import now
from heavytail.pipeline.notebook import NotebookResult, write_index
from heavytail.studies.grid_folder import GRID_JSON, grid_status  # the record's file and its one reader

STATUSES = ("ok", "skipped", "failed", "cancelled", "locked", "running", "submitted", "pending")
RECORD_LOCK = ".grid-record.lock"


def log(msg: str) -> None:
    print(f"[grid] {msg}", file=sys.stderr, flush=True)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return load_json(path)
    except (OSError, ValueError):
        return None


def previous_entries(grid_dir: Path) -> dict[str, Mapping[str, Any]]:
    """The configurations an earlier run of the grid recorded in its grid.json, by name (empty when none; a damaged
    record is a one-line ValueError, :func:`heavytail.studies.grid_folder.grid_status`)."""
    recorded = (grid_status(grid_dir) or {}).get("configurations", [])
    return {e.get("name"): e for e in recorded if isinstance(e, Mapping)}


def _summary(run_dir: Path) -> dict[str, Any] | None:
    """The headline numbers of results.json, for grid.json (None when there are none)."""
    results = _read(RunDir(run_dir).results_path)
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


@contextlib.contextmanager
def _record_lock(grid_dir: Path):
    """The grid folder's record lock: an flock, released by the kernel when its holder exits, so never stale."""
    grid_dir.mkdir(parents=True, exist_ok=True)
    with open(grid_dir / RECORD_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class GridEntry:
    """One configuration's state in ``grid.json``. status: ok (ran now, or collected from an earlier
    submission), skipped (finished earlier, or by another grid command), failed, cancelled (its SLURM job was
    cancelled, or the grid was interrupted: it runs again on the next run), locked (another grid command is executing it: ``error`` says which
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
        self.html = f"{self.run_dir}/{record['html']}" if record.get("html") else None
        self.ipynb = f"{self.run_dir}/{record['ipynb']}" if record.get("ipynb") else None
        self.summary = _summary(grid_dir / self.run_dir)


@dataclass
class GridReport:
    name: str
    directory: Path
    executor: str
    entries: list[GridEntry]
    finished: bool = False
    source: Path | None = None
    # the configurations this command was asked to run (all of them without --only / --unshipped); not recorded
    selected: frozenset[str] = field(default_factory=frozenset, repr=False)

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
        return self.directory / GRID_JSON

    @property
    def index_path(self) -> Path:
        return self.directory / "index.html"

    def refresh(self) -> None:
        """Re-read the configurations this command does not run ('pending', 'locked') from their run folders: one
        another grid command finished since is 'skipped' (finished, not by this command), and one whose lock
        holder has exited is 'pending' again."""
        for e in self.entries:
            if e.status not in ("pending", "locked"):
                continue
            run = RunDir(self.directory / e.run_dir)
            if run.is_finished(e.config):
                e.absorb(run.execution() or {}, self.directory)
                e.status, e.error = "skipped", None
            elif e.status == "locked" and lock.holder(run.path) is None:
                e.status, e.error = "pending", None

    def write(self) -> None:
        """grid.json and index.html, each written atomically under the folder's record lock; called after every
        change of state."""
        with _record_lock(self.directory):
            self.refresh()
            self._write()

    def _write(self) -> None:
        counts = {s: len(self.by_status(s)) for s in STATUSES}
        save_json({"grid": self.name, "source": str(self.source or ""), "executor": self.executor,
                   "finished": self.finished, "written": now(), "counts": counts,
                   "configurations": [asdict(e) for e in self.entries]}, self.json_path)
        # The runner's index shows a detail only for failed (cell and error) and skipped rows; the ratios
        # are in grid.json ('summary') and in the summary notebook.
        rows = [NotebookResult(name=e.name, status=e.status, elapsed_s=e.elapsed_s, failed_cell=e.failed_cell,
                               error="finished earlier, not rerun" if e.status == "skipped" else e.error,
                               html=e.html, ipynb=e.ipynb) for e in self.entries]
        write_index(self.directory, f"grid {self.name}", rows, self.source, finished=self.finished)
        # write_index also writes index.json in the runner's notebook format; grid.json is this grid's record.

    def finish(self, entry: GridEntry, record: Mapping[str, Any]) -> None:
        """Record ``entry``'s execution record, say so on stderr, and rewrite the files."""
        entry.absorb(record, self.directory)
        msg = f"{entry.name}: {entry.status}"
        if entry.elapsed_s is not None:
            msg += f" in {entry.elapsed_s:.1f} s"
        if entry.status == "failed":
            msg += f" (code cell {entry.failed_cell}: {entry.error})" if entry.failed_cell else f" ({entry.error})"
        elif entry.status in ("cancelled", "locked"):
            msg += f" ({entry.error})"
        log(msg)
        self.write()
