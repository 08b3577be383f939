"""Where in the operator family a model collapses.

The paper labels whole runs collapsed (App. I, Tables 5-6). A run is scored on trials drawn across the operator
family (omega_T ~ Pi_T, App. D.1), so a run labelled collapsed may be degenerate on some tasks and healthy on
others. This module places each evaluation trial's collapse (spread ratio below the threshold) at its task
parameters and asks one question per run: does a straight line in (omega_T[0], omega_T[1]) separate the
collapsed trials from the healthy ones better than it separates labels shuffled at random? The statistic is the
best line's agreement (share of trials on the side of their label); its p-value is a permutation test that
shuffles the labels, so it is calibrated by construction whatever the layout of the trials.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from heavytail.science.collapse import collapsed
from heavytail.studies.run_record import RunRecord

PERMUTATIONS = 999
_ANGLES = np.linspace(0.0, np.pi, 180, endpoint=False)


def trials_of(run: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(omega_T (T, k), collapsed (T,) bool) of a run summary's evaluation trials, or None where it holds none."""
    tc = run.get("trial_collapse")
    if not tc:
        return None
    threshold = RunRecord.from_summary(run).collapse_spread
    ratio = np.asarray(tc["spread_ratio"], dtype=float)
    import torch

    flags = collapsed(torch.as_tensor(ratio), threshold).numpy()
    return np.asarray(tc["omega_T"], dtype=float), flags


def best_line_agreement(points: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Share of points on their label's side of the best straight line, per row of ``labels``.

    points: (T, 2); labels: (..., T) bool  ->  (...). 1 for labels a line separates; at least the majority
    label's share, since a line past every point puts all of them on one side.
    """
    labels = np.asarray(labels, dtype=bool)
    t = points.shape[0]
    best = np.maximum(labels.mean(-1), 1 - labels.mean(-1))
    for angle in _ANGLES:
        order = np.argsort(points @ np.array([np.cos(angle), np.sin(angle)]), kind="stable")
        lab = labels[..., order].astype(float)
        # Threshold after the first i points: those are called healthy, the rest collapsed (or the reverse).
        ones_before = np.concatenate([np.zeros(lab.shape[:-1] + (1,)), np.cumsum(lab, -1)], -1)  # (..., T+1)
        i = np.arange(t + 1)
        right = (i - ones_before) + (lab.sum(-1, keepdims=True) - ones_before)
        share = np.maximum(right, t - right).max(-1) / t
        best = np.maximum(best, share)
    return best


def half_plane_test(points: np.ndarray, labels: np.ndarray, permutations: int = PERMUTATIONS, seed: int = 0
                    ) -> dict[str, Any]:
    """The best line's agreement and its permutation p-value (labels shuffled ``permutations`` times).

    points: (T, 2) task parameters; labels: (T,) bool collapsed. ``{"agreement", "p", "n", "collapsed",
    "permutations"}``; p is (1 + #{shuffled >= observed}) / (1 + permutations). A run with no collapsed (or no
    healthy) trial has nothing to separate: p = 1.
    """
    labels = np.asarray(labels, dtype=bool)
    observed = float(best_line_agreement(points[:, :2], labels))
    out = {"agreement": observed, "n": int(labels.size), "collapsed": int(labels.sum()), "permutations": permutations}
    if labels.all() or not labels.any():
        return {**out, "p": 1.0}
    rng = np.random.default_rng(seed)
    shuffled = np.stack([rng.permutation(labels) for _ in range(permutations)])
    null = best_line_agreement(points[:, :2], shuffled)
    return {**out, "p": float((1 + np.sum(null >= observed - 1e-12)) / (1 + permutations))}
