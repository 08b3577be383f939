"""Set divergences and trial-level statistics of the paper's evaluations.

- ``energy_distance``, ``energy_distance_1d``, ``check_finite``: eq. 10, from :mod:`heavytail.science.energy`.
- ``wasserstein2_1d``: the empirical 2-Wasserstein distance of Figure 1 (sorted matching).
- ``hill_estimate`` (eq. 38), ``hill_k`` (App. J.1), ``hill_k_from_seam`` (App. F.1),
  ``hill_error_discrepancy`` (eq. 41).
- ``ratio_interval`` / ``RatioInterval`` (eqs. 36-37, App. H.2), ``noise_units`` / ``NoiseUnits`` (eq. 32).
  The sampling floor of eq. 11 is drawn once per evaluation pool by ``heavytail.harness.evaluate``.

Per-set functions take and return tensors (shapes in the docstrings). Trial-level summaries (pools of
n = 128 numbers) take array-likes and return Python floats or float64 numpy arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from heavytail import names

from heavytail.science.energy import check_finite, energy_distance, energy_distance_1d
from heavytail.names import ENERGY_BACKENDS, RATIO_STATISTICS  # energy-distance kernels, not attention backends

__all__ = [
    "ENERGY_BACKENDS",
    "HILL_FLOOR",
    "STATISTICS",
    "NoiseUnits",
    "RatioInterval",
    "check_finite",
    "energy_distance",
    "energy_distance_1d",
    "hill_error_discrepancy",
    "hill_estimate",
    "hill_k",
    "hill_path",
    "hill_band_miss",
    "hill_k_from_seam",
    "noise_units",
    "ratio_interval",
    "summarize",
    "wasserstein2_1d",
]

#: Numerical floor on the sample values inside the Hill logarithms (App. J.1).
HILL_FLOOR = 1e-16
#: Summary statistics S of eqs. 11 and 36.
STATISTICS = RATIO_STATISTICS


# ------------------------------------------------------------------------------ Wasserstein-2
def wasserstein2_1d(x, y) -> torch.Tensor:
    """Empirical 2-Wasserstein distance W_2 (not squared) between equal-size 1D samples (Figure 1).

    In 1D the optimal coupling of two N-point empirical measures matches order statistics, so
    W_2 = sqrt(mean_k (x_(k) - y_(k))^2). Squares are taken in float64 (heavy tails overflow float32).

    Args:
        x, y: ``(..., N)`` samples with the same N; batch dimensions broadcast.

    Returns:
        ``(...)`` in the inputs' dtype; differentiable through the sorted values.
    """
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    if x.dim() < 1 or y.dim() < 1 or x.shape[-1] != y.shape[-1] or x.shape[-1] < 1:
        raise ValueError(
            f"wasserstein2_1d needs equal-size samples (..., N) with N >= 1, got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    check_finite(x, "x")
    check_finite(y, "y")
    dtype = torch.promote_types(x.dtype, y.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    xs = torch.sort(x.to(dtype), dim=-1).values.to(torch.float64)
    ys = torch.sort(y.to(dtype), dim=-1).values.to(torch.float64)
    return (xs - ys).square().mean(-1).sqrt().to(dtype)


# ------------------------------------------------------------------------------------ Hill
def hill_k(n: int, phi: float) -> int:
    """k = floor(phi N) of eq. 38 (App. J.1: phi = 0.1 at N = 16384 gives 1638, 0.01 at 65536 gives 655): the
    rule of :func:`heavytail.names.hill_k`, with ``n`` checked to be a positive integer."""
    return names.hill_k(_positive_int(n, "n"), float(phi))


def hill_k_from_seam(n: int, q0: float) -> int:
    """k = max(2, round(N (1 - q0))) of App. F.1 (Figure 1's Hill gap, seam quantile q0).

    Python's ``round`` (ties to even) is used; the paper does not say how ties are broken.
    """
    n = _positive_int(n, "n")
    q0 = float(q0)
    if not 0.0 < q0 < 1.0:
        raise ValueError(f"seam quantile q0={q0} must lie in (0, 1)")
    k = max(2, round(n * (1.0 - q0)))
    if k >= n:
        raise ValueError(f"k = max(2, round(N (1 - q0))) = {k} for N={n}, q0={q0}; need k < N")
    return k


def hill_estimate(z, k: int) -> torch.Tensor:
    """Hill estimate of the upper-tail index (eq. 38), along the last dimension.

    a_hat = ( (1/k) sum_{l=1..k} log(Z_(l) / Z_(k+1)) )^(-1) with Z_(1) >= ... >= Z_(N) the descending
    order statistics; the values entering the logarithms are floored at 1e-16 (App. J.1). Computed
    in float64 from the k + 1 largest values (``torch.topk``).

    Args:
        z: ``(..., N)`` samples (batch along leading dims).
        k: number of upper order statistics, 1 <= k < N.

    Returns:
        ``(...)`` estimates in z's floating dtype (float64 for integer input); +inf when the k + 1
        largest values coincide.
    """
    z = torch.as_tensor(z)
    if z.dim() < 1:
        raise ValueError("hill_estimate needs samples of shape (..., N)")
    n = z.shape[-1]
    if isinstance(k, bool) or int(k) != k or not 1 <= int(k) < n:
        raise ValueError(f"k={k} must be an integer with 1 <= k < N = {n}")
    k = int(k)
    check_finite(z, "z")
    top = torch.topk(z.to(torch.float64), k + 1, dim=-1, largest=True, sorted=True).values
    logs = torch.log(top.clamp_min(HILL_FLOOR))
    gamma = logs[..., :k].mean(-1) - logs[..., k]
    out_dtype = z.dtype if z.is_floating_point() else torch.float64
    return (1.0 / gamma).to(out_dtype)


def hill_path(z, k_max: int) -> torch.Tensor:
    """Hill estimates (eq. 38) for every k = 1 .. k_max at once, along the last dimension: ``(..., k_max)``.

    The same estimator as :func:`hill_estimate` (float64, logs floored at 1e-16) from one sort of the
    k_max + 1 largest values and a cumulative sum, so the whole Hill plot of App. J's future work ("errors
    across a range of thresholds") costs one ``topk``."""
    z = torch.as_tensor(z)
    n = z.shape[-1]
    if not 1 <= int(k_max) < n:
        raise ValueError(f"k_max={k_max} must satisfy 1 <= k_max < N = {n}")
    check_finite(z, "z")
    top = torch.topk(z.to(torch.float64), int(k_max) + 1, dim=-1, largest=True, sorted=True).values
    logs = torch.log(top.clamp_min(HILL_FLOOR))
    k = torch.arange(1, int(k_max) + 1, dtype=torch.float64)
    gamma = logs[..., :-1].cumsum(-1) / k - logs[..., 1:]
    return 1.0 / gamma


def hill_band_miss(z, tail_index, k_lo: int, k_hi: int, z_score: float = 1.959964) -> torch.Tensor:
    """Share of thresholds k in [k_lo, k_hi] where the asymptotic 95 % band of the Hill estimate,
    a_hat (1 +- 1.96 / sqrt(k)), excludes the known tail index: ``(...)`` for samples ``(..., N)`` and
    ``tail_index`` broadcastable to ``(...)``. An i.i.d. Pareto sample misses at some k too (the band is
    pointwise and the estimator biased at large k), so compare a model's share with its target's."""
    path = hill_path(z, k_hi)[..., k_lo - 1 :]
    k = torch.arange(k_lo, k_hi + 1, dtype=torch.float64)
    half = z_score / k.sqrt()
    a = torch.as_tensor(tail_index, dtype=torch.float64).unsqueeze(-1)
    outside = (a < path * (1 - half)) | (a > path * (1 + half)) | ~torch.isfinite(path)
    return outside.double().mean(-1)


def hill_error_discrepancy(e, e_hat) -> float:
    """E(e, e_hat) of eq. 41: the unbiased U-statistic of the 1D energy distance (p = 1) between pools.

    2/(n m) sum_ij |e_i - e_hat_j| - 1/(n(n-1)) sum_{i != i'} |e_i - e_i'| - 1/(m(m-1)) sum_{j != j'} |...|,
    the paper's formula with n = m, written for pools of sizes n, m >= 2. Unbiased for the population
    energy distance, so it is 0 in expectation when both pools share a law and may be negative.
    Pairwise sums use the sorted form sum_{i<j} |x_i - x_j| = sum_k (2k - n - 1) x_(k) in float64,
    exact enough for pools of trial statistics (n in the hundreds).
    """
    e = _pool(e, "e", allow_inf=False)
    e_hat = _pool(e_hat, "e_hat", allow_inf=False)
    n, m = e.size, e_hat.size
    within_e, within_h = _sum_abs_pairs(e), _sum_abs_pairs(e_hat)
    cross = _sum_abs_pairs(np.concatenate([e, e_hat])) - within_e - within_h
    # sum over i != i' counts each unordered pair twice
    return float(2.0 * cross / (n * m) - 2.0 * within_e / (n * (n - 1)) - 2.0 * within_h / (m * (m - 1)))


def _sum_abs_pairs(x: np.ndarray) -> float:
    xs = np.sort(x)
    n = xs.size
    return float(np.dot(2.0 * np.arange(1, n + 1) - n - 1.0, xs))


# ------------------------------------------------------------------------ floor and bootstrap
def summarize(x, statistic: str) -> float:
    """S in eqs. 11 and 36: the median (mean of the two middle values for even n) or the mean."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic!r} is not one of {STATISTICS}")
    x = np.asarray(torch.as_tensor(x).detach().cpu().to(torch.float64), dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("cannot summarize an empty pool")
    return float(np.median(x) if statistic == "median" else np.mean(x))


@dataclass(frozen=True)
class RatioInterval:
    """Eq. 36 ratio with its eq. 37 bootstrap interval; ``bold`` is App. H.2's rule.

    ``reference`` is S(d_hat), the vertical line of Figures 3-4: ``on_distance_scale()`` multiplies the
    interval through by it, as the figures do.
    """

    ratio: float
    low: float
    high: float
    bold: bool
    statistic: str
    reference: float
    confidence: float
    n_resamples: int

    def on_distance_scale(self) -> tuple[float, float]:
        return self.low * self.reference, self.high * self.reference


def ratio_interval(
    d,
    d_hat,
    statistic: str = "median",
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> RatioInterval:
    """r = S(d) / S(d_hat) (eq. 36) and its two-pool percentile bootstrap interval (eq. 37).

    Eq. 37 draws both pools' indices independently and uniformly with replacement, B = 2000 times,
    and takes the empirical 2.5 % and 97.5 % quantiles of r_b. That is exactly
    ``scipy.stats.bootstrap((d, d_hat), S(.)/S(.), paired=False, method="percentile")``: with
    ``paired=False`` scipy resamples each sample independently, and the percentile method reports
    the (linearly interpolated) quantiles of the bootstrap distribution. scipy is used for that
    reason (a well-kept, tested implementation of the resampling); no BCa or other correction is applied, as in the paper.

    ``bold`` (App. H.2): the interval contains or lies below 1, i.e. ``low <= 1``.

    Args:
        d: candidate distances d_i (n,); +inf is allowed (a diverged trial), NaN is not.
        d_hat: reference distances (m,), finite, with S(d_hat) > 0.
        statistic: "median" or "mean".
        n_resamples: B. seed: seeds ``numpy.random.default_rng``. confidence: 0.95 gives 2.5/97.5 %.
    """
    from scipy import stats

    if statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic!r} is not one of {STATISTICS}")
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples={n_resamples} must be a positive integer")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence} must lie in (0, 1)")
    d = _pool(d, "d", allow_inf=True)
    d_hat = _pool(d_hat, "d_hat", allow_inf=False)
    reference = summarize(d_hat, statistic)
    if not reference > 0.0:
        raise ValueError(f"S(d_hat) = {reference} under {statistic}; the reference must be positive")
    summary = np.median if statistic == "median" else np.mean

    def ratio(a, b, axis=-1):
        with np.errstate(invalid="ignore"):
            return summary(a, axis=axis) / summary(b, axis=axis)

    with np.errstate(invalid="ignore"):
        res = stats.bootstrap(
            (d, d_hat),
            ratio,
            n_resamples=int(n_resamples),
            paired=False,
            vectorized=True,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if math.isnan(low) or math.isnan(high):
        # Interpolating between a finite r_b and an infinite one (inf - inf) gives NaN in numpy;
        # the quantile of a distribution with mass at +inf is +inf there.
        low, high = _quantiles_with_inf(res.bootstrap_distribution, confidence)
    value = float(ratio(d, d_hat))
    return RatioInterval(value, low, high, bool(low <= 1.0), statistic, reference, float(confidence), int(n_resamples))


def _quantiles_with_inf(r: np.ndarray, confidence: float) -> tuple[float, float]:
    big = np.finfo(np.float64).max
    alpha = (1.0 - confidence) / 2.0
    q = np.quantile(np.where(np.isposinf(r), big, r), [alpha, 1.0 - alpha])
    q = np.where(q >= big / 2, np.inf, q)
    return float(q[0]), float(q[1])


# ----------------------------------------------------------------------------------- eq. 32
class NoiseUnits(NamedTuple):
    """Eq. 32: z (..., A) plotted values; mean and std (..., A) over repetitions; varsigma (...)."""

    z: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    varsigma: np.ndarray


def noise_units(values, a_grid, a_ref: float = 1.5, ddof: int = 1) -> NoiseUnits:
    """Shift and scale a statistic's sweep into noise units (App. F.2, eq. 32).

    z_j = (mu_j - mu_j*) / varsigma, varsigma = median{ s_j : s_j finite }, j* = argmin_j |a_j - a_ref|,
    with mu_j and s_j the mean and standard deviation (``ddof``, default 1) over repetitions.

    Args:
        values: ``(..., A, R)`` statistic per candidate index a_j (A) and repetition (R); non-finite
            values are allowed (their s_j is then not finite and is left out of the median).
        a_grid: ``(A,)`` candidate tail indices.
        a_ref: the reference index (1.5).

    Returns:
        ``NoiseUnits`` of float64 numpy arrays.

    Raises:
        ValueError: shape mismatch, fewer than ``ddof + 1`` repetitions, no finite s_j or varsigma = 0.
    """
    v = np.asarray(torch.as_tensor(values).detach().cpu().to(torch.float64), dtype=np.float64)
    a = np.asarray(a_grid, dtype=np.float64).reshape(-1)
    if v.ndim < 2 or v.shape[-2] != a.size:
        raise ValueError(f"values must be (..., A, R) with A = len(a_grid) = {a.size}, got {v.shape}")
    if v.shape[-1] <= ddof:
        raise ValueError(f"need more than ddof={ddof} repetitions, got R = {v.shape[-1]}")
    if not np.isfinite(a).all():
        raise ValueError("a_grid must be finite")
    with np.errstate(invalid="ignore"):
        mean = v.mean(-1)
        std = v.std(-1, ddof=ddof)
    finite_std = np.where(np.isfinite(std), std, np.nan)
    if np.isnan(finite_std).all(-1).any():
        raise ValueError("no finite standard deviation s_j: eq. 32's scale is undefined")
    varsigma = np.nanmedian(finite_std, axis=-1)
    if (varsigma <= 0).any():
        raise ValueError("median standard deviation varsigma is 0: the statistic does not vary between repetitions")
    j_star = int(np.argmin(np.abs(a - float(a_ref))))
    with np.errstate(invalid="ignore"):
        z = (mean - mean[..., j_star : j_star + 1]) / varsigma[..., None]
    return NoiseUnits(z, mean, std, varsigma)


# ----------------------------------------------------------------------------------- helpers
def _positive_int(n, name: str) -> int:
    if isinstance(n, bool) or int(n) != n or n < 2:
        raise ValueError(f"{name}={n} must be an integer >= 2")
    return int(n)


def _pool(x, name: str, allow_inf: bool) -> np.ndarray:
    arr = np.asarray(torch.as_tensor(x).detach().cpu().to(torch.float64), dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name} must be a 1D pool of at least 2 trial values, got shape {arr.shape}")
    bad = np.isnan(arr) if allow_inf else ~np.isfinite(arr)
    if bad.any():
        what = "NaN" if allow_inf else "NaN or inf"
        raise ValueError(f"{name} holds {int(bad.sum())} {what} values out of {arr.size}")
    return arr
