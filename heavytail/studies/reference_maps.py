"""The shipped reference maps under ``outputs/reference/``: their names, files and grids, and how a notebook reads one.

A map is a grid's per-run summaries (:func:`heavytail.studies.run_summary.run_summary`: configuration,
ratios with intervals, collapse, traces; never checkpoints or weights) with provenance; :mod:`heavytail.studies.ship_map`
writes one (``python -m heavytail ship-map NAME GRID_DIR``). A map file that is truncated, not UTF-8 or not a map is
one line naming it (:func:`read_map`). A notebook reads a map through :func:`source`: a local re-run when one exists,
else the shipped file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from heavytail.harness.artifacts import repo_root
from heavytail.io import load_json
from heavytail.studies.run_record import RUN_KEYS, RunRecord, shape_problem


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


def read_map(path: str | Path) -> dict[str, Any]:
    """The map in ``path``, its runs as :class:`heavytail.studies.run_record.RunRecord`; a file that is truncated,
    empty, not UTF-8 or not a map's shape is a one-line ValueError naming it (readers would otherwise fail far away,
    or print every claim as 'not run')."""
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
    return {**data, "runs": [RunRecord.from_summary(run) for run in data["runs"]]}


def _shape_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"a map is a JSON object with 'provenance' and 'runs', got {type(data).__name__}"
    if not isinstance(data.get("provenance"), dict):
        return "'provenance' is missing or not an object"
    runs = data.get("runs")
    if not isinstance(runs, list):
        return "'runs' is missing or not a list"
    for i, run in enumerate(runs):
        problem = shape_problem(run)
        if problem:  # a run with all its parts is named; one without them may lack its name too
            name = f" ({run['name']})" if isinstance(run, dict) and all(k in run for k in RUN_KEYS) else ""
            return f"run {i}{name} {problem}"
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


def run_provenance(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(run.get("provenance") or [{}])


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
