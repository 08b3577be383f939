"""Checks of heavytail.science.operators against App. D (eqs. 23-25), Section 3.2.1 and Prop. 6.

Statistical tests use fixed seeds and level ALPHA = 1e-3 per family of tests, Bonferroni-corrected
over the number of p-values in the family, with a power check where a test could pass vacuously.
"""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import stats

from heavytail.science.distributions import A_MIN
from heavytail.science.operators import (
    ETA_RANGES, EXCHANGE, LOCATION, MARGINALS, OMEGA_T_RANGES, OPERATORS, Benchmark, Trials, qud_inverse,
    qud_matrix, shear_matrix,
)

ALPHA = 1e-3
IDENTIFIABLE = [("sheared_swap", "mirrored_pareto"), ("sheared_swap", "gaussian"), ("matrix_inverse", "mirrored_pareto")]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_unknown_names_raise_and_list_the_allowed_ones():
    with pytest.raises(ValueError, match=r"operator must be one of \('sheared_swap', 'matrix_inverse'\); got 'swap'"):
        Benchmark("swap", "gaussian")
    with pytest.raises(ValueError, match=r"marginals must be one of \('mirrored_pareto', 'gaussian'\); got 'pareto'"):
        Benchmark("sheared_swap", "pareto")
    with pytest.raises(ValueError, match="n_trials must be a positive integer; got 0"):
        Benchmark("sheared_swap", "gaussian").sample_trials(0)
    with pytest.raises(ValueError, match="n must be a positive integer; got 2.5"):
        Benchmark("sheared_swap", "gaussian").sample(2, 2.5)


def test_matrix_inverse_on_gaussians_is_refused_citing_prop6_unless_asked_for():
    with pytest.raises(ValueError, match=r"unidentifiable \(Prop\. 6"):
        Benchmark("matrix_inverse", "gaussian")
    x, y, trials = Benchmark("matrix_inverse", "gaussian", allow_unidentifiable=True).sample(2, 8, generator=gen())
    assert x.shape == y.shape == (2, 8, 2) and len(trials) == 2


def _corners(operator):
    """Every corner of the Pi_T box (the determinant's extremes lie on the boundary) as columns of omega_T."""
    return torch.tensor(list(itertools.product(*[(lo, hi) for _, lo, hi in OMEGA_T_RANGES[operator]])),
                        dtype=torch.float64)


def test_det_M_is_one_and_det_B_positive_over_the_parameter_ranges():
    for op in OPERATORS:
        omega = torch.cat([_corners(op), Benchmark(op, "mirrored_pareto").sample_trials(4096, gen(1)).omega_T])
        if op == "sheared_swap":
            m = shear_matrix(*omega.unbind(-1))
            torch.testing.assert_close(torch.linalg.det(m), torch.ones(len(omega), dtype=torch.float64))  # eq. 23
        else:
            b = qud_matrix(*omega.unbind(-1))
            det = torch.linalg.det(b)
            assert bool((det > 0).all())
            torch.testing.assert_close(det, omega[:, 2] * omega[:, 3])  # det Q = det U = 1 (eq. 24)
            eye = torch.eye(2, dtype=torch.float64).expand_as(b)
            torch.testing.assert_close(qud_inverse(*omega.unbind(-1)) @ b, eye)


def test_matrices_match_the_paper_written_out_in_numpy():
    j, k = 0.3, -0.8
    m = np.array([[1, j], [0, 1]]) @ np.array([[1, 0], [k, 1]])  # eq. 23 as a product of shears
    torch.testing.assert_close(shear_matrix(torch.tensor(j, dtype=torch.float64), torch.tensor(k, dtype=torch.float64)),
                               torch.tensor(m))
    th, s, l1, l2 = 0.5, -0.2, 0.9, 1.3
    b = (np.array([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]]) @ np.array([[1, s], [0, 1]])
         @ np.diag([l1, l2]))  # eq. 24: Q(theta) U(s) D(lambda)
    args = [torch.tensor(v, dtype=torch.float64) for v in (th, s, l1, l2)]
    torch.testing.assert_close(qud_matrix(*args), torch.tensor(b))
    torch.testing.assert_close(qud_inverse(*args), torch.tensor(np.linalg.inv(b)))
    torch.testing.assert_close(EXCHANGE, torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("op,marg", IDENTIFIABLE)
def test_trials_draw_fresh_uniform_omega_in_the_paper_ranges(op, marg):
    bench = Benchmark(op, marg)
    t = bench.sample_trials(2000, generator=gen(2))
    names = OMEGA_T_RANGES[op]
    assert t.omega_T.dtype == t.marginal_params.dtype == t.T_in.dtype == torch.float64
    assert t.omega_T.shape == (2000, len(names)) and t.marginal_params.shape == (2000, 2)
    # Pi_T (eqs. 23, 25) and Pi_eta (Section 3.2.1; ranges exchanged for the Gaussian so that axis 1
    # has the larger spread) are uniform boxes: KS of every column, Bonferroni over the columns.
    cols = [(t.omega_T[:, i], lo, hi) for i, (_, lo, hi) in enumerate(names)]
    cols += [(t.marginal_params[:, i], lo, hi) for i, (lo, hi) in enumerate(ETA_RANGES[marg])]
    for col, lo, hi in cols:
        assert lo <= col.min().item() and col.max().item() <= hi
        assert stats.kstest(col.numpy(), stats.uniform(lo, hi - lo).cdf).pvalue > ALPHA / len(cols)
    lighter = (2.0, 3.0) if marg == "mirrored_pareto" else (A_MIN, 2.0)
    assert ETA_RANGES[marg][0] == lighter  # axis 0: a in [2, 3] (Pareto), sigma in [1+eps, 2] (Gaussian)
    assert len(torch.unique(t.omega_T, dim=0)) == 2000  # a fresh omega for every trial (App. D.1)
    if op == "sheared_swap":
        torch.testing.assert_close(t.T_in, shear_matrix(*t.omega_T.unbind(-1)))
        torch.testing.assert_close(t.T_out, t.T_in @ EXCHANGE)
    else:
        torch.testing.assert_close(t.T_in, qud_matrix(*t.omega_T.unbind(-1)))
        torch.testing.assert_close(t.T_out, qud_inverse(*t.omega_T.unbind(-1)))


@pytest.mark.parametrize("op,marg", IDENTIFIABLE)
def test_input_to_output_and_output_to_latent(op, marg):
    t = Benchmark(op, marg).sample_trials(64, generator=gen(3))
    t_in = t.T_in.numpy()
    if op == "sheared_swap":  # Psi = (M P M^-1)_# (Section 3.2.2)
        expected = t_in @ EXCHANGE.numpy() @ np.linalg.inv(t_in)
    else:  # Psi = (B^-2)_#
        expected = np.linalg.inv(t_in @ t_in)
    torch.testing.assert_close(t.input_to_output, torch.tensor(expected))
    eye = torch.eye(2, dtype=torch.float64).expand(64, 2, 2)
    torch.testing.assert_close(t.output_to_latent @ t.T_out, eye)  # T_i^-1 of App. J.1
    if op == "matrix_inverse":
        torch.testing.assert_close(t.output_to_latent, t.T_in)  # (B^-1)^-1 = B


@pytest.mark.parametrize("op,marg", IDENTIFIABLE)
def test_pushing_inputs_through_the_operator_reproduces_the_target_law(op, marg):
    # Independent samples: Y ~ mu_O and X ~ mu_I pushed by input_to_output must agree in law. Compare
    # 1D projections on 4 directions per trial with two-sample KS (rank-based, so infinite variances
    # are harmless), Bonferroni over trials x directions. Power check: the unpushed inputs (the identity
    # in place of the operator) differ from the targets in law, but for some omega only mildly (the swap
    # only exchanges which axis is heavy), so we require rejection in at least half of the trials.
    bench, n, n_trials = Benchmark(op, marg), 4096, 6
    trials = bench.sample_trials(n_trials, generator=gen(4))
    x = bench.sample_inputs(trials, n, generator=gen(5), dtype=torch.float64)
    y = bench.sample_targets(trials, n, generator=gen(6), dtype=torch.float64)
    pushed = x @ trials.input_to_output.transpose(-1, -2)
    angles = torch.tensor([0.0, 0.25, 0.5, 0.75], dtype=torch.float64) * math.pi
    dirs = torch.stack([angles.cos(), angles.sin()], -1)  # (4, 2)
    level = ALPHA / (n_trials * len(dirs))
    rejected_controls = 0
    for i in range(n_trials):
        py, pp, px = (v[i] @ dirs.T for v in (y, pushed, x))  # (n, 4)
        assert min(stats.ks_2samp(py[:, d], pp[:, d]).pvalue for d in range(4)) > level
        rejected_controls += min(stats.ks_2samp(py[:, d], px[:, d]).pvalue for d in range(4)) < level
    assert rejected_controls >= n_trials // 2


@pytest.mark.parametrize("op,marg", IDENTIFIABLE)
def test_output_to_latent_recovers_the_latent_marginals(op, marg):
    # App. J.1: Y (T_i^-1)^T has independent coordinates with the trial's laws eta^(1), eta^(2), which we
    # check against scipy (mirrored Pareto via eq. 18 from scipy's Pareto, Gaussian N(1, sigma^2)).
    bench, n = Benchmark(op, marg), 4096
    trials = bench.sample_trials(4, generator=gen(7))
    z = bench.sample_targets(trials, n, generator=gen(8), dtype=torch.float64) @ trials.output_to_latent.transpose(-1, -2)
    for i in range(4):
        for axis in range(2):
            p = trials.marginal_params[i, axis].item()
            if marg == "gaussian":
                cdf = stats.norm(LOCATION, p).cdf
            else:
                par = stats.pareto(p, scale=LOCATION)
                cdf = lambda v, par=par: np.where(v < LOCATION, 0.5 * par.sf(2 * LOCATION - v), 1 - 0.5 * par.sf(v))
            assert stats.kstest(z[i, :, axis].numpy(), cdf).pvalue > ALPHA / 8
    # Axis 1 carries the larger spread in both families (Section 3.2.1): compare interquartile ranges.
    iqr = z.quantile(0.75, dim=1) - z.quantile(0.25, dim=1)
    assert bool((iqr[:, 1] > iqr[:, 0]).all())


@pytest.mark.parametrize("op", OPERATORS)
def test_training_scale_batch_is_finite_seeded_and_shaped(op):
    bench = Benchmark(op, "mirrored_pareto")
    x, y, _ = bench.sample(64, 16384, generator=gen(9))  # one training step at the paper's scale (Table 3)
    assert x.shape == y.shape == (64, 16384, 2) and x.dtype == y.dtype == torch.float32
    assert bool(torch.isfinite(x).all() and torch.isfinite(y).all())
    a, b = bench.sample(8, 1024, generator=gen(9)), bench.sample(8, 1024, generator=gen(9))
    assert all(torch.equal(u, v) for u, v in zip(a[:2], b[:2])) and torch.equal(a[2].omega_T, b[2].omega_T)
    assert not torch.equal(a[0], bench.sample(8, 1024, generator=gen(10))[0])
    assert bench.sample(2, 5, generator=gen(9), dtype=torch.float64)[0].dtype == torch.float64


def test_trials_slice_and_validate():
    t = Benchmark("matrix_inverse", "mirrored_pareto").sample_trials(8, generator=gen(11))
    assert len(t) == 8 and len(t[2:5]) == 3 and len(t[-1]) == 1
    torch.testing.assert_close(t[-1].input_to_output[0], t.input_to_output[7])
    assert torch.equal(t[[0, 3]].T_in, t.T_in[[0, 3]])
    with pytest.raises(ValueError, match="inconsistent Trials shapes"):
        Trials(t.omega_T, t.marginal_params[:3], t.T_in, t.T_out)
    assert set(MARGINALS) == set(ETA_RANGES) and set(OPERATORS) == set(OMEGA_T_RANGES)
