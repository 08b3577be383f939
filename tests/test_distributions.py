"""Checks of heavytail.science.distributions against scipy.stats and the paper's formulas (eqs. 5, 6, 18-20, 31).

Statistical tests use fixed seeds and a per-test level ALPHA = 1e-3 (binomial or KS p-values), so a
correct sampler fails a given test with probability 1e-3 over seeds; every KS test is paired with a
power check showing that the same sample size rejects a nearby wrong law.
"""

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from heavytail.science.distributions import (
    A_MIN, FLOAT32_EPS, MirroredPareto, Pareto, ShiftedGaussian, SplicedPareto, mirrored_pareto_transport,
)

ALPHA = 1e-3
N_KS = 20_000


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# Reference laws: scipy.stats frozen laws, or laws built from scipy's Pareto and the constructions
# themselves (eq. 18: sign + Pareto; eq. 31: a reference Pareto below the seam, a translated Pareto
# above it), not from the code under test. Each has cdf, sf and logpdf.
def mirrored_ref(lam, a):
    p = stats.pareto(a, scale=lam)

    def branch(z, left, right):  # z < lam arises only from the reflected branch 2 lam - X
        z = np.asarray(z, dtype=float)
        return np.where(z < lam, left(2 * lam - z), right(z))

    return SimpleNamespace(
        cdf=lambda z: branch(z, lambda r: 0.5 * p.sf(r), lambda x: 1 - 0.5 * p.sf(x)),
        sf=lambda z: branch(z, lambda r: 1 - 0.5 * p.sf(r), lambda x: 0.5 * p.sf(x)),
        logpdf=lambda z: np.log(0.5) + branch(z, p.logpdf, p.logpdf),
    )


def spliced_ref(a_ref, a_star, q0, lam=1.0):
    u0 = lam * (1 - q0) ** (-1 / a_ref)
    b = u0 * (1 - a_star / a_ref)
    body, tail = stats.pareto(a_ref, scale=lam), stats.pareto(a_star, loc=b, scale=u0 - b)

    def branch(x, below, above):
        x = np.asarray(x, dtype=float)
        return np.where(x <= u0, below(x), above(x))

    return SimpleNamespace(
        cdf=lambda x: branch(x, body.cdf, lambda x: q0 + (1 - q0) * tail.cdf(x)),
        sf=lambda x: branch(x, body.sf, lambda x: (1 - q0) * tail.sf(x)),
        logpdf=lambda x: branch(x, body.logpdf, lambda x: np.log1p(-q0) + tail.logpdf(x)),
        tail=tail,
    )


# (name, distribution, reference law, a nearby wrong law for the KS power check)
CASES = [
    ("pareto", Pareto(1.0, 1.5), stats.pareto(1.5), stats.pareto(1.65)),
    ("pareto_scaled", Pareto(2.0, A_MIN), stats.pareto(A_MIN, scale=2.0), stats.pareto(1.1, scale=2.0)),
    ("mirrored", MirroredPareto(1.0, 1.5), mirrored_ref(1.0, 1.5), mirrored_ref(1.0, 1.65)),
    ("mirrored_light", MirroredPareto(1.0, 2.5), mirrored_ref(1.0, 2.5), mirrored_ref(1.0, 2.75)),
    ("gaussian", ShiftedGaussian(1.0, 2.0), stats.norm(1, 2), stats.norm(1, 2.2)),
    # KS has little power in the top 1 - q0 of the mass (the tail tests below cover it), so the power
    # check for the splices perturbs the body index a_ref instead.
    ("spliced_heavier", SplicedPareto(1.5, 0.8, 0.9), spliced_ref(1.5, 0.8, 0.9), spliced_ref(1.65, 0.8, 0.9)),
    ("spliced_lighter", SplicedPareto(1.5, 2.8, 0.5), spliced_ref(1.5, 2.8, 0.5), spliced_ref(1.65, 2.8, 0.5)),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_samples_pass_ks_against_scipy_and_the_test_has_power(case, dtype):
    _, dist, ref, wrong = case
    x = dist.sample((N_KS,), generator=gen(11), dtype=dtype)
    assert x.dtype == dtype and x.shape == (N_KS,)
    x = x.double().numpy()
    assert stats.kstest(x, ref.cdf).pvalue > ALPHA
    assert stats.kstest(x, wrong.cdf).pvalue < ALPHA  # a ~10% change of a or sigma is detectable at N_KS


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cdf_sf_and_log_prob_match_the_reference(case):
    _, dist, ref, _ = case
    # Quantiles spanning the body and far tails (u down to 1e-12 from either end).
    tail = np.logspace(-12, -2, 11)
    u = np.concatenate([tail, np.linspace(0.05, 0.95, 19), 1 - tail[::-1]])
    x = dist.icdf(torch.tensor(u)).numpy()
    xt = torch.tensor(x)
    # atol 1e-15: scipy forms e.g. the Pareto cdf as 1 - (x/lambda)^-a, exact only to ~eps64 absolutely.
    np.testing.assert_allclose(dist.cdf(xt).numpy(), ref.cdf(x), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(dist.sf(xt).numpy(), ref.sf(x), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(dist.log_prob(xt).numpy(), ref.logpdf(x), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dist.pdf(xt).numpy(), np.exp(ref.logpdf(x)), rtol=1e-9, atol=0)
    # In the unbounded tails the references are accurate to relative precision, and so must we be:
    # sf on the right (where 1 - cdf would keep no digits at 1e-12) and cdf on an unbounded left.
    right = torch.tensor(x[-11:])
    np.testing.assert_allclose(dist.sf(right).numpy(), ref.sf(x[-11:]), rtol=1e-9, atol=0)
    if math.isinf(dist.icdf(torch.tensor(0.0)).item()):
        np.testing.assert_allclose(dist.cdf(torch.tensor(x[:11])).numpy(), ref.cdf(x[:11]), rtol=1e-9, atol=0)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_icdf_inverts_cdf_and_isf_inverts_sf(case):
    dist = case[1]
    u = torch.cat([torch.logspace(-6, -2, 5, dtype=torch.float64), torch.linspace(0.1, 0.9, 9, dtype=torch.float64),
                   1 - torch.logspace(-2, -6, 5, dtype=torch.float64)])
    x = dist.icdf(u)
    # A float64 rounding of u near 1 moves x by about eps64 / ((1 - u) a) <= 2.2e-16 / (1e-6 * 0.8) ~ 3e-10
    # relative, so rtol 1e-8 has a 30x margin; atol covers the Gaussian's zero crossing.
    torch.testing.assert_close(dist.icdf(dist.cdf(x)), x, rtol=1e-8, atol=1e-12)
    torch.testing.assert_close(dist.isf(dist.sf(x)), x, rtol=1e-8, atol=1e-12)
    assert bool((x[1:] > x[:-1]).all())  # quantiles increase


def test_icdf_endpoints_and_dtype():
    p, m = Pareto(1.0, 2.0), MirroredPareto(1.0, 2.0)
    assert p.icdf(torch.tensor([0.0])).item() == 1.0 and p.icdf(torch.tensor([1.0])).item() == math.inf
    assert m.icdf(torch.tensor([0.0, 1.0])).tolist() == [-math.inf, math.inf]
    assert m.cdf(torch.tensor([1.0], dtype=torch.float32)).dtype == torch.float32
    assert m.cdf(torch.tensor([1])).dtype == torch.float32  # integers are evaluated as float32 by default


def test_densities_are_continuous_at_the_seams():
    # Mirrored Pareto at z = lambda (eq. 19), spliced Pareto at u0 (eq. 31), over the paper's ranges.
    # Away from the seam each branch has |f'| = (a + 1) f / x, so one-sided values delta = 1e-9 * seam
    # apart differ by at most ~ (a + 1) * 1e-9 relative; a jump (the plain Pareto's, or a splice without
    # the shift b) is O(1). rtol 1e-6 separates the two by orders of magnitude.
    a = torch.tensor([A_MIN, 1.5, 2.0, 2.5, 3.0], dtype=torch.float64)
    lam = torch.tensor([1.0, 1.0, 0.5, 2.0, 1.0], dtype=torch.float64)
    m = MirroredPareto(lam, a)
    left, right = m.pdf(lam * (1 - 1e-9)), m.pdf(lam * (1 + 1e-9))
    torch.testing.assert_close(left, right, rtol=1e-6, atol=0)
    torch.testing.assert_close(m.pdf(lam), a / (2 * lam))  # f(lambda) = f_P(lambda) / 2
    assert bool((Pareto(lam, a).pdf(lam * (1 - 1e-9)) == 0).all())  # control: the plain Pareto jumps

    q0, a_star = torch.meshgrid(torch.tensor([0.5, 0.9, 0.99], dtype=torch.float64),
                                torch.tensor([0.6, 0.8, 1.0, 1.5, 2.2, 3.5], dtype=torch.float64), indexing="ij")
    s = SplicedPareto(1.5, a_star, q0)
    u0 = s.seam
    torch.testing.assert_close(u0, (1 - q0) ** (-1 / 1.5))
    torch.testing.assert_close(s.shift, u0 * (1 - a_star / 1.5))
    torch.testing.assert_close(s.pdf(u0 * (1 - 1e-9)), s.pdf(u0 * (1 + 1e-9)), rtol=1e-6, atol=0)
    torch.testing.assert_close(s.cdf(u0), q0, rtol=1e-12, atol=0)  # G(u0) = q0
    torch.testing.assert_close(s.sf(u0 * (1 + 1e-12)), 1 - q0, rtol=1e-9, atol=0)  # mass 1 - q0 above
    # Control: the unshifted tail (b = 0) would have density a_star (1 - q0) / u0 at the seam, a jump by
    # the factor a_star / a_ref, which this comparison would catch.
    jump = a_star * (1 - q0) / u0 / s.pdf(u0 * (1 - 1e-9))
    assert bool(((jump - 1).abs() > 1e-3).sum() == (a_star != 1.5).sum())


@pytest.mark.parametrize("make", [lambda a: Pareto(1.0, a), lambda a: MirroredPareto(1.0, a),
                                  lambda a: SplicedPareto(1.5, a, 0.9)], ids=["pareto", "mirrored", "spliced"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_no_inf_or_nan_at_one_plus_eps_at_training_scale(make, dtype):
    x = make(A_MIN).sample((64, 16384), generator=gen(3), dtype=dtype)
    assert bool(torch.isfinite(x).all())


@pytest.mark.parametrize("r", [0.0, 1 - 2.0**-53], ids=["rand=0", "rand=1-2^-53"])
def test_extreme_uniforms_give_finite_draws(monkeypatch, r):
    # Force torch.rand to its two extreme float64 values. 1 - rand lies in [2**-53, 1], so at
    # a = 1 + eps the largest Pareto draw is 2**(53/a) ~ 9e15, far inside float32 (the float32-uniform
    # cap would be 2**(24/a) ~ 1.7e7); below a ~ 0.41 a float32 draw saturates at finfo.max, never inf.
    monkeypatch.setattr(torch, "rand", lambda shape, dtype=None, **kw: torch.full(tuple(shape), r, dtype=dtype))
    assert A_MIN == 1 + FLOAT32_EPS and torch.tensor(A_MIN, dtype=torch.float32).item() == A_MIN
    for dist in (Pareto(1.0, A_MIN), MirroredPareto(1.0, A_MIN), SplicedPareto(1.5, A_MIN, 0.9), Pareto(1.0, 0.3)):
        for dtype in (torch.float32, torch.float64):
            assert bool(torch.isfinite(dist.sample((4,), dtype=dtype)).all()), (dist, dtype)
    top = Pareto(1.0, A_MIN).sample((1,), dtype=torch.float64).item()
    expected = 1.0 if r == 0.0 else 2 ** (53 / A_MIN)
    assert math.isclose(top, expected, rel_tol=1e-12)
    if r > 0:
        assert Pareto(1.0, 0.3).sample((1,)).item() == torch.finfo(torch.float32).max


def test_uniforms_are_resolved_beyond_the_float32_grid():
    # Recover each draw's survival probability v = S(x) = x**-a. Float32 uniforms are multiples of 2**-24,
    # so v * 2**24 would be an integer (up to ~1e-8 of float64 round-off) and the extreme tail would be
    # truncated; float64 uniforms leave a fractional part > 1e-6 for all but ~2e-6 of the draws.
    x = Pareto(1.0, 1.5).sample((4096,), generator=gen(5), dtype=torch.float64)
    v = Pareto(1.0, 1.5).sf(x) * 2.0**24
    frac = (v - v.round()).abs()
    assert (frac > 1e-6).double().mean().item() > 0.99


@pytest.mark.parametrize("name,dist,upper_isf,lower_cdf_inv", [
    ("pareto_1+eps", Pareto(1.0, A_MIN), lambda p: stats.pareto(A_MIN).isf(p), None),
    ("mirrored_1.5", MirroredPareto(1.0, 1.5), lambda p: stats.pareto(1.5).isf(2 * p),
     lambda p: 2.0 - stats.pareto(1.5).isf(2 * p)),  # eq. 18: each tail of mass p is a Pareto tail of 2p
    ("spliced_0.8_at_0.99", SplicedPareto(1.5, 0.8, 0.99),
     lambda p: spliced_ref(1.5, 0.8, 0.99).tail.isf(p / 0.01), None),  # the tail branch holds mass 0.01
])
def test_tail_exceedance_counts_match_binomial(name, dist, upper_isf, lower_cdf_inv):
    # KS on inverse-CDF draws mostly tests the uniform generator's bulk; count the draws beyond high
    # quantiles (from scipy) and test each count against Binomial(n, p) at level ALPHA.
    n = 1 << 20
    x = dist.sample((n,), generator=gen(7)).double().numpy()  # float32, as in training
    for p in (1e-2, 1e-3, 1e-4, 1e-5, 1e-6):
        k = int((x > upper_isf(p)).sum())
        assert stats.binomtest(k, n, p).pvalue > ALPHA, (p, k, n * p)
        if lower_cdf_inv is not None:
            k = int((x < lower_cdf_inv(p)).sum())
            assert stats.binomtest(k, n, p).pvalue > ALPHA, ("lower", p, k, n * p)


def test_per_trial_tensor_parameters_broadcast():
    a = torch.tensor([[1.2], [2.0], [3.0], [5.0]])
    x = Pareto(1.0, a).sample((4, 5000), generator=gen(2), dtype=torch.float64)
    assert x.shape == (4, 5000)
    for row, ai in zip(x.numpy(), a.flatten().tolist()):  # each row follows its own index
        assert stats.kstest(row, stats.pareto(ai).cdf).pvalue > ALPHA / 4  # Bonferroni over rows
    assert stats.kstest(x[0].numpy(), stats.pareto(5.0).cdf).pvalue < ALPHA  # rows are not all alike
    q0 = torch.tensor([[[0.5]], [[0.99]]])  # (T, 1, 1) against (T, N, 2), as the benchmarks use it
    assert SplicedPareto(1.5, 0.8, q0).sample((2, 7, 3), generator=gen()).shape == (2, 7, 3)
    assert MirroredPareto(1.0, 2.0).sample((2, 3, 4), generator=gen()).shape == (2, 3, 4)
    assert Pareto(1.0, a).cdf(torch.ones(1, 6)).shape == (4, 6)  # x broadcasts with the parameters too
    with pytest.raises(ValueError, match=r"sample shape \(3, 5\).*parameter shape \(4, 1\)"):
        Pareto(1.0, a).sample((3, 5))
    with pytest.raises(ValueError, match="sample shape"):
        Pareto(1.0, a).sample((5,))  # parameters may not add dimensions the caller did not ask for


@pytest.mark.parametrize("dist", [c[1] for c in CASES], ids=IDS)
def test_same_seed_same_samples(dist):
    a, b = dist.sample((3, 100), generator=gen(42)), dist.sample((3, 100), generator=gen(42))
    assert torch.equal(a, b)
    assert not torch.equal(a, dist.sample((3, 100), generator=gen(43)))


@pytest.mark.parametrize("a", [2.5, 3.0])
def test_prop3_sample_means_converge_when_the_variance_is_finite(a):
    # Prop. 3: E X = a lambda / (a - 1) (and E Z = lambda for the mirrored law) when a > 1. For a > 2 the
    # variance is finite and the CLT gives the tolerance: 5 standard errors of the mean (two-sided ~6e-7).
    n, lam = 1 << 20, 1.0
    mean_p = a * lam / (a - 1)
    var_p = a * lam**2 / ((a - 1) ** 2 * (a - 2))
    x = Pareto(lam, a).sample((n,), generator=gen(8), dtype=torch.float64)
    assert abs(x.mean().item() - mean_p) < 5 * math.sqrt(var_p / n)
    z = MirroredPareto(lam, a).sample((n,), generator=gen(9), dtype=torch.float64)
    var_z = var_p + (mean_p - lam) ** 2  # E (Z - lambda)^2 = E (X - lambda)^2
    assert abs(z.mean().item() - lam) < 5 * math.sqrt(var_z / n)


def test_prop3_sample_means_diverge_without_a_finite_mean():
    # For a < 1 the mean of n draws grows like n**(1/a - 1) (stable-law scaling); at a = 0.8 going from
    # n = 64 to 16384 should multiply the median block mean by 256**0.25 = 4; require at least half that.
    # With a = 2.5 the same ratio tends to 1; require it below 1.25.
    def ratio(a):
        x = Pareto(1.0, a).sample((64, 16384), generator=gen(10), dtype=torch.float64)
        return (x.mean(1).median() / x[:, :64].mean(1).median()).item()

    assert ratio(0.8) > 2.0
    assert abs(ratio(2.5) - 1) < 0.25


def test_transport_is_the_quantile_map_and_pushes_samples_to_the_destination():
    # Eq. (20): T = F_dst^-1 o F_src, increasing, and T_# src = dst.
    src, dst = MirroredPareto(1.0, 2.5), MirroredPareto(2.0, A_MIN)
    z = src.icdf(torch.linspace(1e-6, 1 - 1e-6, 101, dtype=torch.float64))
    t = mirrored_pareto_transport(z, 1.0, 2.5, 2.0, A_MIN)
    torch.testing.assert_close(t, dst.icdf(src.cdf(z)), rtol=1e-8, atol=1e-12)
    assert bool((t[1:] > t[:-1]).all())
    torch.testing.assert_close(mirrored_pareto_transport(z, 1.0, 2.5, 1.0, 2.5), z)
    moved = mirrored_pareto_transport(src.sample((N_KS,), generator=gen(4), dtype=torch.float64), 1.0, 2.5, 2.0, A_MIN)
    assert stats.kstest(moved.numpy(), mirrored_ref(2.0, A_MIN).cdf).pvalue > ALPHA
    assert mirrored_pareto_transport(torch.tensor([3.0], dtype=torch.float32), 1.0, 1.5, 1.0, 2.0).dtype == torch.float32


@pytest.mark.parametrize("make,name,value,allowed", [
    (lambda: Pareto(0.0, 1.5), "scale", "0", r"\(0, inf\)"),
    (lambda: Pareto(1.0, -2.0), "tail_index", "-2", r"\(0, inf\)"),
    (lambda: MirroredPareto(float("nan"), 1.5), "scale", "nan", r"\(0, inf\)"),
    (lambda: MirroredPareto(1.0, float("inf")), "tail_index", "inf", r"\(0, inf\)"),
    (lambda: ShiftedGaussian(1.0, 0.0), "std", "0", r"\(0, inf\)"),
    (lambda: ShiftedGaussian(float("inf"), 1.0), "mean", "inf", r"\(-inf, inf\)"),
    (lambda: SplicedPareto(1.5, 0.8, 1.0), "seam_quantile", "1", r"\(0, 1\)"),
    (lambda: SplicedPareto(1.5, 0.8, 0.0), "seam_quantile", "0", r"\(0, 1\)"),
    (lambda: SplicedPareto(0.0, 0.8, 0.5), "a_ref", "0", r"\(0, inf\)"),
    (lambda: SplicedPareto(1.5, -1.0, 0.5), "a_star", "-1", r"\(0, inf\)"),
    (lambda: SplicedPareto(1.5, 0.8, 0.5, scale=-1.0), "scale", "-1", r"\(0, inf\)"),
    (lambda: Pareto(1.0, torch.tensor([[1.5], [0.0]])), "tail_index", "0", r"1 of 2 entries"),
    (lambda: mirrored_pareto_transport(torch.zeros(2), 1.0, 0.0, 1.0, 2.0), "a_src", "0", r"\(0, inf\)"),
    (lambda: Pareto(1.0, 2.0).icdf(torch.tensor([0.5, 1.5])), "u", "1.5", r"\[0, 1\]"),
    (lambda: MirroredPareto(1.0, 2.0).isf(torch.tensor([float("nan")])), "v", "nan", r"\[0, 1\]"),
])
def test_bad_parameters_raise_value_errors_naming_parameter_value_and_range(make, name, value, allowed):
    with pytest.raises(ValueError) as err:
        make()
    msg = str(err.value)
    assert msg.startswith(name + " ") and f"got {value}" in msg
    assert re.search(allowed, msg), msg
