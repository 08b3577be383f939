"""The paper's one-dimensional measure families (Section 3.2.1, App. C, App. F.1).

- ``Pareto(scale, tail_index)``: eq. (5).
- ``MirroredPareto(scale, tail_index)``: eqs. (6), (18), (19).
- ``ShiftedGaussian(mean, std)``: the light-tailed control of Section 3.2.1.
- ``SplicedPareto(a_ref, a_star, seam_quantile, scale)``: eq. (31).
- ``mirrored_pareto_transport``: quantile transport between mirrored Paretos, eq. (20).

Every family has ``sample(shape, generator=None, dtype=None)``, ``cdf``, ``sf`` (survival), ``icdf``,
``isf`` (inverse survival), ``log_prob`` and ``pdf``. Parameters are Python floats or tensors; they
broadcast against the sample shape (a ``tail_index`` of shape ``(T, 1)`` with ``shape=(T, N)`` gives one
index per trial) and against ``x`` in the density functions. The functions of ``x`` and ``u`` are
evaluated in float64 and returned in the input's floating dtype (float32 for integer input).

Why these are written by hand rather than taken from ``torch.distributions``: the paper's tail needs
inverse-CDF sampling with float64 uniforms on (0, 1] (below), per-trial tensor parameters in one call,
and the mirrored and spliced laws, none of which torch provides.

Sampling precision. Pareto draws are ``lambda * U**(-1/a)``: ``U = 0`` is the end that matters (it gives
+inf), ``U = 1`` is harmless (it gives ``lambda``). ``U = 1 - torch.rand(float64)`` lies in
``{2**-53, 2*2**-53, ..., 1}``, so no draw is infinite, and the tail is resolved down to survival
probability ``2**-53``. Float32 uniforms are multiples of ``2**-24`` and would cap every draw at
``lambda * 2**(24/a)`` (about 1.7e7 at ``a = 1 + eps``), silently removing the extreme tail, so uniforms
are always float64 and the result is cast at the end. The largest possible draw is then
``lambda * 2**(53/a)``, about ``9.0e15 * lambda`` at ``a = 1 + eps``, far inside float32's range
(3.4e38). Only for ``a < 53 / (128 - log2(lambda))`` (about 0.41 at ``lambda = 1``) can a float32 draw
exceed float32's range; the cast then saturates at ``torch.finfo(float32).max`` instead of returning
inf, which happens with probability ``(lambda / 3.4e38)**a``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from heavytail import names

__all__ = [
    "FLOAT32_EPS",
    "A_MIN",
    "Pareto",
    "MirroredPareto",
    "ShiftedGaussian",
    "SplicedPareto",
    "mirrored_pareto_transport",
]

FLOAT32_EPS = torch.finfo(torch.float32).eps
# The paper's 1 + eps (Section 3.2.1): the smallest float32 tail index above 1, the lower end of the paper's
# tail regime (heavytail.names.TAIL_REGIMES), where it is written down once.
A_MIN = names.PARETO_A_MIN

_F64 = torch.float64


def _param(name: str, value, low: float = 0.0, high: float = math.inf) -> Tensor:
    """Validate a parameter once at construction: finite and in the open interval (low, high)."""
    t = torch.as_tensor(value, dtype=_F64)
    ok = torch.isfinite(t) & (t > low) & (t < high)
    if not bool(ok.all()):
        bad = t[~ok].flatten()
        where = f" ({bad.numel()} of {t.numel()} entries invalid)" if t.numel() > 1 else ""
        raise ValueError(
            f"{name} must be a finite number in ({low:g}, {high:g}); got {bad[0].item():.8g}{where}"
        )
    return t


def _prob(u, name: str) -> tuple[Tensor, torch.dtype]:
    """Probabilities for icdf/isf as float64, plus the dtype to return; NaN or values outside [0, 1] raise."""
    u = torch.as_tensor(u)
    out = u.dtype if u.is_floating_point() else torch.float32
    u = u.to(_F64)
    if not bool(((u >= 0) & (u <= 1)).all()):
        bad = u[~((u >= 0) & (u <= 1))].flatten()[0].item()
        raise ValueError(f"{name} must be a probability in [0, 1]; got {bad:.8g}")
    return u, out


def _values(x) -> tuple[Tensor, torch.dtype]:
    x = torch.as_tensor(x)
    out = x.dtype if x.is_floating_point() else torch.float32
    return x.to(_F64), out


def _cast(x: Tensor, dtype: torch.dtype) -> Tensor:
    """Cast float64 results, saturating at the target's finite range instead of overflowing to inf."""
    if dtype != _F64:
        big = torch.finfo(dtype).max
        x = x.clamp(-big, big)
    return x.to(dtype)


def _unit_uniform(shape: torch.Size, generator, device) -> Tensor:
    """Float64 uniforms on (0, 1]: ``1 - rand`` excludes 0, the end that would give an infinite Pareto draw."""
    return 1.0 - torch.rand(shape, generator=generator, dtype=_F64, device=device)


class _Family:
    """Shared plumbing: broadcasting of tensor parameters against a sample shape, dtype and device."""

    _names: tuple[str, ...] = ()

    def _params(self, device=None) -> list[Tensor]:
        return [getattr(self, n).to(device) if device is not None else getattr(self, n) for n in self._names]

    @property
    def batch_shape(self) -> torch.Size:
        return torch.broadcast_shapes(*(getattr(self, n).shape for n in self._names))

    def sample(self, shape: Sequence[int], generator: torch.Generator | None = None,
               dtype: torch.dtype | None = None, device=None) -> Tensor:
        """Draw a tensor of exactly ``shape``; parameters must broadcast to ``shape``.

        Computed in float64 from float64 uniforms (see the module docstring) and cast to ``dtype``
        (float32 by default). ``device`` defaults to the generator's device, else the parameters'.
        """
        shape = torch.Size(shape)
        try:
            ok = torch.broadcast_shapes(self.batch_shape, shape) == shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"sample shape {tuple(shape)} must be a broadcast target of the parameter shape "
                f"{tuple(self.batch_shape)} (e.g. parameters (T, 1) with shape (T, N))"
            )
        if device is None:
            device = generator.device if generator is not None else getattr(self, self._names[0]).device
        x = self._sample64(shape, generator, torch.device(device))
        return _cast(x, dtype or torch.float32)

    def pdf(self, x) -> Tensor:
        return self.log_prob(x).exp()

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={getattr(self, n).tolist()}" for n in self._names)
        return f"{type(self).__name__}({args})"


class Pareto(_Family):
    """Pareto(lambda, a) on [lambda, inf): S_P(x) = (x/lambda)^-a, f_P(x) = a lambda^a x^(-a-1) (eq. 5).

    ``scale`` = lambda > 0 and ``tail_index`` = a > 0; moments of order p exist iff p < a (Prop. 3).
    """

    _names = ("scale", "tail_index")

    def __init__(self, scale, tail_index):
        self.scale = _param("scale", scale)
        self.tail_index = _param("tail_index", tail_index)

    def _log_ratio(self, x: Tensor) -> Tensor:
        lam = self.scale.to(x.device)
        return torch.log(torch.maximum(x, lam) / lam)  # 0 below the support, so S = 1 there

    def sf(self, x) -> Tensor:
        x, out = _values(x)
        return torch.exp(-self.tail_index.to(x.device) * self._log_ratio(x)).to(out)

    def cdf(self, x) -> Tensor:
        x, out = _values(x)
        # -expm1 keeps precision just above lambda where F is tiny.
        return (-torch.expm1(-self.tail_index.to(x.device) * self._log_ratio(x))).to(out)

    def log_prob(self, x) -> Tensor:
        x, out = _values(x)
        lam, a = self._params(x.device)
        inside = torch.log(a) + a * torch.log(lam) - (a + 1) * torch.log(torch.maximum(x, lam))
        return torch.where(x >= lam, inside, -math.inf).to(out)

    def icdf(self, u) -> Tensor:
        u, out = _prob(u, "u")
        lam, a = self._params(u.device)
        return (lam * torch.exp(-torch.log1p(-u) / a)).to(out)

    def isf(self, v) -> Tensor:
        """Inverse survival function: x with S_P(x) = v; exact in the far tail where 1 - v rounds to 1."""
        v, out = _prob(v, "v")
        lam, a = self._params(v.device)
        return (lam * v.pow(-1.0 / a)).to(out)

    def _sample64(self, shape, generator, device) -> Tensor:
        lam, a = self._params(device)
        return lam * _unit_uniform(shape, generator, device).pow(-1.0 / a)


class MirroredPareto(_Family):
    """Mirrored Pareto on R (eqs. 6, 18, 19): Z = X or 2 lambda - X with X ~ Pareto(lambda, a), even odds.

    With the fold m(z) = lambda + |z - lambda|: f(z) = f_P(m(z)) / 2, continuous at the seam z = lambda,
    F(z) = S_P(m(z)) / 2 for z < lambda and 1 - S_P(m(z)) / 2 otherwise (eq. 19). Symmetric about lambda.
    """

    _names = ("scale", "tail_index")

    def __init__(self, scale, tail_index):
        self.scale = _param("scale", scale)
        self.tail_index = _param("tail_index", tail_index)

    def _half_sf_of_fold(self, z: Tensor) -> tuple[Tensor, Tensor]:
        lam, a = self._params(z.device)
        m = lam + (z - lam).abs()
        return 0.5 * torch.exp(-a * torch.log(m / lam)), z < lam

    def cdf(self, x) -> Tensor:
        x, out = _values(x)
        s, left = self._half_sf_of_fold(x)
        return torch.where(left, s, 1.0 - s).to(out)

    def sf(self, x) -> Tensor:
        x, out = _values(x)
        s, left = self._half_sf_of_fold(x)
        return torch.where(left, 1.0 - s, s).to(out)

    def log_prob(self, x) -> Tensor:
        x, out = _values(x)
        lam, a = self._params(x.device)
        m = lam + (x - lam).abs()
        return (math.log(0.5) + torch.log(a) + a * torch.log(lam) - (a + 1) * torch.log(m)).to(out)

    def _branches(self, p: Tensor, upper: Tensor) -> Tensor:
        """Invert eq. (19) given the tail probability p in (0, 1/2] of the branch; upper selects z >= lambda."""
        lam, a = self._params(p.device)
        m = lam * (2.0 * p).pow(-1.0 / a)
        return torch.where(upper, m, 2.0 * lam - m)

    def icdf(self, u) -> Tensor:
        u, out = _prob(u, "u")
        upper = u >= 0.5
        return self._branches(torch.where(upper, 1.0 - u, u), upper).to(out)

    def isf(self, v) -> Tensor:
        v, out = _prob(v, "v")
        upper = v <= 0.5
        return self._branches(torch.where(upper, v, 1.0 - v), upper).to(out)

    def _sample64(self, shape, generator, device) -> Tensor:
        # Eq. (18) from one uniform: the first half of (0, 1] picks the Rademacher sign, and the
        # rescaled remainder stays in (0, 1], so neither branch can reach U = 0.
        s = 2.0 * _unit_uniform(shape, generator, device)
        upper = s <= 1.0
        v = torch.where(upper, s, s - 1.0)
        lam, a = self._params(device)
        m = lam * v.pow(-1.0 / a)
        return torch.where(upper, m, 2.0 * lam - m)


class ShiftedGaussian(_Family):
    """N(mean, std^2), the light-tailed control of Section 3.2.1 (mean mu_N = 1 in Section 4.2)."""

    _names = ("mean", "std")

    def __init__(self, mean, std):
        self.mean = _param("mean", mean, low=-math.inf)
        self.std = _param("std", std)

    def _z(self, x: Tensor) -> Tensor:
        mu, sigma = self._params(x.device)
        return (x - mu) / sigma

    # Phi via erfc rather than torch.special.ndtr: measured on torch 2.13 CPU, float64 ndtr(-6) is off
    # by 3e-8 relative and ndtr(-20) returns 0, while 0.5 * erfc(-z / sqrt 2) matches scipy to ~1e-13.
    def cdf(self, x) -> Tensor:
        x, out = _values(x)
        return (0.5 * torch.special.erfc(-self._z(x) / math.sqrt(2.0))).to(out)

    def sf(self, x) -> Tensor:
        x, out = _values(x)
        return (0.5 * torch.special.erfc(self._z(x) / math.sqrt(2.0))).to(out)

    def log_prob(self, x) -> Tensor:
        x, out = _values(x)
        z = self._z(x)
        return (-0.5 * z * z - torch.log(self.std.to(x.device)) - 0.5 * math.log(2 * math.pi)).to(out)

    def icdf(self, u) -> Tensor:
        u, out = _prob(u, "u")
        mu, sigma = self._params(u.device)
        return (mu + sigma * torch.special.ndtri(u)).to(out)

    def isf(self, v) -> Tensor:
        v, out = _prob(v, "v")
        mu, sigma = self._params(v.device)
        return (mu - sigma * torch.special.ndtri(v)).to(out)

    def _sample64(self, shape, generator, device) -> Tensor:
        # torch's own normal sampler: no inverse-CDF tail issue for a light tail.
        mu, sigma = self._params(device)
        return mu + sigma * torch.randn(shape, generator=generator, dtype=_F64, device=device)


class SplicedPareto(_Family):
    """Reference Pareto(lambda, a_ref) up to the seam u0, a Pareto of index a_star beyond it (eq. 31).

    u0 = lambda (1 - q0)^(-1/a_ref) is the reference's q0-quantile; above it the law is a Pareto of index
    a_star and scale u0 - b translated by b = u0 (1 - a_star / a_ref), which makes the density continuous
    at u0, G(u0) = q0 and leaves mass 1 - q0 above the seam (App. F.1).
    """

    _names = ("a_ref", "a_star", "seam_quantile", "scale")

    def __init__(self, a_ref, a_star, seam_quantile, scale=1.0):
        self.a_ref = _param("a_ref", a_ref)
        self.a_star = _param("a_star", a_star)
        self.seam_quantile = _param("seam_quantile", seam_quantile, low=0.0, high=1.0)
        self.scale = _param("scale", scale)

    @property
    def seam(self) -> Tensor:
        """u0 = Q_ref(q0) = lambda (1 - q0)^(-1/a_ref) (eq. 31)."""
        return self.scale * (1.0 - self.seam_quantile).pow(-1.0 / self.a_ref)

    @property
    def shift(self) -> Tensor:
        """b = u0 (1 - a_star / a_ref) (eq. 31)."""
        return self.seam * (1.0 - self.a_star / self.a_ref)

    def _pieces(self, device):
        a_ref, a_star, q0, lam = self._params(device)
        u0 = lam * (1.0 - q0).pow(-1.0 / a_ref)
        b = u0 * (1.0 - a_star / a_ref)
        return a_ref, a_star, q0, lam, u0, b, u0 - b  # u0 - b = u0 a_star / a_ref > 0

    def sf(self, x) -> Tensor:
        x, out = _values(x)
        a_ref, a_star, q0, lam, u0, b, c = self._pieces(x.device)
        body = torch.exp(-a_ref * torch.log(torch.maximum(x, lam) / lam))  # = 1 below lambda
        tail = (1.0 - q0) * torch.exp(-a_star * torch.log(torch.maximum(x - b, c) / c))
        return torch.where(x > u0, tail, body).to(out)

    def cdf(self, x) -> Tensor:
        x, out = _values(x)
        a_ref, a_star, q0, lam, u0, b, c = self._pieces(x.device)
        body = -torch.expm1(-a_ref * torch.log(torch.maximum(x, lam) / lam))
        tail = q0 - (1.0 - q0) * torch.expm1(-a_star * torch.log(torch.maximum(x - b, c) / c))
        return torch.where(x > u0, tail, body).to(out)

    def log_prob(self, x) -> Tensor:
        x, out = _values(x)
        a_ref, a_star, q0, lam, u0, b, c = self._pieces(x.device)
        body = torch.log(a_ref) + a_ref * torch.log(lam) - (a_ref + 1) * torch.log(torch.maximum(x, lam))
        tail = (torch.log1p(-q0) + torch.log(a_star) - torch.log(c)
                - (a_star + 1) * torch.log(torch.maximum(x - b, c) / c))
        return torch.where(x > u0, tail, torch.where(x >= lam, body, -math.inf)).to(out)

    def _from_sf(self, v: Tensor) -> Tensor:
        a_ref, a_star, q0, lam, u0, b, c = self._pieces(v.device)
        body = lam * v.pow(-1.0 / a_ref)
        tail = b + c * (v / (1.0 - q0)).pow(-1.0 / a_star)
        return torch.where(v < 1.0 - q0, tail, body)

    def icdf(self, u) -> Tensor:
        u, out = _prob(u, "u")
        return self._from_sf(1.0 - u).to(out)

    def isf(self, v) -> Tensor:
        v, out = _prob(v, "v")
        return self._from_sf(v).to(out)

    def _sample64(self, shape, generator, device) -> Tensor:
        return self._from_sf(_unit_uniform(shape, generator, device))


def mirrored_pareto_transport(z, scale_src, a_src, scale_dst, a_dst) -> Tensor:
    """Increasing quantile transport from MirroredPareto(scale_src, a_src) to MirroredPareto(scale_dst, a_dst).

    Eq. (20): T(z) = T_P(m_src(z)) for z >= lambda_src and 2 lambda_dst - T_P(m_src(z)) otherwise, with
    T_P(x) = lambda_dst (x / lambda_src)^(a_src / a_dst) and m_src(z) = lambda_src + |z - lambda_src|.
    ``z`` (...) broadcasts with the parameters; computed in float64 and returned in z's dtype, saturating
    at its finite range (a ratio a_src / a_dst up to 3 cubes the tail, which float32 cannot always hold).
    """
    lam_s, a_s = _param("scale_src", scale_src), _param("a_src", a_src)
    lam_d, a_d = _param("scale_dst", scale_dst), _param("a_dst", a_dst)
    z, out = _values(z)
    lam_s, a_s, lam_d, a_d = (t.to(z.device) for t in (lam_s, a_s, lam_d, a_d))
    m = lam_s + (z - lam_s).abs()
    t = lam_d * torch.exp((a_s / a_d) * torch.log(m / lam_s))
    return _cast(torch.where(z >= lam_s, t, 2.0 * lam_d - t), out)
