"""Checks of heavytail.science.metrics: Wasserstein-2, Hill (eq. 38) against exact Pareto theory, eq. 41, the
sampling floor (eq. 11), the bootstrap ratio interval (eqs. 36-37 and App. H.2's bold rule) and eq. 32.

Statistical checks use fixed seeds and tolerances of 4 standard errors computed from the number of
repetitions (a correct implementation fails one with probability ~6e-5).
"""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

from heavytail.science import metrics
from heavytail.science.metrics import (
    hill_error_discrepancy,
    hill_estimate,
    hill_k,
    hill_k_from_seam,
    noise_units,
    ratio_interval,
    summarize,
    wasserstein2_1d,
)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_contract_names_are_public():
    for name in ("energy_distance", "energy_distance_1d", "wasserstein2_1d", "hill_estimate", "hill_k",
                 "hill_error_discrepancy", "RatioInterval", "ratio_interval", "noise_units",
                 "check_finite"):
        assert name in metrics.__all__ and hasattr(metrics, name)


# ----------------------------------------------------------------------------------- W2
def test_wasserstein2_matches_optimal_assignment():
    rng = np.random.default_rng(0)
    x, y = rng.standard_t(2, size=40), rng.standard_t(2, size=40) + 0.5
    cost = (x[:, None] - y[None, :]) ** 2
    rows, cols = linear_sum_assignment(cost)  # brute-force optimal coupling, independent of sorting
    ref = math.sqrt(cost[rows, cols].mean())
    assert wasserstein2_1d(torch.tensor(x), torch.tensor(y)).item() == pytest.approx(ref, rel=1e-12)


def test_wasserstein2_batched_shift_and_errors():
    x = torch.randn(3, 100, generator=gen(1), dtype=torch.float64)
    out = wasserstein2_1d(x, x + 2.5)
    torch.testing.assert_close(out, torch.full((3,), 2.5, dtype=torch.float64))
    with pytest.raises(ValueError, match="equal-size"):
        wasserstein2_1d(torch.zeros(5), torch.zeros(6))
    with pytest.raises(ValueError, match="non-finite"):
        wasserstein2_1d(torch.tensor([1.0, float("nan")]), torch.zeros(2))


# ----------------------------------------------------------------------------------- Hill
def test_hill_k_rules():
    assert hill_k(16384, 0.1) == 1638 and hill_k(65536, 0.01) == 655  # App. J.1
    assert hill_k(100, 0.29) == 29  # floor, robust to 0.29 * 100 = 28.999999999999996
    assert hill_k_from_seam(256, 0.99) == 3 and hill_k_from_seam(256, 0.999) == 2  # App. F.1
    assert hill_k_from_seam(65536, 0.5) == 32768
    for bad in (dict(n=100, phi=0.0), dict(n=100, phi=1.0), dict(n=10, phi=0.05), dict(n=1, phi=0.5)):
        with pytest.raises(ValueError):
            hill_k(**bad)
    with pytest.raises(ValueError, match="q0"):
        hill_k_from_seam(100, 1.0)


def test_hill_matches_the_formula_and_applies_the_floor():
    z = torch.tensor([3.0, 10.0, -3.0, 5.0, 0.5], dtype=torch.float64)
    # k = 2: Z_(1) = 10, Z_(2) = 5, Z_(3) = 3
    assert hill_estimate(z, 2).item() == pytest.approx(1 / ((math.log(10 / 3) + math.log(5 / 3)) / 2))
    # k = 4: Z_(5) = -3 is floored at 1e-16 (App. J.1)
    logs = [math.log(v) for v in (10, 5, 3, 0.5)]
    assert hill_estimate(z, 4).item() == pytest.approx(1 / (sum(logs) / 4 - math.log(1e-16)))
    for k in (0, 5, 2.5):
        with pytest.raises(ValueError, match="1 <= k < N"):
            hill_estimate(z, k)
    assert hill_estimate(torch.ones(2, 3, 50), 10).shape == (2, 3)  # batched along leading dims


def test_hill_bias_and_spread_on_exact_pareto_samples():
    """Given Z_(k+1), the k log-spacings of a Pareto(lam, a) sample are i.i.d. Exp(a), so 1/a_hat ~ Gamma(k, k a)
    and a_hat is inverse-gamma: E[a_hat] = a k/(k-1) (bias a/(k-1)), sd = a k / ((k-1) sqrt(k-2)) ~ a/sqrt(k)."""
    a, lam, k, n, reps = 1.5, 2.0, 40, 400, 4000
    u = torch.rand(reps, n, generator=gen(2), dtype=torch.float64)
    est = hill_estimate(lam * u.pow(-1 / a), k)
    mean_th = a * k / (k - 1)
    sd_th = a * k / ((k - 1) * math.sqrt(k - 2))
    assert abs(est.mean().item() - mean_th) < 4 * sd_th / math.sqrt(reps)
    assert abs(est.mean().item() - a) > 0.5 * a / (k - 1)  # the bias is really there (it is 8 s.e. here)
    # sd of the sample sd: sigma sqrt((kurt - 1) / (4 R)); excess kurtosis of InvGamma(k) = 6(5k-11)/((k-3)(k-4))
    kurt = 3 + 6 * (5 * k - 11) / ((k - 3) * (k - 4))
    assert abs(est.std().item() - sd_th) < 4 * sd_th * math.sqrt((kurt - 1) / (4 * reps))


# ----------------------------------------------------------------------------------- eq. 41
def brute_u_statistic(e, f):
    n, m = len(e), len(f)
    cross = sum(abs(a - b) for a in e for b in f)
    within_e = sum(abs(e[i] - e[j]) for i in range(n) for j in range(n) if i != j)
    within_f = sum(abs(f[i] - f[j]) for i in range(m) for j in range(m) if i != j)
    return 2 * cross / (n * m) - within_e / (n * (n - 1)) - within_f / (m * (m - 1))


def test_hill_error_discrepancy_matches_eq_41():
    rng = np.random.default_rng(3)
    e, f = rng.exponential(size=30), rng.exponential(size=23) * 1.3
    assert hill_error_discrepancy(e, f) == pytest.approx(brute_u_statistic(list(e), list(f)), rel=1e-12)
    assert hill_error_discrepancy(torch.tensor(e), torch.tensor(e)) < 0  # identical pools: -(2/n) mean |e - e'|


def test_hill_error_discrepancy_is_unbiased_and_can_be_negative():
    rng = np.random.default_rng(4)
    reps, n = 3000, 16
    vals = np.array([hill_error_discrepancy(rng.exponential(size=n), rng.exponential(size=n)) for _ in range(reps)])
    se = vals.std(ddof=1) / math.sqrt(reps)
    assert abs(vals.mean()) < 4 * se  # same law: expectation 0 at finite n
    assert (vals < 0).mean() > 0.2
    shifted = [hill_error_discrepancy(rng.exponential(size=n), rng.exponential(size=n) + 1.0) for _ in range(200)]
    assert np.mean(shifted) > 10 * se
    with pytest.raises(ValueError, match="NaN or inf"):
        hill_error_discrepancy([1.0, np.inf], [1.0, 2.0])


# ------------------------------------------------------------------------- floor, bootstrap
def test_summarize():
    assert summarize([4.0, 1.0, 3.0, 2.0], "median") == 2.5
    assert summarize([4.0, 1.0, 3.0, 2.0], "mean") == 2.5 and summarize([1.0, 2.0, 9.0], "median") == 2.0
    with pytest.raises(ValueError, match="not one of"):
        summarize([1.0], "mode")


def eq37_by_hand(d, d_hat, summary, n_resamples, rng):
    i = rng.integers(0, len(d), (n_resamples, len(d)))
    j = rng.integers(0, len(d_hat), (n_resamples, len(d_hat)))
    r = summary(d[i], axis=1) / summary(d_hat[j], axis=1)
    return np.quantile(r, [0.025, 0.975])


@pytest.mark.parametrize("statistic", ["median", "mean"])
def test_ratio_interval_is_eq_37(statistic):
    """scipy's two-sample percentile bootstrap agrees with a hand-written eq. 37 loop up to Monte Carlo error:
    the endpoint spread is measured from 20 hand-written runs and 4 of its standard deviations are allowed."""
    rng = np.random.default_rng(6)
    d, d_hat = rng.lognormal(0.2, 0.5, size=128), rng.lognormal(0.0, 0.5, size=128)
    summary = np.median if statistic == "median" else np.mean
    res = ratio_interval(d, d_hat, statistic=statistic, n_resamples=2000, seed=0)
    assert res.ratio == pytest.approx(summary(d) / summary(d_hat), rel=1e-12)
    assert res.reference == pytest.approx(summary(d_hat))
    hand = np.array([eq37_by_hand(d, d_hat, summary, 2000, np.random.default_rng(100 + s)) for s in range(20)])
    spread = hand.std(axis=0, ddof=1)
    assert abs(res.low - hand[:, 0].mean()) < 4 * spread[0] * math.sqrt(1 + 1 / 20)
    assert abs(res.high - hand[:, 1].mean()) < 4 * spread[1] * math.sqrt(1 + 1 / 20)
    assert ratio_interval(d, d_hat, statistic=statistic, seed=0) == res  # seeded: reproducible


def test_bold_rule_on_hand_made_pools():
    rng = np.random.default_rng(7)
    ref = rng.lognormal(0.0, 0.3, size=128)
    below = ratio_interval(0.5 * rng.lognormal(0.0, 0.3, size=128), ref)  # interval lies below 1
    assert below.high < 1 and below.bold
    same = ratio_interval(rng.lognormal(0.0, 0.3, size=128), ref)  # contains 1
    assert same.low <= 1 <= same.high and same.bold
    above = ratio_interval(3.0 * rng.lognormal(0.0, 0.3, size=128), ref)  # lies above 1
    assert above.low > 1 and not above.bold
    lo, hi = above.on_distance_scale()
    assert lo == pytest.approx(above.low * np.median(ref)) and hi == pytest.approx(above.high * np.median(ref))


def test_ratio_interval_with_diverged_trials_and_bad_pools():
    rng = np.random.default_rng(8)
    ref = rng.lognormal(size=64)
    d = rng.lognormal(size=64)
    d[:5] = np.inf  # a diverged trial scores +inf (evaluate.py): the median survives, the mean does not
    med = ratio_interval(d, ref, "median", n_resamples=500)
    assert math.isfinite(med.ratio) and math.isfinite(med.high)
    mean = ratio_interval(d, ref, "mean", n_resamples=500)
    assert mean.ratio == math.inf and mean.high == math.inf and not mean.bold
    with pytest.raises(ValueError, match="NaN"):
        ratio_interval([1.0, np.nan], ref)
    with pytest.raises(ValueError, match="d_hat holds"):
        ratio_interval(ref, [1.0, np.inf])
    with pytest.raises(ValueError, match="positive"):
        ratio_interval(ref, [0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="not one of"):
        ratio_interval(ref, ref, "trimmed")


# ----------------------------------------------------------------------------------- eq. 32
def test_noise_units_by_hand():
    a_grid = [1.2, 1.5, 1.8]
    values = np.array([[1.0, 3.0, 5.0], [0.0, 1.0, 2.0], [2.0, 2.0, np.inf]])  # (A, R)
    out = noise_units(values, a_grid, a_ref=1.5)
    # s = (2, 1, nan): varsigma = median{2, 1} = 1.5; mu = (3, 1, inf); j* = 1
    assert out.varsigma == pytest.approx(1.5)
    np.testing.assert_allclose(out.z[:2], [(3 - 1) / 1.5, 0.0])
    assert out.z[2] == np.inf
    batched = noise_units(np.stack([values, 2 * values]), a_grid)
    np.testing.assert_allclose(batched.z[1, :2], out.z[:2])  # z is scale-free
    with pytest.raises(ValueError, match="A = len"):
        noise_units(values, [1.0, 1.5])
    with pytest.raises(ValueError, match="no finite"):
        noise_units(np.full((3, 3), np.inf), a_grid)


def test_hill_path_is_the_hill_estimate_at_every_k():
    from heavytail.science.metrics import hill_path

    gen = torch.Generator().manual_seed(7)
    z = torch.rand(3, 500, generator=gen, dtype=torch.float64).pow(-1 / 1.7)
    path = hill_path(z, 100)
    for k in (1, 2, 10, 57, 100):
        torch.testing.assert_close(path[..., k - 1], hill_estimate(z, k), rtol=1e-12, atol=0)


def test_hill_band_miss_is_small_on_pareto_samples_and_large_on_the_wrong_index():
    from heavytail.science.metrics import hill_band_miss

    gen = torch.Generator().manual_seed(8)
    n, trials = 4000, 40
    z = torch.rand(trials, n, generator=gen, dtype=torch.float64).pow(-1 / 2.0)  # exact Pareto(2) above 1
    # the band is pointwise, so even the true index is missed at a few k; a mean share under 15 % over
    # trials (k = 20 .. 400) is far below the wrong index's
    right = hill_band_miss(z, 2.0, 20, 400)
    wrong = hill_band_miss(z, 3.0, 20, 400)
    assert float(right.mean()) < 0.15 and float(wrong.mean()) > 0.8
