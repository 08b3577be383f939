"""The kernel gap at convergence, fair to both kernels: one fixed budget annealed to zero, the best validated weights,
each variant at its own learning rate, and rules that can conclude both ways.

The stopping-rule recipe (:mod:`heavytail.studies.kernel_gap.converged`) ended most runs at its first allowed check
and stopped log-ELU early far more often than softmax, so its map measures where a noisy plateau happened to be
checked. Here every run of an N trains the same ``BUDGET`` steps, the cosine schedule decays to zero at the last one
after a warm-up of ``WARMUP_SHARE`` of them, and the weights evaluated are those of the best validation score
(checked every ``VAL_EVERY`` steps on a fixed draw of ``VAL_TRIALS`` trials at the training N, never the training or
evaluation draws); the final weights are evaluated too, and both ship. Model and data are the design map's (D = 32,
2 post-norm blocks, one trial per step, the same task instances at every N for a seed).

Written before any run of this recipe:

* **Selection** (seeds ``SELECT_SEEDS``, rates ``LEARNING_RATES``, 3e-4 to 3e-2). A rate is *excluded* for a variant
  and N when any selection seed there diverged (more than 10 % of steps skipped, or a non-finite ratio:
  :func:`heavytail.science.collapse.diverged`) or failed to train (its best validation score is not below its first
  by ``log 2``: the energy distance never halved). Among the rest, the choice is the lowest median best-validation
  score over the selection seeds, ties to the smaller rate. A choice at the largest or smallest rate tried is an
  *edge*: that cell gets one more rate a factor ~3 beyond it, on the selection seeds, before it is decided.
* **Flattened.** A deciding run has flattened when the best validation score of its last quarter improves on the
  score at the start of that quarter by less than ``FLAT_TOLERANCE`` (x1.05 in energy). Each variant and N reports
  its share of flattened runs; a claim whose runs are not all flattened says so.
* **Claims** on the deciding seeds ``DECIDE_SEEDS`` (at least ``MIN_DECIDING_SEEDS``), best weights:
  (a) ``fair-excess-grows``: the floor-free excess ratio's per-doubling slope (as
  :func:`heavytail.studies.kernel_gap.converged.excess_by_seed`), decided by
  :func:`heavytail.studies.claims.equivalence_rule` with margin ``GROWTH_EQUIVALENCE`` (x1.10 per doubling): grows
  (interval above 0), or no growth of practical size (TOST within the margin), or undecided;
  (b) ``fair-gap-n<N>``: the paired softmax / log-ELU ratio at the common evaluation N, the same rule with margin
  ``GAP_EQUIVALENCE`` (x1.25): softmax above, or equivalent within x1.25, or undecided. Each states the power of its
  equivalence test at the observed spread (:func:`heavytail.studies.claims.tost_power`).
  The same for softmax through exact float32 attention beside SDPA's.

**The long budget** (registered after the 3,000-step deciding runs at N = 256, before any run at this budget). Those
runs carried a gap (x1.31 for SDPA) but only 6 of 20 softmax-(SDPA)-pair runs had flattened, so "at convergence" was
not shown. The deciding seeds rerun at N = ``LONG_SIZES`` for ``LONG_BUDGET`` steps (4x; the same warm-up share,
validation and best-weight rules), each variant at the rate stage 1 chose at 3,000 steps: the selection is not
rerun at this budget, and every claim says so. Claims ``fair-long-gap-n<N>`` (and ``-exact``) follow rule (b) with
its margin; their evidence states the flattened share, and a verdict whose runs are not all flattened is a verdict
at this budget, not at convergence. Nothing of the 3,000-step map is replaced: both ship and both are shown.

**N = 1024** (registered after N = 256's long runs, before any deciding run at N = 1024). At N = 256 the long budget
flattened the best run of every variant (seed 6, best weights at step 6,700) but only 7 of 30 runs, and 3,000 steps
flattened fewer; so N = 1024's deciding seeds skip the 3,000-step budget and train at ``LONG_BUDGET`` only, each
variant at the rate stage 1 chooses at N = 1024 (its selection runs at 3,000 steps, as N = 256's did), and
``LONG_SIZES`` gains 1024 when select-lr-fair has written that rate. Rule (a)'s growth is then read between N = 256
and 1024 at the long budget, by the same rule and margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from heavytail.science.collapse import diverged
from heavytail.studies import claims as C
from heavytail.studies.kernel_gap.converged import (excess_by_seed, load_selection, selection_parser,
                                                    write_decision_grid)
from heavytail.studies.core import (LOG_ELU, SOFTMAX_EXACT, SOFTMAX_SDPA, cells, map_extent, paired_ratio,
                                          sizes, variant, variant_name)
from heavytail.studies.paper_numbers import paper_gap
from heavytail.studies.run_record import RunRecord, records

NOTEBOOK = "07_kernel_gap"
SELECT_SEEDS = (0, 1, 2)
DECIDE_SEEDS = tuple(range(3, 13))
MIN_DECIDING_SEEDS = 8
LEARNING_RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
VARIANTS = (SOFTMAX_SDPA, SOFTMAX_EXACT, LOG_ELU)
SIZES = (256, 1024, 4096)
BUDGET = 3000  # steps at every N: the stopping recipe's cap, now every run's length
WARMUP_SHARE = 0.05
VAL_EVERY, VAL_TRIALS = 100, 16
TRAIN_FACTOR = math.log(2.0)  # "trained": the best validation energy at most half the first one
FLAT_TOLERANCE = math.log(1.05)
GAP_EQUIVALENCE = math.log(1.25)
GROWTH_EQUIVALENCE = C.GROWTH_MARGIN  # x1.10 per doubling, the margin every growth rule here uses
SELECT_GRID = "params/grid_gap_fair_select.yaml"
DECIDE_GRID = "params/grid_gap_fair.yaml"
LONG_BUDGET = 12000  # 4x BUDGET: the long budget, registered before its runs (module docstring)
LONG_SIZES = (256, 1024)  # 1024 joined once its selection had chosen its rates (module docstring)
LONG_ONLY = (1024,)  # sizes whose deciding seeds skip the 3,000-step budget: stage 2's grid leaves them out
LONG_GRID = "params/grid_gap_fair_long.yaml"


# ------------------------------------------------------------------------------------ a run's numbers
def validation(run: Mapping[str, Any]) -> list[tuple[int, float]]:
    """The run's validation scores (mean log energy distance on its fixed draw), ``[(step, score), ...]``."""
    trace = run.get("trace") or {}
    return [(int(s), float(v)) for s, v in zip(trace.get("val_step") or [], trace.get("val_log_energy") or [])
            if v is not None]


def best_score(run: Mapping[str, Any]) -> float:
    """The best validation score the run reached (its kept weights' score); NaN without one."""
    best = run.get("best_weights") or {}
    return float(best["value"]) if best.get("step") is not None else math.nan


def failure(run: Mapping[str, Any]) -> str | None:
    """Why a selection run excludes its rate (None when it does not): diverged, or never trained."""
    run = RunRecord.from_summary(run)
    why = diverged(int(run.get("skipped_steps") or 0), run.steps,
                   float((run.get("median") or {}).get("ratio", math.nan)))
    if why is not None:
        return f"diverged ({why})"
    scores = validation(run)
    best = best_score(run)
    if not scores or not math.isfinite(best):
        return "no finite validation score"
    if not best <= scores[0][1] - TRAIN_FACTOR:
        return (f"did not train (best validation energy x{math.exp(best - scores[0][1]):.2f} of its first, "
                f"needs <= x{math.exp(-TRAIN_FACTOR):.2f})")
    return None


def flattened(run: Mapping[str, Any]) -> bool | None:
    """Whether the run's validation curve is flat over its last quarter (best of the quarter within
    ``FLAT_TOLERANCE`` of the score where the quarter starts); None without enough scores."""
    scores = validation(run)
    start = 0.75 * RunRecord.from_summary(run).steps
    before = [v for s, v in scores if s <= start]
    quarter = [v for s, v in scores if s > start and math.isfinite(v)]
    if not before or not quarter or not math.isfinite(before[-1]):
        return None
    return before[-1] - min(quarter) < FLAT_TOLERANCE


def at_best(run: Mapping[str, Any]) -> RunRecord:
    """The run as its best validated weights scored (their ratios in place of the final weights'), so the shared
    readers of :mod:`heavytail.studies.core` read them; the run unchanged when it kept none."""
    run = RunRecord.from_summary(run)
    best = run.get("best_weights") or {}
    if best.get("step") is None:
        return run
    return run.with_parts(median=best.get("median", {}), mean=best.get("mean", {}), at_train_n=best.get("at_train_n", {}))


# ------------------------------------------------------------------------------------ selection
@dataclass(frozen=True)
class Selection:
    """The rate chosen for one (variant, N): the median best-validation score of every rate tried, the rates
    excluded and why (per seed), and whether the choice is at an end of the rates tried."""

    variant: tuple[str, str]
    n_points: int
    lr: float | None
    scores: Mapping[float, float]
    excluded: Mapping[float, str]
    edge: bool


def _median(xs: Sequence[float]) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return float(np.median(xs)) if xs else math.inf


def select(runs: Sequence[Mapping[str, Any]], seeds: Sequence[int] = SELECT_SEEDS,
           rates: Sequence[float] = LEARNING_RATES) -> list[Selection]:
    """The selection rule on the selection seeds' runs. A (variant, N) is chosen once every rate of ``rates`` (and
    any an extension added there) has a run on every selection seed; with every rate excluded, ``lr`` is None."""
    groups: dict[tuple[tuple[str, str], int], dict[float, dict[int, RunRecord]]] = {}
    for r in records(runs):
        if r.seed in seeds:
            key = (variant(r), r.n_points)
            groups.setdefault(key, {}).setdefault(r.lr, {})[r.seed] = r
    out = []
    for (v, n), by_lr in sorted(groups.items(), key=lambda kv: (kv[0][1], VARIANTS.index(kv[0][0])
                                                                if kv[0][0] in VARIANTS else 9)):
        if not set(rates) <= set(by_lr) or any(sorted(rs) != sorted(seeds) for rs in by_lr.values()):
            continue
        scores = {lr: _median([best_score(r) for r in rs.values()]) for lr, rs in sorted(by_lr.items())}
        excluded = {}
        for lr, rs in sorted(by_lr.items()):
            why = {s: f for s, r in sorted(rs.items()) if (f := failure(r)) is not None}
            if why:
                excluded[lr] = "; ".join(f"seed {s}: {f}" for s, f in why.items())
        allowed = [lr for lr in scores if lr not in excluded]
        best = min(allowed, key=lambda lr: (scores[lr], lr)) if allowed else None
        tried = sorted(scores)
        out.append(Selection(v, n, best, scores, excluded, best is not None and best in (tried[0], tried[-1])))
    return out


def decision_grid(selections: Sequence[Selection], template: Mapping[str, Any],
                  seeds: Sequence[int] = DECIDE_SEEDS) -> dict[str, Any]:
    """The deciding grid file (a mapping, written as YAML): the selection grid's base and settings, one cell per
    chosen (variant, N) with its rate, on the deciding seeds; edges, cells with every rate excluded and the sizes of
    ``LONG_ONLY`` (their deciding runs are the long grid's) are left out."""
    cells_ = [{"n_points": s.n_points, "kernel": s.variant[0], "attention_backend": s.variant[1], "lr": s.lr}
              for s in selections if s.lr is not None and not s.edge and s.n_points not in LONG_ONLY]
    # every cell's folder spells its N, rate and path, so the runs of the first N keep their names as others join
    return {"name": "grid-gap-fair", "base": dict(template["base"]),
            "name_keys": ["attention_backend", "lr", "n_points"], "axes": {"cells": cells_, "seed": list(seeds)},
            **{k: template[k] for k in ("local", "slurm") if k in template}}


def selection_table(selections: Sequence[Selection]) -> dict[str, Any]:
    """The choice per variant and N with each rate's median best-validation score; an excluded rate shows why."""
    rates = sorted({lr for s in selections for lr in s.scores})
    rows = []
    for s in selections:
        row = {"variant": variant_name(s.variant), "N": s.n_points,
               "chosen lr": "none (every rate excluded)" if s.lr is None else f"{s.lr:g}",
               "at an edge": "yes" if s.edge else "no"}
        for lr in rates:
            score = C.fmt(s.scores[lr]) if lr in s.scores else ""
            row[f"lr {lr:g}"] = f"{score} (excluded)" if lr in s.excluded else score
        rows.append(row)
    exclusions = "; ".join(f"{variant_name(s.variant)}, N = {s.n_points}, lr {lr:g}: {why}"
                           for s in selections for lr, why in s.excluded.items())
    return {"title": "Learning rate per variant and N (median best validation score over the selection seeds)",
            "columns": ["variant", "N", "chosen lr", *[f"lr {lr:g}" for lr in rates], "at an edge"], "rows": rows,
            "notes": f"score: mean log energy distance on a fixed validation draw at the training N (lower is better), "
                     f"the best of each run's {BUDGET:,}-step budget, median over seeds {list(SELECT_SEEDS)}; the "
                     f"deciding seeds {DECIDE_SEEDS[0]}-{DECIDE_SEEDS[-1]} never enter the choice. Excluded: "
                     + (exclusions or "none")}


# ------------------------------------------------------------------------------------ claims
def flat_share(runs: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(flattened, with a verdict) over the runs."""
    flags = [f for f in map(flattened, runs) if f is not None]
    return sum(flags), len(flags)


def _power_note(log_values: Sequence[float], margin: float) -> str:
    x = [v for v in log_values if math.isfinite(v)]
    if len(x) < 2:
        return ""
    sd = float(np.std(x, ddof=1))
    return (f"; power of the equivalence test at the observed spread (sd {sd:.3g}, {len(x)} seeds, no true "
            f"difference): {C.tost_power(sd, len(x), margin):.2f}")


def _decided_by() -> dict[str, Any]:
    return {"notebook": NOTEBOOK, "section": "The gap at convergence, fair to both kernels",
            "figures": ["fair_gap_vs_n"]}


def findings(runs: Sequence[Mapping[str, Any]], prefix: str = "fair", budget: int = BUDGET) -> list[dict[str, Any]]:
    """Claims (a) and (b) on the deciding runs' best weights, for softmax through SDPA and exact attention; ``prefix``
    names the claims (``<prefix>-gap-n<N>``) and ``budget`` is the step budget they state."""
    deciding = [r for r in map(at_best, runs) if r.seed in DECIDE_SEEDS]
    out = []
    for v, tag, short in ((SOFTMAX_SDPA, "", "softmax (SDPA)"), (SOFTMAX_EXACT, "-exact", "exact softmax")):
        pairs = excess_by_seed(deciding, v)
        slopes = C.per_seed_slopes(pairs)
        left_out = sorted(s for s, row in pairs.items() if len(row) >= 2 and s not in slopes)
        d = C.equivalence_rule(list(slopes.values()), min_seeds=MIN_DECIDING_SEEDS, margin=GROWTH_EQUIVALENCE)
        used = [r for r in deciding if variant(r) in (v, LOG_ELU) and r.seed in slopes]
        flat, judged = flat_share(used)
        out.append(C.make_claim(
            f"{prefix}-excess-grows{tag}", f"Floor-free gap grows with N at a fixed {budget:,}-step annealed budget, "
            f"best weights: "
            f"{short}'s excess vs log-ELU's", "Sec. 4.2, App. A", paper_gap(), d,
            f"{short}/log-ELU excess per doubling", map_extent(used),
            "per-seed x per doubling: " + ", ".join(f"{s}: {math.exp(x):.2f}" for s, x in slopes.items())
            + (f"; left out (excess not positive at some N): seeds {left_out}" if left_out else "")
            + f"; flattened runs {flat} of {judged}" + _power_note(list(slopes.values()), GROWTH_EQUIVALENCE),
            _decided_by(), transform=math.exp).to_dict())
    cs = cells(deciding)
    for n in sizes(cs):
        for v, tag, short in ((SOFTMAX_SDPA, "", "softmax (SDPA)"), (SOFTMAX_EXACT, "-exact", "exact softmax")):
            pair = paired_ratio(cs, v, LOG_ELU, n)
            logs = [math.log(x) for x in pair.values()]
            d = C.equivalence_rule(logs, min_seeds=MIN_DECIDING_SEEDS, margin=GAP_EQUIVALENCE)
            used = [r for r in deciding if variant(r) in (v, LOG_ELU) and r.n_points == n]
            lrs = ", ".join(f"{variant_name(w)} {cs[(w, n)].runs[0].lr:g}"
                            for w in (v, LOG_ELU) if (w, n) in cs)
            flat, judged = flat_share(used)
            out.append(C.make_claim(
                f"{prefix}-gap-n{n}{tag}", f"At training N = {n}, a fixed {budget:,}-step annealed budget and its own lr, "
                f"{short}'s best "
                "weights end above log-ELU's (ratios at the common evaluation N)",
                "Sec. 4.2, Table 5", "log-ELU beats softmax at N = 16384 (Table 5)", d, f"{short}/log-ELU ratio",
                map_extent(used), f"learning rates: {lrs}; flattened runs {flat} of {judged}"
                + _power_note(logs, GAP_EQUIVALENCE), _decided_by(), transform=math.exp).to_dict())
    return out


def long_findings(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The long budget's claims (module docstring): rule (b) at each N of ``LONG_SIZES`` (and rule (a) once there are
    two), on the long deciding runs, at the rates stage 1 chose at ``BUDGET`` steps."""
    found = findings(runs, "fair-long", LONG_BUDGET)
    note = f"; rates as stage 1 chose them at {BUDGET:,} steps (not reselected at {LONG_BUDGET:,})"
    return [{**c, "evidence": c["evidence"] + note} for c in found]


# ------------------------------------------------------------------------------------ what notebook 07 shows
def by_budget(runs: Sequence[Mapping[str, Any]], long_runs: Sequence[Mapping[str, Any]] = ()
              ) -> dict[int, list[Mapping[str, Any]]]:
    """The deciding runs per step budget (``BUDGET``, ``LONG_BUDGET``), each budget present only when it has runs."""
    out: dict[int, list[Mapping[str, Any]]] = {}
    for r in records([*runs, *long_runs]):
        if r.seed in DECIDE_SEEDS:
            out.setdefault(r.steps, []).append(r)
    return dict(sorted(out.items()))


def flat_sentence(runs: Sequence[Mapping[str, Any]], long_runs: Sequence[Mapping[str, Any]] = ()) -> str:
    """Per budget and variant, how many deciding runs flattened (the registered check), as one sentence: what says
    whether a verdict is one at convergence or only at its budget."""
    parts = []
    for steps, rs in by_budget(runs, long_runs).items():
        counts = []
        for v in VARIANTS:
            flat, judged = flat_share([r for r in rs if variant(r) == v])
            if judged:
                counts.append(f"{variant_name(v)} {flat} of {judged}")
        seeds = len({r.seed for r in rs})
        parts.append(f"at {steps:,} steps ({seeds} seeds), " + ", ".join(counts))
    if not parts:
        return "No deciding run of the fair recipe has been shipped yet."
    return (f"**Flattened** (the best validation score of the last quarter within x{math.exp(FLAT_TOLERANCE):.2f} of "
            "the score where the quarter starts): " + "; ".join(parts) + ". A verdict whose runs did not all flatten "
            "is a verdict at its budget, not at convergence.")


def shown_recipes(design: Sequence[Mapping[str, Any]], converged: Sequence[Mapping[str, Any]],
                  select_runs: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]],
                  long_runs: Sequence[Mapping[str, Any]] = ()) -> dict[str, list[Mapping[str, Any]]]:
    """The recipes the gap-against-N figure compares, label -> runs (the fair ones scored at their best weights):
    until the deciding seeds exist, the selection seeds at their chosen rates stand in (they decide nothing)."""
    if runs:
        fair = [at_best(r) for r in runs]
        label = f"fixed {BUDGET:,}-step budget, best weights"
    else:
        chosen = {(s.variant, s.n_points): s.lr for s in select(select_runs)}
        fair = [r for r in map(at_best, select_runs) if chosen.get((variant(r), r.n_points)) == r.lr]
        label = f"fair recipe, selection seeds {SELECT_SEEDS[0]}-{SELECT_SEEDS[-1]}"
    out = {"design recipe": list(design), "stopping rule, own lr": list(converged), label: fair}
    if long_runs:
        out[f"fixed {LONG_BUDGET:,}-step budget, best weights"] = [at_best(r) for r in long_runs]
    return {k: v for k, v in out.items() if v}


# ------------------------------------------------------------------------------------ command
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heavytail select-lr-fair [GRID_DIR]``: apply the fair recipe's selection rule to stage 1's finished
    runs (the shipped selection map's, with GRID_DIR's added) and write stage 2's grid file (``--output``, default
    params/grid_gap_fair.yaml), printing every rate's score and every exclusion."""
    from heavytail import cli
    from heavytail.harness.artifacts import repo_root

    args = selection_parser("python -m heavytail select-lr-fair", main.__doc__, DECIDE_GRID,
                            SELECT_GRID).parse_args(argv)
    try:
        selections, template = load_selection(select, "gap-fair-select", args.grid_dir, SELECT_GRID)
    except cli.BAD_INPUT as err:
        return cli.bad_input("select-lr-fair", err)
    header = ("# The kernel gap at convergence, fair to both kernels, stage 2: written by `python -m heavytail\n"
              "# select-lr-fair` from stage 1's runs (heavytail.studies.kernel_gap.fair.select); the chosen lr per\n"
              f"# variant and N on the deciding seeds only. Median best validation score per lr (seeds {list(SELECT_SEEDS)}):\n")
    for s in selections:
        header += (f"#   {variant_name(s.variant)}, N = {s.n_points}: " + ", ".join(
            f"{lr:g}: {score:.4g}" + (" (excluded)" if lr in s.excluded else "") for lr, score in s.scores.items())
            + f" -> {'none' if s.lr is None else f'{s.lr:g}'}"
            + (" (AT AN EDGE: extend the rates before deciding; left out)" if s.edge else "") + "\n")
        for lr, why in s.excluded.items():
            header += f"#     excluded lr {lr:g}: {why}\n"
    header += ("# A variant and N not listed has not finished its selection runs; select-lr-fair adds it once they\n"
               "# have (the cells already here keep their folder names). N = "
               + ", ".join(map(str, LONG_ONLY)) + " trains its deciding seeds at the long budget only\n"
               f"# ({LONG_GRID}), at the rates chosen above: no cell here.\n")
    out = Path(args.output) if args.output else repo_root() / DECIDE_GRID
    left_out = sum(s.edge or s.lr is None for s in selections if s.n_points not in LONG_ONLY)
    write_decision_grid(out, header, decision_grid(selections, template), left_out, "gap-fair",
                        None if args.output else DECIDE_GRID)
    return 0
