"""The paired sign-flip (permutation) test of a mean difference, and the interval that is its own inversion.

Paired per-seed differences d_1..d_n (A - B on one seed) are exchangeable in sign under the null of a symmetric
distribution about 0, so the test compares |mean(d)| with |mean(s * d)| over the 2^n sign patterns s. It suits
graded outcomes (fractions with many ties at zero) where a t test's normality fails. Its interval is the set of
shifts delta that the same test, applied to d - delta, does not reject: it excludes 0 exactly when the test rejects,
so a verdict read off the test and the interval printed beside it never disagree (a t interval can hold 0 while
the sign flip rejects, or the reverse).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np
from scipy import stats

ALPHA = 0.05


def _finite(diffs: Sequence[float]) -> np.ndarray:
    return np.asarray([v for v in diffs if math.isfinite(v)], dtype=float)


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def signflip_p(diffs: Sequence[float], max_exact: int = 20, n_random: int = 20000, seed: int = 0) -> float:
    """Two-sided p value of the paired sign-flip (permutation) test of mean(diffs) = 0, by
    ``scipy.stats.permutation_test`` (``permutation_type='samples'`` on one sample flips signs): exact over
    all 2^n sign patterns for n <= ``max_exact``, Monte Carlo beyond. Non-finite differences are left out."""
    d = _finite(diffs)
    n = len(d)
    if n < 2:  # one difference: its two sign patterns are equally extreme, so p = 1 (scipy needs two)
        return 1.0
    exact = n <= max_exact
    result = stats.permutation_test((d,), _mean, permutation_type="samples", vectorized=True,
                                    n_resamples=2**n if exact else n_random, batch=2**16,
                                    alternative="two-sided", rng=np.random.default_rng(seed))
    return float(result.pvalue)


@functools.lru_cache(maxsize=32)
def _patterns(n: int, max_exact: int, n_random: int, seed: int) -> np.ndarray:
    """The sign patterns, ``(P, n)`` of +-1: all 2^n for n <= ``max_exact``, else ``n_random`` drawn ones."""
    if n <= max_exact:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1
    else:
        bits = np.random.default_rng(seed).integers(0, 2, size=(n_random, n))
    return (1 - 2 * bits).astype(float)


def _p_at(d: np.ndarray, delta: float, signs: np.ndarray) -> float:
    """The two-sided sign-flip p value of mean(d - delta) = 0 over ``signs``: the share of patterns whose |sum| is
    at least the observed |sum| (with a relative tolerance for the patterns that tie it in exact arithmetic)."""
    x = d - delta
    observed = abs(x.sum())
    flipped = np.abs(signs @ x)
    return float(np.mean(flipped >= observed * (1 - 1e-12)))


def signflip_interval(diffs: Sequence[float], alpha: float = ALPHA, max_exact: int = 20, n_random: int = 20000,
                      seed: int = 0) -> tuple[float, float]:
    """The 1 - ``alpha`` interval of the mean difference that inverts the sign-flip test: every shift delta at which
    the test of mean(diffs - delta) = 0 has p >= ``alpha``, found by bisection outward from the mean (where p = 1).
    Unbounded, (-inf, inf), when the test cannot reject at ``alpha`` whatever the data (fewer than 6 nonzero
    differences at 0.05, one among them: :func:`signflip_floor`); (nan, nan) without a finite difference."""
    d = _finite(diffs)
    n = len(d)
    if n == 0:
        return (math.nan, math.nan)
    if signflip_floor(n) >= alpha:
        return (-math.inf, math.inf)
    signs = _patterns(n, max_exact, n_random, seed)
    centre, width = float(d.mean()), float(d.max() - d.min()) or max(abs(float(d.mean())), 1.0)

    def edge(direction: float) -> float:
        inside, step = centre, width
        outside = centre + direction * step
        while _p_at(d, outside, signs) >= alpha:  # beyond every difference the test rejects: this ends
            inside, step = outside, 2 * step
            outside = centre + direction * step
        for _ in range(60):
            middle = 0.5 * (inside + outside)
            if _p_at(d, middle, signs) >= alpha:
                inside = middle
            else:
                outside = middle
        return inside

    return (_snap(edge(-1.0), d, signs, width), _snap(edge(1.0), d, signs, width))


def _snap(edge: float, d: np.ndarray, signs: np.ndarray, width: float) -> float:
    """The bisected edge moved onto the exact shift where it lies: p changes only where a pattern's |sum| meets the
    observed one, sum(s (d - delta)) = +-sum(d - delta), which is linear in delta. Of those shifts within rounding
    of the edge, 0 or one of the differences is taken first (what the shift is in exact arithmetic, so it prints as
    that number), else the nearest."""
    total, n, flipped, ones = d.sum(), len(d), signs @ d, signs.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        shifts = np.concatenate([(flipped - total) / (ones - n), (flipped + total) / (ones + n)])
    tol = 1e-9 * max(width, abs(edge))
    near = shifts[np.isfinite(shifts) & (np.abs(shifts - edge) <= tol)]
    if near.size == 0:
        return edge
    for exact in (0.0, *d):
        if np.any(np.abs(near - exact) <= tol):
            return float(exact) + 0.0  # + 0.0: never -0
    return float(near[np.argmin(np.abs(near - edge))])


def signflip_floor(n_nonzero: int) -> float:
    """The smallest p the two-sided sign-flip test can give on differences of which ``n_nonzero`` are not 0,
    whatever their values: flipping a zero changes nothing and flipping every sign keeps |mean|, so at least
    2 * 2^zeros of the 2^n sign patterns are as extreme as the data, p >= 2 / 2^n_nonzero (1 when none is)."""
    return min(1.0, 2.0 ** (1 - n_nonzero))


def nonzero_needed(alpha: float = ALPHA) -> int:
    """How many nonzero paired differences the sign-flip test needs before p < ``alpha`` is possible (6 at 0.05)."""
    m = 1
    while signflip_floor(m) >= alpha:
        m += 1
    return m


def ties_note(diffs: Sequence[float], alpha: float = ALPHA) -> str:
    """Where ties at zero alone keep the sign-flip test above ``alpha`` (:func:`signflip_floor`), what it would
    take: more seeds alone do not decide when their differences are 0 too. Empty otherwise."""
    finite = [v for v in diffs if math.isfinite(v)]
    m, need = sum(v != 0 for v in finite), nonzero_needed(alpha)
    if m >= need or m == len(finite):
        return ""
    more = need - m
    return (f"; {m} of the {len(finite)} differences are nonzero, and the sign flip needs {need} nonzero to reach "
            f"p < {alpha:g}: {more} more {'seed' if more == 1 else 'seeds'} with a nonzero difference at least")
