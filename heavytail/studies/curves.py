"""Training curves as Figure 13 draws them (App. I), one shared way for every study's figures (notebooks 04, 05, 09)."""

from __future__ import annotations

import numpy as np


def training_curve(ax, steps, loss, *, color: str, window: int, label: str | None = None,
                   raw_label: str | None = None):
    """One training-loss trace as Figure 13 draws it (App. I): the per-step loss faint, its centred rolling
    median over ``window`` logged steps heavy (:func:`heavytail.science.collapse.rolling_median`), log y axis.

    steps, loss: (T,). Losses that are not finite and positive (a skipped step, or a value a log axis cannot
    show) are left out of both traces, so a skipped step leaves a gap rather than pulling the median.
    ``color`` is the kernel's (:data:`heavytail.names.KERNEL_COLORS`); ``label`` names the heavy trace,
    ``raw_label`` the faint one. Returns the rolling median, (T,) with NaN where the window held no loss.
    """
    from heavytail.science.collapse import rolling_median  # torch-backed module: loaded only when a curve is drawn

    steps = np.asarray(steps)
    loss = np.asarray(loss, dtype=float)
    if steps.shape != loss.shape or loss.ndim != 1:
        raise ValueError(f"steps and loss must be matching (T,) arrays, got {steps.shape} and {loss.shape}")
    shown = np.where(np.isfinite(loss) & (loss > 0), loss, np.nan)
    ok = np.isfinite(shown)
    ax.plot(steps[ok], shown[ok], color=color, alpha=0.2, lw=0.7, label=raw_label)
    median = rolling_median(shown, window)
    ax.plot(steps, median, color=color, lw=2, label=label)
    ax.set_yscale("log")
    return median
