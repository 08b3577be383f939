"""Running normalizers (App. A) and the symlog tail (eq. 22)."""

from __future__ import annotations

import math

import pytest
import torch

from heavytail.distributions import Pareto
from heavytail.integrability import gaussian_softmax_log_normalizer, running_log_normalizer, symlog_pareto_sf
from heavytail.kernels import KERNEL_NAMES, get_kernel


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_running_normalizer_is_the_running_mean_of_g(name):
    s = torch.linspace(-5, 5, 101, dtype=torch.float64)[torch.randperm(101, generator=torch.Generator().manual_seed(0))]
    g = get_kernel(name).g(s)
    direct = torch.log(torch.cumsum(g, 0) / torch.arange(1, 102))
    assert torch.allclose(running_log_normalizer(s, name), direct, rtol=1e-12, atol=1e-12)


def test_softmax_normalizer_stays_finite_where_exp_overflows():
    s = torch.tensor([0.0, 1e4, 2e4], dtype=torch.float64)
    ln = running_log_normalizer(s, "softmax")
    assert torch.isfinite(ln).all()
    assert math.isclose(float(ln[-1]), 2e4 - math.log(3), rel_tol=1e-12)
    with pytest.raises(ValueError, match="non-finite"):
        running_log_normalizer(torch.tensor([float("inf")]), "softmax")
    with pytest.raises(ValueError, match="valid kernels"):
        running_log_normalizer(s, "relu")


def test_gaussian_normalizer_matches_monte_carlo():
    # Mean of e^{<b,Y>} over n draws; its standard error is the sd of e^{<b,Y>} over sqrt(n); allow 4 of them.
    gen = torch.Generator().manual_seed(0)
    b, mu, std = torch.tensor([0.5, 0.5]), torch.tensor([1.0, 1.0]), torch.tensor([1.5, 2.5])
    y = mu + std * torch.randn(400_000, 2, generator=gen, dtype=torch.float64)
    e = torch.exp(y @ b.double())
    exact = math.exp(float(gaussian_softmax_log_normalizer(b, mu, torch.diag(std**2))))
    assert abs(float(e.mean()) - exact) < 4 * float(e.std()) / math.sqrt(len(e))


def test_symlog_tail_is_the_pareto_survival_at_symexp_t():
    # P(sigma(X) > t) = P(X > e^t - 1) (sigma is increasing), independently of eq. (22)'s algebra.
    for lam, a in ((1.0, 1.5), (2.0, 2.7)):
        t = torch.linspace(math.log1p(lam), 12, 50, dtype=torch.float64)
        assert torch.allclose(symlog_pareto_sf(t, lam, a), Pareto(lam, a).sf(torch.expm1(t)), rtol=1e-10)
    assert float(symlog_pareto_sf(torch.tensor(0.1), 1.0, 1.5)) == 1.0
    with pytest.raises(ValueError, match="tail_index"):
        symlog_pareto_sf(torch.tensor(1.0), 1.0, -1.0)
