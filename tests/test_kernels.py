"""Every registered kernel (Table 1 and App. A's power ELU): values, positivity, C^1 at 0, NaN-free log g gradients."""

import math

import pytest
import torch

from heavytail import names
from heavytail.science import kernels
from heavytail.science.kernels import KERNEL_NAMES, get_kernel, power_elu_forms

# Every registered kernel, the tests' parametrisation: a new row is tested without editing this file.
ALL = names.kernel_names()

# Table 1 and App. A's power ELU (1 + elu(s))^q, written out independently of heavytail.science.kernels (plain
# Python floats): positive branch, negative branch, growth.
TABLE1 = {
    "softmax": (lambda s: math.exp(s), lambda s: math.exp(s), "exponential"),
    "squared_elu": (lambda s: (s + 1) ** 2, lambda s: math.exp(2 * s), "quadratic"),
    "linear_elu": (lambda s: s + 1, lambda s: math.exp(s), "linear"),
    "log_elu": (lambda s: math.log1p(s) + 1, lambda s: 1 / (1 - s), "logarithmic"),
    "elu_pow0.5": (lambda s: math.sqrt(s + 1), lambda s: math.exp(s / 2), "square root"),
    "elu_pow1.5": (lambda s: (s + 1) ** 1.5, lambda s: math.exp(1.5 * s), "power 1.5"),
    "elu_pow3": (lambda s: (s + 1) ** 3, lambda s: math.exp(3 * s), "cubic"),
    # Prieto et al.'s StableMax (an intervention kernel, not Table 1's)
    "stablemax": (lambda s: s + 1, lambda s: 1 / (1 - s), "linear (StableMax)"),
}


def test_registry_names_and_unknown_name():
    assert KERNEL_NAMES == ("softmax", "squared_elu", "linear_elu", "log_elu")  # Table 1, its order
    assert set(ALL) == set(TABLE1)  # every registered kernel has its independent formulas here
    with pytest.raises(ValueError) as err:
        get_kernel("relu")
    for name in ALL:
        assert name in str(err.value)
    assert "relu" in str(err.value)


@pytest.mark.parametrize("name", ALL)
def test_values_match_table1(name):
    kern = get_kernel(name)
    pos, neg, growth = TABLE1[name]
    assert kern.growth == growth
    s = torch.tensor([-30.0, -3.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 3.0, 30.0], dtype=torch.float64)
    expected = torch.tensor([pos(x) if x > 0 else neg(x) for x in s.tolist()], dtype=torch.float64)
    torch.testing.assert_close(kern.g(s), expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(kern.log_g(s), expected.log(), rtol=1e-12, atol=1e-300)
    assert kern.g(torch.zeros((), dtype=torch.float64)).item() == 1.0


@pytest.mark.parametrize("name", ALL)
def test_strictly_positive_and_c1_at_zero(name):
    kern = get_kernel(name)
    # -200: the cubic ELU's e^{3s} stays a normal float64 there (e^{-1000} would round to 0).
    s = torch.linspace(-200, 700, 18001, dtype=torch.float64)
    assert (kern.g(s) > 0).all()
    # One-sided difference quotients at 0 agree to O(h) (g'' is bounded near 0): C^1 (g'(0) = q for the power ELU).
    h = 1e-6
    zero = torch.zeros((), dtype=torch.float64)
    right = (kern.g(zero + h) - kern.g(zero)) / h
    left = (kern.g(zero) - kern.g(zero - h)) / h
    assert abs(right.item() - left.item()) < 10 * h
    # and equal to the analytic derivative of log g at 0 (g(0) = 1)
    assert abs(right.item() - kern.dlog_g(zero).item()) < 10 * h


@pytest.mark.parametrize("name", ALL)
def test_log_g_finite_gradients_over_whole_float32_range(name):
    kern = get_kernel(name)
    mags = torch.logspace(-30, 30, 121)
    s = torch.cat([-mags, torch.tensor([-1e30, 0.0, 3e38]), mags]).float().requires_grad_()
    lg = kern.log_g(s)
    (grad,) = torch.autograd.grad(lg.sum(), s)
    assert torch.isfinite(lg).all(), f"{name}: non-finite log g"
    assert torch.isfinite(grad).all(), f"{name}: NaN/inf leaked into the gradient of log g"
    # the hand-written derivative used by the flash backward agrees with autograd
    # atol: log-ELU's slope at 3e38 is ~4e-41, a float32 denormal that autograd's chain rule may flush.
    torch.testing.assert_close(kern.dlog_g(s.detach()), grad, rtol=1e-6, atol=1e-38)


@pytest.mark.parametrize("name", ALL)
def test_dlog_g_matches_autograd_float64(name):
    kern = get_kernel(name)
    s = torch.linspace(-50, 50, 1001, dtype=torch.float64).requires_grad_()
    (grad,) = torch.autograd.grad(kern.log_g(s).sum(), s)
    torch.testing.assert_close(kern.dlog_g(s.detach()), grad, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ALL)
def test_g_ratio_is_g_over_the_row_maximum_in_float32(name):
    """g(s)/g(m) (the flash backend's weights before normalization, eq. 7) against float64
    exp(log g(s) - log g(m)), for row maxima from -1e30 to 3e38 and every score below them."""
    kern = get_kernel(name)
    mags = torch.logspace(-6, 30, 73, dtype=torch.float64)
    pool = torch.cat([-mags, torch.tensor([-1e30, 0.0, 3e38], dtype=torch.float64), mags])
    for m in (-1e30, -1e4, -60.0, -1.0, 0.0, 0.5, 30.0, 1e4, 1e8, 3e38):
        if name == "softmax" and m > 60:
            continue  # e^{s - m} underflows to 0 for every s far below m: nothing to compare
        s = torch.cat([pool[pool <= m], torch.tensor([m], dtype=torch.float64)])
        m32 = torch.tensor([m], dtype=torch.float32)
        log_gm = kern.log_g(m32)
        got = kern.g_ratio(s.float(), log_gm, kern.ratio_row(m32, log_gm)).double()
        want = torch.exp(kern.log_g(s) - kern.log_g(torch.tensor([m], dtype=torch.float64)))
        assert torch.isfinite(got).all() and (got >= 0).all() and (got <= 1 + 1e-6).all(), (m, got)
        assert got[-1] == pytest.approx(1.0, rel=1e-6), m  # the maximum itself has ratio 1
        # float32 rounding of s and of log g(m): a few ulps relative where the weight is a normal float32.
        normal = want > 1e-30
        torch.testing.assert_close(got[normal], want[normal], rtol=2e-5, atol=0)
        assert (got[~normal] <= 1e-29).all(), m


@pytest.mark.parametrize("q, name", [(1, "linear_elu"), (2, "squared_elu")])
def test_power_elu_at_one_and_two_is_table1_bit_for_bit(q, name):
    """App. A's family contains Table 1's linear and squared ELU: the generic form at q = 1, 2 gives the same float32
    g, log g and its derivative as the hand-written kernels, on scores -1e30 to 3e38, and their flash weights
    g(s)/g(m) to float32 round-off (the generic one is exp(q log base), see heavytail.science.kernels, whose
    relative error is about |log weight| ulps: 4e-6 at a weight of 1e-30)."""
    power, table1 = power_elu_forms(q), get_kernel(name)
    mags = torch.logspace(-30, 38.4, 4001)
    s = torch.cat([-mags, torch.tensor([-1e30, -0.0, 0.0, 3e38]), mags, torch.linspace(-60, 60, 24001)]).float()
    for fn in ("g", "log_g", "dlog_g"):
        assert torch.equal(getattr(power, fn)(s), getattr(table1, fn)(s)), fn
    for m in (-1e30, -3.0, 0.0, 0.5, 1e4, 3e38):
        m32 = torch.tensor([m], dtype=torch.float32)
        log_gm = table1.log_g(m32)
        below = s[s <= m]
        torch.testing.assert_close(power.g_ratio(below, log_gm, power.ratio_row(m32, log_gm)),
                                   table1.g_ratio(below, log_gm, table1.ratio_row(m32, log_gm)), rtol=1e-5, atol=1e-37)


@pytest.mark.parametrize("name", ALL)
def test_growth_order_in_the_names_table_is_the_kernels(name):
    """The order q of a kernel's row (App. A: E[g(S)] finite on Pareto(a) scores iff q < a) is its elasticity
    s (log g)'(s) far out, s = 1e30: q for (s + 1)^q, about 1 / log s for log-ELU (order 0), s for softmax."""
    order = names.KERNEL_ROWS[name].order
    s = torch.tensor(1e30, dtype=torch.float64)
    elasticity = (s * get_kernel(name).dlog_g(s)).item()
    if math.isinf(order):
        assert elasticity > 1e29
    else:
        assert elasticity == pytest.approx(order, abs=0.02)


@pytest.mark.parametrize("q, name", [(1, "linear_elu"), (2, "squared_elu")])
def test_power_elu_flash_weights_at_one_and_two_are_table1_bit_for_bit(q, name):
    """At a q that is a multiple of 1/2 the power ELU's weight (1 + s)^q / (1 + m)^q is a product of the base
    (no exp(q log base)), so at q = 1, 2 it is Table 1's linear and squared ELU weight exactly, -1e30 to 3e38."""
    power, table1 = power_elu_forms(q), get_kernel(name)
    mags = torch.logspace(-30, 38.4, 4001)
    s = torch.cat([-mags, torch.tensor([-1e30, -0.0, 0.0, 3e38]), mags, torch.linspace(-60, 60, 24001)]).float()
    for m in (-1e30, -3.0, 0.0, 0.5, 1e4, 3e38):
        m32 = torch.tensor([m], dtype=torch.float32)
        log_gm = table1.log_g(m32)
        below = s[s <= m]
        assert torch.equal(power.g_ratio(below, log_gm, power.ratio_row(m32, log_gm)),
                           table1.g_ratio(below, log_gm, table1.ratio_row(m32, log_gm))), m


@pytest.mark.parametrize("q", [0.5, 1.5, 3.0, 0.7, 2.5])
def test_power_elu_weight_products_and_exp_log_agree_with_float64(q):
    """Both ways of computing b^q (products with at most one square root where 2q is whole, exp(q log b) otherwise)
    stay within a few float32 ulps of the float64 power over the whole base range (0, 1]."""
    b = torch.cat([torch.logspace(-38, 0, 20001), torch.rand(10000, generator=torch.Generator().manual_seed(0))])
    b = b.float().clamp(min=torch.finfo(torch.float32).tiny)
    got = kernels._base_power(q)(b).double()
    want = b.double() ** q
    normal = want > 1e-30
    # exp(q log b) inherits log b's float32 rounding times q: about q |log b| ulps relative; products: about q.
    ulps = (q * b.double().log().abs() + 4) * 2.0**-23
    rel = (got - want).abs() / want
    assert (rel[normal] <= ulps[normal]).all(), (rel[normal] / ulps[normal]).max()
