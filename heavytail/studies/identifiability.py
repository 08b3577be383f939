"""Recovering the mixing matrix from input samples (App. D.3, Props. 4-6), and Prop. 6's counterexample.

The propositions identify M (sheared swap) and B (matrix inverse) from the input *law*; these are simple
sample estimators that follow the same arguments, so their error can be watched shrink as N grows.

- Center. The input law is centrally symmetric about c = T z_* with z_* = (lambda, lambda) (App. D.3).
  With a Pareto index near 1 the mean barely exists and the variance does not, so the sample mean is a poor
  estimator of c; each coordinate of X is a symmetric law about c_i with positive density there, so its
  median *is* c_i. :func:`center` uses the coordinate-wise median (error O(N^-1/2) for every admissible index).
- Sheared swap, off the edge: k and j from the center by eq. (27).
- Sheared swap on the shear edge c_y = 0 (k = -1), where eq. (27) divides by zero. Mirrored Pareto: Prop. 4
  uses the kink lines x - j y = lambda and x - j y + y = lambda of the density; these are the images of the
  latent seams, parallel to the two columns of M, (1 + jk, k) and (j, 1), whose slopes (x per unit y) are
  j - 1 and j, "the larger slope is j". We read the same two directions off the samples' tails
  (:func:`latent_columns`), where each extreme point lies along one column. Gaussian: the covariance
  formulas of Prop. 4's proof.
- Matrix inverse on the mirrored Pareto family (Prop. 5): the columns of B from the tails
  (:func:`latent_columns`) together with the center m = c / lambda = b_l + b_h, the column order fixed by
  det B > 0 exactly as in the proof.
- Prop. 6: :func:`prop6_instances` builds H of eq. (29) and the second admissible instance (B H^-1, H D H^T).
- Notebook 03's findings: :func:`recovery_findings` (error quantiles, log-log slopes, the cases whose error
  falls with N) and :func:`conditioning_split` / :func:`edge_dominates` (is the error concentrated near the
  shear edge, where eq. (27) divides by a small c_y?).

:func:`latent_columns` is written by hand because no library estimates the directions of a product of
independent heavy-tailed coordinates; how it works is in its docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from heavytail.science.operators import ETA_RANGES, LOCATION, MARGINALS, OMEGA_T_RANGES, qud_matrix, shear_matrix


def _check_points(x: Tensor, name: str = "x") -> Tensor:
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x)
    if x.ndim < 2 or x.shape[-1] != 2:
        raise ValueError(f"{name} must have shape (..., N, 2), got {tuple(x.shape)}")
    if x.shape[-2] < 8:
        raise ValueError(f"{name} needs at least 8 points per set to estimate anything, got N={x.shape[-2]}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains non-finite values ({int((~torch.isfinite(x)).sum())} entries); "
                         "estimators need finite samples")
    return x.to(torch.float64)


def center(x: Tensor) -> Tensor:
    """Coordinate-wise median (..., N, 2) -> (..., 2): the symmetry center c = T z_* (App. D.3).

    The median of each coordinate equals c_i for every admissible index because each coordinate is
    symmetric about c_i; the mean would need a > 1 and converge like N^(1/a - 1) near a = 1.
    """
    x = _check_points(x)
    s = x.sort(dim=-2).values
    n = x.shape[-2]
    return 0.5 * (s[..., (n - 1) // 2, :] + s[..., n // 2, :])  # midpoint median for even N


def shear_from_center(c: Tensor, lam: float = LOCATION) -> tuple[Tensor, Tensor]:
    """Eq. (27): k = (c_y - lambda) / lambda, j = (c_x - lambda) / c_y. (..., 2) -> ((...), (...)).

    j is +-inf or NaN on the shear edge c_y = 0; :func:`estimate_shear` switches to the edge estimators there.
    """
    k = (c[..., 1] - lam) / lam
    j = (c[..., 0] - lam) / c[..., 1]
    return k, j


def _axis_mean(v: Tensor) -> Tensor:
    """Mean axis (unit vector, sign-free) of row vectors v (n, 2): the doubled-angle circular mean."""
    phi = 2.0 * torch.atan2(v[:, 1], v[:, 0])
    ang = 0.5 * torch.atan2(torch.sin(phi).mean(), torch.cos(phi).mean())
    return torch.stack([torch.cos(ang), torch.sin(ang)])


def _mode_axis(v: Tensor, bins: int = 90, window: float = math.radians(10.0)) -> Tensor:
    """The most populated axis among row vectors v (n, 2): histogram of doubled angles, then the circular
    mean of the points within ``window`` of the peak (axis angle)."""
    phi = torch.remainder(2.0 * torch.atan2(v[:, 1], v[:, 0]), 2 * math.pi)
    counts = torch.histc(phi, bins=bins, min=0.0, max=2 * math.pi)
    peak = (counts.argmax().item() + 0.5) * 2 * math.pi / bins
    dist = torch.remainder(phi - peak + math.pi, 2 * math.pi) - math.pi
    near = v[dist.abs() <= 2 * window]
    return _axis_mean(near if len(near) else v)


def _partner(y: Tensor, d: Tensor, m: Tensor, top: int) -> tuple[Tensor, Tensor]:
    """Given the exact direction d of one column b_1 (b_1 = alpha d), find the other column b_2 with
    b_1 + b_2 = m. Project on u perpendicular to d: t = <u, X - c> = gamma Z_2' sees only the other latent
    coordinate (gamma = <u, m> = <u, b_2>). Along d, s = alpha Z_1' + kappa t with kappa = <d, b_2> / gamma.
    Among the ``top`` largest |t| the noise alpha Z_1' / t is symmetric and independent of t, so the median
    of s / t estimates kappa. Returns (b_1, b_2)."""
    u = torch.stack([-d[1], d[0]])
    t, s = y @ u, y @ d
    gamma = m @ u
    idx = t.abs().topk(top).indices
    kappa = (s[idx] / t[idx]).median()
    b2 = gamma * (kappa * d + u)
    return m - b2, b2


def latent_columns(x: Tensor, lam: float = LOCATION, tail_fraction: float = 0.02, n_iter: int = 3) -> Tensor:
    """The two columns of T from input samples X = T Z with independent mirrored Pareto coordinates, (N, 2) -> (2, 2).

    Returned as the columns of a matrix in an arbitrary order (fix it with the determinant's sign, as Prop. 5
    does). Why it works (Prop. 5's directional tail calculation): X - c = Z_1' b_1 + Z_2' b_2 with
    Z_i' = Z_i - lambda, so the far points lie along +-b_1 or +-b_2 (one latent coordinate huge, the other
    O(1)). The most populated tail axis gives the direction of one column; projecting perpendicular to it
    isolates the other latent coordinate exactly, and :func:`_partner` reads the other column off a median
    of ratios, using b_1 + b_2 = m = c / lambda. Alternating the roles ``n_iter`` times refines both
    directions from the extremes of the coordinate they carry.
    """
    x = _check_points(x)
    if x.ndim != 2:
        raise ValueError(f"latent_columns takes one sample set (N, 2), got {tuple(x.shape)}")
    if not 0.0 < tail_fraction <= 0.5:
        raise ValueError(f"tail_fraction must lie in (0, 0.5], got {tail_fraction}")
    c = center(x)
    m = c / lam
    y = x - c
    top = max(8, int(tail_fraction * len(y)))
    far = y[y.norm(dim=-1).topk(top).indices]
    d1 = _mode_axis(far)
    b1, b2 = _partner(y, d1, m, top)
    for _ in range(n_iter):
        b2, b1 = _partner(y, b2 / b2.norm(), m, top)  # refine b2's direction from its own coordinate's extremes
        b1, b2 = _partner(y, b1 / b1.norm(), m, top)
    return torch.stack([b1, b2], dim=-1)


def shear_edge_j(x: Tensor, marginals: str, lam: float = LOCATION) -> Tensor:
    """j on the shear edge c_y = 0 (k = -1), Prop. 4. (N, 2) -> ().

    mirrored_pareto: the two column directions of M are parallel to the density's kink lines; their slopes
    (x per unit y) are j - 1 and j, and the larger one is j. gaussian: with C = Cov(X), S = C_yy = v + w,
    det C = v w; v <= w is the smaller root of t (S - t) = det C and j = (C_xy + v) / S.
    """
    x = _check_points(x)
    if marginals == "mirrored_pareto":
        cols = latent_columns(x, lam)
        slopes = cols[0] / cols[1]
        return slopes.max()
    if marginals == "gaussian":
        cov = torch.cov(x.T)
        s, det = cov[1, 1], torch.linalg.det(cov)
        v = 0.5 * (s - torch.sqrt(torch.clamp(s * s - 4 * det, min=0.0)))
        return (cov[0, 1] + v) / s
    raise ValueError(f"marginals must be one of {MARGINALS}, got {marginals!r}")


def estimate_shear(x: Tensor, marginals: str, lam: float = LOCATION, edge_tol: float = 0.05) -> Tensor:
    """M(j, k) of eq. (23) from one input sample set (N, 2) -> (2, 2) (Prop. 4).

    Uses eq. (27) when |c_y| > edge_tol * lambda; otherwise k from the center and j from :func:`shear_edge_j`.
    """
    if not edge_tol >= 0:
        raise ValueError(f"edge_tol must be >= 0, got {edge_tol}")
    c = center(x)
    k, j = shear_from_center(c, lam)
    if c[1].abs() <= edge_tol * lam:
        j = shear_edge_j(x, marginals, lam)
    return shear_matrix(j, k)


def estimate_inverse_matrix(x: Tensor, marginals: str = "mirrored_pareto", lam: float = LOCATION) -> Tensor:
    """B of eq. (24) from one input sample set (N, 2) -> (2, 2) on the mirrored Pareto family (Prop. 5).

    The two tail columns with m = c / lambda give B up to the order of its columns; the two orders have
    determinants of opposite sign and det B > 0 selects one (Prop. 5's last step).
    """
    if marginals == "gaussian":
        raise ValueError("the matrix inverse is unidentifiable on the gaussian family (Prop. 6): "
                         "no estimator of B from the input law exists; use marginals='mirrored_pareto'")
    if marginals != "mirrored_pareto":
        raise ValueError(f"marginals must be 'mirrored_pareto' here, got {marginals!r}")
    cols = latent_columns(x, lam)
    return cols if torch.linalg.det(cols) > 0 else cols.flip(-1)


def decompose_qud(b: Tensor) -> dict[str, float]:
    """Invert eq. (24): B = Q(theta) U(s) diag(lambda1, lambda2) via QR with a positive R diagonal. (2, 2) -> dict."""
    if torch.linalg.det(b) <= 0:
        raise ValueError(f"B must have a positive determinant (GL+(2)), got det {float(torch.linalg.det(b))}")
    q, r = torch.linalg.qr(b)
    sign = torch.diag(torch.sign(torch.diagonal(r)))
    q, r = q @ sign, sign @ r  # make the diagonal of R positive; det Q = +1 since det B > 0
    return {"theta": float(torch.atan2(q[1, 0], q[0, 0])), "s": float(r[0, 1] / r[1, 1]),
            "lambda1": float(r[0, 0]), "lambda2": float(r[1, 1])}


@dataclass(frozen=True)
class Prop6Instances:
    """Two matrix-inverse parameter instances on Gaussian marginals with one input law (Prop. 6)."""

    b: Tensor  # (2, 2) B = diag(b_x, b_y)
    sigma: Tensor  # (2,) latent stds (sigma_l, sigma_h)
    h: float
    H: Tensor  # (2, 2) eq. (29)
    b_prime: Tensor  # (2, 2) B H^-1
    sigma_prime: Tensor  # (2,) sqrt of diag(H D H^T)
    omega_T_prime: dict  # eq. (24) parameters of B'
    admissible: bool  # every parameter of the perturbed instance inside Pi (eq. 25, Section 3.2.1)


def prop6_instances(b_diag=(0.9, 1.3), sigma=(1.5, 2.5), h: float = 0.05) -> Prop6Instances:
    """Build Prop. 6's pair: B = diag(b_x, b_y), D = diag(sigma_l^2, sigma_h^2), H of eq. (29),
    B' = B H^-1, D' = H D H^T. Both instances give X ~ N(B 1, B D B^T); their outputs B^-1 Z and B'^-1 Z'
    have means differing by (H - I) B^-1 z_*, horizontally lambda h (b_y - b_x) / (b_x b_y)."""
    bx, by = map(float, b_diag)
    sl, sh = map(float, sigma)
    if bx == by:
        raise ValueError(f"b_x and b_y must differ (Prop. 6), got {b_diag}")
    g = h * sh**2 / ((1 + h) * sl**2 + h * sh**2)  # eq. (29): zeroes the off-diagonal of H D H^T
    H = torch.tensor([[1 + h, -h], [g, 1 - g]], dtype=torch.float64)
    B = torch.diag(torch.tensor([bx, by], dtype=torch.float64))
    D = torch.diag(torch.tensor([sl**2, sh**2], dtype=torch.float64))
    Dp = H @ D @ H.T
    if abs(float(Dp[0, 1])) > 1e-12 or float(torch.linalg.det(H)) <= 0:
        raise ValueError(f"h={h} is too large: H D H^T is not diagonal or det H <= 0")
    Bp = B @ torch.linalg.inv(H)
    sp = torch.sqrt(torch.diagonal(Dp))
    omega = decompose_qud(Bp)
    lims = {name: (lo, hi) for name, lo, hi in OMEGA_T_RANGES["matrix_inverse"]}
    (l_lo, l_hi), (h_lo, h_hi) = ETA_RANGES["gaussian"]
    ok = all(lims[k][0] <= v <= lims[k][1] for k, v in omega.items())
    ok = ok and l_lo <= float(sp[0]) <= l_hi and h_lo <= float(sp[1]) <= h_hi
    ok = ok and all(lims["lambda1"][0] < v < lims["lambda1"][1] for v in (bx, by))
    ok = ok and l_lo < sl < l_hi and h_lo < sh < h_hi
    return Prop6Instances(B, torch.tensor([sl, sh], dtype=torch.float64), float(h), H, Bp, sp, omega, bool(ok))


def relative_error(est: Tensor, true: Tensor) -> Tensor:
    """||est - true||_F / ||true||_F over the last two dims. (..., 2, 2) -> (...)."""
    return torch.linalg.matrix_norm(est - true) / torch.linalg.matrix_norm(true)


# ------------------------------------------------------------------ notebook 03's findings
# Eq. (27) divides by c_y = lambda (1 + k), so the estimate of j degrades as c_y nears the shear edge 0 (Prop. 4).
# Instances with |c_y| below this fraction of lambda count as near the edge; estimate_shear switches to the edge
# estimators only within edge_tol = 0.05 lambda, so between the two eq. (27) is used on a small divisor.
NEAR_EDGE = 0.25
# The near-edge instances "carry most of the error" when their median error exceeds the other instances' by more
# than this factor in every family. The paper gives no number; 2 asks for a clear separation, not a shift of the
# median that one or two instances of a dozen could make.
EDGE_ERROR_RATIO = 2.0


@dataclass(frozen=True)
class RecoveryFindings:
    """Recovery of the mixing matrix as N grows (Props. 4, 5): per case and budget, the error quantiles."""

    budgets: tuple[int, ...]  # ensemble sizes N, increasing as given
    cases: tuple[str, ...]
    rows: list  # one dict per (case, N): case, N, median_rel_error, q25, q75, max_rel_error
    slopes: dict  # {case: least-squares slope of log median error against log N}
    falling: tuple[str, ...]  # cases whose median error at the last budget is below that at the first

    def median(self, case: str, n: int) -> float:
        """The median relative error of ``case`` at budget ``n``."""
        return next(r["median_rel_error"] for r in self.rows if r["case"] == case and r["N"] == n)


def recovery_findings(errors) -> RecoveryFindings:
    """Summarise relative errors ``{N: {case: (instances,)}}`` (every N the same cases, budgets in order).

    Medians are quantile(0.5), not torch.median, which returns the lower middle value for an even count;
    the slope is a least-squares fit of log median error on log N (the N^-1/2 rate gives -0.5).
    """
    budgets = tuple(errors)
    if len(budgets) < 2:
        raise ValueError(f"recovery slopes need at least two budgets N, got {list(budgets)}")
    cases = tuple(errors[budgets[0]])
    for n in budgets:
        if tuple(errors[n]) != cases:
            raise ValueError(f"every budget must hold the same cases {list(cases)}; N = {n} has {list(errors[n])}")

    def q(n, c, p):
        return float(torch.as_tensor(errors[n][c]).quantile(p))

    rows = [{"case": c, "N": n, "median_rel_error": q(n, c, 0.5), "q25": q(n, c, 0.25), "q75": q(n, c, 0.75),
             "max_rel_error": float(torch.as_tensor(errors[n][c]).max())} for c in cases for n in budgets]
    med = {(r["case"], r["N"]): r["median_rel_error"] for r in rows}
    slopes = {c: float(np.polyfit(np.log(budgets), np.log([med[c, n] for n in budgets]), 1)[0]) for c in cases}
    falling = tuple(c for c in cases if med[c, budgets[-1]] < med[c, budgets[0]])
    return RecoveryFindings(budgets, cases, rows, slopes, falling)


@dataclass(frozen=True)
class ConditioningSplit:
    """Sheared-swap instances split by the divisor c_y of eq. (27): near the shear edge against the rest."""

    n_near: int
    n_far: int
    median_near: float  # median relative error of the instances with |c_y| < NEAR_EDGE lambda
    median_far: float  # ... and of the others

    @property
    def ratio(self) -> float:
        return self.median_near / self.median_far


def conditioning_split(errors: Tensor, c_y: Tensor, lam: float = LOCATION,
                       near: float = NEAR_EDGE) -> ConditioningSplit | None:
    """Split per-instance errors (n,) by |c_y| (n,) < near * lambda; None when either side is empty."""
    errors, c_y = torch.as_tensor(errors), torch.as_tensor(c_y)
    if errors.shape != c_y.shape or errors.ndim != 1:
        raise ValueError(f"errors and c_y must be matching (n,) vectors, got {tuple(errors.shape)} and {tuple(c_y.shape)}")
    close = c_y.abs() < near * lam
    if not close.any() or close.all():
        return None
    return ConditioningSplit(int(close.sum()), int((~close).sum()), float(errors[close].quantile(0.5)),
                             float(errors[~close].quantile(0.5)))


def edge_dominates(splits, factor: float = EDGE_ERROR_RATIO) -> bool:
    """Whether the near-edge instances carry most of the error in every split: min ratio > ``factor``."""
    ratios = [s.ratio for s in splits]
    if not ratios:
        raise ValueError("edge_dominates needs at least one conditioning split")
    return min(ratios) > factor


__all__ = ["center", "shear_from_center", "latent_columns", "shear_edge_j", "estimate_shear",
           "estimate_inverse_matrix", "decompose_qud", "prop6_instances", "Prop6Instances", "relative_error",
           "qud_matrix", "recovery_findings", "RecoveryFindings", "conditioning_split", "ConditioningSplit",
           "edge_dominates", "NEAR_EDGE", "EDGE_ERROR_RATIO"]


# The cases of the recovery study: the sheared swap on both families (Prop. 4), the matrix inverse on mirrored
# Pareto marginals (Prop. 5; on Gaussian marginals it is unidentifiable, Prop. 6).
RECOVERY_CASES = (("sheared_swap", "mirrored_pareto"), ("sheared_swap", "gaussian"), ("matrix_inverse", "mirrored_pareto"))
EDGE_INDICES = {"mirrored_pareto": (2.5, 1.5), "gaussian": (1.5, 2.5)}  # midpoints of each family's ranges


@dataclass(frozen=True)
class Recovery:
    """Relative errors per case at one N, ``{case label: (trials,)}``, and per family the sheared swap's
    c_y = lambda (1 + k) of its instances (eq. 27 divides by it)."""

    errors: dict
    c_y: dict


def recovery_errors(case_trials: dict, n: int, n_edge: int, generator: torch.Generator) -> Recovery:
    """Estimate M (eq. 27) and B (Prop. 5) from fresh input ensembles of size ``n`` of the given instances
    ``{(operator, family): Trials}``, and M on ``n_edge`` shear-edge instances (k = -1, so c_y = 0; j spread over
    [-0.9, 0.9]) per family, where eq. (27) alone would divide by zero."""
    from heavytail.science.operators import EXCHANGE, Benchmark, Trials

    errors, c_y = {}, {}
    for (op, fam), trials in case_trials.items():
        x = Benchmark(op, fam).sample_inputs(trials, n, generator=generator, dtype=torch.float64)
        est = estimate_shear if op == "sheared_swap" else estimate_inverse_matrix
        errors[f"{op} / {fam}"] = torch.stack([relative_error(est(x[i], fam), trials.T_in[i])
                                               for i in range(len(trials.T_in))])
        if op == "sheared_swap":
            c_y[fam] = LOCATION * (1 + trials.omega_T[:, 1])
    j = torch.linspace(-0.9, 0.9, n_edge, dtype=torch.float64)
    k = -torch.ones_like(j)
    m = shear_matrix(j, k)
    for fam, params in EDGE_INDICES.items():
        p = torch.tensor([params] * n_edge, dtype=torch.float64)
        edge = Trials(torch.stack([j, k], -1), p, m, m @ EXCHANGE)
        x = Benchmark("sheared_swap", fam).sample_inputs(edge, n, generator=generator, dtype=torch.float64)
        errors[f"shear edge / {fam}"] = torch.stack([relative_error(estimate_shear(x[i], fam), m[i])
                                                     for i in range(n_edge)])
    return Recovery(errors, c_y)
