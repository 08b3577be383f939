"""Figures of the kernel-gap study (heavytail.studies.core): the gap against N, the numerics behind it, and
the collapse precursors over training (App. I). Each function takes run summaries and returns a figure."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, NullFormatter
import numpy as np

from heavytail.names import KERNELS
import heavytail.studies.core as G
from heavytail.studies.run_record import records

_JITTER = 0.035  # seeds side by side on the log-N axis


def _seed_offsets(n_seeds: int) -> np.ndarray:
    return (np.arange(n_seeds) - (n_seeds - 1) / 2) * _JITTER


def _draw_cells(ax, cs, style: str, offset: float = 0.0, at: str = "common") -> None:
    for v in G.variants(cs):
        ns = [n for n in G.sizes(cs) if (v, n) in cs]
        color = G.variant_color(v)
        ax.plot(ns, [G._median(cs[(v, n)].ratios_at(at)) for n in ns], style, color=color, lw=1.8)
        for n in ns:
            c = cs[(v, n)]
            xs = n * 10 ** (_seed_offsets(len(c.runs)) + offset)
            stats = [G.interval_at(r, at) for r in c.runs]
            lo = [m - lo_ for m, lo_, _ in stats]
            hi = [hi_ - m for m, _, hi_ in stats]
            ax.errorbar(xs, [m for m, _, _ in stats], yerr=[lo, hi], fmt="o" if style == "-" else "s", ms=3.5, color=color,
                        mfc=color if style == "-" else "white", elinewidth=0.8, capsize=1.5, alpha=0.85, lw=0)


def _cell_points(cs, centre: float):
    """Per (variant, N) cell: (variant, cell, x positions of its seeds, colour, first N of the variant), the
    variants side by side around each N so that their seeds do not overlap."""
    for i, v in enumerate(G.variants(cs)):
        first_n = min(m for w, m in cs if w == v)
        for n in G.sizes(cs):
            if (v, n) in cs:
                c = cs[(v, n)]
                yield v, c, n * 10 ** (_seed_offsets(len(c.runs)) + (i - centre) * 0.02), G.variant_color(v), n == first_n


def _legend(fig, variants, sources) -> None:
    """One legend under both panels: colour = variant, line style = source, star = the paper."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=G.variant_color(v), lw=2.5, label=G.variant_name(v)) for v in variants]
    handles += [Line2D([], [], color="0.3", ls=style, marker="o" if style == "-" else "s",
                       mfc="0.3" if style == "-" else "white", label=label) for style, label in sources]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.01))


def _paper_points() -> dict[str, str | dict]:
    """Table 5's median ratios (sheared swap, mirrored Pareto, post-norm, no symlog), as the paper prints them."""
    from heavytail.studies.paper_numbers import paper_value

    out = {}
    for k in KERNELS:
        try:
            out[k] = paper_value("sheared_swap", "mirrored_pareto", "post", k, False, "median")
        except (KeyError, ValueError, IndexError):
            continue  # a kernel the paper did not train
    return out


def gap_figure(own: Sequence[Mapping], shipped: Sequence[Mapping] = (), shipped_label: str = "shipped map",
               at: str = "common"):
    """(a) each variant's median ratio to the floor against training N, seeds as points with their eq. 37
    bootstrap intervals and the median over seeds as a line; (b) softmax over log-ELU per seed (same data
    streams), through SDPA and through exact float32 attention; (c) the paper's Table 5 values at its own
    scale, in a panel of their own: N = 16384 with 50,000 steps and D = 256 is not a point on our curves."""
    fig, (ax_a, ax_b, ax_c) = plt.subplots(1, 3, figsize=(14, 5.2), gridspec_kw={"width_ratios": [5, 5, 1.3]})
    sources = []
    if own:
        sources.append((G.cells(own), "-", "this report (filled, solid)", 0.0))
    if shipped:
        sources.append((G.cells(shipped), "--", f"{shipped_label} (open, dashed)", 0.012))
    all_n, all_v = set(), set()
    for cs, style, _, off in sources:
        all_n |= set(G.sizes(cs))
        all_v |= set(G.variants(cs))
        _draw_cells(ax_a, cs, style, off, at)
        for v in (G.SOFTMAX_SDPA, G.SOFTMAX_EXACT):
            ns = [n for n in G.sizes(cs) if G.paired_ratio(cs, v, G.LOG_ELU, n, at)]
            if not ns:
                continue
            pairs = [G.paired_ratio(cs, v, G.LOG_ELU, n, at) for n in ns]
            ax_b.plot(ns, [G._median(list(p.values())) for p in pairs], style, color=G.variant_color(v), lw=1.8)
            for n, p in zip(ns, pairs):
                xs = n * 10 ** (_seed_offsets(len(p)) + off)
                ax_b.plot(xs, list(p.values()), "o" if style == "-" else "s", ms=4, color=G.variant_color(v),
                          mfc=G.variant_color(v) if style == "-" else "white", alpha=0.85)
    ax_b.axhline(1.0, color="k", lw=0.8, ls=":")
    for ax in (ax_a, ax_b):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("training ensemble size N")
        ax.grid(alpha=0.3, which="both")
        if all_n:
            ax.set_xlim(min(all_n) / 1.6, max(all_n) * 1.6)
    where = "the common evaluation N" if at == "common" else "each run's training N"
    ax_a.set_ylabel(f"median energy distance / floor (eq. 36), at {where}")
    ax_a.set_title("(a) each variant's ratio to the sampling floor", fontsize=10)
    ax_b.set_ylabel("softmax ratio / log-ELU ratio, per seed")
    ax_b.set_title("(b) the softmax / log-ELU gap (> 1: softmax worse)", fontsize=10)
    paper = _paper_points()
    for kernel, value in paper.items():
        text = value["text"] if isinstance(value, dict) else value
        color = G.variant_color((kernel, "auto"))
        if text == "collapse":
            ax_c.annotate("collapsed", xy=(0, 1), xycoords=("data", "axes fraction"), xytext=(0, 0.9),
                          textcoords=("data", "axes fraction"), ha="center", color=color, fontsize=8,
                          arrowprops=dict(arrowstyle="->", color=color))
        else:
            ax_c.plot([0], [float(text)], "*", ms=12, color=color, mec="k", mew=0.6)
            ax_c.annotate(f"{kernel} {text}", (0.08, float(text)), fontsize=7, va="center")
    ax_c.set_xlim(-0.5, 1.5)
    ax_c.set_xticks([])
    ax_c.set_yscale("log")
    ax_c.set_ylim(0.8, 2.0)
    ax_c.set_title("(c) the paper, Table 5:\nN = 16384, 50,000 steps,\nD = 256, 6 blocks", fontsize=8)
    _legend(fig, sorted(all_v, key=G._order), [(style, label) for _, style, label, _ in sources])
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def growth_figure(runs: Sequence[Mapping], at: str = "common"):
    """Per seed, how much each variant's gap to log-ELU changes per doubling of N (the statistic of
    :func:`heavytail.studies.claims.growth_rule`), with the mean over seeds and its 95 % t interval."""
    from heavytail.studies import claims as C
    from heavytail.studies.kernel_gap.claims import growth

    cs = G.cells(runs)
    rows = [v for v in G.variants(cs) if v != G.LOG_ELU]
    fig, ax = plt.subplots(figsize=(8, 0.7 + 0.65 * max(1, len(rows))))
    for i, v in enumerate(rows):
        d, slopes = growth(cs, v, G.LOG_ELU, at)
        if not slopes:
            continue
        ys = i + _seed_offsets(len(slopes)) * 4
        ax.plot(np.exp(list(slopes.values())), ys, "o", ms=4, color=G.variant_color(v), alpha=0.6)
        e = d.estimate
        if e is not None and e.n > 1:
            ax.errorbar([math.exp(e.estimate)], [i], xerr=[[math.exp(e.estimate) - math.exp(e.low)],
                                                          [math.exp(e.high) - math.exp(e.estimate)]],
                        fmt="D", color="k", ms=6, capsize=4, lw=1.5)
        ax.annotate(d.verdict, (1.0, i + 0.3), xycoords=("axes fraction", "data"), ha="right", fontsize=8,
                    color=C.VERDICT_COLORS[d.verdict])
    ax.axvline(1.0, color="k", lw=0.8, ls=":")
    ax.axvspan(1 / math.exp(C.GROWTH_MARGIN), math.exp(C.GROWTH_MARGIN), color="0.85", zorder=0,
               label=f"no growth of practical size (< x{math.exp(C.GROWTH_MARGIN):.2f} per doubling)")
    ax.set_yticks(range(len(rows)), [G.variant_name(v) + " / log-ELU" for v in rows], fontsize=8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"x{v:.3g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("change of the gap per doubling of N (dots: seeds; diamond: mean, 95 % t interval)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, axis="x", which="both")
    fig.tight_layout()
    return fig


def collapse_figure(runs: Sequence[Mapping]):
    """Collapse as a graded outcome against N: (a) the share of evaluation trials whose output collapsed, at
    each run's training N; (b) the share of logged training steps whose batch collapsed. One point per seed."""
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(12, 3.8))
    for v, c, xs, color, first in _cell_points(G.cells(runs), 2):
        ax_a.plot(xs, c.collapsed_fraction("train"), "o", color=color, ms=4, alpha=0.8,
                  label=G.variant_name(v) if first else None)
        ax_b.plot(xs, c.collapsed_steps(), "o", color=color, ms=4, alpha=0.8)
    for ax in (ax_a, ax_b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training ensemble size N")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    ax_a.set_ylabel("share of evaluation trials collapsed")
    ax_b.set_ylabel("share of logged steps with a collapsed batch")
    ax_a.set_title("(a) evaluation at the training N", fontsize=10)
    ax_b.set_title("(b) over training", fontsize=10)
    ax_a.legend(fontsize=7)
    fig.tight_layout()
    return fig


def windowed_share(steps: Sequence[int], fractions: Sequence[float | None], window: int) -> tuple[list, list]:
    """Share of logged steps whose batch was collapsed (fraction >= 0.5, as :func:`G.collapsed_steps` counts)
    in consecutive windows of ``window`` training steps: (window centres, shares; NaN where nothing logged)."""
    centres, shares = [], []
    for lo in range(0, max(steps, default=0), window):
        hits = [f >= 0.5 for s, f in zip(steps, fractions)
                if lo < s <= lo + window and f is not None and math.isfinite(f)]
        centres.append(lo + window / 2)
        shares.append(sum(hits) / len(hits) if hits else math.nan)
    return centres, shares


def long_figure(runs: Sequence[Mapping], window: int = 250):
    """Softmax for longer, one column per learning rate. Top: the share of logged training steps whose batch
    was collapsed, per window of ``window`` steps (thin: each seed; thick: the mean over seeds). Bottom: the
    collapse precursor, block 0's largest |S| of eq. 1 in the logged batch (each seed), with |S| ~ 1e8 where a
    flash-style softmax backward loses every digit."""
    from heavytail.science.collapse import rolling_median

    runs = records(runs)
    lrs = sorted({r.lr for r in runs})
    ncol = max(1, len(lrs))
    fig, axes = plt.subplots(2, ncol, figsize=(6 * ncol, 6.4), sharex=True, squeeze=False)
    seen = set()
    for col, lr in enumerate(lrs):
        top, bottom = axes[0][col], axes[1][col]
        by_variant: dict = {}
        for r in (r for r in runs if r.lr == lr):
            by_variant.setdefault(G.variant(r), []).append(r)
        for v, group in by_variant.items():
            color, curves = G.variant_color(v), []
            for r in group:
                steps = r["trace"]["step"]
                xs, share = windowed_share(steps, r["trace"]["collapsed_fraction"], window)
                curves.append(share)
                top.plot(xs, share, color=color, lw=0.6, alpha=0.45)
                score = [math.nan if x is None else x for x in r["trace"].get("block0.max_abs_score", [])]
                if score:  # a rolling median over 5 logged steps: single batches swing by decades
                    bottom.plot(steps, rolling_median(score, 5), color=color, lw=0.8, alpha=0.7)
            if curves and all(len(c) == len(curves[0]) for c in curves):
                mean = np.nanmean(np.array(curves, dtype=float), axis=0)
                top.plot(xs, mean, color=color, lw=2.2,
                         label=f"{G.variant_name(v)} ({len(group)} seed{'s' if len(group) > 1 else ''})" if (v, lr) not in seen else None)
                seen.add((v, lr))
        top.set_title(f"lr {lr:g}", fontsize=10)
        top.set_ylim(-0.03, 1.03)
        bottom.set_yscale("log")
        bottom.axhline(1e8, color="k", ls=":", lw=0.8)
        bottom.set_xlabel("training step")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
        top.legend(fontsize=7, loc="upper left")
    axes[0][0].set_ylabel(f"collapsed share of logged steps\n(per {window} steps)")
    axes[1][0].set_ylabel("block-0 largest |S| (eq. 1)\n(rolling median of 5 logged steps)")
    fig.tight_layout()
    return fig


def numerics_figure(runs: Sequence[Mapping], title: str = ""):
    """(a) steps skipped for a non-finite gradient per run, (b) the largest block-0 |S| of eq. 1 seen in
    training, against N: what breaks a flash-style softmax backward (|S| ~ 1e8, see heavytail.science.attention)."""
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(12, 3.8))
    for v, c, xs, color, first in _cell_points(G.cells(runs), 1.5):
        ax_a.plot(xs, c.skipped, "o", color=color, ms=4, label=G.variant_name(v) if first else None)
        ax_b.plot(xs, [r["blocks"][0]["max_abs_score"] if r["blocks"] else math.nan for r in c.runs], "o",
                  color=color, ms=4)
    ax_b.axhline(1e8, color="k", ls=":", lw=0.8)
    ax_b.annotate("|S| ~ 1e8: flash-style softmax gradients lose every digit", xy=(0.02, 1.4e8),
                  xycoords=("axes fraction", "data"), fontsize=7)
    for ax in (ax_a, ax_b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training ensemble size N")
        ax.grid(alpha=0.3)
    ax_b.set_yscale("log")
    ax_a.set_ylabel("skipped steps (non-finite gradient)")
    ax_b.set_ylabel("largest block-0 |S| in training")
    ax_a.set_title("(a) steps skipped per run", fontsize=10)
    ax_b.set_title("(b) block 0 sees the raw heavy-tailed inputs", fontsize=10)
    ax_a.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
