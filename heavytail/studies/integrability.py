"""Empirical attention normalizers and the symlog tail: the checks behind App. A (Prop. 1) and App. C.3.

For a query s and key/value measure nu, attention with kernel g (eq. 7) divides by the population
normalizer D_g(s; nu) = E_{y ~ nu} g(<b, y>) with b = K^T Q s / sqrt(d_K) (App. A). On an ensemble of N
draws this is the empirical mean D_g(s; nu_N) = N^-1 sum_j g(<b, y_j>), which converges as N grows exactly
when the population integral is finite. For softmax on mirrored Pareto measures it is infinite for every
b != 0 (App. A), so the empirical normalizer keeps jumping up with each new extreme draw.

:func:`drift_rows` and :func:`drift_findings` turn the running normalizers into notebook 01's verdict:
which kernels still grow at the largest N, and whether those are the ones App. A's moment condition names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from heavytail.science.energy import check_finite
from heavytail.science.kernels import get_kernel
from heavytail.names import GROWTH_ORDER


def running_log_normalizer(scores: Tensor, kernel) -> Tensor:
    """log D_g(s; nu_n) for n = 1..N along the last axis: log(n^-1 sum_{j<=n} g(scores_j)). (..., N) -> (..., N).

    Computed as logcumsumexp(log g) - log n in float64, so softmax on scores of ~1e4 (where e^s overflows
    every float type) still gives the exact logarithm.
    """
    k = get_kernel(kernel)
    s = torch.as_tensor(scores, dtype=torch.float64)
    check_finite(s, "scores")
    n = torch.arange(1, s.shape[-1] + 1, dtype=torch.float64, device=s.device)
    return torch.logcumsumexp(k.log_g(s), dim=-1) - torch.log(n)


def gaussian_softmax_log_normalizer(b: Tensor, mean: Tensor, cov: Tensor) -> Tensor:
    """log E e^{<b, Y>} = <b, mu> + b^T Sigma b / 2 for Y ~ N(mu, Sigma): the finite population softmax
    normalizer of the light-tailed control (the Gaussian moment generating function). (d,), (d,), (d, d) -> ()."""
    b, mean, cov = (torch.as_tensor(v, dtype=torch.float64) for v in (b, mean, cov))
    return b @ mean + 0.5 * b @ cov @ b


def symlog_pareto_sf(t: Tensor, scale: float, tail_index: float) -> Tensor:
    """P(sigma(X) > t) for X ~ Pareto(lambda, a) and the symlog sigma of eq. (21): lambda^a (e^t - 1)^-a for
    t >= log(1 + lambda), and 1 below (eq. 22). (...) -> (...)."""
    if not (scale > 0 and tail_index > 0):
        raise ValueError(f"scale and tail_index must be > 0, got scale={scale}, tail_index={tail_index}")
    t = torch.as_tensor(t, dtype=torch.float64)
    tail = torch.exp(tail_index * (math.log(scale) - torch.log(torch.expm1(torch.clamp(t, min=math.log1p(scale))))))
    return torch.where(t >= math.log1p(scale), tail, torch.ones_like(t))


# --------------------------------------------------------------------------- the drift verdict (App. A)
# How many doublings of N the drift is measured over: the last six, from N_max / 2^6 to N_max.
DRIFT_DOUBLINGS = 6
# A running log-normalizer counts as still growing when its median drift over those doublings exceeds this
# many decades (log10 units), and as settled when |drift| stays within it. 0.1 decade is a change of the mean
# by a factor 10^0.1 ~ 1.26: a normalizer with a finite population value moves by much less over six doublings
# once N is in the thousands (its relative fluctuation shrinks as N grows), while softmax on mirrored Pareto
# keys gains many decades there (App. A, Prop. 1). The paper states no threshold; this one is ours.
DRIFT_THRESHOLD_DECADES = 0.1
# The measure names notebook 01 draws keys from: the heavy-tailed one (Pareto tails, where the moment
# condition of App. A decides finiteness) and the light-tailed control (every kernel finite).
HEAVY_MEASURE = "mirrored Pareto"
LIGHT_MEASURE = "shifted Gaussian"
# The level of the Kolmogorov-Smirnov test of the symlog tail against eq. (22).
SYMLOG_KS_LEVEL = 0.01


def drift_rows(log_norm, a_min: float, heavy_measure: str = HEAVY_MEASURE,
               doublings: int = DRIFT_DOUBLINGS) -> list[dict]:
    """One row per (kernel, measure): how far the running log-normalizer still moves at the largest N.

    ``log_norm`` maps (measure, kernel) to :func:`running_log_normalizer` paths of shape (P, N_max), P
    independent paths; rows come kernel by kernel, measures in their order of first appearance. The drift
    of a path is log10 D(N_max) - log10 D(N_max / 2^doublings). App. A predicts a finite population
    normalizer for a kernel of growth order q (``heavytail.names.GROWTH_ORDER``) on the heavy measure
    exactly when q < a_min, the smallest tail index (Prop. 3); on any other measure every kernel is finite.
    Each row: kernel, measure, predicted_finite, log10_D_at_Nmax_median, drift_decades_median,
    drift_decades_max (the largest |drift| over paths).
    """
    if not log_norm:
        raise ValueError("drift_rows needs at least one (measure, kernel) path set")
    window = 2**doublings
    measures = list(dict.fromkeys(m for m, _ in log_norm))
    kernels = list(dict.fromkeys(k for _, k in log_norm))
    rows = []
    for kname in kernels:
        q = GROWTH_ORDER[get_kernel(kname).growth]
        for mname in measures:
            if (mname, kname) not in log_norm:
                raise ValueError(f"log_norm has no paths for measure {mname!r} and kernel {kname!r}")
            ln = torch.as_tensor(log_norm[mname, kname], dtype=torch.float64)
            if ln.ndim != 2:
                raise ValueError(f"paths for ({mname!r}, {kname!r}) must have shape (P, N_max), got {tuple(ln.shape)}")
            n_max = ln.shape[-1]
            if n_max < window:
                raise ValueError(f"drift over {doublings} doublings needs N_max >= {window}, got N_max = {n_max}")
            drift = (ln[:, -1] - ln[:, n_max // window - 1]) / math.log(10)  # decades gained over the window
            finite = (q < a_min) if mname == heavy_measure else True
            rows.append({"kernel": kname, "measure": mname, "predicted_finite": finite,
                         "log10_D_at_Nmax_median": float(ln[:, -1].median() / math.log(10)),
                         "drift_decades_median": float(drift.median()), "drift_decades_max": float(drift.abs().max())})
    return rows


@dataclass(frozen=True)
class DriftFindings:
    """What notebook 01's drift rows show (App. A): which kernels keep growing on the heavy measure."""

    diverging: tuple[str, ...]  # heavy measure: median drift > threshold
    settled: tuple[str, ...]  # heavy measure: |median drift| <= threshold
    predicted_divergent: tuple[str, ...]  # heavy measure: App. A's moment condition fails (q >= a_min)
    agrees: bool  # the diverging kernels are exactly the predicted ones
    light_max_drift: float  # largest |median drift| over kernels on the light measure
    softmax_heavy: dict  # softmax's row on the heavy measure
    softmax_light: dict  # softmax's row on the light measure


def drift_findings(rows, heavy_measure: str = HEAVY_MEASURE, light_measure: str = LIGHT_MEASURE,
                   threshold: float = DRIFT_THRESHOLD_DECADES) -> DriftFindings:
    """Classify :func:`drift_rows` output. A kernel whose median drift is below -threshold (falling) is
    neither diverging nor settled. Raises when either measure has no rows or softmax is missing."""
    heavy = [r for r in rows if r["measure"] == heavy_measure]
    light = [r for r in rows if r["measure"] == light_measure]
    if not heavy or not light:
        raise ValueError(f"drift rows must cover both {heavy_measure!r} and {light_measure!r}; "
                         f"measures present: {sorted({r['measure'] for r in rows})}")

    def softmax(rs, m):
        found = [r for r in rs if r["kernel"] == "softmax"]
        if not found:
            raise ValueError(f"drift rows have no softmax row on {m!r}")
        return found[0]

    diverging = tuple(r["kernel"] for r in heavy if r["drift_decades_median"] > threshold)
    settled = tuple(r["kernel"] for r in heavy if abs(r["drift_decades_median"]) <= threshold)
    predicted = tuple(r["kernel"] for r in heavy if not r["predicted_finite"])
    return DriftFindings(diverging=diverging, settled=settled, predicted_divergent=predicted,
                         agrees=sorted(diverging) == sorted(predicted),
                         light_max_drift=max(abs(r["drift_decades_median"]) for r in light),
                         softmax_heavy=softmax(heavy, heavy_measure), softmax_light=softmax(light, light_measure))


def symlog_tail_rejected(pvalue: float, level: float = SYMLOG_KS_LEVEL) -> bool:
    """Whether the KS test rejects eq. (22) for the symlog tail at ``level`` (p <= level)."""
    return not pvalue > level


@dataclass(frozen=True)
class SymlogTail:
    """The survival of symlog(X) for X ~ Pareto(lambda, a) on a grid of t: empirical, eq. 22's, the
    Kolmogorov-Smirnov test against eq. 22, and the fitted exponential rate of the tail (eq. 22: rate a)."""

    t: torch.Tensor
    empirical_sf: torch.Tensor
    theory_sf: torch.Tensor
    ks: Any
    rate: float


def symlog_tail(n: int, a: float, generator: torch.Generator) -> SymlogTail:
    """Draw ``n`` Pareto(lambda, a) values and compare the tail of symlog(X) with eq. 22. The rate is the
    least-squares slope of log S over the t where S keeps >= 100 expected points, one unit above the seam."""
    import numpy as np
    import scipy.stats

    from heavytail.science.distributions import Pareto
    from heavytail.science.operators import LOCATION
    from heavytail.science.transforms import symlog

    sx = symlog(Pareto(LOCATION, a).sample((n,), generator=generator, dtype=torch.float64))
    t = torch.linspace(math.log1p(LOCATION), float(sx.max()), 400, dtype=torch.float64)
    emp = 1.0 - torch.searchsorted(sx.sort().values, t, right=True).to(torch.float64) / n
    theory = symlog_pareto_sf(t, LOCATION, a)
    ks = scipy.stats.kstest(sx.numpy(), lambda v: 1.0 - symlog_pareto_sf(torch.as_tensor(v), LOCATION, a).numpy())
    sel = (theory * n >= 100) & (t >= math.log1p(LOCATION) + 1.0)
    rate = -float(np.polyfit(t[sel].numpy(), np.log(emp[sel].numpy()), 1)[0])
    return SymlogTail(t, emp, theory, ks, rate)
