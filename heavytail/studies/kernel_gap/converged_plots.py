"""Figures of the converged-gap study (heavytail.studies.kernel_gap.converged): the gap against N at both recipes, and
each variant's validation score against steps at its chosen learning rate. Each takes run summaries."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from heavytail.studies import claims as C
import heavytail.studies.kernel_gap.converged as CG
from heavytail.studies.core import (LOG_ELU, SOFTMAX_EXACT, SOFTMAX_SDPA, cells, paired_ratio, sizes, variant,
                                          variant_color, variant_name)
from heavytail.studies.run_record import records

RECIPE_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def _interval(logs: Sequence[float]) -> tuple[float, float, float]:
    est = C.t_interval(logs)
    return tuple(math.exp(x) if math.isfinite(x) else math.nan for x in (est.estimate, est.low, est.high))


def recipes_figure(recipes: Mapping[str, Sequence[Mapping]]):
    """(a) softmax / log-ELU ratio at the common evaluation N against the training N, per recipe; (b) the
    floor-free excess ratio at the training N. Points: the geometric mean over seeds with its 95 % t interval."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    if len(recipes) > len(RECIPE_STYLES):
        raise ValueError(f"recipes_figure draws at most {len(RECIPE_STYLES)} recipes; got {len(recipes)}")
    shifts = (-0.02, 0.02) if len(recipes) < 3 else tuple(np.linspace(-0.03, 0.03, len(recipes)))
    for (label, runs), (ls, marker), shift in zip(recipes.items(), RECIPE_STYLES, shifts):
        cs = cells(runs)
        for v in (SOFTMAX_SDPA, SOFTMAX_EXACT):
            ns, gap, excess = [], [], []
            for n in sizes(cs):
                pair = paired_ratio(cs, v, LOG_ELU, n)
                if len(pair) < 2:
                    continue
                ns.append(n)
                gap.append(_interval([math.log(x) for x in pair.values()]))
                if (v, n) in cs and (LOG_ELU, n) in cs:
                    a, b = cs[(v, n)].by_seed(), cs[(LOG_ELU, n)].by_seed()
                    logs = [CG.excess_log_ratio(a[s], b[s]) for s in sorted(set(a) & set(b))]
                    excess.append(_interval([x for x in logs if math.isfinite(x)]))
                else:
                    excess.append((math.nan,) * 3)
            for ax, vals in zip(axes, (gap, excess)):
                if not ns:
                    continue
                xs = np.asarray(ns) * 10 ** shift
                mid = np.array([m for m, _, _ in vals])
                err = np.array([[m - lo for m, lo, _ in vals], [hi - m for m, _, hi in vals]])
                ax.errorbar(xs, mid, yerr=err, ls=ls, marker=marker, color=variant_color(v), capsize=2, ms=4,
                            label=f"{variant_name(v)}, {label}")
    for ax, title in zip(axes, ("(a) ratio to log-ELU at evaluation N = 1024",
                                "(b) excess over the floor relative to log-ELU's, at the training N")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.axhline(1, color="0.6", lw=0.8)
        ax.set_xlabel("training N")
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel("geometric mean over seeds (95 % interval)")
    # below both panels: inside one, 'best' still covered the converged rows' intervals at N = 1024
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, frameon=False, loc="outside lower center", ncols=2)
    return fig


def validation_figure(select_runs: Sequence[Mapping], selections: Sequence[CG.Selection]):
    """Per training N: each variant's validation score against steps at its chosen learning rate (one line per
    selection seed); a cross marks where the stopping rule ended a run."""
    chosen = {(s.variant, s.n_points): s.lr for s in selections}
    ns = sorted({n for _, n in chosen})
    fig, axes = plt.subplots(1, max(1, len(ns)), figsize=(3.6 * max(1, len(ns)), 3.2), constrained_layout=True,
                             squeeze=False)
    for ax, n in zip(axes[0], ns):
        for r in records(select_runs):
            v, cfg = variant(r), r.config
            if cfg["n_points"] != n or chosen.get((v, n)) != cfg["lr"]:
                continue
            tr = r.get("trace") or {}
            xs, ys = tr.get("val_step", []), tr.get("val_log_energy", [])
            ax.plot(xs, ys, color=variant_color(v), lw=0.9, alpha=0.8,
                    label=f"{variant_name(v)} (lr {cfg['lr']:g})" if cfg["seed"] == min(CG.SELECT_SEEDS) else None)
            if (r.get("stop") or {}).get("stop_reason") == "converged" and xs:
                ax.plot(xs[-1], ys[-1], "x", color=variant_color(v), ms=6)
        ax.set_title(f"training N = {n}", fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=6, frameon=False)
    axes[0][0].set_ylabel("validation: mean log energy distance")
    return fig


def budget_figure(by_budget: Mapping[int, Sequence[Mapping]]):
    """One panel per step budget: each deciding run's validation score against steps (one line per seed, a colour
    per variant), the last quarter, which the flattened check reads, shaded."""
    fig, axes = plt.subplots(1, max(1, len(by_budget)), figsize=(4.2 * max(1, len(by_budget)), 3.2),
                             constrained_layout=True, squeeze=False, sharey=True)
    for ax, (steps, runs) in zip(axes[0], by_budget.items()):
        labelled = set()
        for r in runs:
            v, tr = variant(r), r.get("trace") or {}
            ax.plot(tr.get("val_step", []), tr.get("val_log_energy", []), color=variant_color(v), lw=0.7, alpha=0.6,
                    label=None if v in labelled else variant_name(v))
            labelled.add(v)
        ax.axvspan(0.75 * steps, steps, color="0.92", zorder=0)
        ax.set_title(f"{steps:,}-step budget, seeds {min(r['config']['seed'] for r in runs)}-"
                     f"{max(r['config']['seed'] for r in runs)}", fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=6, frameon=False)
    axes[0][0].set_ylabel("validation: mean log energy distance")
    return fig
