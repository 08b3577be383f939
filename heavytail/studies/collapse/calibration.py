"""What the collapse criterion (heavytail.science.collapse) labels, on outputs constructed to be healthy,
shrunk, partly collapsed or collapsed onto a few clusters: the calibration behind the threshold.

A trial is collapsed when, on some axis, IQR(output) / IQR(target) < ``threshold`` (App. I gives no number;
ours is RunConfig.collapse_spread). Each case below draws one (N, 2) output ensemble and an independent
target ensemble from a symmetric Pareto law of tail index a (the mirrored Pareto family of Section 3.2.1,
without the map T), so the spread ratio of a healthy output is near 1 whatever a is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from heavytail.science.collapse import collapsed, spread_ratio

TAIL_INDICES = (1.1, 1.5, 2.0, 3.0)
SHRINK_FACTORS = (0.02, 0.04, 0.06, 0.1, 0.2, 0.5)
POINT_MASS_SHARES = (0.3, 0.5, 0.6, 0.7, 0.8, 0.95)
CLUSTERS = (1, 2, 3, 5)


def symmetric_pareto(rng: np.random.Generator, a: float, n: int, d: int = 2) -> np.ndarray:
    """(n, d) draws of sign * (U^(-1/a) - 1): Pareto(a) magnitudes about 0, both signs."""
    u = rng.random((n, d))
    return np.where(rng.random((n, d)) < 0.5, -1.0, 1.0) * (u ** (-1.0 / a) - 1.0)


@dataclass(frozen=True)
class Case:
    family: str
    setting: str
    make: Callable[[np.random.Generator, np.ndarray], np.ndarray]  # (rng, healthy output) -> output
    expected: str  # what a collapse criterion should say, in words
    target_a: float | None = None  # the target's tail index (None: the table's)


def cases() -> list[Case]:
    out = [Case("healthy", f"a = {a}", lambda rng, y: y, "not collapsed", target_a=a) for a in TAIL_INDICES]
    out += [Case("wrong tail index", f"a = {a} against the target's", lambda rng, y, a=a: symmetric_pareto(rng, a, len(y)),
                 "not collapsed (a tail error, which the Hill diagnostic of App. J measures)") for a in (1.1, 3.0)]
    out += [Case("uniform shrinkage", f"x{c}", lambda rng, y, c=c: c * y,
                 "collapsed when the spread shrinks below the threshold") for c in SHRINK_FACTORS]
    out += [Case("point mass + healthy rest", f"{p:.0%} at one point", lambda rng, y, p=p: _point_mass(rng, y, p),
                 "collapsed when most points coincide") for p in POINT_MASS_SHARES]
    out += [Case("few clusters", f"{k} cluster{'s' if k > 1 else ''}", lambda rng, y, k=k: _clusters(rng, y, k),
                 "collapsed (degenerate), though a spread measure sees the clusters' separation") for k in CLUSTERS]
    out += [Case("one axis collapsed", "x0.01 on axis 1", lambda rng, y: y * np.array([1.0, 0.01]),
                 "collapsed: the criterion takes the smaller axis")]
    return out


def _point_mass(rng: np.random.Generator, y: np.ndarray, share: float) -> np.ndarray:
    out = y.copy()
    out[rng.random(len(y)) < share] = np.median(y, axis=0)
    return out


def _clusters(rng: np.random.Generator, y: np.ndarray, k: int) -> np.ndarray:
    centres = np.quantile(y, (np.arange(k) + 0.5) / k, axis=0)  # (k, d): spread like the target's quantiles
    return centres[rng.integers(0, k, len(y))] + 1e-6 * rng.standard_normal(y.shape)


def table(threshold: float, n: int = 1024, a: float = 1.5, trials: int = 20, seed: int = 0) -> dict:
    """Per case: the median spread ratio over ``trials`` constructed trials, the share labelled collapsed
    at ``threshold``, and what the case should be called (heavytail.studies.tables format)."""
    rng = np.random.default_rng(seed)
    rows = []
    for case in cases():
        ratios = []
        a_case = case.target_a or a
        for _ in range(trials):
            y_out = case.make(rng, symmetric_pareto(rng, a_case, n))
            target = symmetric_pareto(rng, a_case, n)
            ratios.append(float(spread_ratio(torch.from_numpy(y_out), torch.from_numpy(target))))
        flags = collapsed(torch.tensor(ratios), threshold)
        rows.append({"case": case.family, "setting": case.setting, "median spread ratio": float(np.median(ratios)),
                     "labelled collapsed": f"{float(flags.double().mean()):.0%}", "should be": case.expected,
                     "collapsed share": float(flags.double().mean())})
    return {"title": f"The collapse criterion at threshold {threshold:g} on constructed outputs (N = {n}, "
                     f"target tail index a = {a}, {trials} trials each)",
            "columns": ["case", "setting", "median spread ratio", "labelled collapsed", "should be"], "rows": rows,
            "notes": "spread ratio: smallest per-axis IQR(output) / IQR(target); collapsed when below the threshold"}
