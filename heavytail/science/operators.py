"""The two benchmark operators and their parameter distributions (Section 3.2.2, App. D).

Every measure is mu(omega) = T(omega_T)_# eta(omega_eta) (Section 3.2) with eta a product of two 1D
marginals (``heavytail.science.distributions``) and T a 2x2 matrix:

- sheared swap: T_in = M(j, k) (eq. 23), T_out = M P, so Psi pushes mu_I forward by M P M^-1;
- matrix inverse: T_in = B = Q(theta) U(s) D(lambda) (eqs. 24, 25), T_out = B^-1, so Psi pushes by B^-2.

A fresh omega = (omega_T, omega_eta) is drawn for every trial (App. D.1). Input and target ensembles of
a trial are independent draws from mu_I(omega) and mu_O(omega) (Section 3.1). Matrices act on row-sample
matrices as ``Z @ T.transpose(-1, -2)``.
"""

from __future__ import annotations

import operator as _op
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from heavytail import names
from heavytail.science.distributions import MirroredPareto, ShiftedGaussian

__all__ = [
    "OPERATORS", "MARGINALS", "LOCATION", "ETA_RANGES", "OMEGA_T_RANGES", "EXCHANGE", "eta_ranges",
    "shear_matrix", "qud_matrix", "qud_inverse", "Trials", "Benchmark",
]

# The operators and marginal families, and which pairs can be learnt, are heavytail.names' (Section 3.2).
OPERATORS = names.BENCHMARKS
MARGINALS = names.MARGINALS

# lambda = mu_N = 1 (Section 4.2): the common latent location that makes the input center identify T (App. D.3).
LOCATION = 1.0


def eta_ranges(marginals: str, tail_regime: str = "paper") -> tuple[tuple[float, float], tuple[float, float]]:
    """Pi_eta (Section 3.2.1), per latent axis ``((low, high), (low, high))``: the range of the tail index a for
    the mirrored Pareto (``heavytail.names.TAIL_REGIMES[tail_regime]``), of the std sigma for the Gaussian.

    The Gaussian takes the paper's ranges exchanged, so that axis 1 always carries the larger spread: for the
    Pareto the heavier tail (smaller a), for the Gaussian the larger sigma. It has no tail regime
    (``heavytail.names.regime_refusal``)."""
    if tail_regime not in names.TAIL_REGIMES:
        raise ValueError(f"tail_regime must be one of {tuple(names.TAIL_REGIMES)}; got {tail_regime!r}")
    why = names.regime_refusal(marginals, tail_regime)
    if why is not None:
        raise ValueError(why)
    lighter, heavier = names.TAIL_REGIMES[tail_regime]
    return (lighter, heavier) if marginals == "mirrored_pareto" else (heavier, lighter)


# The paper's Pi_eta for each marginal family.
ETA_RANGES = {m: eta_ranges(m) for m in MARGINALS}

# Pi_T (App. D.1): eq. (23) for the sheared swap, eq. (25) for the matrix inverse; columns of omega_T.
OMEGA_T_RANGES = {
    "sheared_swap": (("j", -1.0, 1.0), ("k", -1.0, 1.0)),
    "matrix_inverse": (("theta", -0.7, 0.7), ("s", -0.35, 0.35), ("lambda1", 0.75, 1.5), ("lambda2", 0.75, 1.5)),
}

EXCHANGE = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)  # P, the coordinate exchange


def _mat(a, b, c, d) -> Tensor:
    return torch.stack([torch.stack([a, b], -1), torch.stack([c, d], -1)], -2)


def shear_matrix(j: Tensor, k: Tensor) -> Tensor:
    """M(j, k) = [[1, j], [0, 1]] [[1, 0], [k, 1]] = [[1 + jk, j], [k, 1]], det M = 1 (eq. 23). (...) -> (..., 2, 2)."""
    one = torch.ones_like(j)
    return _mat(1 + j * k, j, k, one)


def qud_matrix(theta: Tensor, s: Tensor, lam1: Tensor, lam2: Tensor) -> Tensor:
    """B = Q(theta) U(s) D(lambda) in GL+(2) (eq. 24), det B = lambda1 lambda2 > 0. (...) -> (..., 2, 2)."""
    c, sn = torch.cos(theta), torch.sin(theta)
    # Q U = [[c, c s - sn], [sn, sn s + c]]; D scales the columns.
    return _mat(c * lam1, (c * s - sn) * lam2, sn * lam1, (sn * s + c) * lam2)


def qud_inverse(theta: Tensor, s: Tensor, lam1: Tensor, lam2: Tensor) -> Tensor:
    """B^-1 = D^-1 U(-s) Q(-theta) in closed form (eq. 24), avoiding a numerical inverse. (...) -> (..., 2, 2)."""
    c, sn = torch.cos(theta), torch.sin(theta)
    # U(-s) Q(-theta) = [[1, -s], [0, 1]] [[c, sn], [-sn, c]] = [[c + s sn, sn - s c], [-sn, c]];
    # D^-1 scales the rows.
    return _mat((c + s * sn) / lam1, (sn - s * c) / lam1, -sn / lam2, c / lam2)


@dataclass(frozen=True)
class Trials:
    """Per-trial parameters omega and matrices, float64, leading dimension T (one row per trial).

    omega_T (T, k): (j, k) or (theta, s, lambda1, lambda2); marginal_params (T, 2): tail index or std per
    latent axis; T_in (T, 2, 2) with input X = T_in Z; T_out (T, 2, 2) with target Y = T_out Z.
    """

    omega_T: Tensor
    marginal_params: Tensor
    T_in: Tensor
    T_out: Tensor

    def __post_init__(self):
        n = self.T_in.shape[0]
        shapes = {f.name: tuple(getattr(self, f.name).shape) for f in fields(self)}
        if (self.omega_T.ndim != 2 or shapes["marginal_params"] != (n, 2)
                or shapes["T_in"] != (n, 2, 2) or shapes["T_out"] != (n, 2, 2) or self.omega_T.shape[0] != n):
            raise ValueError(f"inconsistent Trials shapes {shapes}; expected (T, k), (T, 2), (T, 2, 2), (T, 2, 2)")

    def __len__(self) -> int:
        return self.T_in.shape[0]

    def __getitem__(self, idx) -> "Trials":
        """Select trials; an integer keeps a leading dimension of 1 so the result is still a Trials."""
        try:
            idx = [_op.index(idx)]  # ints, numpy ints and 0-d integer tensors
        except TypeError:
            pass
        return Trials(*(getattr(self, f.name)[idx] for f in fields(self)))

    @property
    def input_to_output(self) -> Tensor:
        """T_out T_in^-1 (T, 2, 2): M P M^-1 (sheared swap) or B^-2 (matrix inverse), Section 3.2.2."""
        return self.T_out @ torch.linalg.inv(self.T_in)

    @property
    def output_to_latent(self) -> Tensor:
        """T_out^-1 (T, 2, 2): maps targets back to latent coordinates for the Hill diagnostic (App. J.1)."""
        return torch.linalg.inv(self.T_out)


def _count(name: str, value) -> int:
    try:
        v = _op.index(value)
    except TypeError:
        v = None
    if v is None or v < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return v


@dataclass(frozen=True)
class Benchmark:
    """An operator benchmark of Section 3.2.2 on one latent marginal family (Section 3.2.1).

    ``operator`` in OPERATORS, ``marginals`` in MARGINALS. A pair no model can learn
    (``heavytail.names.task_refusal``: the matrix inverse on Gaussian marginals, Prop. 6) is refused unless
    ``allow_unidentifiable=True`` (for the counterexample). ``tail_regime`` names the mirrored Pareto's tail
    index ranges (:func:`eta_ranges`; the paper's by default).
    """

    operator: str
    marginals: str
    allow_unidentifiable: bool = False
    tail_regime: str = "paper"

    def __post_init__(self):
        if self.operator not in OPERATORS:
            raise ValueError(f"operator must be one of {OPERATORS}; got {self.operator!r}")
        if self.marginals not in MARGINALS:
            raise ValueError(f"marginals must be one of {MARGINALS}; got {self.marginals!r}")
        why = names.task_refusal(self.operator, self.marginals)
        if why is not None and not self.allow_unidentifiable:
            raise ValueError(f"operator {self.operator!r} on marginals {self.marginals!r}: {why}. Use marginals "
                             f"{names.BENCHMARK_MARGINALS[self.operator]}, or pass allow_unidentifiable=True to "
                             "build the counterexample deliberately.")
        eta_ranges(self.marginals, self.tail_regime)  # refuses an unknown regime, or one on Gaussian marginals

    def sample_trials(self, n_trials: int, generator: torch.Generator | None = None, device=None) -> Trials:
        """Draw omega ~ Pi_T x Pi_eta independently for each of ``n_trials`` trials (App. D.1, Section 3.2.1)."""
        n_trials = _count("n_trials", n_trials)
        if device is None:
            device = generator.device if generator is not None else "cpu"
        ranges = OMEGA_T_RANGES[self.operator]
        lo_hi = [(lo, hi) for _, lo, hi in ranges] + list(eta_ranges(self.marginals, self.tail_regime))
        lo, hi = (torch.tensor(v, dtype=torch.float64, device=device) for v in zip(*lo_hi))
        omega = lo + (hi - lo) * torch.rand((n_trials, len(lo_hi)), generator=generator,
                                            dtype=torch.float64, device=device)
        omega_T, params = omega[:, : len(ranges)], omega[:, len(ranges):]
        if self.operator == "sheared_swap":
            t_in = shear_matrix(omega_T[:, 0], omega_T[:, 1])
            t_out = t_in @ EXCHANGE.to(device)
        else:
            t_in, t_out = qud_matrix(*omega_T.unbind(-1)), qud_inverse(*omega_T.unbind(-1))
        return Trials(omega_T, params, t_in, t_out)

    def latent_law(self, trials: Trials):
        """eta(omega_eta) with parameters of shape (T, 1, 2): one law per trial and latent axis (Section 3.2.1)."""
        p = trials.marginal_params[:, None, :]
        if self.marginals == "mirrored_pareto":
            return MirroredPareto(LOCATION, p)
        return ShiftedGaussian(LOCATION, p)

    def sample_latent(self, trials: Trials, n: int, generator: torch.Generator | None = None,
                      dtype: torch.dtype = torch.float32) -> Tensor:
        """Z ~ eta(omega)^{(x) n} per trial: (T, n, 2)."""
        n = _count("n", n)
        return self.latent_law(trials).sample((len(trials), n, 2), generator=generator, dtype=dtype,
                                              device=trials.T_in.device)

    def _push(self, trials, mats, n, generator, dtype) -> Tensor:
        z = self.sample_latent(trials, n, generator, dtype=torch.float64)
        # Entries of T are O(1) and latent draws stay below ~1e16 (see distributions), so the product
        # is finite in float32 too; it is formed in float64 so a float32 result has only one rounding.
        return (z @ mats.transpose(-1, -2)).to(dtype)

    def sample_inputs(self, trials: Trials, n: int, generator: torch.Generator | None = None,
                      dtype: torch.dtype = torch.float32) -> Tensor:
        """X ~ mu_I(omega)^{(x) n} = (T_in)_# eta: (T, n, 2)."""
        return self._push(trials, trials.T_in, n, generator, dtype)

    def sample_targets(self, trials: Trials, n: int, generator: torch.Generator | None = None,
                       dtype: torch.dtype = torch.float32) -> Tensor:
        """Y ~ mu_O(omega)^{(x) n} = (T_out)_# eta, independent of the inputs: (T, n, 2)."""
        return self._push(trials, trials.T_out, n, generator, dtype)

    def sample(self, n_trials: int, n: int, generator: torch.Generator | None = None,
               dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor, Trials]:
        """Fresh omega per trial, then independent ensembles X, Y of shape (n_trials, n, 2) (eq. 4)."""
        trials = self.sample_trials(n_trials, generator)
        return (self.sample_inputs(trials, n, generator, dtype),
                self.sample_targets(trials, n, generator, dtype), trials)
