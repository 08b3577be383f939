"""The symlog transform and its inverse (Section 3.4.1, eq. 8).

    sigma(x)      = sign(x) log(1 + |x|)
    sigma^-1(y)   = sign(y) (e^|y| - 1)

Both are written as a ``where`` over the two signs (each branch fed only inputs valid for
it, see ``heavytail.science.kernels``) rather than ``sign(x) * ...``: ``sign`` has zero gradient, so the
product form gives the wrong derivative (0 instead of 1) at exactly 0.

Overflow: ``sigma^-1(y)`` exceeds the largest finite float32 (3.4e38) for ``|y|`` beyond about
88.72 (709.78 in float64). A model output there would silently become ``inf`` and poison the
energy-distance loss. ``symexp`` never returns such an ``inf``: by default it clamps ``|y|`` to the
largest value whose image is finite *and warns* (``SymexpOverflowWarning``, with the count of
clamped entries); ``on_overflow="raise"`` raises instead. The clamp has zero gradient, so a
clamped output does not pull its parameters further out.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

__all__ = ["symlog", "symexp", "symexp_limit", "SymexpOverflowWarning"]

_ON_OVERFLOW = ("clamp", "raise")


class SymexpOverflowWarning(RuntimeWarning):
    """Issued when ``symexp`` clamps inputs whose image would overflow the dtype."""


def symlog(x: Tensor) -> Tensor:
    """sigma(x) = sign(x) log(1 + |x|) (eq. 8), elementwise, ``(...) -> (...)``."""
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    pos = x >= 0
    return torch.where(pos, torch.log1p(torch.where(pos, x, zero)), -torch.log1p(torch.where(pos, zero, -x)))


def symexp_limit(dtype: torch.dtype) -> float:
    """Largest ``|y|`` whose ``sigma^-1(y)`` is finite in ``dtype`` (88.72... for float32)."""
    # log(max) rounded down a hair so that expm1 of the limit, computed in dtype, stays finite.
    return math.log(torch.finfo(dtype).max) * (1.0 - 4.0 * torch.finfo(dtype).eps)


def symexp(y: Tensor, on_overflow: str = "clamp") -> Tensor:
    """sigma^-1(y) = sign(y) (e^|y| - 1) (eq. 8), elementwise, ``(...) -> (...)``.

    Args:
        y: tensor of any shape and floating dtype.
        on_overflow: ``"clamp"`` (default) clamps ``|y|`` to ``symexp_limit(y.dtype)`` and issues a
            ``SymexpOverflowWarning`` naming how many entries were clamped; ``"raise"`` raises
            ``ValueError`` instead. Either way the result is never an overflow ``inf``.
            (Entries that are already non-finite are passed through: they are not overflow.)
    """
    if on_overflow not in _ON_OVERFLOW:
        raise ValueError(f"on_overflow={on_overflow!r}; allowed: {', '.join(_ON_OVERFLOW)}")
    limit = symexp_limit(y.dtype)
    over = torch.isfinite(y) & (y.abs() > limit)
    n_over = int(over.sum())  # one host sync per call: the price of never overflowing silently
    if n_over:
        msg = (
            f"symexp: {n_over} of {y.numel()} entries have |y| > {limit:.4g}, where sigma^-1 overflows "
            f"{y.dtype}; largest |y| = {float(y.detach().abs()[over].max()):.4g}"
        )
        if on_overflow == "raise":
            raise ValueError(msg)
        warnings.warn(msg + "; clamped to the largest finite value", SymexpOverflowWarning, stacklevel=2)
        y = y.clamp(-limit, limit)
    zero = torch.zeros((), dtype=y.dtype, device=y.device)
    pos = y >= 0
    return torch.where(pos, torch.expm1(torch.where(pos, y, zero)), -torch.expm1(torch.where(pos, zero, -y)))
