"""Running normalizers (App. A), the drift verdict of notebook 01 and the symlog tail (eq. 22)."""

from __future__ import annotations

import math

import pytest
import torch

from heavytail.science.distributions import Pareto
from heavytail.studies.integrability import (DRIFT_THRESHOLD_DECADES, SYMLOG_KS_LEVEL, drift_findings, drift_rows,
                                     gaussian_softmax_log_normalizer, running_log_normalizer, symlog_pareto_sf,
                                     symlog_tail_rejected)
from heavytail.science.kernels import KERNEL_NAMES, get_kernel


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


# ------------------------------------------------------------------- notebook 01's drift verdict
HEAVY, LIGHT = "mirrored Pareto", "shifted Gaussian"


def _paths(drift_decades, n_max=256, n_paths=3, start=0.0):
    """(P, N_max) log-normalizer paths equal to ``start`` (log10 units) up to N_max / 2^6 and rising linearly
    to start + drift at N_max: drift_rows must read exactly ``drift_decades`` off them."""
    base = torch.full((n_paths, n_max), start * math.log(10), dtype=torch.float64)
    lo = n_max // 64 - 1
    base[:, lo:] += torch.linspace(0, drift_decades * math.log(10), n_max - lo, dtype=torch.float64)
    return base


def _log_norm(heavy, light=None):
    light = light or {k: 0.0 for k in heavy}
    out = {(HEAVY, k): _paths(d, start=1.0) for k, d in heavy.items()}
    out.update({(LIGHT, k): _paths(d) for k, d in light.items()})
    return out


def test_drift_rows_read_the_last_six_doublings_and_the_moment_condition():
    rows = drift_rows(_log_norm({"softmax": 40.0, "squared_elu": 0.5, "linear_elu": 0.02, "log_elu": -0.01}), a_min=1.5)
    assert [(r["kernel"], r["measure"]) for r in rows] == [(k, m) for k in KERNEL_NAMES for m in (HEAVY, LIGHT)]
    by = {(r["kernel"], r["measure"]): r for r in rows}
    assert math.isclose(by["softmax", HEAVY]["drift_decades_median"], 40.0, rel_tol=1e-12)
    assert math.isclose(by["softmax", HEAVY]["log10_D_at_Nmax_median"], 41.0, rel_tol=1e-12)
    assert math.isclose(by["log_elu", HEAVY]["drift_decades_max"], 0.01, rel_tol=1e-9)
    # App. A: finite iff q < a_min on the heavy measure, q = inf, 2, 1, 0; always finite on the light one.
    assert [by[k, HEAVY]["predicted_finite"] for k in KERNEL_NAMES] == [False, False, True, True]
    assert all(by[k, LIGHT]["predicted_finite"] for k in KERNEL_NAMES)
    # a_min = 2.5: the quadratic kernel's second moment now exists.
    rows = drift_rows(_log_norm({k: 0.0 for k in KERNEL_NAMES}), a_min=2.5)
    assert [r["predicted_finite"] for r in rows if r["measure"] == HEAVY] == [False, True, True, True]


def test_drift_rows_take_the_median_over_paths_and_reject_short_paths():
    ln = torch.cat([_paths(5.0, n_paths=1), _paths(0.0, n_paths=2)])  # one jumping path out of three
    row = drift_rows({(HEAVY, "softmax"): ln, (LIGHT, "softmax"): _paths(0.0)}, a_min=1.5)[0]
    assert row["drift_decades_median"] == 0.0 and math.isclose(row["drift_decades_max"], 5.0, rel_tol=1e-12)
    with pytest.raises(ValueError, match="N_max >= 64"):
        drift_rows({(HEAVY, "softmax"): torch.zeros(2, 32)}, a_min=1.5)
    with pytest.raises(ValueError, match="no paths"):
        drift_rows({(HEAVY, "softmax"): _paths(0.0), (LIGHT, "log_elu"): _paths(0.0)}, a_min=1.5)


def test_softmax_and_squared_elu_diverging_as_predicted_agrees():
    f = drift_findings(drift_rows(_log_norm({"softmax": 40.0, "squared_elu": 0.5, "linear_elu": 0.02,
                                             "log_elu": -0.01}, {k: 0.003 for k in KERNEL_NAMES}), a_min=1.5))
    assert f.diverging == ("softmax", "squared_elu") and f.settled == ("linear_elu", "log_elu")
    assert f.predicted_divergent == ("softmax", "squared_elu") and f.agrees
    assert math.isclose(f.light_max_drift, 0.003, rel_tol=1e-9)
    assert f.softmax_heavy["measure"] == HEAVY and f.softmax_light["measure"] == LIGHT


def test_a_predicted_finite_kernel_that_diverges_disagrees():
    f = drift_findings(drift_rows(_log_norm({"softmax": 40.0, "squared_elu": 0.5, "linear_elu": 0.3,
                                             "log_elu": 0.0}), a_min=1.5))
    assert f.diverging == ("softmax", "squared_elu", "linear_elu") and not f.agrees
    # ... and so does a predicted-divergent kernel that settles (softmax flat on the heavy measure).
    f = drift_findings(drift_rows(_log_norm({"softmax": 0.05, "squared_elu": 0.5, "linear_elu": 0.0,
                                             "log_elu": 0.0}), a_min=1.5))
    assert f.diverging == ("squared_elu",) and "softmax" in f.settled and not f.agrees


def test_the_threshold_is_inclusive_for_settled_and_a_falling_kernel_is_neither():
    d = DRIFT_THRESHOLD_DECADES
    rows = [{"kernel": k, "measure": HEAVY, "predicted_finite": k != "softmax", "log10_D_at_Nmax_median": 0.0,
             "drift_decades_median": v, "drift_decades_max": abs(v)}
            for k, v in (("softmax", 2 * d), ("squared_elu", d), ("linear_elu", -d), ("log_elu", -2 * d))]
    rows += [{**r, "measure": LIGHT, "predicted_finite": True, "drift_decades_median": -0.2} for r in rows]
    f = drift_findings(rows)
    assert f.diverging == ("softmax",) and f.settled == ("squared_elu", "linear_elu") and f.agrees
    assert f.light_max_drift == 0.2  # the largest |drift|, a falling one included
    with pytest.raises(ValueError, match="must cover both"):
        drift_findings([r for r in rows if r["measure"] == HEAVY])
    with pytest.raises(ValueError, match="no softmax row"):
        drift_findings([r for r in rows if r["kernel"] != "softmax"])


def test_real_running_normalizers_separate_softmax_from_log_elu():
    # 2^14 mirrored Pareto keys at indices (2.5, 1.5): softmax's running normalizer gains many decades over the
    # last six doublings (App. A); log-ELU's (q = 0) moves by less than the threshold. Fixed seed, deterministic.
    from heavytail.science.distributions import MirroredPareto

    y = MirroredPareto(1.0, torch.tensor([2.5, 1.5], dtype=torch.float64)).sample(
        (3, 2**14, 2), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = y @ torch.tensor([0.5, 0.5], dtype=torch.float64)
    log_norm = {(HEAVY, k): running_log_normalizer(s, k) for k in ("softmax", "log_elu")}
    log_norm.update({(LIGHT, k): running_log_normalizer(torch.randn(3, 2**14, dtype=torch.float64), k)
                     for k in ("softmax", "log_elu")})
    f = drift_findings(drift_rows(log_norm, a_min=1.5))
    assert f.diverging == ("softmax",) and f.settled == ("log_elu",) and f.agrees
    assert f.softmax_heavy["drift_decades_median"] > 10 * DRIFT_THRESHOLD_DECADES


def test_symlog_ks_verdict_rejects_at_the_level():
    assert symlog_tail_rejected(0.001) and symlog_tail_rejected(SYMLOG_KS_LEVEL)
    assert not symlog_tail_rejected(0.5)


def test_symlog_tail_matches_eq_22_on_pareto_draws():
    from heavytail.studies.integrability import symlog_tail

    tail = symlog_tail(20000, 1.5, torch.Generator().manual_seed(0))
    # KS statistic of a correct law at n = 20000 is of order 1/sqrt(n) = 0.007; the tail's rate is a
    assert tail.ks.pvalue > 0.01 and abs(tail.rate - 1.5) < 0.3
    # and the test can fail: against a Pareto of index 3 the same comparison rejects
    heavy = symlog_tail(20000, 3.0, torch.Generator().manual_seed(0))
    assert abs(heavy.rate - 1.5) > 0.5
