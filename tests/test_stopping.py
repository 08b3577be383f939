"""The stopping rule (heavytail.harness.stopping) and the run-configuration keys it reads."""

from __future__ import annotations

import math

import pytest

from heavytail.harness.config import RunConfig
from heavytail.harness.stopping import converged


def _history(values, every=100):
    return [(every * (i + 1), v) for i, v in enumerate(values)]


def test_a_plateau_stops_and_a_descent_does_not():
    falling = _history([math.log(1 - 0.05 * i) for i in range(10)])  # 5 % better every 100 steps
    flat = _history([0.0] * 5 + [-0.001] * 5)  # 0.1 % better after step 500, then nothing
    assert not converged(falling, 1000, tolerance=0.01)
    assert converged(flat, 1000, tolerance=0.01)


def test_the_tolerance_is_a_fraction_of_the_energy_distance():
    # best before step 800: log 1.0; best after: log 0.985, a 1.5 % improvement
    history = _history([0.0] * 8 + [math.log(0.985), math.log(0.99)])
    assert converged(history, 1000, tolerance=0.02)
    assert not converged(history, 1000, tolerance=0.01)


def test_no_stop_before_the_minimum_nor_without_two_recent_scores():
    flat = _history([0.0] * 10)
    assert not converged(flat, 1000, tolerance=0.01, min_steps=1500)
    assert not converged(flat[:3], 300, tolerance=0.01)  # (240, 300] holds one score
    assert not converged(flat, 1000, tolerance=0.0)  # tolerance 0: train to the cap


def test_a_diverged_model_is_never_an_improvement():
    history = _history([0.0] * 8 + [math.inf, math.nan])
    assert converged(history, 1000, tolerance=0.01)
    assert not converged(_history([math.inf] * 10), 1000, tolerance=0.01)


@pytest.mark.parametrize("values, message", [
    ({"stop_tolerance": 0.01}, "needs val_every"),
    ({"val_every": 10, "stop_tolerance": 1.0}, r"fraction in \[0, 1\)"),
    ({"val_every": 10, "val_trials": 0}, "val_trials"),
    ({"val_every": 20000, "steps": 100, "warmup_steps": 10}, "larger than steps"),
    ({"stop_min_steps": 200, "steps": 100, "warmup_steps": 10}, "larger than the step cap"),
    ({"schedule_steps": 50, "steps": 100, "warmup_steps": 10}, "shorter than steps"),
    ({"dense_log_window": 10}, "needs track_attention"),
    ({"flush_subnormals": "yes"}, "true or false"),
])
def test_bad_stopping_and_logging_settings_are_refused_by_name(values, message):
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict(values)


def test_the_schedule_spans_its_horizon():
    from heavytail.harness.build import build_model, build_optimizer

    cfg = RunConfig(d_model=8, n_blocks=1, d_ff=8, steps=100, warmup_steps=10, schedule_steps=1000, lr=1e-3)
    optimizer, schedule = build_optimizer(cfg, build_model(cfg))
    for _ in range(100):
        optimizer.step()
        schedule.step()
    # step 100 of a 1000-step cosine after a 10-step warmup: lr barely decayed (a 100-step horizon would be ~0)
    expected = 0.5 * 1e-3 * (1 + math.cos(math.pi * 90 / 990))
    assert optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-6)


def test_the_best_validation_is_the_lowest_finite_score_with_its_step():
    from heavytail.harness.train import best_validation

    assert best_validation([[100, 0.5], [200, 0.2], [300, float("nan")], [400, 0.3]]) == {"step": 200, "value": 0.2}
    assert best_validation([]) is None and best_validation([[100, float("inf")]]) is None
