"""Shipping a grid's finished runs as a reference map: ``python -m heavytail ship-map NAME GRID_DIR``. The registry of
maps and the readers are :mod:`heavytail.studies.reference_maps`.

A map is a grid's per-run summaries (:func:`heavytail.studies.run_summary.run_summary`: configuration,
ratios with intervals, collapse, traces; never checkpoints or weights) with provenance. The provenance is
the runs' own (:mod:`heavytail.harness.provenance`, recorded at training time): shipping refuses runs from a
dirty tree or from several commits unless told otherwise, and a grid shipped before it finished says so
(``complete`` is false and ``finished`` counts what it holds), so a later session can resume the grid and
ship again. ``python -m heavytail ship-map NAME GRID_DIR`` is the command. A session whose grid folder is gone
resumes with ``python -m heavytail grid <grid file> --unshipped`` (only the configurations the map lacks) in a
fresh folder; shipping that folder keeps the runs the map already holds (:func:`merged_runs`). A grid file that
gained configurations is re-shipped the same way before any of them has finished (``grid FILE --list --output DIR``
writes the folder's record), so the map's count of configurations follows its grid file.

A shipped map is results nobody can recompute cheaply, so shipping never loses one: a map is written only from the
folder of the grid file it belongs to (the name its ``grid.json`` records against the ``name`` of
:attr:`MapSpec.grid`), and over a shipped map only when it holds at least as many finished runs; ``--force`` lifts
the second rule and keeps the old file as ``<file>.bak``. A map file that is truncated, not UTF-8 or not a map is
one line naming it (:func:`read_map`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence

from heavytail import cli
from heavytail.harness.artifacts import repo_root
from heavytail.harness.provenance import check_shippable, machine, now
from heavytail.io import save_records_json
from heavytail.studies.grid_folder import grid_status
from heavytail.studies.reference_maps import MAPS, path_of, portable_command, read_map, run_provenance


def _grid_name(name: str) -> str | None:
    """The ``name`` of the grid file map ``name`` belongs to (what its grid folder's ``grid.json`` records)."""
    data = cli.read_yaml(repo_root() / MAPS[name].grid)
    return data.get("name") if isinstance(data, dict) else None


def _check_grid(name: str, grid_dir: Path, record: dict[str, Any]) -> None:
    """Refuse a grid folder that is not a run of the grid file map ``name`` belongs to."""
    if name not in MAPS:
        return
    spec, grid, source = MAPS[name], record.get("grid"), record.get("source") or ""
    expected = _grid_name(name)
    if grid != expected or (source and Path(source).name != Path(spec.grid).name):
        ran = f"grid {grid!r}" + (f" of {source}" if source else "")
        raise ValueError(f"{grid_dir} holds {ran}, not {expected!r} of {spec.grid}: map {name!r} holds only the runs "
                         f"of {spec.grid}")


def _check_replace(out: Path, finished: int, force: bool) -> None:
    """Refuse to replace a shipped map by one holding fewer finished runs (``--force``: allowed, the old one kept as
    ``<file>.bak``)."""
    if not out.exists():
        return
    try:
        old = read_map(out)
    except ValueError as err:
        if not force:
            raise ValueError(f"{err}; --force replaces it, keeping it as {out.name}.bak") from None
        old = None
    held = len(old["runs"]) if old is not None else 0
    if old is not None and finished < held and not force:
        raise ValueError(f"{out} holds {held} finished runs and this grid {finished}: a shipped map is replaced only by "
                         f"one with as many; finish the grid and ship again, or --force (keeps {out.name}.bak)")
    if force:
        shutil.copy2(out, out.with_name(out.name + ".bak"))


def _shipped_runs(out: Path) -> list[dict[str, Any]]:
    """The runs of the map already at ``out`` (none when there is no file; a damaged one is refused later)."""
    try:
        return list(read_map(out)["runs"]) if out.is_file() else []
    except ValueError:
        return []


def merged_runs(fresh: Sequence[dict[str, Any]], shipped: Sequence[dict[str, Any]], names: Sequence[str]
                ) -> tuple[list[dict[str, Any]], int]:
    """The runs a map is shipped with, and how many of them come from the earlier ship: every finished run of the
    grid folder, plus each shipped run of the same grid (a name among ``names``, the grid's configurations) that
    the folder does not hold. A later session resumes a grid with ``--only`` its pending configurations
    (``grid FILE --unshipped``) in a fresh folder, and shipping keeps what the earlier sessions finished; a run
    in both is taken from the folder. Listed in the grid's order."""
    have = {r["name"] for r in fresh}
    order = {n: i for i, n in enumerate(names)}
    kept = [r for r in shipped if r.get("name") in order and r["name"] not in have]
    runs = sorted([*fresh, *kept], key=lambda r: order.get(r["name"], len(order)))
    return runs, len(kept)


def replacements(fresh: Sequence[dict[str, Any]], shipped: Sequence[dict[str, Any]]) -> list[str]:
    """The shipped runs a ship of ``fresh`` would replace with different numbers: same name, another configuration,
    median ratio or training commit ("name: what differs"). A shipped number never moves without a flag saying so."""
    old = {r.get("name"): r for r in shipped}
    out = []
    for r in fresh:
        before = old.get(r["name"])
        if before is None:
            continue
        differ = [what for what, get in (("configuration", lambda x: x.get("config")),
                                         ("median ratio", lambda x: (x.get("median") or {}).get("ratio")),
                                         ("commit", lambda x: [p.get("commit") for p in run_provenance(x)]))
                  if get(before) != get(r)]
        if differ:
            out.append(f"{r['name']}: {', '.join(differ)}")
    return out


def without_per_trial(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` without its per-trial records (the same run when it holds none)."""
    return {k: v for k, v in run.items() if k != "per_trial"} if "per_trial" in run else run


def with_trace_keys(run: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """``run`` with only the trace series in ``keys`` (the same run when it holds no others)."""
    trace = run.get("trace") or {}
    return {**run, "trace": {k: v for k, v in trace.items() if k in keys}} if set(trace) - set(keys) else run


def with_blocks(run: dict[str, Any], blocks: int) -> dict[str, Any]:
    """``run`` with the per-block series of its trace and onset window ("block<b>.<key>") for b < ``blocks`` only."""
    def keep(series: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in series.items()
                if not (k.startswith("block") and "." in k and k[5:k.index(".")].isdigit()
                        and int(k[5:k.index(".")]) >= blocks)}

    return {**run, **{part: keep(run[part]) for part in ("trace", "onset_window") if isinstance(run.get(part), dict)}}


def map_of_grid(grid_file: str | Path) -> str | None:
    """The name of the map whose grid file is ``grid_file`` (matched by file name), or None."""
    return next((name for name, spec in MAPS.items() if Path(spec.grid).name == Path(grid_file).name), None)


def ship(name: str, grid_dir: str | Path, *, command: str, allow_dirty: bool = False, allow_mixed: bool = False,
         output: str | Path | None = None, force: bool = False, replace: bool = False) -> Path:
    """Write the finished runs of ``grid_dir`` as map ``name``; returns the file written. Refused (ValueError) for
    a folder of another grid and, unless ``force``, over a map with more finished runs (see the module docstring)."""
    from heavytail.studies.core import path_mismatches
    from heavytail.studies.run_summary import collect

    grid_dir = Path(grid_dir)
    record = grid_status(grid_dir)
    if record is None:
        raise ValueError(f"{grid_dir} holds no grid.json: run the grid first "
                         f"(python -m heavytail grid {MAPS[name].grid if name in MAPS else '<grid file>'})")
    _check_grid(name, grid_dir, record)
    out = Path(output) if output is not None else path_of(name)
    cli.check_writable(out.parent, "the map's folder")
    # A folder with nothing finished still re-ships a map that holds runs of this grid: after its grid file gained
    # configurations (an edge extension, select-lr's new cells) the map keeps its runs and records the new count.
    fresh, shipped = collect(grid_dir), _shipped_runs(out)
    replacing = replacements(fresh, shipped)
    if replacing and not replace:
        raise ValueError(f"{len(replacing)} shipped run(s) would be replaced by different numbers ({replacing[0]}"
                         f"{'; ...' if len(replacing) > 1 else ''}); nothing was shipped: ship another folder, or "
                         "add --replace to replace them (each is printed)")
    for line in replacing:
        print(f"[ship-map] replacing shipped run {line}", file=sys.stderr)
    runs, kept = merged_runs(fresh, shipped, [c.get("name") for c in record["configurations"]])
    if not runs:
        raise ValueError(f"{grid_dir} holds no finished configuration yet, and the map holds none of its grid's")
    mismatched = path_mismatches(runs)  # a map's readers group runs by the attention path that ran
    if mismatched:
        raise ValueError(f"{len(mismatched)} run(s) of {grid_dir} ran another attention path than their configuration "
                         f"asks for, so no claim can group them; the first: {mismatched[0]}")
    if name in MAPS and MAPS[name].trace_keys is not None:
        runs = [with_trace_keys(r, MAPS[name].trace_keys) for r in runs]
    if name in MAPS and not MAPS[name].per_trial:
        runs = [without_per_trial(r) for r in runs]
    if name in MAPS and MAPS[name].blocks is not None:
        runs = [with_blocks(r, MAPS[name].blocks) for r in runs]
    if name in MAPS and not MAPS[name].trial_collapse:
        runs = [{k: v for k, v in r.items() if k != "trial_collapse"} for r in runs]
    commits = check_shippable([p for r in runs for p in run_provenance(r)], allow_dirty=allow_dirty,
                              allow_mixed=allow_mixed)
    total = len(record["configurations"])
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
            **({"kept_from_earlier_ship": kept} if kept else {}),
        },
        "runs": runs,
    }
    _check_replace(out, len(runs), force)
    return save_records_json(payload, "runs", out)


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
    parser.add_argument("--replace", action="store_true",
                        help="replace shipped runs that the folder holds with different numbers (each is printed)")
    parser.add_argument("--force", action="store_true",
                        help="replace a shipped map that holds more finished runs (the old file is kept as <file>.bak)")
    args = parser.parse_args(argv)
    try:
        if args.name not in MAPS:
            raise ValueError(f"unknown map {args.name!r}; the shipped maps are: {', '.join(MAPS)}")
        path = ship(args.name, args.grid_dir, output=args.output, allow_dirty=args.allow_dirty,
                    allow_mixed=args.allow_mixed, force=args.force, replace=args.replace,
                    command=portable_command("python -m heavytail ship-map "
                                             + " ".join(argv if argv is not None else sys.argv[1:])))
    except cli.BAD_INPUT as err:
        return cli.bad_input("ship-map", err)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0
