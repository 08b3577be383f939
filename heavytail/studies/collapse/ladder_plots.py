"""Figures of the collapse ladder (heavytail.studies.collapse.ladder): collapse per rung, and the collapse onset
watched (App. I, Fig. 13, plus the attention and gradient statistics the paper asked for). Each function takes
run summaries and returns a figure."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from heavytail.names import variant_color
import heavytail.studies.collapse.ladder as L
from heavytail.studies.core import collapsed_steps

# What the onset figure draws per block: (summary key, axis label, log scale)
ONSET_PANELS = (
    ("loss", "training loss (eq. 10)", True),
    ("attn_max_weight", "largest attention weight", False),
    ("attn_absorbed", "rows absorbed (max weight = 1)", False),
    ("max_abs_score", "largest |S| (eq. 1)", True),
    ("attn_entropy_ratio", "entropy / log N", False),
    ("qk_grad_norm", "|grad W_Q, W_K|", True),
)
def _color(v) -> str:
    return variant_color(v)  # the one colour per variant (heavytail.names)


def collapse_figure(runs: Sequence[Mapping]):
    """Per rung: each seed's share of logged steps with a collapsed batch (dots; a ring marks a run labelled
    collapsed), per kernel side by side."""
    cs = L.ladder_cells(runs)
    rungs = [r.name for r in L.RUNGS if any(k[0] == r.name for k in cs)]
    variants = [v for v in L.VARIANT_LABELS if any(k[1] == v for k in cs)]
    fig, ax = plt.subplots(figsize=(7.5, 3.4), constrained_layout=True)
    # each rung's columns are the variants it ran, centred on its tick (a variant that ran on one rung only
    # leaves no empty column elsewhere)
    present = {rung: [v for v in variants if (rung, v) in cs] for rung in rungs}
    width = 0.8 / max([1, *map(len, present.values())])
    labelled = set()
    for i, rung in enumerate(rungs):
        for j, v in enumerate(present[rung]):
            rs = cs[(rung, v)]
            x = i + (j - (len(present[rung]) - 1) / 2) * width
            ys = [collapsed_steps(r) for r in rs]
            xs = np.full(len(ys), x) + np.linspace(-0.3, 0.3, len(ys)) * width
            ax.scatter(xs, ys, s=18, color=_color(v), label=None if v in labelled else L.VARIANT_LABELS[v], zorder=3)
            labelled.add(v)
            hit = [(xr, y) for r, xr, y in zip(rs, xs, ys) if r["collapse"]["label"] == "collapse"]
            if hit:
                ax.scatter(*zip(*hit), s=80, facecolors="none", edgecolors="k", lw=1, zorder=4)
            ax.text(x, -0.06, f"{len(rs)}", ha="center", va="top", fontsize=7, color="0.4",
                    transform=ax.get_xaxis_transform())
    ax.set_xticks(range(len(rungs)), rungs)
    ax.tick_params(axis="x", length=0, pad=16)  # the rung names sit below the seed counts, never on them
    ax.set_ylabel("share of logged steps with a collapsed batch")
    ax.set_ylim(bottom=-0.02)
    ax.set_title("Collapse per rung (ring: run labelled collapsed; small numbers: seeds)", fontsize=10)
    if variants:
        ax.legend(fontsize=8, frameon=False)
    return fig


def task_figure(runs: Sequence[Mapping], tests: Mapping[str, Mapping] | None = None, limit: int = 12):
    """Each softmax run's evaluation trials at their task parameters (omega_T[0], omega_T[1]), collapsed ones
    marked: one panel per run that kept them (at most ``limit``; runs with both collapsed and healthy trials
    first, in rung and seed order), titled with its rung, seed and, from ``tests``
    (by run name, :func:`heavytail.studies.collapse.by_task.half_plane_test`), the best line's agreement."""
    from heavytail.science.operators import OMEGA_T_RANGES
    from heavytail.studies.collapse.by_task import trials_of

    placed = [(rung, r, flags) for (rung, v), rs in L.ordered_cells(runs) if v[0] == "softmax" for r in rs
              if (t := trials_of(r)) is not None for flags in [t[1]]]
    # Runs with both collapsed and healthy trials first: only they can show where in the family collapse lies.
    shown = [(rung, r) for rung, r, flags in sorted(placed, key=lambda x: not 0 < x[2].sum() < x[2].size)][:limit]
    cols = max(1, min(4, len(shown)))
    rows = max(1, -(-len(shown) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(2.9 * cols, 2.9 * rows + 0.4), constrained_layout=True,
                             squeeze=False)
    for ax, (rung, r) in zip(axes.flat, shown):
        omega, flags = trials_of(r)
        ax.scatter(omega[~flags, 0], omega[~flags, 1], s=12, color="0.6", label="healthy")
        ax.scatter(omega[flags, 0], omega[flags, 1], s=22, marker="x", color=_color(L.variant(r)), label="collapsed")
        names = [n for n, _, _ in OMEGA_T_RANGES[r.benchmark]]
        ax.set_xlabel(names[0])
        ax.set_ylabel(names[1])
        t = (tests or {}).get(r["name"])
        extra = f"\nbest line {t['agreement']:.0%} (p = {t['p']:.3g})" if t else ""
        ax.set_title(f"{rung} {L.VARIANT_LABELS[L.variant(r)]}, seed {r['config']['seed']}: "
                     f"{int(flags.sum())}/{flags.size}{extra}", fontsize=8)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    if not shown:
        axes.flat[0].text(0.5, 0.5, "no run kept its trials' task parameters", ha="center", va="center",
                          transform=axes.flat[0].transAxes, color="0.5")
    fig.suptitle("Softmax's collapsed evaluation trials (x) and healthy ones (dots) at their task parameters",
                 fontsize=9)
    return fig


def _series(run: Mapping, key: str, block: int, source: str = "trace") -> tuple[list, list]:
    data = run.get(source) or {}
    name = key if key == "loss" else f"block{block}.{key}"
    steps, ys = data.get("step", []), data.get(name, [])
    pts = [(s, y) for s, y in zip(steps, ys) if y is not None and isinstance(y, (int, float)) and math.isfinite(y)]
    return [p[0] for p in pts], [p[1] for p in pts]


# One line style per rung, in the onset figure's panels and its caption.
RUNG_STYLES = {"R1": ":", "R1b": (0, (5, 1, 1, 1, 1, 1)), "R2": "-", "R3": "--", "R4": "-."}
STYLE_WORDS = "R1 dotted, R1b dash-dot-dot, R2 solid, R3 dashed, R4 dash-dot"


def _aligned_median(lines: Sequence[tuple[Sequence, Sequence]], least: int = 2) -> tuple[list, list]:
    """The median over runs at each offset that at least ``least`` of the runs logged (offsets are whole multiples
    of the logging interval when every run is aligned on a logged step)."""
    at: dict[float, list] = {}
    for xs, ys in lines:
        for x, y in zip(xs, ys):
            if math.isfinite(y):
                at.setdefault(x, []).append(y)
    keep = sorted(x for x, v in at.items() if len(v) >= least)
    return keep, [float(np.median(at[x])) for x in keep]


def onset_figure(runs: Sequence[Mapping], block: int = 0, before: int | None = None, smooth: int = 9):
    """Fig. 13 plus what the paper asked for, from the regular log. Where runs have a collapse onset (the first
    logged step from which every logged batch is collapsed, :func:`L.onsets`), each is aligned on it (step 0):
    thin lines each run (rolling median over ``smooth`` logged steps), bold the median over runs, and the log-ELU
    run of the same rung and seed over the same training steps, from ``before`` steps ahead of the onset (from the
    start of training when None) to its end. Where no run has one, the panels show the same statistics over
    training, per rung, so the figure says how close each rung came. :func:`window_figure` draws the every-step
    windows."""
    from heavytail.science.collapse import rolling_median

    cs = L.ladder_cells(runs)
    onset = [(rung, r) for (rung, v), rs in cs.items() for r in rs if r["collapse"].get("onset") is not None]
    fig, axes = plt.subplots(2, 3, figsize=(11, 5.6), constrained_layout=True)
    drawn = {v for _, v in cs}  # the variants the legend names: those drawn, not every variant of the map
    if onset:
        drawn = {L.variant(r) for _, r in onset}
        partners = {}  # (rung, seed) -> (the log-ELU run, the onset it is aligned on: softmax's, where it has one)
        for rung, r in sorted(onset, key=lambda t: L.variant(t[1])[0] != "softmax"):
            p = {x.seed: x for x in cs.get((rung, L.LOG_ELU), [])}.get(r.seed)
            if p is not None and L.variant(r) != L.LOG_ELU:
                partners.setdefault((rung, r.seed), (p, r["collapse"]["onset"]))
        drawn |= {L.LOG_ELU} if partners else set()
        groups: dict[tuple, list] = {}  # (rung, variant) -> the aligned runs
        for rung, r in onset:
            groups.setdefault((rung, L.variant(r)), []).append((r, r["collapse"]["onset"]))
        for (rung, _), (p, t0) in sorted(partners.items()):
            groups.setdefault((rung, L.LOG_ELU), []).append((p, t0))
        several = len({rung for rung, _ in groups}) > 1
        for ax, (key, label, log) in zip(axes.flat, ONSET_PANELS):
            for (rung, v), members in sorted(groups.items()):
                lines = []
                for r, t0 in members:
                    xs, ys = _series(r, key, block)
                    pts = [(x - t0, y) for x, y in zip(xs, ys) if before is None or x - t0 >= -before]
                    if len(pts) > 2:
                        xs, ys = [p[0] for p in pts], rolling_median([p[1] for p in pts], smooth)
                        ax.plot(xs, ys, color=_color(v), lw=0.6, alpha=0.35, ls=RUNG_STYLES.get(rung, "-"))
                        lines.append((xs, ys))
                mx, my = _aligned_median(lines, least=min(2, len(lines)))
                if mx:
                    ax.plot(mx, my, color=_color(v), lw=1.8, ls=RUNG_STYLES.get(rung, "-"))
            ax.set_title(label, fontsize=9)
            ax.set_yscale("log" if log else "linear")
            ax.axvline(0, color="0.3", lw=0.8, ls=":")
        for ax in axes[1]:
            ax.set_xlabel("steps from the run's collapse onset")
        n = {v: sum(L.variant(r) == v for _, r in onset) for v in drawn - {L.LOG_ELU}}
        fig.suptitle("Aligned on each run's collapse onset (dotted line), block " + str(block) + ": "
                     + ", ".join(f"{k} {L.VARIANT_LABELS[v]} run{'s' * (k != 1)}" for v, k in sorted(n.items()))
                     + (", and log-ELU on the same seeds over the same steps" if partners else "")
                     + f"\nthin: each run, rolling median over {smooth} logged steps; bold: the median over runs"
                     + (f"; line style = rung: {STYLE_WORDS}" if several else ""), fontsize=9)
    else:
        for (rung, v), rs in sorted(cs.items()):
            for ax, (key, label, log) in zip(axes.flat, ONSET_PANELS):
                lines = []
                for r in rs:
                    xs, ys = _series(r, key, block)
                    if len(xs) > 2:
                        ys = rolling_median(ys, max(3, len(ys) // 20))
                        ax.plot(xs, ys, color=_color(v), lw=0.5, alpha=0.25, ls=RUNG_STYLES.get(rung, "-"))
                        lines.append((xs, ys))
                if lines:  # the median over seeds on the shortest common grid of steps
                    n = min(len(xs) for xs, _ in lines)
                    ax.plot(lines[0][0][:n], np.median([ys[:n] for _, ys in lines], axis=0), color=_color(v),
                            lw=1.6, ls=RUNG_STYLES.get(rung, "-"))
                ax.set_title(label, fontsize=9)
                ax.set_yscale("log" if log else "linear")
        for ax in axes.flat:
            if not ax.lines:
                ax.text(0.5, 0.5, "not logged by these runs", ha="center", va="center", transform=ax.transAxes,
                        color="0.5", fontsize=9)
                ax.set_yscale("linear")
                ax.set_xticks([])
                ax.set_yticks([])
        for ax in axes[1]:
            ax.set_xlabel("training step")
        fig.suptitle(f"No collapse onset in these runs: the precursors over training, block {block}, rolling medians "
                     f"(bold: median over seeds; line style = rung: {STYLE_WORDS})",
                     fontsize=9)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_color(v), lw=2, label=label) for v, label in L.VARIANT_LABELS.items()
               if v in drawn]
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
                   bbox_to_anchor=(0.5, -0.04))
    return fig


def window_figure(runs: Sequence[Mapping], block: int = 0, key: str = "attn_absorbed"):
    """The every-step windows: one row per run whose batch collapsed after a healthy stretch (the window training
    logs at every step, :func:`heavytail.studies.run_summary.onset_window`), aligned on that first collapsed batch
    (step 0). Colour: ``block``'s ``key`` at each step (by default the share of rows absorbed, largest weight
    exactly 1); a black tick marks each step whose batch collapsed. Rows are ordered by rung, variant and seed."""
    cs = L.ladder_cells(runs)
    order = {rung.name: i for i, rung in enumerate(L.RUNGS)}
    rows = sorted(((rung, r) for (rung, v), rs in cs.items() for r in rs
                   if (r.get("onset_window") or {}).get("center") is not None),
                  key=lambda t: (order.get(t[0], 99), list(L.VARIANT_LABELS).index(L.variant(t[1]))
                                 if L.variant(t[1]) in L.VARIANT_LABELS else 99, t[1].seed))
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.24 * max(1, len(rows))), constrained_layout=True)
    if not rows:
        ax.text(0.5, 0.5, "no run's batch collapsed after a healthy stretch", ha="center", va="center",
                transform=ax.transAxes, color="0.5")
        ax.axis("off")
        return fig
    offsets = []
    for _, r in rows:
        w = r["onset_window"]
        offsets += [s - w["center"] for s in w["step"]]
    lo, hi = min(offsets), max(offsets)
    grid = np.full((len(rows), hi - lo + 1), np.nan)
    ticks = []
    for i, (_, r) in enumerate(rows):
        w = r["onset_window"]
        xs, ys = _series(r, key, block, "onset_window")
        for x, y in zip(xs, ys):
            grid[i, x - w["center"] - lo] = y
        ticks += [(s - w["center"], i) for s, c in zip(w["step"], w.get("collapsed_fraction", []))
                  if isinstance(c, (int, float)) and c > 0.5]
    label = dict((k, t) for k, t, _ in ONSET_PANELS).get(key, key)
    im = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", interpolation="nearest", cmap="viridis",
                   extent=(lo - 0.5, hi + 0.5, len(rows) - 0.5, -0.5), vmin=0,
                   vmax=1 if key == "attn_absorbed" else None)
    if ticks:
        ax.scatter(*zip(*ticks), marker="|", s=40, color="k", lw=1.2)
    ax.set_yticks(range(len(rows)), [f"{rung} {L.VARIANT_LABELS.get(L.variant(r), '/'.join(L.variant(r)))}, seed "
                                     f"{r['config']['seed']}" for rung, r in rows], fontsize=7)
    ax.axvline(0, color="w", lw=0.8, ls=":")
    ax.set_xlabel("steps from the first collapsed batch after a healthy stretch (every step logged)")
    fig.colorbar(im, ax=ax, label=f"block {block}: {label}", fraction=0.03, pad=0.01)
    ax.set_title("The every-step windows: each row one run, aligned on its first collapsed batch after a healthy "
                 "stretch (black ticks: steps whose batch collapsed; blank: not logged)", fontsize=9)
    return fig


def loss_figure(runs: Sequence[Mapping]):
    """Fig. 13 beside ours, rung by rung: each seed's training loss (rolling median of its regularly logged steps),
    softmax and log-ELU, on log axes; dotted, the step at which the paper's softmax diverged (with symlog on R4)."""
    from heavytail.studies.collapse import tables56 as T
    from heavytail.studies.paper_numbers import PAPER_ONSET

    cs = L.ladder_cells(runs)
    rungs = [r for r in L.RUNGS if any(k[0] == r.name for k in cs)]
    fig, axes = plt.subplots(1, max(1, len(rungs)), figsize=(3.6 * max(1, len(rungs)), 3.4), sharey=True,
                             squeeze=False, constrained_layout=True)
    for ax, rung in zip(axes[0], rungs):
        for v in (L.SOFTMAX_SDPA, L.LOG_ELU):
            for i, run in enumerate(cs.get((rung.name, v), [])):
                steps, loss = T.regular_rows(run["trace"], run.log_every)
                if len(steps):
                    ax.plot(steps, T.rolling_median(loss), color=_color(v), lw=0.9, alpha=0.75,
                            label=L.VARIANT_LABELS[v] if i == 0 else None)
        symlog = any(r.symlog for v in (L.SOFTMAX_SDPA,) for r in cs.get((rung.name, v), []))
        ax.axvline(PAPER_ONSET[symlog], color="k", ls=":", lw=1)
        ax.set_yscale("log")
        ax.set_title(f"{rung.name}: {rung.short}", fontsize=9)
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("training loss (rolling median)")
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Training loss per rung, one line per seed; dotted: the paper's softmax divergence (Fig. 13: step "
                 f"~{PAPER_ONSET[False]:,}, ~{PAPER_ONSET[True]:,} with symlog)", fontsize=9)
    return fig
