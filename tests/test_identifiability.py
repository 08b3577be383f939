"""Estimators of App. D.3 (Props. 4-6) on samples with known parameters, and notebook 03's findings.

Tolerances: every estimator is built on the coordinate-wise median, whose standard error is
1 / (2 f(c) sqrt(N)) per coordinate, with the marginal density at the center f(c) >= ~0.1 over Pi; the
tail-direction step converges at least as fast. So single-instance errors are O(1/sqrt(N)) with a
constant of a few; we allow 8/sqrt(N) (about 4x the worst error seen over 16 instances per case).
"""

from __future__ import annotations

import math

import pytest
import torch

from heavytail.studies import identifiability as idf
from heavytail.science.operators import EXCHANGE, Benchmark, Trials, qud_matrix, shear_matrix

N = 16384
TOL = 8 / math.sqrt(N)


def _inputs(op, fam, trials, n=N, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return Benchmark(op, fam).sample_inputs(trials, n, generator=gen, dtype=torch.float64)


def _shear_trials(j, k, params):
    j = torch.as_tensor(j, dtype=torch.float64)
    k = torch.as_tensor(k, dtype=torch.float64)
    m = shear_matrix(j, k)
    p = torch.tensor([params] * len(j), dtype=torch.float64)
    return Trials(torch.stack([j, k], -1), p, m, m @ EXCHANGE)


def test_center_is_the_symmetry_center_even_without_a_mean():
    trials = _shear_trials([0.3], [0.5], (2.0, 1.0000001))  # heavy axis at the 1 + eps end: no useful mean
    x = _inputs("sheared_swap", "mirrored_pareto", trials)[0]
    c_true = trials.T_in[0] @ torch.ones(2, dtype=torch.float64)
    assert (idf.center(x) - c_true).abs().max() < TOL


def test_eq27_is_exact_on_the_population_center():
    j, k = torch.tensor([0.4, -0.8]), torch.tensor([0.3, 0.9])
    c = shear_matrix(j, k) @ torch.ones(2)
    k_hat, j_hat = idf.shear_from_center(c)
    assert torch.allclose(k_hat, k, atol=1e-6) and torch.allclose(j_hat, j, atol=1e-6)


@pytest.mark.parametrize("fam", ["mirrored_pareto", "gaussian"])
def test_shear_recovered_off_the_edge(fam):
    params = (2.5, 1.5) if fam == "mirrored_pareto" else (1.5, 2.5)
    trials = _shear_trials([-0.6, 0.7], [0.0, 0.8], params)
    x = _inputs("sheared_swap", fam, trials)
    for i in range(2):
        assert idf.relative_error(idf.estimate_shear(x[i], fam), trials.T_in[i]) < TOL


@pytest.mark.parametrize("fam,params", [("mirrored_pareto", (2.5, 1.5)), ("mirrored_pareto", (2.0, 2.0)),
                                        ("gaussian", (1.5, 2.5)), ("gaussian", (2.0, 2.0))])
def test_shear_edge_recovers_j_where_eq27_divides_by_zero(fam, params):
    j = [-0.7, 0.2, 0.9]
    trials = _shear_trials(j, [-1.0] * 3, params)
    x = _inputs("sheared_swap", fam, trials)
    for i in range(3):
        c = idf.center(x[i])
        assert abs(float(c[1])) < TOL  # we really are on the edge
        assert abs(float(idf.shear_edge_j(x[i], fam)) - j[i]) < TOL
        assert idf.relative_error(idf.estimate_shear(x[i], fam), trials.T_in[i]) < TOL


def test_inverse_matrix_recovered_including_equal_indices():
    theta = torch.tensor([-0.6, 0.1, 0.5], dtype=torch.float64)
    s = torch.tensor([0.3, -0.3, 0.0], dtype=torch.float64)
    l1 = torch.tensor([0.8, 1.4, 1.0], dtype=torch.float64)
    l2 = torch.tensor([1.4, 0.8, 1.2], dtype=torch.float64)
    b = qud_matrix(theta, s, l1, l2)
    params = torch.tensor([[2.9, 1.05], [2.0, 2.0], [2.2, 1.8]], dtype=torch.float64)  # incl. the common endpoint
    trials = Trials(torch.stack([theta, s, l1, l2], -1), params, b, torch.linalg.inv(b))
    x = _inputs("matrix_inverse", "mirrored_pareto", trials)
    for i in range(3):
        est = idf.estimate_inverse_matrix(x[i])
        assert torch.linalg.det(est) > 0
        assert idf.relative_error(est, b[i]) < TOL, (i, est, b[i])


def test_errors_shrink_with_n():
    # Median error over 8 instances at N and 16 N: the 1/sqrt(N) rate predicts a factor 4; require 2.
    bench = Benchmark("matrix_inverse", "mirrored_pareto")
    trials = bench.sample_trials(8, generator=torch.Generator().manual_seed(3))
    med = []
    for n in (1024, 16384):
        x = _inputs("matrix_inverse", "mirrored_pareto", trials, n=n, seed=4)
        med.append(torch.stack([idf.relative_error(idf.estimate_inverse_matrix(x[i]), trials.T_in[i]) for i in range(8)]).median())
    assert med[1] < med[0] / 2


def test_prop6_instances_share_the_input_law_and_not_the_output():
    p = idf.prop6_instances((0.8, 1.4), (1.9, 2.1), -0.1)
    one = torch.ones(2, dtype=torch.float64)
    d = torch.diag(p.sigma**2)
    dp = torch.diag(p.sigma_prime**2)
    assert torch.allclose(p.H @ one, one)  # H preserves the latent location (eq. 29)
    assert torch.allclose(p.b @ one, p.b_prime @ one)  # same input mean
    assert torch.allclose(p.b @ d @ p.b.T, p.b_prime @ dp @ p.b_prime.T)  # same input covariance
    out_shift = (torch.linalg.inv(p.b_prime) - torch.linalg.inv(p.b)) @ one
    assert torch.isclose(out_shift[0], torch.tensor(-0.1 * (1.4 - 0.8) / (0.8 * 1.4), dtype=torch.float64))
    assert p.admissible
    # Eq. (24) round trip of the perturbed matrix.
    o = p.omega_T_prime
    rebuilt = qud_matrix(*(torch.tensor(o[k], dtype=torch.float64) for k in ("theta", "s", "lambda1", "lambda2")))
    assert torch.allclose(rebuilt, p.b_prime)
    # A perturbation too large leaves the admissible set and is reported as such.
    assert not idf.prop6_instances((0.8, 1.4), (1.9, 2.1), 0.6).admissible


def test_bad_inputs_are_rejected_with_reasons():
    with pytest.raises(ValueError, match="unidentifiable"):
        idf.estimate_inverse_matrix(torch.zeros(100, 2), "gaussian")
    with pytest.raises(ValueError, match=r"\(\.\.\., N, 2\)"):
        idf.center(torch.zeros(100, 3))
    with pytest.raises(ValueError, match="non-finite"):
        idf.center(torch.tensor([[float("nan"), 0.0]] * 10))
    with pytest.raises(ValueError, match="must differ"):
        idf.prop6_instances((1.0, 1.0))
    with pytest.raises(ValueError, match="marginals"):
        idf.shear_edge_j(torch.randn(100, 2), "cauchy")


# ------------------------------------------------------------------- notebook 03's findings
def _t(*v):
    return torch.tensor(v, dtype=torch.float64)


def test_recovery_findings_quantiles_slopes_and_falling_cases():
    # "halving" falls like N^-1/2 exactly; "flat" does not move; "rising" grows. Four instances each, so the
    # median is the midpoint of the middle two (torch.median would give the lower one).
    errors = {n: {"halving": _t(1, 3, 5, 100) / math.sqrt(n), "flat": _t(0.1, 0.2, 0.3, 0.4),
                  "rising": _t(1, 1, 1, 1) * n} for n in (1024, 4096, 16384)}
    rec = idf.recovery_findings(errors)
    assert rec.budgets == (1024, 4096, 16384) and rec.cases == ("halving", "flat", "rising")
    assert rec.median("halving", 1024) == pytest.approx(4 / 32)
    row = next(r for r in rec.rows if r["case"] == "halving" and r["N"] == 4096)
    assert row["q25"] == pytest.approx(2.5 / 64) and row["q75"] == pytest.approx(28.75 / 64)
    assert row["max_rel_error"] == pytest.approx(100 / 64)
    assert [(r["case"], r["N"]) for r in rec.rows][:3] == [("halving", 1024), ("halving", 4096), ("halving", 16384)]
    assert rec.slopes["halving"] == pytest.approx(-0.5) and rec.slopes["flat"] == pytest.approx(0.0, abs=1e-12)
    assert rec.slopes["rising"] == pytest.approx(1.0)
    assert rec.falling == ("halving",)  # equal is not falling


def test_recovery_findings_need_two_budgets_and_the_same_cases():
    with pytest.raises(ValueError, match="at least two budgets"):
        idf.recovery_findings({1024: {"a": _t(1.0)}})
    with pytest.raises(ValueError, match="same cases"):
        idf.recovery_findings({1024: {"a": _t(1.0)}, 4096: {"b": _t(1.0)}})


def test_conditioning_split_by_c_y_and_the_edge_verdict():
    # Three instances near the edge (|c_y| < 0.25 lambda, sign ignored) with large errors, three far with small.
    c_y = _t(0.1, -0.2, 0.05, 1.0, -1.5, 0.25)  # 0.25 itself is not near: the bound is strict
    err = _t(0.3, 0.5, 0.4, 0.01, 0.03, 0.02)
    s = idf.conditioning_split(err, c_y)
    assert (s.n_near, s.n_far) == (3, 3)
    assert s.median_near == pytest.approx(0.4) and s.median_far == pytest.approx(0.02) and s.ratio == pytest.approx(20)
    # lambda scales the bound: with lambda = 2 the edge reaches |c_y| < 0.5, so 0.25 joins the near side.
    assert idf.conditioning_split(err, c_y, lam=2.0).n_near == 4
    # Every split must exceed the factor for the edge to carry most of the error.
    even = idf.conditioning_split(_t(0.1, 0.1, 0.15, 0.1), _t(0.0, 0.1, 1.0, 1.2))  # ratio 1 / 1.25 = 0.8
    assert idf.edge_dominates([s]) and not idf.edge_dominates([s, even])
    borderline = idf.conditioning_split(_t(0.2, 0.1), _t(0.0, 1.0))  # ratio exactly 2: not more than 2
    assert borderline.ratio == pytest.approx(idf.EDGE_ERROR_RATIO) and not idf.edge_dominates([borderline])
    with pytest.raises(ValueError, match="at least one"):
        idf.edge_dominates([])


def test_conditioning_split_is_none_without_two_sides():
    assert idf.conditioning_split(_t(0.1, 0.2), _t(1.0, 2.0)) is None  # nothing near the edge
    assert idf.conditioning_split(_t(0.1, 0.2), _t(0.0, 0.1)) is None  # nothing away from it
    with pytest.raises(ValueError, match="matching"):
        idf.conditioning_split(_t(0.1, 0.2), _t(0.0))


def test_recovery_errors_cover_every_case_and_fall_with_n():
    from heavytail.science.operators import Benchmark

    gen = torch.Generator().manual_seed(11)
    trials = {case: Benchmark(*case).sample_trials(6, generator=gen) for case in idf.RECOVERY_CASES}
    small = idf.recovery_errors(trials, 256, 3, gen)
    big = idf.recovery_errors(trials, 16384, 3, gen)
    assert set(small.errors) == {f"{op} / {fam}" for op, fam in idf.RECOVERY_CASES} | {
        "shear edge / mirrored_pareto", "shear edge / gaussian"}
    assert set(small.c_y) == {"mirrored_pareto", "gaussian"} and small.c_y["gaussian"].shape == (6,)
    for case in ("sheared_swap / mirrored_pareto", "matrix_inverse / mirrored_pareto"):
        assert float(big.errors[case].median()) < float(small.errors[case].median()), case
