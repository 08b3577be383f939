"""Figures of notebook 05 (heavytail.studies.collapse.numerics): the grid's training curves with their collapse
onsets (App. I, Figure 13) and a collapsed output next to a healthy one (Figure 12)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from heavytail.names import KERNEL_COLORS
from heavytail.studies.curves import training_curve
from heavytail.studies.collapse.numerics import Curve

CURVE_WINDOW = 15  # logged steps in Figure 13's rolling median


def figure13(curves: Sequence[Curve]):
    """Per-step loss (faint) and its rolling median (heavy) per kernel, without and with symlog; a dot marks each
    run's collapse onset."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
    for ax, transform in zip(axes, (False, True)):
        for c in (c for c in curves if c.symlog == transform):
            color = KERNEL_COLORS[c.kernel]
            training_curve(ax, c.steps, c.loss, color=color, window=CURVE_WINDOW, label=c.kernel)
            if c.onset is not None:
                ax.plot([c.onset], [np.nanmax(c.loss)], "o", color=color)
        ax.set_yscale("log")  # also on a panel with no run
        ax.set_xlabel("step")
        ax.set_title(f"post-norm, {'symlog' if transform else 'no transform'}")
        if not any(c.symlog == transform for c in curves):
            ax.text(0.5, 0.5, "no run", transform=ax.transAxes, ha="center", color="0.5")
    axes[0].set_ylabel("training loss (energy distance, eq. 10)")
    labelled = next((ax for ax in axes if ax.get_legend_handles_labels()[0]), None)
    if labelled is not None:
        labelled.legend()
    fig.tight_layout()
    return fig


def figure12(panels: Mapping[str, Any]):
    """The target, the softmax model's output and the log-ELU model's on one evaluation instance, symmetric-log
    axes as in the paper (:func:`heavytail.studies.collapse.numerics.figure12_panels`)."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.3), sharex=True, sharey=True)
    for ax, key in zip(axes, ("target", "softmax", "log-ELU")):
        pts = panels[key]
        ax.scatter(pts[:, 0], pts[:, 1], s=2, alpha=0.4, color="k" if key == "target" else None)
        ax.set_xscale("symlog")
        ax.set_yscale("symlog")
        ax.set_title(key if key == "target" else f"{key} output (IQR ratio {panels[key + ' ratio']:.2f})")
    fig.tight_layout()
    return fig
