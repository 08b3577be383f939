"""The shipped reference maps under ``outputs/reference/``: their names, files, grids, and how one is shipped.

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
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

from heavytail import cli
from heavytail.harness.artifacts import repo_root
from heavytail.harness.provenance import check_shippable, machine, now
from heavytail.io import load_json, save_records_json
from heavytail.studies.grid_folder import grid_status


@dataclass(frozen=True)
class MapSpec:
    """One shipped map: its file under ``outputs/reference/``, the grid file that makes it, what it is."""

    file: str
    grid: str
    title: str
    about: str
    # The trace series shipped with each run (None: all). A map whose readers draw only some keeps the file small
    # enough to review and to hold more runs.
    trace_keys: tuple[str, ...] | None = None
    # Whether the runs keep their per-trial evaluation records (heavytail.studies.run_summary.trial_records): only
    # a map whose readers score trials does; the records would be most of every other map's size.
    per_trial: bool = False
    # Whether the runs keep each evaluation trial's spread ratio and task parameters (run_summary.trial_collapse):
    # only the collapse ladder's readers place collapsed trials in task space.
    trial_collapse: bool = False
    # The per-block series (trace and onset window) kept for blocks 0..blocks-1 only (None: every block). The
    # collapse figures read block 0, the one that sees the raw heavy-tailed tokens; the run folders keep the rest.
    blocks: int | None = None


# What the converged-gap notebook draws from a run's trace (its validation curve), with the training loss and the
# collapsed share for anyone who looks; the per-block precursors stay in the run folders.
_CONVERGED_TRACE = ("step", "loss", "grad_norm", "collapsed_fraction", "val_step", "val_log_energy")

MAPS = {
    "gap-design": MapSpec("kernel_gap_design.json", "params/grid_gap_design.yaml", "one-trial-per-step map",
                          "kernel gap vs N at one trial per step (the same task instances at every N), 8 seeds"),
    "gap-long": MapSpec("kernel_gap_long.json", "params/grid_gap_long.yaml", "3,000-step grid",
                        "softmax and log-ELU for 3,000 steps at N = 1024, lr 1e-3 and 1e-2"),
    "phase": MapSpec("phase_diagram.json", "params/grid_phase.yaml", "phase map",
                     "kernel growth order q x tail regime x N at one trial per step, 5 seeds"),
    "gap-points": MapSpec("kernel_gap_map.json", "params/grid_gap_map.yaml", "points-per-step map",
                          "kernel gap vs N at 4096 points per step (trials per step traded for N), 3 seeds"),
    "gap-converged-select": MapSpec("kernel_gap_converged_select.json", "params/grid_gap_converged_select.yaml",
                                    "converged-gap selection runs",
                                    "every variant, N and lr to convergence (cap 3,000 steps), seeds 0-2",
                                    _CONVERGED_TRACE),
    "gap-converged": MapSpec("kernel_gap_converged.json", "params/grid_gap_converged.yaml", "converged-gap map",
                             "every variant at its chosen lr to convergence (cap 3,000 steps), seeds 3-10",
                             _CONVERGED_TRACE),
    # The same question at a recipe fair to both kernels: one fixed budget annealed to zero, the best validated weights
    "gap-fair-select": MapSpec("kernel_gap_fair_select.json", "params/grid_gap_fair_select.yaml",
                               "fair-gap selection runs", "every variant, N and lr at a fixed 3,000-step budget "
                               "annealed to zero, best and final weights, seeds 0-2", _CONVERGED_TRACE),
    "gap-fair": MapSpec("kernel_gap_fair.json", "params/grid_gap_fair.yaml", "fair converged-gap map",
                        "every variant at its chosen lr, a fixed 3,000-step budget annealed to zero, best and final "
                        "weights, seeds 3-12", _CONVERGED_TRACE),
    # the deciding seeds again at 4x the budget, stage 1's rates (fair.LONG_BUDGET, registered before its runs)
    "gap-fair-long": MapSpec("kernel_gap_fair_long.json", "params/grid_gap_fair_long.yaml", "fair-gap map, long budget",
                             "every variant at the rate chosen at 3,000 steps, a fixed 12,000-step budget annealed to "
                             "zero, best and final weights, seeds 3-12", _CONVERGED_TRACE),
    "ladder": MapSpec("collapse_ladder.json", "params/grid_collapse_ladder.yaml", "collapse ladder",
                      "softmax and log-ELU from the CPU recipe to Table 3's model and precision, 6,000 steps",
                      trial_collapse=True, blocks=1),
    # rung R1b: R1's model on the ladder's recipe (its own grid, so the ladder's run names stay as shipped)
    "ladder-small": MapSpec("collapse_ladder_small.json", "params/grid_collapse_ladder_small.yaml",
                            "collapse ladder, R1's model", "softmax and log-ELU at D = 32, 2 blocks on the ladder's "
                            "6,000-step recipe (rung R1b)", trial_collapse=True, blocks=1),
    # Tables 5-6's 48 cells at rung R2's recipe; R2's three post-norm sheared-swap cells are read from "ladder"
    "tables56": MapSpec("tables56.json", "params/grid_tables56.yaml", "Tables 5-6 at Table 3's model",
                        "every column, both norms, Table 1's kernels, none and symlog at rung R2's recipe, "
                        "256 evaluation trials; 6 seeds on the claim-bearing cells, 1 on the others",
                        trial_collapse=True, blocks=1),
    # Why softmax fails at Table 3's model: the screen for the paper's shape, and the interventions
    "mechanism-screen": MapSpec("mechanism_screen.json", "params/grid_mechanism_screen.yaml", "mechanism screen",
                                "the first 1,500 steps of rung R2's recipe in five settings, softmax and log-ELU, "
                                "seeds 0-1", blocks=1),
    # where the screen says softmax learns: that setting for 6,000 steps on six seeds (collapse.mechanism_followup)
    "mechanism-followup": MapSpec("mechanism_followup.json", "params/grid_mechanism_followup.yaml",
                                  "mechanism screen's follow-up", "rung R2's recipe with the screen's chosen change, "
                                  "6,000 steps, softmax and log-ELU, seeds 0-5, 256 evaluation trials",
                                  trial_collapse=True, blocks=1),
    "mechanism": MapSpec("mechanism.json", "params/grid_mechanism_interventions.yaml", "mechanism interventions",
                         "log-ELU or softmax in block 0 only, QK-norm, StableMax at rung R2's recipe, seeds 0-5",
                         trial_collapse=True, blocks=1),
    # Its endpoint reads the per-trial records and no trace; 280 runs of 64 trials fit the size of a shipped map
    # (2 MiB) only without the traces.
    "phase-confirm": MapSpec("phase_confirm.json", "params/grid_phase_confirm.yaml", "confirmatory phase map",
                             "the pre-registered test of App. A's boundary: its four deciding cells, N = 256-8192, "
                             "seeds 100-119, with per-trial records", (), per_trial=True),
    "subnormal-ab": MapSpec("subnormal_ab.json", "params/grid_subnormal_ab.yaml", "subnormal A/B",
                            "the design recipe at N = 1024 with and without flushing subnormals, 8 seeds"),
}
REFERENCE_DIR = Path("outputs") / "reference"


def path_of(name: str, root: Path | None = None) -> Path:
    if name not in MAPS:
        raise ValueError(f"unknown map {name!r}; the shipped maps are: {', '.join(MAPS)}")
    return (root or repo_root()) / REFERENCE_DIR / MAPS[name].file


def load(name: str, root: Path | None = None) -> dict[str, Any] | None:
    """A shipped map (None when its file is absent); ValueError naming the file when it is not a readable map."""
    path = path_of(name, root)
    return read_map(path) if path.is_file() else None


RUN_KEYS = ("name", "config", "median", "mean", "collapse")  # what every reader of a map's runs takes
# The configuration keys the readers of a map's runs look up (task, variant, seed, size, recipe): a run without one
# would fail far from the file, or be read at RunConfig's default for it.
CONFIG_KEYS = ("benchmark", "marginals", "kernel", "norm", "symlog", "attention_backend", "seed", "n_points",
               "eval_n_points", "steps", "lr", "trials_per_step")


def read_map(path: str | Path) -> dict[str, Any]:
    """The map in ``path``; a file that is truncated, empty, not UTF-8 or not a map's shape is a one-line
    ValueError naming it (readers would otherwise fail far away, or print every claim as 'not run')."""
    path = Path(path)
    restore = f"restore it (git checkout -- {path}) or ship it again"
    try:
        data = load_json(path)
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start}); {restore}") from None
    except json.JSONDecodeError as err:
        what = "empty" if not err.doc.strip() else f"not valid JSON ({err.msg} at line {err.lineno} column {err.colno})"
        raise ValueError(f"{path}: {what}: the file is truncated or damaged; {restore}") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot be read ({err.strerror or err})") from None
    problem = _shape_problem(data)
    if problem:
        raise ValueError(f"{path}: not a reference map: {problem}; {restore}")
    return data


def _shape_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"a map is a JSON object with 'provenance' and 'runs', got {type(data).__name__}"
    if not isinstance(data.get("provenance"), dict):
        return "'provenance' is missing or not an object"
    runs = data.get("runs")
    if not isinstance(runs, list):
        return "'runs' is missing or not a list"
    for i, run in enumerate(runs):
        missing = [k for k in RUN_KEYS if not isinstance(run, dict) or k not in run]
        if missing:
            return f"run {i} has no {', '.join(missing)}"
        if not isinstance(run["config"], dict):
            return f"run {i}'s 'config' is not an object"
        lacks = [f"config.{k}" for k in CONFIG_KEYS if k not in run["config"]]
        if not isinstance(run["median"], dict) or "ratio" not in run["median"]:
            lacks.append("median.ratio")
        if lacks:
            return f"run {i} ({run.get('name', '?')}) has no {', '.join(lacks)}"
    return None


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
                f"by `{portable_command(str(p.get('command')))}`")


# The repository's top-level folders a shipping command names; a path through one of them is shown from there.
_REPO_FOLDERS = ("outputs", "params", "notebooks", "benchmarks", "heavytail", "tests")


def portable_command(command: str) -> str:
    """``command`` with every path argument made repository-relative (``/work/wt-grid/outputs/grid-x`` and
    ``../wt-grid/outputs/grid-x`` become ``outputs/grid-x``): shipped maps travel between machines and
    checkouts, and the absolute path of the one that shipped them means nothing elsewhere."""
    def portable(arg: str) -> str:
        parts = PurePosixPath(arg).parts
        if "/" not in arg or (parts and parts[0] in _REPO_FOLDERS):
            return arg
        for i, part in enumerate(parts):
            if part in _REPO_FOLDERS:
                return str(PurePosixPath(*parts[i:]))
        return arg
    return " ".join(portable(a) for a in command.split(" "))


def source(name: str, local_dir: str | Path | None = None, root: Path | None = None) -> Source:
    """Map ``name``'s runs: from ``local_dir`` when it holds finished runs of a re-run, else the shipped file."""
    from heavytail.studies.run_summary import collect

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
        "phase_static.json", "python -m heavytail.studies.phase.static --pilot outputs/reference/phase_static.json "
        "--most 3000 --work outputs/phase-static-work --output outputs/reference/phase_static.json",
        "static reference", "growth exponent of one query's attention output, every kernel x 9 tail indices, "
        "N = 2^10 .. 2^20, repetitions per tail index sized from the previous reference's spread (App. A)"),
    "phase-fixed-weight": ComputedSpec(
        "phase_fixed_weight.json", "python -m heavytail.studies.phase.fixed_weight outputs/phase-fixed/<run> ... "
        "--output outputs/reference/phase_fixed_weight.json", "fixed-weight measurements",
        "block 0's attention-output exponent and each block's token tail index at trained weights (6 runs)"),
}


def load_computed(name: str, root: Path | None = None) -> dict[str, Any] | None:
    """A shipped computed reference (None when its file is absent)."""
    if name not in COMPUTED:
        raise ValueError(f"unknown computed reference {name!r}; they are: {', '.join(COMPUTED)}")
    path = (root or repo_root()) / REFERENCE_DIR / COMPUTED[name].file
    return load_json(path) if path.is_file() else None
