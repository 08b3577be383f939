"""Figures of the kernel-gap study (heavytail.studies.kernel_gap): the gap against N, the numerics behind it, and
the collapse precursors over training (App. I). Each function takes run summaries and returns a figure."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from heavytail.studies import kernel_gap as G

_JITTER = 0.035  # seeds side by side on the log-N axis


def _seed_offsets(n_seeds: int) -> np.ndarray:
    return (np.arange(n_seeds) - (n_seeds - 1) / 2) * _JITTER


def _draw_cells(ax, cs, style: str, offset: float = 0.0) -> None:
    for v in G.variants(cs):
        ns = [n for n in G.sizes(cs) if (v, n) in cs]
        color = G.variant_color(v)
        ax.plot(ns, [cs[(v, n)].median_ratio for n in ns], style, color=color, lw=1.8)
        for n in ns:
            c = cs[(v, n)]
            xs = n * 10 ** (_seed_offsets(len(c.runs)) + offset)
            lo = [r["median"]["ratio"] - r["median"]["low"] for r in c.runs]
            hi = [r["median"]["high"] - r["median"]["ratio"] for r in c.runs]
            ax.errorbar(xs, c.ratios, yerr=[lo, hi], fmt="o" if style == "-" else "s", ms=3.5, color=color,
                        mfc=color if style == "-" else "white", elinewidth=0.8, capsize=1.5, alpha=0.85, lw=0)


def _legend(fig, variants, sources) -> None:
    """One legend under both panels: colour = variant, line style = source, star = the paper."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=G.variant_color(v), lw=2.5, label=G.variant_name(v)) for v in variants]
    handles += [Line2D([], [], color="0.3", ls=style, marker="o" if style == "-" else "s",
                       mfc="0.3" if style == "-" else "white", label=label) for style, label in sources]
    handles.append(Line2D([], [], color="w", marker="*", mfc="0.5", mec="k", ms=12,
                          label="paper, N = 16384 (Table 5)"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.01))


def gap_figure(own: Sequence[Mapping], shipped: Sequence[Mapping] = (), shipped_label: str = "shipped map"):
    """(a) each variant's median ratio to the floor against training N, seeds as points with their eq. 37
    bootstrap intervals and the median over seeds as a line; (b) softmax over log-ELU per seed (same data
    streams), through SDPA and through exact float32 attention. The paper's N = 16384 is marked."""
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(13, 5.2))
    sources = []
    if own:
        sources.append((G.cells(own), "-", "this report (filled, solid)", 0.0))
    if shipped:
        sources.append((G.cells(shipped), "--", f"{shipped_label} (open, dashed)", 0.012))
    all_n, all_v = set(), set()
    for cs, style, _, off in sources:
        all_n |= set(G.sizes(cs))
        all_v |= set(G.variants(cs))
        _draw_cells(ax_a, cs, style, off)
        for v in (G.SOFTMAX_SDPA, G.SOFTMAX_EXACT):
            ns = [n for n in G.sizes(cs) if G.paired_ratio(cs, v, G.LOG_ELU, n)]
            if not ns:
                continue
            pairs = [G.paired_ratio(cs, v, G.LOG_ELU, n) for n in ns]
            ax_b.plot(ns, [G._median(list(p.values())) for p in pairs], style, color=G.variant_color(v), lw=1.8)
            for n, p in zip(ns, pairs):
                xs = n * 10 ** (_seed_offsets(len(p)) + off)
                ax_b.plot(xs, list(p.values()), "o" if style == "-" else "s", ms=4, color=G.variant_color(v),
                          mfc=G.variant_color(v) if style == "-" else "white", alpha=0.85)
    for kernel, value in G.PAPER_POINTS.items():
        if value is not None and any(v[0] == kernel for v in all_v):
            ax_a.plot([G.PAPER_N], [value], "*", ms=13, color=G.variant_color((kernel, "auto")), mec="k", mew=0.6)
    ax_b.axhline(1.0, color="k", lw=0.8, ls=":")
    for ax in (ax_a, ax_b):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("training ensemble size N")
        ax.grid(alpha=0.3, which="both")
        ax.set_xlim(min(all_n | {256}) / 1.6, G.PAPER_N * 1.6)
    # Softmax collapsed at the paper's N, so its ratio over log-ELU has no finite value: an arrow off the top.
    for ax in (ax_a, ax_b):
        ax.annotate("paper: softmax\ncollapsed", xy=(G.PAPER_N, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(G.PAPER_N, 0.80), textcoords=("data", "axes fraction"), ha="center", fontsize=8,
                    color="tab:red", arrowprops=dict(arrowstyle="->", color="tab:red", lw=1.2))
    ax_a.set_ylabel("median energy distance / floor (eq. 36)")
    ax_a.set_title("(a) each variant's ratio to the sampling floor", fontsize=10)
    ax_b.set_ylabel("softmax ratio / log-ELU ratio, per seed")
    ax_b.set_title("(b) the softmax / log-ELU gap (> 1: softmax worse)", fontsize=10)
    _legend(fig, sorted(all_v, key=G._order), [(style, label) for _, style, label, _ in sources])
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def numerics_figure(runs: Sequence[Mapping], title: str = ""):
    """(a) steps skipped for a non-finite gradient per run, (b) the largest block-0 |S| of eq. 1 seen in
    training, against N: what breaks a flash-style softmax backward (|S| ~ 1e8, see heavytail.science.attention)."""
    cs = G.cells(runs)
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(12, 3.8))
    for i, v in enumerate(G.variants(cs)):
        color = G.variant_color(v)
        for n in G.sizes(cs):
            if (v, n) not in cs:
                continue
            c = cs[(v, n)]
            xs = n * 10 ** (_seed_offsets(len(c.runs)) + (i - 1.5) * 0.02)
            ax_a.plot(xs, c.skipped, "o", color=color, ms=4,
                      label=G.variant_name(v) if n == min(m for w, m in cs if w == v) else None)
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


PRECURSORS = (("loss", "training loss (eq. 10)", True), ("block0.max_abs_score", "block-0 largest |S|", True),
              ("block0.attn_entropy_ratio", "block-0 entropy / log N", False),
              ("block0.attn_max_weight", "block-0 largest weight per row", False),
              ("block0.qk_spectral_norm", "block-0 ||W_Q W_K^T|| / sqrt(d)", True),
              ("block0.grad_norm", "block-0 gradient norm", True))


def precursor_figure(runs: Sequence[Mapping], n_points: int):
    """The collapse precursors logged at every logged step (App. I) for the runs at training N ``n_points``,
    one line per run, coloured by variant; a cross marks the onset of each run whose training batch ended
    collapsed (heavytail.science.collapse.collapse_onset)."""
    chosen = [r for r in runs if r["config"]["n_points"] == n_points and r.get("trace", {}).get("step")]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6), sharex=True)
    seen = set()
    for r in chosen:
        v = G.variant(r["config"])
        steps = np.asarray(r["trace"]["step"], dtype=float)
        onset = r["collapse"]["onset"]
        for ax, (key, label, log) in zip(axes.flat, PRECURSORS):
            ys = np.asarray([np.nan if y is None else y for y in r["trace"].get(key, [])], dtype=float)
            if ys.size != steps.size:
                continue
            ax.plot(steps, ys, color=G.variant_color(v), lw=0.9, alpha=0.8,
                    label=G.variant_name(v) if v not in seen else None)
            if onset is not None and onset in steps:
                i = int(np.flatnonzero(steps == onset)[0])
                ax.plot([onset], [ys[i]], "kx", ms=7, mew=1.5)
            ax.set_title(label, fontsize=9)
            if log:
                ax.set_yscale("log")
        seen.add(v)
    for ax in axes[-1]:
        ax.set_xlabel("training step (x: collapse onset of the training batch)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"Collapse precursors at N = {n_points} (every seed; App. I)", fontsize=10)
    fig.tight_layout()
    return fig
