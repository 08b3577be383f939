"""Figures of the phase-diagram study (heavytail.studies.phase.moment_condition, heavytail.studies.phase.diagram)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from heavytail.names import KERNEL_COLORS, KERNEL_ROWS, kernel_label
from heavytail.studies import claims as C
import heavytail.studies.phase.diagram as P

_Q_INF = 4.5  # where softmax (q = infinity) is drawn on a q axis


def _q_pos(q: float) -> float:
    return _Q_INF if math.isinf(q) else q


def static_figure(rows: Sequence[Mapping[str, Any]], ns: Sequence[int], norms: Mapping[float, Mapping[str, np.ndarray]]):
    """(a) the median |o_N| over repetitions against N per kernel, one panel per tail index a; (b) measured
    growth exponent (95 % bootstrap interval) against App. A's prediction, one point per (kernel, a)."""
    tails = sorted({r["a"] for r in rows})
    fig = plt.figure(figsize=(4.2 * len(tails) + 4.6, 4.2))
    grid = fig.add_gridspec(1, len(tails) + 1, width_ratios=[1] * len(tails) + [1.15])
    for i, a in enumerate(tails):
        ax = fig.add_subplot(grid[0, i])
        for name, block in norms[a].items():
            ax.plot(ns, np.median(block, axis=0), "o-", ms=3, color=KERNEL_COLORS[name], label=kernel_label(name))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N keys")
        ax.set_title(f"tail index a = {a:g}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        if i == 0:
            ax.set_ylabel("median |attention output| over repetitions")
    fig.axes[0].legend(fontsize=6, loc="upper left")
    ax = fig.add_subplot(grid[0, -1])
    for r in rows:
        ax.errorbar([r["predicted"]], [r["measured"]], yerr=[[r["measured"] - r["low"]], [r["high"] - r["measured"]]],
                    fmt="o" if r["holds"] else "x", color=KERNEL_COLORS[r["kernel"]], ms=5, capsize=2)
    _identity_panel(ax, max(max(r["high"] for r in rows), max(r["predicted"] for r in rows)),
                    "predicted exponent (App. A, order statistics)", "measured exponent, 95 % interval",
                    "(b) o: interval holds the prediction, x: it does not")
    fig.tight_layout()
    return fig


def _identity_panel(ax, top: float, xlabel: str, ylabel: str, title: str, margin: float | None = None) -> None:
    """Finish a measured-against-predicted panel: the identity line up to ``top`` (+0.05), the +-``margin`` band
    around it when given, labels, title and grid."""
    top += 0.05
    ax.plot([0, top], [0, top], "k:", lw=0.8)
    if margin is not None:
        ax.fill_between([0, top], [-margin, top - margin], [margin, top + margin], color="0.9", zorder=-1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)


def phase_figure(rows: Sequence[Mapping[str, Any]], what: str = "ratio to the floor"):
    """Each (kernel, regime) cell on the (q, a) plane: a bar spanning the regime's heavier-axis tail indices,
    coloured by the measured change of the ratio per doubling of N, outlined by the verdict; the line
    q + 1 = a separates where App. A's condition holds (above) from where it fails."""
    fig, ax = plt.subplots(figsize=(8, 5))
    cmap = plt.get_cmap("coolwarm")
    norm = plt.Normalize(1 / 1.6, 1.6)
    for r in rows:
        x = _q_pos(r["q"])
        value = r["per doubling"] if math.isfinite(r["per doubling"]) else 1.0
        ax.plot([x, x], [r["a_lo"], r["a_hi"]], lw=12, solid_capstyle="butt", color=cmap(norm(value)))
        ax.plot([x, x], [r["a_lo"], r["a_hi"]], lw=14, solid_capstyle="butt", zorder=0,
                color=C.VERDICT_COLORS[r["verdict"]])
        ax.annotate(f"x{C.fmt(r['per doubling'], 2)}\n{r['seeds']} seeds", (x + 0.08, (r["a_lo"] + r["a_hi"]) / 2),
                    fontsize=6, va="center")
    qs = np.linspace(-0.2, _Q_INF - 0.5, 50)
    ax.plot(qs, qs + 1, "k--", lw=1, label="q + 1 = a (App. A's condition: holds above)")
    ax.fill_between(qs, 0, qs + 1, color="0.92", zorder=-1, label="condition fails: growth predicted")
    kernels = sorted({r["kernel"] for r in rows}, key=lambda k: KERNEL_ROWS[k].order)
    ax.set_xticks([_q_pos(KERNEL_ROWS[k].order) for k in kernels], [f"{k}\nq={KERNEL_ROWS[k].order:g}" for k in kernels],
                  fontsize=7)
    ax.set_ylabel("tail index a of the heavier latent axis")
    ax.set_ylim(0.8, max((r["a_hi"] for r in rows), default=6) + 0.5)
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax, label=f"{what}, change per doubling of N")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("Outline: verdict of the growth rule (green grows, red bounded, amber undecided)", fontsize=9)
    fig.tight_layout()
    return fig


def curves_figure(runs: Sequence[Mapping[str, Any]]):
    """Per tail regime, each kernel's median ratio to the floor (at the training N) against N, seeds as dots."""
    by = P.cells(runs)
    regimes = sorted({reg for _, reg in by})
    fig, axes = plt.subplots(1, max(1, len(regimes)), figsize=(5 * max(1, len(regimes)), 4), sharey=True,
                             squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        for (kernel, reg), seeds in sorted(by.items(), key=lambda kv: KERNEL_ROWS[kv[0][0]].order):
            if reg != regime:
                continue
            ns = sorted({n for row in seeds.values() for n in row})
            med = [float(np.exp(np.median([row[n] for row in seeds.values() if n in row]))) for n in ns]
            ax.plot(ns, med, "o-", color=KERNEL_COLORS[kernel], label=kernel_label(kernel), ms=4)
            for row in seeds.values():
                ax.plot(list(row), np.exp(list(row.values())), ".", color=KERNEL_COLORS[kernel], alpha=0.4)
        lo, hi = P.heavier_range(regime)
        ax.set_title(f"{regime}: heavier axis a in [{lo:.3g}, {hi:.3g}]", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("training N")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("median ratio to the floor (eq. 36) at the training N")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    return fig


def hill_plot_figure(run_dirs: Mapping[str, Any], n_points: int | None = None, seed: int = 0):
    """Hill plots (eq. 38 at every k, App. J's thresholds) of one evaluation trial per run: for each latent axis,
    the model output's Hill estimate against k with its asymptotic 95 % band a_hat (1 +- 1.96/sqrt k), the
    same for an i.i.d. target ensemble of equal size, and the trial's known tail index as a line.
    ``run_dirs``: {label: finished run folder}."""
    import torch

    from heavytail.harness.evaluate import band_k_range
    from heavytail.harness.build import build_benchmark
    from heavytail.harness.checkpoints import load_model
    from heavytail.science.metrics import hill_path

    fig, axes = plt.subplots(len(run_dirs), 2, figsize=(11, 3.2 * len(run_dirs)), squeeze=False)
    for row, (label, run_dir) in enumerate(run_dirs.items()):
        model, cfg = load_model(run_dir)
        n = n_points or cfg.eval_n_points
        bench = build_benchmark(cfg)
        gen = torch.Generator().manual_seed(seed)
        trials = bench.sample_trials(1, generator=gen)
        x, y = bench.sample_inputs(trials, n, generator=gen), bench.sample_targets(trials, n, generator=gen)
        with torch.no_grad():
            out = model(x).double()
        to_latent = trials.output_to_latent.double()
        k_lo, k_hi = band_k_range(n)
        k = np.arange(1, k_hi + 1)
        for axis in (0, 1):
            ax = axes[row][axis]
            for ens, name, color in ((out, "model output", "tab:red"), (y.double(), "i.i.d. target", "0.4")):
                z = (ens @ to_latent.transpose(-1, -2))[0, :, axis]
                path = hill_path(z, k_hi).numpy()
                half = 1.96 / np.sqrt(k)
                ax.plot(k, path, color=color, lw=1.2, label=name)
                ax.fill_between(k, path * (1 - half), path * (1 + half), color=color, alpha=0.15)
            a_true = float(trials.marginal_params[0, axis])
            ax.axhline(a_true, color="k", ls="--", lw=1, label=f"known index a = {a_true:.2f}")
            ax.axvspan(k_lo, k_hi, color="tab:blue", alpha=0.05, label="k range of the band summary")
            ax.set_xscale("log")
            ax.set_ylim(0, max(4 * a_true, 1))
            ax.set_title(f"{label}: latent axis {axis}", fontsize=9)
            ax.set_xlabel("k (upper order statistics)")
            ax.set_ylabel("Hill estimate (eq. 38)")
            ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def reference_figure(rows: Sequence[Mapping[str, Any]], margin: float = P.STATIC_MARGIN):
    """The shipped static reference: (a) each (kernel, a) cell's measured minus predicted exponent against a,
    with its Bonferroni interval (the claim's) and the +-``margin`` band; (b) measured against predicted."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.6), gridspec_kw={"width_ratios": [1.6, 1]})
    kernels = sorted({r["kernel"] for r in rows}, key=lambda k: KERNEL_ROWS[k].order)
    for i, k in enumerate(kernels):
        sub = [r for r in rows if r["kernel"] == k]
        x = np.array([r["a"] for r in sub]) + 0.03 * (i - len(kernels) / 2)
        d = np.array([r["measured"] - r["predicted"] for r in sub])
        lo = np.array([r["measured"] - r["joint_low"] for r in sub])
        hi = np.array([r["joint_high"] - r["measured"] for r in sub])
        ax.errorbar(x, d, yerr=[lo, hi], fmt="o", ms=3, capsize=2, color=KERNEL_COLORS[k], label=kernel_label(k))
        bx.errorbar([r["predicted"] for r in sub], [r["measured"] for r in sub], yerr=[lo, hi], fmt="o", ms=3,
                    capsize=2, color=KERNEL_COLORS[k])
    ax.axhspan(-margin, margin, color="0.9", zorder=-1, label=f"+-{margin:g}: the claim's tolerance")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("tail index a of the tokens")
    ax.set_ylabel("measured - predicted exponent (Bonferroni interval)")
    ax.set_title("(a) each cell against App. A's prediction", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    ax.grid(alpha=0.3)
    _identity_panel(bx, max(max(r["joint_high"] for r in rows), max(r["predicted"] for r in rows)),
                    "predicted exponent", "measured exponent", "(b) measured against predicted", margin)
    fig.tight_layout()
    return fig


def fixed_weight_figure(results: Sequence[Mapping[str, Any]]):
    """Trained models at their weights (heavytail.studies.phase.fixed_weight): (a) block 0's attention-output
    exponent (95 % interval) against App. A's prediction, one point per (run, heavier-axis a); (b) the Hill
    estimate of the tokens entering each block (median over ensembles, eq. 38's band), the input's a dashed."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.4))
    labels = []
    for i, r in enumerate(results):
        color = KERNEL_COLORS[r["kernel"]]
        for j, at in enumerate(r["at"]):
            marker = "o" if j == 0 else "s"
            ax.errorbar([at["predicted"]], [at["measured"]], yerr=[[at["measured"] - at["low"]],
                                                                   [at["high"] - at["measured"]]],
                        fmt=marker, color=color, ms=5, capsize=2)
            x = i + 0.3 * j
            for h in at["hill"]:
                bx.errorbar([x + 0.1 * h["block"]], [h["median"]], yerr=[[h["median"] - h["band_low"]],
                                                                         [h["band_high"] - h["median"]]],
                            fmt=marker, color=color, mfc="white" if h["block"] else color, ms=5, capsize=2)
            bx.plot([x - 0.05, x + 0.15], [at["a"]] * 2, "k--", lw=0.8)
        labels.append(f"{r['kernel']}\n{r['tail_regime']}")
    _identity_panel(ax, max(max(at["high"] for r in results for at in r["at"]),
                            max(at["predicted"] for r in results for at in r["at"])),
                    "App. A's predicted exponent at the ensemble's heavier-axis a",
                    "block 0's measured exponent at trained weights",
                    "(a) o: the regime's smallest a, s: its largest; colour: kernel", P.STATIC_MARGIN)
    bx.set_yscale("log")
    bx.set_xticks(range(len(results)), labels, fontsize=7)
    bx.set_ylabel("Hill estimate of |token| (eq. 38, k = 0.1 N)")
    bx.set_title("(b) filled: tokens entering block 0, open: block 1 (after LayerNorm); dashed: input a", fontsize=9)
    bx.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
