"""Where a run collapses in task space (heavytail.studies.collapse.by_task): the best-line statistic, its
permutation test calibrated under shuffled labels, and the task parameters a summary re-draws for old runs
equal the ones evaluation draws."""

from __future__ import annotations

import math

import numpy as np

from heavytail.studies.collapse import by_task

M = 400
ALPHA = 0.05
TOL = 3 * math.sqrt(ALPHA * (1 - ALPHA) / M)


def _points(seed: int, t: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=(t, 2))


def test_labels_a_line_separates_agree_fully_and_are_significant():
    pts = _points(0)
    labels = pts[:, 0] + 0.5 * pts[:, 1] > 0.1
    out = by_task.half_plane_test(pts, labels, permutations=199)
    assert out["agreement"] == 1.0 and out["p"] == 1 / 200
    assert out["collapsed"] == int(labels.sum()) and out["n"] == 64


def test_agreement_is_at_least_the_majority_share_and_at_most_one():
    pts = _points(1)
    labels = np.random.default_rng(2).random((50, 64)) < 0.3
    share = by_task.best_line_agreement(pts, labels)
    majority = np.maximum(labels.mean(-1), 1 - labels.mean(-1))
    assert np.all(share >= majority - 1e-12) and np.all(share <= 1)


def test_a_run_without_collapsed_trials_has_nothing_to_separate():
    assert by_task.half_plane_test(_points(3), np.zeros(64, bool))["p"] == 1.0


def test_shuffled_labels_reject_at_the_nominal_rate():
    """Under the null (labels independent of the task), p < 0.05 in about 5 % of runs, at the ladder's T = 64 and
    about half the trials collapsed, as its softmax runs have."""
    rng = np.random.default_rng(4)
    rejections = 0
    for i in range(M):
        labels = rng.random(64) < 0.5
        rejections += by_task.half_plane_test(_points(100 + i), labels, permutations=99, seed=i)["p"] < ALPHA
    assert abs(rejections / M - ALPHA) <= TOL, rejections / M


def test_a_summary_redraws_the_task_parameters_evaluation_scored(tmp_path):
    import torch

    from heavytail.harness.config import RunConfig
    from heavytail.harness.evaluate import evaluate
    from heavytail.harness.train import train
    from heavytail.studies.run_summary import trial_collapse

    cfg = RunConfig(d_model=8, n_blocks=1, d_ff=8, n_points=64, trials_per_step=1, steps=4, warmup_steps=1,
                    eval_trials=6, eval_n_points=64, bootstrap_resamples=10, device="cpu", seed=7)
    train(cfg, tmp_path / "r", quiet=True)
    results = evaluate(tmp_path / "r", quiet=True, save=False)
    recorded = trial_collapse(results)
    assert recorded["omega_T_source"] == "recorded at evaluation"
    old = {**results, "collapse": {k: v for k, v in results["collapse"].items() if k != "omega_T"}}
    redrawn = trial_collapse(old)
    assert redrawn["omega_T_source"] == "re-drawn from the seed"
    assert np.allclose(redrawn["omega_T"], recorded["omega_T"], rtol=1e-3)
    assert len(recorded["omega_T"]) == len(recorded["spread_ratio"]) == cfg.eval_trials
    assert torch.tensor(recorded["omega_T"]).shape == (6, 2)
