"""Tables 5-6 at Table 3's model: every column, both norms, Table 1's four kernels, none and symlog (Sec. 4.2).

The paper's empirical claims about its benchmarks, in its own words (abstract, Sec. 4.2, App. G, App. I):

- **P1** without symlog, post-norm softmax collapses on both heavy-tailed benchmarks (sheared swap and matrix
  inverse, mirrored Pareto), while squared, linear and log ELU avoid collapse and reach lower energy distances;
- **P2** with symlog, softmax avoids collapse on the matrix inverse but still collapses on the sheared swap;
- **P3** on the Gaussian sheared swap all four kernels avoid collapse and perform similarly;
- **P4** pre-norm models do not collapse, for any kernel or transform;
- **P5** softmax first descends alongside the other kernels, then diverges abruptly to a value it keeps (Fig. 13).

The grid (``params/grid_tables56.yaml``) trains the 48 cells (norm x kernel x transform x column, :func:`cells`)
at exactly the collapse ladder's rung R2 recipe (:data:`RECIPE`: Table 3's model, every kernel in float32 with
subnormals flushed, N = 1024, one trial per step, lr 1e-3, warm-up 1,000 of the 50,000-step cosine schedule,
6,000 steps), evaluated on 256 trials (the paper: 128) whose spread ratios are shipped. R2's runs are three of these
cells (post-norm, none, sheared swap on mirrored Pareto: softmax, log-ELU, squared ELU, seeds 0-5, 64 evaluation
trials; their checkpoints were not kept, so they cannot be re-evaluated on 256) and are read from the ladder's map,
not re-run. Seeds: :data:`SEEDS` on each of the 16 claim-bearing cells (:data:`CLAIM_BEARING`), seed 0 on every
other cell (the paper ran one seed per configuration). Order (:func:`plan`): the claim-bearing cells first with
the seed as the outer axis, the Gaussian control and the matrix inverse first within a seed (if softmax fails on the
Gaussian sheared swap too, R2's failure is not specific to heavy tails), then the one-seed cells. Mixing commits: R2's
softmax seed 0 trained at the ladder's commit and at this grid's gives the same loss and gradient norm on every one of
the first 104 logged steps on one machine; on another processor the same run departs at step 100 (rounding amplified
by softmax's training, docs/reliability.md), so R2's cells and this grid's differ in machine, not in code.

The rules, written and committed before any run of this grid was read; the training seed is the replicate, a run is
*labelled collapsed* when at least :data:`SHARE` of its evaluation trials collapsed (App. I's spread criterion,
``collapse_spread``), and every rate verdict is re-read at the shares :data:`SWEEP` to say whether it survives:

- **P1** (``p1-collapse-<column>``, ``p1-distance-<column>-<kernel>``) per heavy-tailed column (sheared swap and
  matrix inverse, mirrored Pareto), post-norm, none: *collapse*: softmax's share of runs labelled collapsed has its
  Clopper-Pearson 95 % interval above 1/2 and each slower kernel's below 1/2 (reproduced); softmax's below 1/2 (not
  reproduced); otherwise undecided. *Distance*: per slower kernel, softmax's log ratio to the floor minus the
  kernel's, paired by seed, the sign-flip test (:func:`heavytail.studies.claims.graded_rule`; reproduced when
  p < 0.05 with a positive mean). P1 as a whole: reproduced when every part is; partly when some are.
- **P2** (``p2-symlog-<column>``) post-norm, symlog: on the matrix inverse, softmax's share labelled collapsed
  below 1/2 (its interval) is reproduced, above 1/2 not reproduced; on the sheared swap the reverse (softmax still
  collapses: above 1/2 reproduced, below 1/2 not reproduced); log-ELU's share with symlog is reported beside it.
- **P3** (``p3-gaussian-collapse``, ``p3-gaussian-similar``) sheared swap on shifted Gaussian, post-norm, none:
  *avoid*: softmax's and log-ELU's shares labelled collapsed both have intervals below 1/2 (reproduced); either
  above (not reproduced). *Similar*: the paired log ratio softmax / log-ELU (ratios to the floor) lies within
  +-log(:data:`SIMILAR_MARGIN`) by two one-sided t tests at 5 % (reproduced); its 95 % interval outside the margin
  (not reproduced); otherwise undecided. The margin x1.5 is wider than the paper's own spread in this column
  (1.05-1.12, Table 5) and narrower than the x27 softmax/log-ELU gap at R2: "similar" means no gap of the size P1
  is about.
- **P4** (``p4-prenorm-<column>``) pre-norm softmax, none, both heavy-tailed columns: the share labelled collapsed
  below 1/2 (reproduced) or above (not reproduced); the one-seed pre-norm cells are counted, descriptively.
- **P5** (``p5-shape-<column>``, and ``p5-shape-symlog-swap-pareto``: Fig. 13 draws the sheared swap with symlog too,
  diverging at step ~4,500) per softmax run with a log-ELU run of the same cell and seed: its training trace
  (regularly logged rows only, every ``log_every`` steps; skipped steps recorded off that grid are not read),
  rolling median over :data:`WINDOW` logged rows, classified by :func:`shape`:

  * *learned*: at some logged step from :data:`LEARN_FROM` on (the warm-up's end: before it both kernels are near
    their starting loss), softmax's rolling median is at most :data:`LEARN_FACTOR` x log-ELU's at that step;
  * *diverged abruptly and stayed*: after the first learned step, the rolling median rises from at most
    :data:`RISE_FROM` x its running minimum to at least :data:`RISE_FACTOR` x that minimum within
    :data:`ABRUPT_STEPS` steps, and every rolling median after that stays at least :data:`STAY_FACTOR` x the
    minimum, over at least :data:`STAY_STEPS` steps to the end of the run;
  * classes: ``learned, then diverged`` (P5's shape), ``learned`` (no such divergence), ``never learned``,
    ``diverged too late to tell`` (the rise leaves fewer than STAY_STEPS steps).

  P5 is decided on the cells where P1 reads softmax's collapse (post-norm, none, both Pareto columns): the share of
  softmax runs with P5's shape, rate rule about 1/2 (above: reproduced; below: not reproduced). It is applied to
  every softmax run of the ladder and this grid, and a run that never learned is reported so, whatever its label.

With fewer than :data:`MIN_SEEDS` seeds a rule reads *undecided*, never *not reproduced*. The claims are
:mod:`heavytail.studies.collapse.tables56_rules`; the rules' false-positive rates under simulated nulls are tested in
``tests/test_tables56.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from heavytail.names import KERNELS

# ------------------------------------------------------------------------------------------------ the grid
GRID_NAME = "grid-tables56"  # params/grid_tables56.yaml
# Rung R2's recipe (heavytail.studies.collapse.ladder), with 256 evaluation trials: what every cell trains.
RECIPE: dict[str, Any] = {
    "d_model": 256, "n_blocks": 6, "d_ff": 512, "n_heads": 1, "precision": "float32", "flush_subnormals": True,
    "n_points": 1024, "trials_per_step": 1, "lr": 1e-3, "warmup_steps": 1000, "schedule_steps": 50000,
    "steps": 6000, "eval_trials": 256, "eval_n_points": 1024,
}
# Table 5's two columns and Table 6's (benchmark, marginals): the paper's left-to-right order.
COLUMNS: dict[str, tuple[str, str]] = {
    "swap-pareto": ("sheared_swap", "mirrored_pareto"),
    "swap-gaussian": ("sheared_swap", "gaussian"),
    "inverse-pareto": ("matrix_inverse", "mirrored_pareto"),
}
COLUMN_LABELS = {"swap-pareto": "sheared swap, mirrored Pareto", "swap-gaussian": "sheared swap, shifted Gaussian",
                 "inverse-pareto": "matrix inverse, mirrored Pareto"}
HEAVY = ("swap-pareto", "inverse-pareto")
NORMS_ = ("post", "pre")
SEEDS = (0, 1, 2, 3, 4, 5)
ONE_SEED = (0,)
MIN_SEEDS = 6
BACKEND = {"softmax": "sdpa"}  # softmax through SDPA as on the ladder; every other kernel "auto"
EVAL_TRIALS = 256  # this grid's evaluation (R2's runs: 64)

# ------------------------------------------------------------------------------------- the rules' constants
SHARE = 0.5  # a run is labelled collapsed when at least this share of its evaluation trials collapsed (App. I)
SWEEP = (0.4, 0.6)  # the shares every rate verdict is re-read at
SIMILAR_MARGIN = 1.5  # P3: "similar" is a paired softmax / log-ELU ratio within x1.5 either way
# P5's shape (Fig. 13): on the rolling median of the regularly logged training loss
WINDOW = 8  # logged rows in the rolling median (200 steps at log_every 25)
LEARN_FACTOR = 2.0  # learned: at most this x log-ELU's rolling median at the same step ...
LEARN_FROM = 1000  # ... from this step on (the warm-up's end; before it both kernels start from the same loss)
RISE_FROM = 2.0  # a rise starts where the rolling median is at most this x its running minimum ...
RISE_FACTOR = 5.0  # ... and reaches at least this x that minimum ...
ABRUPT_STEPS = 500  # ... within this many steps (abrupt) ...
STAY_FACTOR = 3.0  # ... and every later rolling median stays at least this x the minimum ...
STAY_STEPS = 500  # ... over at least this many steps to the end of the run
SHAPES = ("learned, then diverged", "learned", "never learned", "diverged too late to tell")


@dataclass(frozen=True, order=True)
class Cell:
    """One cell of Tables 5-6: a (norm, kernel, transform, column)."""

    norm: str
    kernel: str
    symlog: bool
    column: str

    def config(self) -> dict[str, Any]:
        """The RunConfig keys that set this cell (the recipe aside)."""
        bench, marg = COLUMNS[self.column]
        return {"benchmark": bench, "marginals": marg, "norm": self.norm, "kernel": self.kernel,
                "symlog": self.symlog, "attention_backend": BACKEND.get(self.kernel, "auto")}

    @property
    def label(self) -> str:
        return (f"{self.norm}-norm {self.kernel} {'symlog' if self.symlog else 'none'}, "
                f"{COLUMN_LABELS[self.column]}")


def cells() -> tuple[Cell, ...]:
    """The 48 cells of Tables 5-6: norm x Table 1's kernels x none/symlog x column."""
    return tuple(Cell(n, k, s, c) for c in COLUMNS for n in NORMS_ for k in KERNELS for s in (False, True))


# The cells P1-P5 are decided on (6 seeds each), in the order each seed runs them: the Gaussian control, then the
# matrix inverse, then the sheared swap on mirrored Pareto.
CLAIM_BEARING: tuple[Cell, ...] = (
    Cell("post", "softmax", False, "swap-gaussian"), Cell("post", "log_elu", False, "swap-gaussian"),
    *(Cell("post", k, False, "inverse-pareto") for k in KERNELS),
    Cell("post", "softmax", True, "inverse-pareto"), Cell("post", "log_elu", True, "inverse-pareto"),
    Cell("pre", "softmax", False, "inverse-pareto"),
    *(Cell("post", k, False, "swap-pareto") for k in KERNELS),
    Cell("post", "softmax", True, "swap-pareto"), Cell("post", "log_elu", True, "swap-pareto"),
    Cell("pre", "softmax", False, "swap-pareto"),
)
# Claim-bearing cells already run as the ladder's rung R2 (seeds 0-5, read from its map, not re-run).
FROM_LADDER: tuple[Cell, ...] = tuple(Cell("post", k, False, "swap-pareto") for k in ("softmax", "log_elu", "squared_elu"))


def plan() -> list[tuple[Cell, int]]:
    """The grid's runs in order: claim-bearing cells (less the ladder's) seed by seed, then every other cell once."""
    bearing = [c for c in CLAIM_BEARING if c not in FROM_LADDER]
    first = [(c, s) for s in SEEDS for c in bearing]
    rest = [(c, s) for s in ONE_SEED for c in cells() if c not in CLAIM_BEARING]
    return first + rest


def cell_of(config: Mapping[str, Any]) -> Cell | None:
    """The cell a run configuration trains, or None when it is not a Tables 5-6 cell at :data:`RECIPE`."""
    column = next((c for c, task in COLUMNS.items() if task == (config.get("benchmark"), config.get("marginals"))), None)
    if column is None or config.get("norm") not in NORMS_ or config.get("kernel") not in KERNELS:
        return None
    if any(config.get(k) != v for k, v in RECIPE.items() if k not in ("eval_trials",)):
        return None
    cell = Cell(config["norm"], config["kernel"], bool(config["symlog"]), column)
    return cell if config.get("attention_backend", "auto") == cell.config()["attention_backend"] else None


def grid_problem(configs: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a grid's configurations are not a Tables 5-6 grid (one sentence), or None: each must be a cell at
    :data:`RECIPE` with 256 evaluation trials, and every claim-bearing cell it holds must hold the same seeds, at least
    :data:`SEEDS` (the balance a partial map is a screen by)."""
    seeds: dict[Cell, set[int]] = {}
    for cfg in configs:
        cell = cell_of(cfg)
        if cell is None:
            what = ", ".join(f"{k}={cfg.get(k)!r}" for k in ("benchmark", "marginals", "norm", "kernel", "symlog",
                                                              "attention_backend"))
            off = sorted(k for k, v in RECIPE.items() if cfg.get(k) != v)
            return (f"configuration ({what}) is not a Tables 5-6 cell at rung R2's recipe"
                    + (f" (differs in {', '.join(off)})" if off else "")
                    + f"; cells: norm in {NORMS_}, kernel in {KERNELS}, columns {list(COLUMNS.values())}, "
                      f"softmax through sdpa, every other kernel auto")
        seeds.setdefault(cell, set()).add(int(cfg["seed"]))
    short = next((cfg for cfg in configs if cfg.get("eval_trials") != EVAL_TRIALS), None)
    if short is not None:
        return (f"eval_trials={short.get('eval_trials')!r} in {cell_of(short).label}; this grid evaluates every run on "
                f"{EVAL_TRIALS} trials (a label decided by about half of 64 trials is a coin flip)")
    bearing = {c: s for c, s in seeds.items() if c in CLAIM_BEARING}
    lists = {frozenset(s) for s in bearing.values()}
    if len(lists) > 1:
        low = min(bearing.items(), key=lambda kv: len(kv[1]))
        return (f"the claim-bearing cells hold different seed lists ({low[0].label}: {sorted(low[1])}); every "
                f"claim-bearing cell must hold the same seeds, at least {list(SEEDS)}")
    if lists and not set(SEEDS) <= next(iter(lists)):
        return (f"the claim-bearing cells hold seeds {sorted(next(iter(lists)))}; they need at least {list(SEEDS)} "
                f"(a rule needs {MIN_SEEDS} seeds)")
    return None


# ------------------------------------------------------------------------------------------------ P5's shape
def rolling_median(values: Sequence[float], window: int = WINDOW) -> np.ndarray:
    """(n,) -> (n,): the median of each row's last ``window`` values (fewer at the start); NaN rows ignored."""
    x = np.asarray(values, dtype=float)
    out = np.full(x.shape, np.nan)
    for i in range(len(x)):
        part = x[max(0, i - window + 1): i + 1]
        part = part[np.isfinite(part)]
        if part.size:
            out[i] = np.median(part)
    return out


def regular_rows(trace: Mapping[str, Sequence[float]], every: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, losses) of the rows on the logging grid (steps that are multiples of ``every``): a skipped step is
    recorded where it happened, off that grid, and no rule reads it."""
    steps = np.asarray(trace["step"], dtype=int)
    loss = np.asarray(trace["loss"], dtype=float)
    keep = steps % every == 0
    return steps[keep], loss[keep]


def shape(steps: Sequence[int], loss: Sequence[float], partner_steps: Sequence[int],
          partner_loss: Sequence[float]) -> dict[str, Any]:
    """P5's class of one softmax trace against log-ELU's on the same cell and seed (regular rows of each):
    {"shape": one of SHAPES, "learned_at", "diverged_at" (steps or None), "min", "final_over_min"}."""
    steps, mine = np.asarray(steps, dtype=int), rolling_median(loss)
    theirs = dict(zip(np.asarray(partner_steps, dtype=int).tolist(), rolling_median(partner_loss).tolist()))
    ref = np.array([theirs.get(int(s), np.nan) for s in steps])
    ok = np.isfinite(mine) & np.isfinite(ref) & (steps >= LEARN_FROM) & (mine <= LEARN_FACTOR * ref)
    out: dict[str, Any] = {"shape": "never learned", "learned_at": None, "diverged_at": None,
                           "min": float(np.nanmin(mine)) if np.isfinite(mine).any() else None, "final_over_min": None}
    if not ok.any():
        return out
    first = int(np.argmax(ok))
    out["learned_at"] = int(steps[first])
    low, start = math.inf, None
    for i in range(first, len(steps)):
        m = mine[i]
        if not math.isfinite(m):
            continue
        if m < low:
            low, start = m, None
        if m <= RISE_FROM * low:
            start = i
        elif start is not None and m >= RISE_FACTOR * low and steps[i] - steps[start] <= ABRUPT_STEPS:
            after = mine[i:]
            after = after[np.isfinite(after)]
            stays = bool(np.all(after >= STAY_FACTOR * low))
            if stays and steps[-1] - steps[i] >= STAY_STEPS:
                out.update(shape="learned, then diverged", diverged_at=int(steps[i]), min=float(low),
                           final_over_min=float(after[-1] / low))
                return out
            if stays:
                out.update(shape="diverged too late to tell", diverged_at=int(steps[i]), min=float(low))
                return out
    out.update(shape="learned", min=float(low))
    return out
