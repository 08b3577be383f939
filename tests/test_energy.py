"""Checks of heavytail.science.energy: eq. 10 against peers (dcor, scipy), a float64 dense reference, gradcheck,
broadcasting, the heavy-tail cancellation case (a small difference of huge means), and eq. 34 by Monte Carlo.

Samples are drawn here with torch directly (not heavytail.science.distributions) so the metric is tested on its
own. Statistical checks use fixed seeds and 4-standard-error tolerances from the number of repetitions.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from heavytail.science.energy import energy_distance, energy_distance_1d
from heavytail.science.metrics import energy_distance as reexported

BACKENDS = ["compiled", "eager"]
F32_EPS = torch.finfo(torch.float32).eps


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def mirrored_pareto(shape, a, g, dtype=torch.float64):
    """Sign times a Pareto(1, a) draw per coordinate (a mirrored-Pareto-like law with index a)."""
    u = torch.rand(shape, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(shape, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    return (sign * u.pow(-1.0 / a)).to(dtype)


def dense_terms(u, v, p=1.0):
    """The three mean-distance terms of eq. 10 in float64 from the full matrices."""
    f = lambda a, b: torch.cdist(a.double(), b.double(), compute_mode="donot_use_mm_for_euclid_dist").pow(p)
    return f(u, v), f(u, u), f(v, v)


def dense(u, v, p=1.0):
    uv, uu, vv = dense_terms(u, v, p)
    return 2 * uv.mean((-1, -2)) - uu.mean((-1, -2)) - vv.mean((-1, -2))


def test_metrics_reexports_energy_distance():
    assert reexported is energy_distance


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p", [1.0, 0.5, 1.5])
def test_matches_dense_reference_and_dcor(backend, p):
    g = gen(1)
    u = torch.randn(53, 2, generator=g, dtype=torch.float64)
    v = 1.3 * torch.randn(37, 2, generator=g, dtype=torch.float64) + 0.4
    got = energy_distance(u, v, p=p, backend=backend).item()
    # float64 throughout: agreement to a few hundred ulps of the larger terms
    assert got == pytest.approx(dense(u, v, p).item(), rel=1e-11)
    # dcor.energy_distance is the same V-statistic with exponent = p (imported here: numba takes ~10 s)
    dcor = pytest.importorskip("dcor")
    assert got == pytest.approx(dcor.energy_distance(u.numpy(), v.numpy(), exponent=p), rel=1e-11)


def test_one_dimension_matches_scipy_and_pairwise():
    g = gen(2)
    x = torch.randn(301, generator=g, dtype=torch.float64)
    y = 0.7 * torch.randn(188, generator=g, dtype=torch.float64) + 0.2
    ref = stats.energy_distance(x.numpy(), y.numpy()) ** 2
    assert energy_distance_1d(x, y).item() == pytest.approx(ref, rel=1e-12)
    assert energy_distance(x[:, None], y[:, None]).item() == pytest.approx(ref, rel=1e-12)  # dispatches to sort
    assert energy_distance(x[:, None], y[:, None], backend="eager").item() == pytest.approx(ref, rel=1e-11)


def test_one_dimension_float32_at_2_pow_20():
    # The sorted-sum form loses 6-16 % here (measured); the CDF form must stay at float32 rounding of the output.
    g = gen(3)
    x = mirrored_pareto((2**20,), 1.5, g, torch.float32)
    y = mirrored_pareto((2**20,), 1.5, g, torch.float32)
    ref = stats.energy_distance(x.double().numpy(), y.double().numpy()) ** 2
    assert energy_distance_1d(x, y).item() == pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p", [1.0, 0.7, 1.5])
def test_gradcheck_with_duplicates_and_unequal_sizes(backend, p):
    g = gen(4)
    u = torch.randn(9, 2, generator=g, dtype=torch.float64)
    v = torch.randn(6, 2, generator=g, dtype=torch.float64)
    u[3] = u[1]  # duplicate within a set
    v[2] = u[0]  # coincident across sets
    u.requires_grad_(True)
    v.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: energy_distance(a, b, p=p, backend=backend), (u, v))
    # coincident points contribute a zero subgradient, never NaN
    (gu, gv) = torch.autograd.grad(energy_distance(u, v, p=p, backend=backend), (u, v))
    assert torch.isfinite(gu).all() and torch.isfinite(gv).all()


def test_gradcheck_one_dimension_sort_path():
    g = gen(5)
    x = torch.randn(2, 11, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, 7, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(energy_distance_1d, (x, y))


def test_gradient_matches_autograd_of_dense_reference():
    g = gen(6)
    u = torch.randn(40, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(25, 3, generator=g, dtype=torch.float64, requires_grad=True)
    got = torch.autograd.grad(energy_distance(u, v), (u, v))
    ref = torch.autograd.grad(dense(u, v), (u, v))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_equals_looped_with_broadcasting(backend):
    g = gen(7)
    u = torch.randn(3, 1, 20, 2, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(4, 13, 2, generator=g, dtype=torch.float64, requires_grad=True)
    out = energy_distance(u, v, backend=backend)
    assert out.shape == (3, 4)
    weights = torch.randn(3, 4, generator=g, dtype=torch.float64)
    gu, gv = torch.autograd.grad((out * weights).sum(), (u, v))
    ref_gu, ref_gv = torch.zeros_like(u), torch.zeros_like(v)
    for i in range(3):
        for j in range(4):
            val = energy_distance(u[i, 0], v[j], backend=backend)
            assert out[i, j].item() == pytest.approx(val.item(), rel=1e-13)
            a, b = torch.autograd.grad(weights[i, j] * val, (u, v))
            ref_gu += a
            ref_gv += b
    torch.testing.assert_close(gu, ref_gu, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(gv, ref_gv, rtol=1e-12, atol=1e-15)


def test_block_size_does_not_change_the_result():
    g = gen(8)
    u = torch.randn(70, 2, generator=g, dtype=torch.float64)
    v = torch.randn(50, 2, generator=g, dtype=torch.float64)
    ref = energy_distance(u, v, backend="eager").item()
    for block in (1, 7, 64, 500):
        assert energy_distance(u, v, block_size=block, backend="eager").item() == pytest.approx(ref, rel=1e-13)
    assert energy_distance(u, v, block_size=16, backend="compiled").item() == pytest.approx(ref, rel=1e-13)


@pytest.mark.parametrize("backend, n", [("compiled", 4096), ("eager", 1024)])  # eager: the slow fallback
def test_heavy_tail_cancellation_in_float32(backend, n):
    """The heavy-tail cancellation trap: two 2D samples of one mirrored-Pareto-like law (index 1.5), N = 4096, float32.

    E is ~2e3 (N = 4096) or ~500 (N = 1024) times smaller than the mean distance. The float32 inputs are exact in float64, so the only
    unavoidable error is the rounding of each float32 distance (relative <= ~2 eps, independent across
    pairs); summed with weights 1/N^2 over 4 N^2 pairs its standard deviation is ~ eps * 2 rms(D) / N.
    We allow 10 of those standard deviations. Float32 accumulation (naive cdist) is ~100x worse here
    (measured: 2e-4 to 5e-4 relative) and fails this bound.
    """
    g = gen(9)
    u = mirrored_pareto((n, 2), 1.5, g, torch.float32).requires_grad_(True)
    v = mirrored_pareto((n, 2), 1.5, g, torch.float32).requires_grad_(True)
    uv, uu, vv = dense_terms(u.detach(), v.detach())
    ref = (2 * uv.mean() - uu.mean() - vv.mean()).item()
    rms = torch.cat([uv.flatten(), uu.flatten(), vv.flatten()]).square().mean().sqrt().item()
    assert uv.mean().item() / ref > n / 8  # the case really is a small difference of large means
    got = energy_distance(u, v, backend=backend)
    assert got.dtype == torch.float32
    bound = 10 * F32_EPS * 2 * rms / n / ref
    assert abs(got.item() - ref) / ref < bound, bound
    assert bound < 2e-5  # i.e. at least as good as the 0.002 % measured for float64 block sums

    # Gradient: each component is 2|w_a| sum_b w_b unit(W_a - W_b), sum_b |w_b| = 2, with each unit vector
    # rounded to a few eps; 8 eps * 2 * 2/N bounds the absolute error per component with margin.
    # The float64 path is checked against autograd of the dense reference above; use it as the reference here.
    gu, gv = torch.autograd.grad(got, (u, v))
    ud, vd = u.detach().double().requires_grad_(True), v.detach().double().requires_grad_(True)
    ref_gu, ref_gv = torch.autograd.grad(energy_distance(ud, vd, backend=backend), (ud, vd))
    err = max((gu.double() - ref_gu).abs().max().item(), (gv.double() - ref_gv).abs().max().item())
    assert err < 8 * F32_EPS * 2 * 2 / n, err


def test_huge_finite_values_evaluate_and_scale_exactly():
    # A collapsed model's output can be huge but finite: squares would overflow float32 without rescaling.
    g = gen(10)
    u = torch.randn(300, 2, generator=g)
    v = torch.randn(200, 2, generator=g) + 1.0
    base = energy_distance(u, v).item()
    c = 2.0**100  # power of two: u * c is exact, and E is homogeneous of degree p = 1
    huge = energy_distance(u * c, v * c)
    assert torch.isfinite(huge)
    assert huge.item() / c == pytest.approx(base, rel=1e-6)
    ud, vd = (u * c).requires_grad_(True), (v * c).requires_grad_(True)
    gu, _ = torch.autograd.grad(energy_distance(ud, vd), (ud, vd))
    u0 = u.clone().requires_grad_(True)
    gu0, = torch.autograd.grad(energy_distance(u0, v), (u0,))
    torch.testing.assert_close(gu, gu0, rtol=1e-5, atol=1e-9)  # the gradient is homogeneous of degree 0


def test_expected_value_of_two_iid_samples_is_2_delta_over_n():
    """Eq. 34: E[E(P_N, P'_N)] = 2 delta / N, delta = E|Y - Y'|.

    2D standard normal: Y - Y' ~ N(0, 2 I), so delta = sqrt(2) E|N(0, I_2)| = sqrt(2) sqrt(pi/2) = sqrt(pi).
    1D uniform: delta = 1/3. Tolerance: 4 standard errors of the mean over R repetitions.
    """
    g = gen(11)
    reps, n = 2000, 32
    with torch.no_grad():
        e2 = energy_distance(
            torch.randn(reps, n, 2, generator=g, dtype=torch.float64),
            torch.randn(reps, n, 2, generator=g, dtype=torch.float64),
        )
    se = e2.std().item() / math.sqrt(reps)
    assert abs(e2.mean().item() - 2 * math.sqrt(math.pi) / n) < 4 * se
    reps, n = 4000, 50
    e1 = energy_distance_1d(
        torch.rand(reps, n, generator=g, dtype=torch.float64), torch.rand(reps, n, generator=g, dtype=torch.float64)
    )
    se = e1.std().item() / math.sqrt(reps)
    assert abs(e1.mean().item() - 2 * (1 / 3) / n) < 4 * se


def test_non_finite_points_are_reported_with_their_count():
    u = torch.randn(10, 2)
    v = torch.randn(8, 2)
    u[2, 0] = float("nan")
    u[5] = float("inf")
    with pytest.raises(ValueError, match=r"u holds 2 non-finite points"):
        energy_distance(u, v)
    x = torch.randn(7)
    x[0] = -float("inf")
    with pytest.raises(ValueError, match=r"x holds 1 non-finite values"):
        energy_distance_1d(x, torch.randn(5))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(u=torch.zeros(5, 2), v=torch.zeros(5, 3)), "last dimensions differ"),
        (dict(u=torch.zeros(5, 2), v=torch.zeros(5, 2), p=2.0), r"0 < p < 2"),
        (dict(u=torch.zeros(5, 2), v=torch.zeros(5, 2), p=0.0), r"0 < p < 2"),
        (dict(u=torch.zeros(5), v=torch.zeros(5)), r"\(\.\.\., N, d\)"),
        (dict(u=torch.zeros(2, 5, 2), v=torch.zeros(3, 5, 2)), "do not broadcast"),
        (dict(u=torch.zeros(5, 2), v=torch.zeros(5, 2), backend="keops"), "not one of"),
        (dict(u=torch.zeros(5, 2), v=torch.zeros(5, 2), block_size=0), "block_size"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        energy_distance(**kwargs)


def test_identical_sets_give_zero_and_float32_default():
    u = torch.randn(64, 2, generator=gen(12))
    out = energy_distance(u, u.clone())
    assert out.dtype == torch.float32 and abs(out.item()) < 1e-6
    assert energy_distance(np.asarray(u), u).dtype == torch.float32  # array-likes are accepted


def test_empty_batch_and_compile_failure_fallback(monkeypatch):
    import heavytail.science.energy as energy

    assert energy_distance(torch.zeros(0, 5, 2), torch.zeros(0, 4, 2)).shape == (0,)
    u, v = torch.randn(30, 2, generator=gen(13)), torch.randn(20, 2, generator=gen(14))
    ref = energy_distance(u, v, backend="eager")

    def broken(kind):
        raise RuntimeError("C++ compile error: no compiler")  # what a machine without gcc reports

    monkeypatch.setattr(energy, "_get_compiled", broken)
    monkeypatch.setattr(energy, "_compile_failed", {})
    with pytest.warns(UserWarning, match="eager tiled backend"):
        assert energy_distance(u, v).item() == ref.item()
    assert energy_distance(u, v).item() == ref.item()  # remembered: no second warning needed
    with pytest.raises(RuntimeError, match="unavailable"):
        energy_distance(u, v, backend="compiled")


def test_cuda_selection_and_triton_failure_fallback(monkeypatch):
    """The device choice for CUDA, checked without a GPU: the fused kernel where Triton exists, the
    eager tiles where it does not or where a Triton kernel was refused once (shared memory)."""
    import torch.utils._triton as triton_utils

    import heavytail.science.energy as energy

    cuda = torch.device("cuda")
    monkeypatch.setattr(energy, "_compile_failed", {})
    monkeypatch.setattr(triton_utils, "has_triton", lambda: True)
    assert energy._resolve_backend("auto", cuda) == "compiled"
    monkeypatch.setattr(triton_utils, "has_triton", lambda: False)
    assert energy._resolve_backend("auto", cuda) == "eager"
    with pytest.raises(RuntimeError, match="unavailable on cuda"):
        energy._resolve_backend("compiled", cuda)

    # A launch refused by Triton is a compile failure: the call falls back to the eager tiles (same value).
    out_of_resources = type("OutOfResources", (RuntimeError,), {"__module__": "triton.runtime.errors"})
    assert energy._is_compile_error(out_of_resources("out of resource: shared memory, Required: 262144"))
    assert not energy._is_compile_error(ValueError("a bad argument"))

    def refused(kind):
        raise out_of_resources("out of resource: shared memory, Required: 262144, Hardware limit: 101376")

    u, v = torch.randn(2, 30, 2, generator=gen(21)), torch.randn(2, 20, 2, generator=gen(22))
    ref = energy_distance(u, v, backend="eager")
    monkeypatch.setattr(energy, "_get_compiled", refused)
    with pytest.warns(UserWarning, match="eager tiled backend"):
        assert torch.equal(energy_distance(u, v), ref)
    assert energy._compile_failed == {"cpu": True}
