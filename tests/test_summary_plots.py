"""The one training-loss trace of notebooks 04 and 05 (Figure 13, App. I)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display needed; must precede pyplot

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from heavytail.names import KERNEL_COLORS  # noqa: E402
from heavytail.studies.curves import training_curve  # noqa: E402


def test_training_curve_draws_faint_raw_and_a_rolling_median_that_skips_bad_steps():
    steps = np.arange(10)
    loss = np.array([8.0, 4.0, np.nan, 2.0, 1.0, 0.0, 1.0, np.inf, 0.5, 0.25])
    fig, ax = plt.subplots()
    try:
        median = training_curve(ax, steps, loss, color=KERNEL_COLORS["softmax"], window=3, label="softmax",
                                raw_label="raw")
        raw, heavy = ax.lines
        assert ax.get_yscale() == "log"
        # NaN, inf and the zero are left out of the faint trace ...
        np.testing.assert_array_equal(raw.get_xdata(), [0, 1, 3, 4, 6, 8, 9])
        assert raw.get_alpha() == pytest.approx(0.2) and heavy.get_alpha() is None  # faint raw, opaque median
        assert raw.get_color() == heavy.get_color() == KERNEL_COLORS["softmax"]
        assert (raw.get_label(), heavy.get_label()) == ("raw", "softmax") and heavy.get_linewidth() > raw.get_linewidth()
        # ... and out of the centred 3-point median: at step 5 the window is {1.0, (0.0), 1.0}, at step 2 {4, 2}.
        assert median[5] == 1.0 and median[2] == 3.0 and median[0] == 6.0 and median[9] == pytest.approx(0.375)
        np.testing.assert_array_equal(heavy.get_ydata(), median)
    finally:
        plt.close(fig)


def test_training_curve_rejects_mismatched_arrays():
    fig, ax = plt.subplots()
    try:
        with pytest.raises(ValueError, match="matching"):
            training_curve(ax, np.arange(3), np.ones(4), color="k", window=3)
    finally:
        plt.close(fig)


def test_log_series_reads_row_keys_block_means_and_the_largest_block_gradient():
    from heavytail.studies.ablation.summary_plots import diagnostics_figure, log_series

    log = [{"step": 1, "loss": 2.0, "skipped": False,
            "blocks": [{"attn_max_weight": 0.2, "grad_norm": 1.0}, {"attn_max_weight": 0.4, "grad_norm": 3.0}]},
           {"step": 2, "loss": float("nan"), "skipped": True}]
    assert log_series(log, "loss")[0] == 2.0
    assert log_series(log, "attn_max_weight")[0] == pytest.approx(0.3) and np.isnan(log_series(log, "attn_max_weight")[1])
    assert log_series(log, "block_grad_norm")[0] == 3.0
    fig = diagnostics_figure({"a": log})
    assert len(fig.axes) == 6
