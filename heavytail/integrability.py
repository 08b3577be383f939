"""Empirical attention normalizers and the symlog tail: the checks behind App. A (Prop. 1) and App. C.3.

For a query s and key/value measure nu, attention with kernel g (eq. 7) divides by the population
normalizer D_g(s; nu) = E_{y ~ nu} g(<b, y>) with b = K^T Q s / sqrt(d_K) (App. A). On an ensemble of N
draws this is the empirical mean D_g(s; nu_N) = N^-1 sum_j g(<b, y_j>), which converges as N grows exactly
when the population integral is finite. For softmax on mirrored Pareto measures it is infinite for every
b != 0 (App. A), so the empirical normalizer keeps jumping up with each new extreme draw.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from heavytail.energy import check_finite
from heavytail.kernels import get_kernel


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
