"""The shipped reference maps under ``outputs/reference/``: their names, files, grids, and how one is shipped.

A map is a grid's per-run summaries (:func:`heavytail.studies.kernel_gap.run_summary`: configuration,
ratios with intervals, collapse, traces; never checkpoints or weights) with provenance. The provenance is
the runs' own (:mod:`heavytail.harness.provenance`, recorded at training time): shipping refuses runs from a
dirty tree or from several commits unless told otherwise, and a grid shipped before it finished says so
(``complete`` is false and ``finished`` counts what it holds), so a later session can resume the grid and
ship again. ``python -m heavytail ship-map NAME GRID_DIR`` is the command.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from heavytail import cli
from heavytail.harness.artifacts import repo_root
from heavytail.harness.provenance import check_shippable, machine, now
from heavytail.io import load_json, save_json


@dataclass(frozen=True)
class MapSpec:
    """One shipped map: its file under ``outputs/reference/``, the grid file that makes it, what it is."""

    file: str
    grid: str
    title: str
    about: str


MAPS = {
    "gap-design": MapSpec("kernel_gap_design.json", "params/grid_gap_design.yaml", "one-trial-per-step map",
                          "kernel gap vs N at one trial per step (the same task instances at every N), 8 seeds"),
    "gap-long": MapSpec("kernel_gap_long.json", "params/grid_gap_long.yaml", "3,000-step grid",
                        "softmax and log-ELU for 3,000 steps at N = 1024, lr 1e-3 and 1e-2"),
    "phase": MapSpec("phase_diagram.json", "params/grid_phase.yaml", "phase map",
                     "kernel growth order q x tail regime x N at one trial per step, 5 seeds"),
    "gap-points": MapSpec("kernel_gap_map.json", "params/grid_gap_map.yaml", "points-per-step map",
                          "kernel gap vs N at 4096 points per step (trials per step traded for N), 3 seeds"),
}
REFERENCE_DIR = Path("outputs") / "reference"


def path_of(name: str, root: Path | None = None) -> Path:
    if name not in MAPS:
        raise ValueError(f"unknown map {name!r}; the shipped maps are: {', '.join(MAPS)}")
    return (root or repo_root()) / REFERENCE_DIR / MAPS[name].file


def load(name: str, root: Path | None = None) -> dict[str, Any] | None:
    """A shipped map (None when its file is absent)."""
    path = path_of(name, root)
    return load_json(path) if path.is_file() else None


@dataclass(frozen=True)
class Source:
    """The runs a notebook draws for one map: a local re-run when one exists, else the shipped file."""

    name: str
    runs: tuple
    label: str
    origin: str  # "local", "shipped" or "absent"
    provenance: dict

    def describe(self) -> str:
        if self.origin == "absent":
            return f"{self.label}: not shipped and not re-run here"
        p = self.provenance
        if self.origin == "local":
            return f"{self.label}: {len(self.runs)} runs"
        commits = ", ".join(c[:9] for c in p.get("commits", [p.get("commit", "?")]))
        done = (f"{p['finished']} of {p['configurations']} configurations" + ("" if p.get("complete") else
                ", INCOMPLETE: the grid was shipped before it finished")) if "finished" in p else f"{len(self.runs)} runs"
        return (f"{self.label}: {done}; trained at commit {commits}; shipped {p.get('shipped', p.get('date'))} "
                f"by `{p.get('command')}`")


def source(name: str, local_dir: str | Path | None = None, root: Path | None = None) -> Source:
    """Map ``name``'s runs: from ``local_dir`` when it holds finished runs of a re-run, else the shipped file."""
    from heavytail.studies.kernel_gap import collect

    about = MAPS[name].title if name in MAPS else name
    if local_dir is not None and Path(local_dir).is_dir():
        runs = collect(local_dir)
        if runs:
            return Source(name, tuple(runs), f"{about} (re-run here)", "local", {})
    shipped = load(name, root)
    if shipped is None:
        return Source(name, (), about, "absent", {})
    return Source(name, tuple(shipped["runs"]), f"{about} (shipped)", "shipped", shipped["provenance"])


def run_provenance(run: dict[str, Any]) -> list[dict[str, Any]]:
    return list(run.get("provenance") or [{}])


def ship(name: str, grid_dir: str | Path, *, command: str, allow_dirty: bool = False, allow_mixed: bool = False,
         output: str | Path | None = None) -> Path:
    """Write the finished runs of ``grid_dir`` as map ``name``; returns the file written."""
    from heavytail.studies.kernel_gap import collect

    grid_dir = Path(grid_dir)
    record_path = grid_dir / "grid.json"
    if not record_path.is_file():
        raise ValueError(f"{grid_dir} holds no grid.json: run the grid first "
                         f"(python -m heavytail grid {MAPS[name].grid if name in MAPS else '<grid file>'})")
    runs = collect(grid_dir)
    if not runs:
        raise ValueError(f"{grid_dir} holds no finished configuration yet")
    commits = check_shippable([p for r in runs for p in run_provenance(r)], allow_dirty=allow_dirty,
                              allow_mixed=allow_mixed)
    total = len(load_json(record_path).get("configurations", []))
    payload = {
        "provenance": {
            "commits": commits,
            "shipped": now(),
            "shipped_on": machine(),
            "command": command,
            "grid_file": MAPS[name].grid if name in MAPS else None,
            "finished": len(runs),
            "configurations": total,
            "complete": len(runs) == total,
        },
        "runs": runs,
    }
    out = Path(output) if output is not None else path_of(name)
    return save_json(payload, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m heavytail ship-map",
        description="Ship a grid's finished per-run summaries, with the runs' own provenance, as a reference map "
                    "under outputs/reference/ (a grid that has not finished ships as incomplete).")
    parser.add_argument("name", help="which map: " + "; ".join(f"{k}: {v.about}" for k, v in MAPS.items()))
    parser.add_argument("grid_dir", help="the grid's output folder, e.g. outputs/grid-gap-design")
    parser.add_argument("--output", default=None, help="write here instead of outputs/reference/<file>")
    parser.add_argument("--allow-dirty", action="store_true", help="accept runs trained from a dirty tree")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="accept runs from several commits, or runs that recorded none")
    args = parser.parse_args(argv)
    try:
        if args.name not in MAPS:
            raise ValueError(f"unknown map {args.name!r}; the shipped maps are: {', '.join(MAPS)}")
        path = ship(args.name, args.grid_dir, output=args.output, allow_dirty=args.allow_dirty,
                    allow_mixed=args.allow_mixed,
                    command="python -m heavytail ship-map " + " ".join(argv if argv is not None else sys.argv[1:]))
    except cli.BAD_INPUT as err:
        return cli.bad_input("ship-map", err)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0


@dataclass(frozen=True)
class ComputedSpec:
    """One shipped reference that is computed, not trained: no grid and no runs, a JSON of rows with its own
    provenance (commit, torch, machine, date, command), written by ``command``."""

    file: str
    command: str
    title: str
    about: str


COMPUTED = {
    "phase-static": ComputedSpec(
        "phase_static.json", "python -m heavytail.studies.phase_static --pilot outputs/reference/phase_static_pilot.json "
        "--most 240 --work outputs/phase-static-work --output outputs/reference/phase_static.json",
        "static reference", "growth exponent of one query's attention output, every kernel x 9 tail indices, "
        "N = 2^10 .. 2^20, 64-240 repetitions per tail index (App. A)"),
    "phase-fixed-weight": ComputedSpec(
        "phase_fixed_weight.json", "python -m heavytail.studies.fixed_weight outputs/phase-fixed/<run> ... "
        "--output outputs/reference/phase_fixed_weight.json", "fixed-weight measurements",
        "block 0's attention-output exponent and each block's token tail index at trained weights (6 runs)"),
}


def load_computed(name: str, root: Path | None = None) -> dict[str, Any] | None:
    """A shipped computed reference (None when its file is absent)."""
    if name not in COMPUTED:
        raise ValueError(f"unknown computed reference {name!r}; they are: {', '.join(COMPUTED)}")
    path = (root or repo_root()) / REFERENCE_DIR / COMPUTED[name].file
    return load_json(path) if path.is_file() else None
