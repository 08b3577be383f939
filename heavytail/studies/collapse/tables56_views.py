"""Tables 5-6 at Table 3's model as the paper prints them, the P5 shapes of every softmax run, and the Fig. 13-style
training curves per column: the views notebook 10 shows (descriptive; the verdicts are
:mod:`heavytail.studies.collapse.tables56_rules`)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from heavytail.names import KERNEL_COLORS, KERNELS, NORM_TABLE_ORDER, TRANSFORM_LABELS, kernel_label
from heavytail.studies import claims as C
from heavytail.studies.collapse import tables56 as T
from heavytail.studies.collapse import tables56_rules as R
from heavytail.studies.paper_numbers import PAPER_ONSET, paper_value
from heavytail.studies.run_summary import diverged_count
from heavytail.studies.tables import fmt_ratio

Run = Mapping[str, Any]


def cell_value(runs: Sequence[Run]) -> dict[str, Any] | None:
    """A cell's ratio to the floor over its seeds: the geometric mean with the t interval of the mean log ratio
    (one seed: the run's own bootstrap interval), the count labelled collapsed, and whether the interval contains or
    lies below one (the paper's bold rule). None for a cell with no runs."""
    if not runs:
        return None
    logs = [math.log(R.ratio(r)) for r in runs if R.ratio(r) > 0 and math.isfinite(R.ratio(r))]
    if len(runs) == 1:
        med = runs[0]["median"]
        est, low, high = med["ratio"], med.get("low", math.nan), med.get("high", math.nan)
    elif logs:
        e = C.t_interval(logs)
        est, low, high = math.exp(e.estimate), math.exp(e.low), math.exp(e.high)
    else:
        est = low = high = math.nan
    return {"ratio": est, "low": low, "high": high, "seeds": len(runs), "collapsed": sum(map(R.labelled, runs)),
            "diverged": diverged_count(runs), "bold": bool(low <= 1.0) if math.isfinite(low) else False}


def _ours(v: dict[str, Any] | None) -> Any:
    if v is None:
        return {"text": "not run", "color": "#6e7781"}
    text = (f"{fmt_ratio(v['ratio'])} [{fmt_ratio(v['low'])}, {fmt_ratio(v['high'])}]; "
            f"{v['collapsed']}/{v['seeds']} collapsed" + (f", {v['diverged']} diverged" if v["diverged"] else ""))
    return {"text": text, "bold": v["bold"], "color": "#cf222e" if 2 * v["collapsed"] >= v["seeds"] else None}


def _paper(column: str, norm: str, kernel: str, symlog: bool) -> Any:
    bench, marg = T.COLUMNS[column]
    value = paper_value(bench, marg, norm, kernel, symlog, "median")
    return value if isinstance(value, (str, dict)) else str(value)


def paper_table(runs: Sequence[Run], column: str) -> dict[str, Any]:
    """One column of Tables 5-6 (its none and symlog sub-columns), both norms, Table 1's kernels: the paper's median
    ratio beside ours (geometric mean over seeds with its interval, runs labelled collapsed of seeds), bold where the
    interval contains or lies below one, red where most runs collapsed."""
    cs = R.by_cell(runs)
    cols = ["norm", "kernel"] + [f"{who}, {TRANSFORM_LABELS[s]}" for s in (False, True) for who in ("paper", "ours")]
    rows = []
    for norm in NORM_TABLE_ORDER:
        for k in KERNELS:
            row: dict[str, Any] = {"norm": norm, "kernel": kernel_label(k)}
            for s in (False, True):
                row[f"paper, {TRANSFORM_LABELS[s]}"] = _paper(column, norm, k, s)
                row[f"ours, {TRANSFORM_LABELS[s]}"] = _ours(cell_value(cs.get(T.Cell(norm, k, s, column), [])))
            rows.append(row)
    return {"title": f"{T.COLUMN_LABELS[column]}: median ratio to the floor, the paper's and ours at Table 3's model",
            "columns": cols, "rows": rows,
            "notes": "Ours: rung R2's recipe (N = 1024, 1 trial per step, 6,000 steps, float32); the geometric mean over "
                     "seeds with the t interval of the mean log ratio (one seed: the run's bootstrap interval); bold "
                     "where the interval contains or lies below 1 (the paper's rule); red where at least half the runs "
                     "are labelled collapsed. The paper: N = 16384, 50,000 steps, bf16, one seed."}


def shape_table(cells: Mapping[Any, Mapping[int, Mapping[str, Any]]], label) -> dict[str, Any]:
    """P5's shape of every softmax run: one row per group (``label(group)`` names it), the shape per seed."""
    rows = []
    for group, per_seed in cells.items():
        counts = {s: sum(v["shape"] == s for v in per_seed.values()) for s in T.SHAPES}
        # A softmax run whose partner (log-ELU, same cell and seed) has not run has no shape yet: say so.
        seeds = ", ".join(map(str, per_seed)) or "none yet with a log-ELU partner"
        rows.append({"softmax runs": label(group), "seeds": seeds,
                     **{s: counts[s] for s in T.SHAPES},
                     "divergence steps": ", ".join(f"{v['diverged_at']:,}" for v in per_seed.values()
                                                   if v["diverged_at"]) or "-"})
    return {"title": "P5: the shape of every softmax run's training loss against log-ELU's on the same seed",
            "columns": ["softmax runs", "seeds", *T.SHAPES, "divergence steps"], "rows": rows,
            "notes": f"Rolling median over {T.WINDOW} logged rows; learned: within x{T.LEARN_FACTOR:g} of log-ELU's from "
                     f"step {T.LEARN_FROM:,}; diverged: a rise from x{T.RISE_FROM:g} to x{T.RISE_FACTOR:g} its running "
                     f"minimum within {T.ABRUPT_STEPS} steps, staying above x{T.STAY_FACTOR:g} for {T.STAY_STEPS}+ steps "
                     f"(heavytail.studies.collapse.tables56). The paper's softmax diverged at step ~{PAPER_ONSET[False]:,}."}


# Fig. 13's panels here: every column without a transform, and the sheared swap with symlog (Fig. 13 draws both).
CURVE_PANELS = (*((c, False) for c in T.COLUMNS), ("swap-pareto", True))


def curves_figure(runs: Sequence[Run]):
    """Fig. 13 at Table 3's model: per column, post-norm and no transform, and the sheared swap with symlog, the
    rolling median training loss of every kernel's runs (one line per seed), on log axes, with the paper's
    divergence step (without and with symlog) marked."""
    import matplotlib.pyplot as plt

    cs = R.by_cell(runs)
    fig, axes = plt.subplots(1, len(CURVE_PANELS), figsize=(4.4 * len(CURVE_PANELS), 3.8), sharey=True, squeeze=False)
    for ax, (column, symlog) in zip(axes[0], CURVE_PANELS):
        drawn = False
        for k in KERNELS:
            for i, run in enumerate(cs.get(T.Cell("post", k, symlog, column), [])):
                steps, loss = T.regular_rows(run["trace"], run.log_every)
                if not len(steps):
                    continue
                ax.plot(steps, T.rolling_median(loss), color=KERNEL_COLORS[k], lw=1.0, alpha=0.75,
                        label=kernel_label(k) if i == 0 else None)
                drawn = True
        ax.axvline(PAPER_ONSET[symlog], color="k", ls=":", lw=1)
        ax.set_xlim(0, T.RECIPE["steps"])
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_title(f"{T.COLUMN_LABELS[column]}\npost-norm, {'symlog' if symlog else 'none'}", fontsize=10)
        if not drawn:
            ax.text(0.5, 0.5, "not run yet", transform=ax.transAxes, ha="center", va="center", color="#6e7781")
        elif column == next(iter(T.COLUMNS)) and not symlog:
            ax.legend(fontsize=8, loc="upper right")
    axes[0][0].set_ylabel(f"training loss (rolling median of {T.WINDOW} logged steps)")
    fig.suptitle("Training loss per column at Table 3's model (one line per seed); dotted: the paper's softmax "
                 f"divergence, step ~{PAPER_ONSET[False]:,} (~{PAPER_ONSET[True]:,} with symlog; Fig. 13)", fontsize=10)
    fig.tight_layout()
    return fig


def counts_sentence(found: Sequence[Mapping[str, Any]]) -> str:
    """One sentence per paper claim decided here: P1-P5 with their verdicts, from the decided claims."""
    by = {c["id"]: c for c in found}
    parts = []
    for p in ("p1-collapse-swap-pareto", "p1-collapse-inverse-pareto", "p2-symlog-inverse-pareto",
              "p2-symlog-swap-pareto", "p3-gaussian-collapse", "p4-prenorm-swap-pareto", "p5-shape-swap-pareto",
              "p5-shape-symlog-swap-pareto"):
        c = by.get(p)
        if c is not None:
            parts.append(f"{p}: {c['verdict']} ({c['seeds']} seeds)")
    return "; ".join(parts)

