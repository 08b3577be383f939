"""The ablation notebook's helpers: the Figure 5 instance, the arrow sample, the findings sentence."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from heavytail.studies.ablation.one_run import figure5_trial, findings, transport_sample
from heavytail.harness.config import RunConfig
from heavytail.science.operators import EXCHANGE, Benchmark


def test_figure5_sheared_swap_is_the_coordinate_exchange():
    bench = Benchmark("sheared_swap", "mirrored_pareto")
    trials = bench.sample_trials(3, generator=torch.Generator().manual_seed(1))
    trial = figure5_trial(bench, trials, index=2)
    assert len(trial) == 1
    assert torch.equal(trial.omega_T, torch.zeros(1, 2, dtype=torch.float64))
    assert torch.equal(trial.T_in[0], torch.eye(2, dtype=torch.float64))
    assert torch.equal(trial.input_to_output[0], EXCHANGE)  # j = k = 0: the operator is P (App. D.2)
    assert torch.equal(trial.marginal_params, trials.marginal_params[2:3])
    # the inputs of this instance are the latent draws themselves: same law as eta
    x = bench.sample_inputs(trial, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = bench.sample_latent(trial, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.equal(x, z)


def test_figure5_matrix_inverse_keeps_the_trial():
    bench = Benchmark("matrix_inverse", "mirrored_pareto")
    trials = bench.sample_trials(2, generator=torch.Generator().manual_seed(1))
    trial = figure5_trial(bench, trials, index=1)
    for f in dataclasses.fields(trial):
        assert torch.equal(getattr(trial, f.name), getattr(trials[1], f.name))
    with pytest.raises(ValueError, match="index=2 is out of range"):
        figure5_trial(bench, trials, index=2)


def _heavy_pair(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=gen) / torch.rand(n, 2, generator=gen).clamp_min(1e-6) ** 0.8
    return x, x.flip(-1) + 0.1 * torch.randn(n, 2, generator=gen)


def test_transport_sample_window_and_fraction():
    x, y = _heavy_pair(4000)
    y[7] = float("nan")  # a non-finite output is never drawn nor counted inside
    s = transport_sample(x, y, n_arrows=140, central=0.98, generator=torch.Generator().manual_seed(0))
    assert s.x.shape == (140, 2) and s.y.shape == (140, 2) and s.n_points == 4000
    assert len(set(s.indices.tolist())) == 140 and 7 not in s.indices.tolist()
    assert torch.equal(s.x, x[s.indices]) and torch.equal(s.y, y[s.indices])
    (a0, a1), (b0, b1) = s.window
    lo, hi = torch.tensor([a0, b0]), torch.tensor([a1, b1])
    assert ((s.x >= lo) & (s.x <= hi) & (s.y >= lo) & (s.y <= hi)).all()
    # the window is the pooled central 98 % range on each axis: 1 % of the pooled finite values below it
    finite = torch.isfinite(y).all(-1)
    pooled = torch.cat([x[finite], y[finite]]).double()
    below = (pooled[:, 0] < a0).double().mean().item()
    assert abs(below - 0.01) <= 1.0 / pooled.shape[0] + 1e-12  # quantile interpolation: at most one point off
    inside = finite & ((x >= lo) & (x <= hi) & (y >= lo) & (y <= hi)).all(-1)
    assert s.inside_fraction == pytest.approx(inside.double().mean().item())
    # each of the 4 coordinates excludes at most ~2 % of its values, so at least ~92 % remain
    assert 0.90 < s.inside_fraction < 1.0
    again = transport_sample(x, y, n_arrows=140, central=0.98, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.indices, s.indices)


def test_transport_sample_takes_all_when_few_and_refuses_bad_input():
    x, y = _heavy_pair(50)
    s = transport_sample(x, y, n_arrows=140, central=1.0)
    assert len(s.indices) == 50 and s.inside_fraction == 1.0
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        transport_sample(x[:, :1], y[:, :1])
    with pytest.raises(ValueError, match="central=0"):
        transport_sample(x, y, central=0)
    with pytest.raises(ValueError, match="n_arrows=0"):
        transport_sample(x, y, n_arrows=0)
    with pytest.raises(ValueError, match="no point has a finite"):
        transport_sample(x, torch.full_like(y, float("inf")))


def _results(median=(0.9, 0.8, 1.05), mean=(1.5, 1.2, 1.9), label="ok", fraction=0.0, d=None):
    cfg = RunConfig.from_dict(dict(steps=300, n_points=256, eval_n_points=1024, warmup_steps=10, kernel="softmax"))
    def stat(r, lo, hi):
        return {"ratio": r, "low": lo, "high": hi, "bold": lo <= 1.0, "candidate": r, "floor": 1.0}
    return {"config": cfg.to_dict(), "collapse": {"label": label, "fraction": fraction, "threshold": 0.05},
            "energy": {"d": d if d is not None else [1.0] * 8, "d_hat": [1.0] * 8,
                       "median": stat(*median), "mean": stat(*mean)}}


def test_findings_sentence_follows_the_numbers():
    text = findings(_results(), skipped_steps=3)
    assert "softmax attention (post-norm, without symlog) on the sheared swap with mirrored pareto marginals" in text
    assert "after 300 steps at N = 256" in text
    assert "median energy-distance ratio of 0.900 (95% interval 0.800-1.050), consistent with the floor" in text
    assert "mean ratio of 1.500 (95% interval 1.200-1.900), above the floor" in text
    assert "over 8 evaluation trials at N = 1024" in text
    assert "no ensemble collapse (0% of the trials" in text and "3 training steps were skipped" in text
    text = findings(_results(median=(0.7, 0.6, 0.95), label="collapse", fraction=0.75,
                             d=[1.0] * 6 + [math.inf] * 2))
    assert "0.700 (95% interval 0.600-0.950), below the i.i.d. sampling floor" in text
    assert "labelled ensemble collapse: 75% of the trials" in text
    assert "2 of them diverged" in text and "skipped" not in text
