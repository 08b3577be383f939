"""The tail regime (Section 3.2.1's Pi_eta of the mirrored Pareto tail indices) as a run's key: validated at the
boundary, drawn by the training and evaluation samplers, and part of the sampling floor's cache key."""

import dataclasses

import pytest
import torch

from heavytail import names
from heavytail.harness.config import RunConfig
from heavytail.harness.evaluate import floor_key, sampling_floor_pool
from heavytail.harness.build import build_benchmark
from heavytail.science.operators import ETA_RANGES, Benchmark, eta_ranges

SMALL_EVAL = dict(eval_trials=4, eval_n_points=32, eval_batch_trials=4, bootstrap_resamples=20)


def _inside(indices: torch.Tensor, ranges) -> bool:
    """(T, 2) tail indices against ((low, high), (low, high)) per latent axis."""
    return all(bool(((indices[:, i] >= lo) & (indices[:, i] <= hi)).all()) for i, (lo, hi) in enumerate(ranges))


def test_the_default_is_the_papers_regime():
    assert RunConfig().tail_regime == "paper"
    (a0, a1) = names.TAIL_REGIMES["paper"]
    assert a0 == (2.0, 3.0) and a1 == (1.0 + torch.finfo(torch.float32).eps, 2.0)  # Section 3.2.1
    assert ETA_RANGES["mirrored_pareto"] == names.TAIL_REGIMES["paper"]
    assert ETA_RANGES["gaussian"] == (a1, a0)  # exchanged: axis 1 carries the larger spread


def test_unknown_or_inapplicable_regimes_are_refused_by_name():
    with pytest.raises(ValueError, match=r"tail_regime='heavy' is not allowed; choose one of: paper, moderate, light"):
        RunConfig(tail_regime="heavy")
    with pytest.raises(ValueError, match=r"tail_regime='light' sets mirrored Pareto tail indices.*'gaussian'"):
        RunConfig(marginals="gaussian", tail_regime="light")
    with pytest.raises(ValueError, match="'gaussian' has none"):
        Benchmark("sheared_swap", "gaussian", tail_regime="light")
    with pytest.raises(ValueError, match="tail_regime must be one of"):
        eta_ranges("mirrored_pareto", "heavy")
    assert RunConfig.from_dict({"tail_regime": "moderate"}).tail_regime == "moderate"


def test_every_regime_keeps_the_first_moment(monkeypatch):
    """The energy distance (eq. 9) needs E|X| < inf: every index a > 1, which the table check enforces."""
    monkeypatch.setitem(names.TAIL_REGIMES, "too_heavy", ((2.0, 3.0), (0.8, 2.0)))
    with pytest.raises(AssertionError, match="'too_heavy' needs two ranges 1 < low < high"):
        names._check()


@pytest.mark.parametrize("regime", ["light", "moderate"])
def test_a_run_under_a_regime_draws_its_tail_indices(regime, tmp_path):
    cfg = RunConfig(tail_regime=regime, **SMALL_EVAL)
    ranges = names.TAIL_REGIMES[regime]
    # the training sampler
    bench = build_benchmark(cfg)
    drawn = bench.sample_trials(500, generator=torch.Generator().manual_seed(0)).marginal_params
    assert _inside(drawn, ranges) and not _inside(drawn, names.TAIL_REGIMES["paper"])
    # spread over each range, not one point of it (500 uniform draws span all but ~1 % of it)
    assert all(drawn[:, i].max() - drawn[:, i].min() > 0.95 * (hi - lo) for i, (lo, hi) in enumerate(ranges))
    # the evaluation floor draws its targets from the same regime, and caches them apart from the paper's
    pool = sampling_floor_pool(cfg, tmp_path)
    assert _inside(torch.tensor(pool["tail_index"]), ranges)
    paper = dataclasses.replace(cfg, tail_regime="paper")
    assert floor_key(cfg) != floor_key(paper) and pool["key"] == floor_key(cfg)
    assert floor_key(paper) == floor_key(RunConfig(**SMALL_EVAL))
    paper_pool = sampling_floor_pool(paper, tmp_path)
    assert _inside(torch.tensor(paper_pool["tail_index"]), names.TAIL_REGIMES["paper"])
    assert len(list(tmp_path.glob("floor-*.json"))) == 2
