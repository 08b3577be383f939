"""Figures of the grid summary (Figures 2, 3, 8-11 and the Hill-error curve), from :mod:`heavytail.studies.ablation.summary`
aggregates. Each function returns a matplotlib figure; missing configurations are drawn as 'not run'.
:func:`heavytail.studies.curves.training_curve` draws one training-loss trace onto a given axis, the same way in notebook 04 (one
configuration) and notebook 05 (Figure 13).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import ticker

from heavytail.names import (BENCHMARK_LABELS, BENCHMARK_MARGINALS, KERNEL_COLORS, KERNEL_LABELS, KERNELS, MARGINAL_LABELS,
                    NORM_LABELS, TRANSFORM_LABELS)
from heavytail.names import NORM_TABLE_ORDER as NORMS
from heavytail.names import STATISTIC_COLORS as STAT_COLORS
from heavytail.studies.ablation.claims import is_collapsed
from heavytail.studies.ablation.summary import index_cells


def energy_figure(aggs: Sequence[Mapping[str, Any]], benchmark: str, norm: str = "post"):
    """Figure 2/3 (post-norm) or 8/9 (pre-norm): per kernel, the median and mean energy distance with the
    95% bootstrap bar on the energy-distance scale (ratio endpoints times the floor summary, App. H.2)
    and the floor under each statistic as a vertical line; rows marginals, columns symlog."""
    cells = index_cells(aggs)
    marginals = BENCHMARK_MARGINALS[benchmark]
    fig, axes = plt.subplots(len(marginals), 2, figsize=(11, 2.6 * len(marginals) + 0.6), squeeze=False)
    labelled: set[str] = set()  # one legend entry per statistic and per floor
    for i, marg in enumerate(marginals):
        for j, sym in enumerate((False, True)):
            ax = axes[i, j]
            ax.set_title(f"{MARGINAL_LABELS[marg]}, transform {TRANSFORM_LABELS[sym]}", fontsize=10)
            floors_drawn = set()
            any_run = False
            for row, kernel in enumerate(KERNELS):
                agg = cells.get((benchmark, marg, norm, kernel, sym))
                if agg is None:
                    ax.text(0.5, row, "not run", transform=ax.get_yaxis_transform(), ha="center", va="center",
                            color="#999", fontsize=9)
                    continue
                any_run = True
                for k, stat in enumerate(("median", "mean")):
                    s = agg[stat]
                    if stat not in floors_drawn:
                        ax.axvline(s["floor"], color=STAT_COLORS[stat], lw=1, ls="--",
                                   label=_once(labelled, f"i.i.d. floor ({stat})"))
                        floors_drawn.add(stat)
                    if is_collapsed(agg):
                        continue
                    y = row + (k - 0.5) * 0.3
                    ax.errorbar([s["ratio"] * s["floor"]], [y],
                                xerr=[[max(s["ratio"] - s["low"], 0) * s["floor"]], [max(s["high"] - s["ratio"], 0) * s["floor"]]],
                                fmt="o", color=STAT_COLORS[stat], ms=4, capsize=3,
                                label=_once(labelled, f"{stat} energy distance"))
                if is_collapsed(agg):
                    ax.text(0.5, row, "ensemble collapse", transform=ax.get_yaxis_transform(), ha="center",
                            va="center", color="tab:red", fontsize=9, fontweight="bold")
            ax.set_yticks(range(len(KERNELS)), [KERNEL_LABELS[k] for k in KERNELS], fontsize=8)
            ax.set_ylim(len(KERNELS) - 0.5, -0.5)
            if any_run:
                _log_x(ax)
            ax.set_xlabel("energy distance E^2 (eq. 10)", fontsize=9)
    fig.suptitle(f"{BENCHMARK_LABELS[benchmark]}, {NORM_LABELS[norm]}: median and mean energy distance, "
                 "95% bootstrap bars, floors dashed", fontsize=11)
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.append(h)
            labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def ecdf_figure(aggs: Sequence[Mapping[str, Any]], benchmark: str, marginals: str = "mirrored_pareto"):
    """Figure 10/11: empirical CDF of the per-trial energy distances (pooled over seeds) against the floor
    pool (black); rows normalization placement, columns symlog. Collapsed runs are left out, as in the paper."""
    cells = index_cells(aggs)
    norms = [n for n in NORMS if any(a["norm"] == n and a["benchmark"] == benchmark for a in aggs)] or ["post"]
    fig, axes = plt.subplots(len(norms), 2, figsize=(11, 3.2 * len(norms)), squeeze=False)
    for i, norm in enumerate(norms):
        for j, sym in enumerate((False, True)):
            ax = axes[i, j]
            ax.set_title(f"{NORM_LABELS[norm]}, transform {TRANSFORM_LABELS[sym]}", fontsize=10)
            floor, omitted, drawn = None, [], 0
            for kernel in KERNELS:
                agg = cells.get((benchmark, marginals, norm, kernel, sym))
                if agg is None:
                    continue
                floor = agg["d_hat"] if floor is None else floor
                if is_collapsed(agg):
                    omitted.append(kernel)
                    continue
                _ecdf(ax, agg["d"], color=KERNEL_COLORS[kernel], label=KERNEL_LABELS[kernel])
                drawn += 1
            if floor is not None:
                _ecdf(ax, floor, color="black", label="i.i.d. floor", lw=2)
                _log_x(ax)
            else:
                ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center", color="#999")
            if omitted:
                ax.text(0.02, 0.95, "collapsed, omitted: " + ", ".join(omitted), transform=ax.transAxes,
                        fontsize=8, va="top", color="tab:red")
            ax.set_xlabel("per-trial energy distance", fontsize=9)
            ax.set_ylabel("fraction of trials", fontsize=9)
            if drawn or floor is not None:
                ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{BENCHMARK_LABELS[benchmark]} on {MARGINAL_LABELS[marginals]}: empirical CDF of per-trial "
                 "energy distances (left = lower)", fontsize=11)
    fig.tight_layout()
    return fig


def _once(seen: set[str], label: str) -> str | None:
    """``label`` the first time it is asked for, None afterwards (one legend entry per label)."""
    if label in seen:
        return None
    seen.add(label)
    return label


def _log_x(ax) -> None:
    """A log x axis whose labels stay readable when the data span less than a decade."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def _ecdf(ax, values, **kw):
    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[np.isfinite(x) & (x > 0)]
    if x.size:
        ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", **kw)


def hill_curve_figure(aggs: Sequence[Mapping[str, Any]], benchmark: str):
    """Section 5, future work: median over trials of |a_hat - a| against the known tail index, over tail
    fractions phi, per latent axis; model outputs (colour per kernel; solid post-norm, dashed pre-norm)
    and the target ensembles Y1 (black). Rows: symlog; columns: axis."""
    cells = index_cells(aggs)
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.4), squeeze=False)
    for i, sym in enumerate((False, True)):
        for j, axis in enumerate(("0", "1")):
            ax = axes[i, j]
            tail = "lighter tail, a in [2, 3]" if axis == "0" else "heavier tail, a in [1+eps, 2]"
            ax.set_title(f"axis {axis} ({tail}), transform {TRANSFORM_LABELS[sym]}", fontsize=9)
            target = None
            for norm in NORMS:
                for kernel in KERNELS:
                    agg = cells.get((benchmark, "mirrored_pareto", norm, kernel, sym))
                    if agg is None or "hill_curve" not in agg:
                        continue
                    c = agg["hill_curve"]
                    target = target or (c["phi"], c["target"][axis])
                    label = f"{KERNEL_LABELS[kernel]}, {norm}" + (" (collapse)" if is_collapsed(agg) else "")
                    ax.plot(c["phi"], c["output"][axis], marker="o", ms=3, color=KERNEL_COLORS[kernel],
                            ls="-" if norm == "post" else "--", label=label)
            if target is not None:
                ax.plot(target[0], target[1], color="black", lw=2, marker="s", ms=3, label="target Y1")
                _log_x(ax)
                ax.set_yscale("log")
                ax.legend(fontsize=6)
            else:
                ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center", color="#999")
            ax.set_xlabel("tail fraction phi (k = phi N)", fontsize=9)
            ax.set_ylabel("median |a_hat - a|", fontsize=9)
    fig.suptitle(f"{BENCHMARK_LABELS[benchmark]}: Hill error against the known tail index over thresholds", fontsize=11)
    fig.tight_layout()
    return fig


# The panels of notebook 05's onset diagnostics: (logged key, title, log scale). Block keys are averaged over
# blocks, except the gradient norm, whose largest block is shown.
DIAGNOSTIC_PANELS = (("loss", "training loss", True), ("spread_median", "median output IQR / target IQR", False),
                     ("grad_norm", "total gradient norm (before clipping)", True),
                     ("attn_max_weight", "largest attention weight (block mean)", False),
                     ("attn_entropy_ratio", "attention entropy / log N (block mean)", False),
                     ("block_grad_norm", "largest per-block gradient norm", True))


def log_series(log, key: str) -> list[float]:
    """One diagnostic per logged step of a training log (metrics.jsonl rows): a row key, the block mean of an
    attention statistic, or the largest per-block gradient norm (``block_grad_norm``); NaN where not logged."""
    if key in ("attn_max_weight", "attn_entropy_ratio"):
        return [float(np.mean([b.get(key, np.nan) for b in row["blocks"]])) if row.get("blocks") else np.nan for row in log]
    if key == "block_grad_norm":
        return [max(b.get("grad_norm", np.nan) for b in row["blocks"]) if row.get("blocks") else np.nan for row in log]
    return [row.get(key, np.nan) for row in log]


def diagnostics_figure(logs):
    """Notebook 05's onset diagnostics: per variant (``{label: training log}``) the rolling median (5 logged
    steps) of each panel of :data:`DIAGNOSTIC_PANELS`; crosses on the loss mark skipped (non-finite) steps."""
    from heavytail.science.collapse import rolling_median

    fig, axes = plt.subplots(2, 3, figsize=(16, 7.5), sharex=True)
    for ax, (key, title, logy) in zip(axes.flat, DIAGNOSTIC_PANELS):
        for label, log in logs.items():
            steps = np.array([row["step"] for row in log])
            vals = log_series(log, key)
            ax.plot(steps, rolling_median(vals, 5), label=label, lw=1.5)
            skipped = [row["step"] for row in log if row.get("skipped")]
            if skipped and key == "loss":
                ax.plot(skipped, np.full(len(skipped), np.nanmax(vals)), "x", color=ax.lines[-1].get_color())
        ax.set_title(title)
        if logy:
            ax.set_yscale("log")
    for ax in axes[1]:
        ax.set_xlabel("step")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig
