"""The attention kernels: Table 1 (Section 3.3.1, App. E.2) and the power-ELU family of App. A.

Each kernel is a strictly positive map ``g`` that replaces the exponential in eq. 7,
``A_g(S)_ij = g(S_ij) / sum_l g(S_il)``. Because ``g > 0`` everywhere,

    A_g(S) = softmax(log g(S)),

so attention only ever needs ``log g``: the row maximum of ``log g`` is subtracted before
exponentiating, which keeps eq. 7 finite where ``g / sum g`` would be ``0 / 0`` (rows whose
scores all lie below about -104 underflow ``e^s`` in float32).

Which kernels exist, with their labels, growth and colours, is :data:`heavytail.names.KERNEL_ROWS`; this
module holds their functions: hand-written ones in :data:`FORMS` under the row's name, or, for a row whose
``form`` is ``"power_elu"``, g_q(s) = (1 + elu(s))^q built from the row's order q by :func:`power_elu_forms`.

Numerics ("safe where"): ``torch.where(c, f(x), h(x))`` back-propagates through *both*
branches, so a branch evaluated on inputs outside its domain (``log1p(-x)`` for ``x > 1``,
``exp(2x)`` overflowing) leaks ``NaN``/``inf`` into the gradient even where it is not taken.
Every branch below is therefore fed only inputs valid for it (the other side replaced by 0),
so ``log_g`` and its gradient are finite for every finite float32 score, -1e30 to 3e38.

``dlog_g`` is the derivative of ``log_g``, written out for the hand-written backward of the
flash-style backend (``heavytail.science.attention``); the tests compare it with autograd.

``g_ratio`` is ``g(s) / g(m)`` for the row maximum ``m`` of the scores, the unnormalized weight of
eq. 7 relative to the row's largest. Every ``g`` here is increasing, so the row maximum of
``log g(S)`` is ``log g`` of the row's largest score: the flash-style backend needs ``log g`` once
per row, and each score costs one ``log1p`` or ``exp`` (the power ELU's positive branch is a product,
or ``log`` and ``exp`` for an order q that is not a multiple of 1/2) against three transcendental
functions for ``exp(log g(s) - max log g)``, which is what its forward and backward spend their
elementwise time on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from heavytail import names

__all__ = ["FORMS", "Forms", "Kernel", "KERNEL_NAMES", "get_kernel", "power_elu_forms"]


@dataclass(frozen=True)
class Forms:
    """The functions of one kernel (their contracts: :class:`Kernel`)."""

    g: Callable[[Tensor], Tensor]
    log_g: Callable[[Tensor], Tensor]
    dlog_g: Callable[[Tensor], Tensor]
    g_ratio: Callable[[Tensor, Tensor, Tensor], Tensor]
    ratio_row: Callable[[Tensor, Tensor], Tensor]
    native: tuple[str, float] | None = None


@dataclass(frozen=True)
class Kernel:
    """One registered kernel: its row's name and growth with its functions.

    Attributes:
        name: registry name (a key of ``heavytail.names.KERNEL_ROWS``).
        g: the map ``g(s)`` elementwise, shape-preserving ``(...) -> (...)``. May overflow to
            ``inf`` for huge scores (that is its true value); attention never calls it.
        log_g: ``log g(s)`` elementwise, finite with finite gradient for every finite score.
        dlog_g: ``d/ds log g(s)`` elementwise (used by hand-written backwards).
        g_ratio: ``g_ratio(s, log_gm, row) = g(s) / g(m)`` for scores ``s`` ``(..., N, L)`` at or
            below their row maximum ``m``, given per row ``log_gm = log g(m)`` and ``row =
            ratio_row(m, log_gm)`` ``(..., N, 1)``; in ``[0, 1]``, finite for every finite score.
            Forward only (no autograd).
        ratio_row: the per-row term ``g_ratio`` needs, ``(..., N, 1) -> (..., N, 1)``, computed once per
            row so that no transcendental function of ``m`` is evaluated once per score.
        growth: growth of the positive branch as ``s -> inf`` (the row's; last column of Table 1).
        native: the C++ weight chain that computes ``g_ratio`` and ``dlog_g`` in
            :mod:`heavytail.science.flash_native`, as ``(chain, order)``: ``("exp", 1)`` softmax, ``("power", q)``
            (1 + elu(s))^q, ``("log_elu", 0)``; None for a kernel without one (it runs on the compiled passes).
    """

    name: str
    g: Callable[[Tensor], Tensor]
    log_g: Callable[[Tensor], Tensor]
    dlog_g: Callable[[Tensor], Tensor]
    g_ratio: Callable[[Tensor, Tensor, Tensor], Tensor]
    ratio_row: Callable[[Tensor, Tensor], Tensor]
    growth: str
    native: tuple[str, float] | None = None


def _split(s: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Return ``(s > 0, positive part, non-positive part)``; each part is 0 off its branch."""
    # Python-scalar fill (not a fresh tensor) so the function also traces inside flex_attention's score_mod.
    pos = s > 0
    return pos, torch.where(pos, s, 0.0), torch.where(pos, 0.0, s)


# softmax: g(s) = e^s on both branches.
def _softmax_g(s: Tensor) -> Tensor:
    return torch.exp(s)


def _softmax_log_g(s: Tensor) -> Tensor:
    return s


def _softmax_dlog_g(s: Tensor) -> Tensor:
    return torch.ones_like(s)


def _softmax_g_ratio(s: Tensor, log_gm: Tensor, row: Tensor) -> Tensor:
    return torch.exp(s - log_gm)


def _no_row(m: Tensor, log_gm: Tensor) -> Tensor:
    return log_gm


def _elu_ratio_row(m: Tensor, log_gm: Tensor) -> Tensor:
    # 1 + m, the base of the positive branch (1 for m <= 0, where no score takes that branch);
    # dividing by it stays exact where 1 / g(m) would underflow (squared-ELU: m > 1.8e19).
    return 1.0 + m.clamp(min=0.0)


# squared-ELU: (s + 1)^2 for s > 0, e^{2s} for s <= 0.
def _sq_g(s: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, (sp + 1.0) ** 2, torch.exp(2.0 * sn))


def _sq_log_g(s: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, 2.0 * torch.log1p(sp), 2.0 * sn)


def _sq_dlog_g(s: Tensor) -> Tensor:
    pos, sp, _ = _split(s)
    return torch.where(pos, 2.0 / (1.0 + sp), torch.full_like(s, 2.0))


def _sq_g_ratio(s: Tensor, log_gm: Tensor, row: Tensor) -> Tensor:
    # s > 0 implies m > 0; on the negative branch the exponent 2s - log g(m) is <= 0 either way.
    pos, sp, sn = _split(s)
    return torch.where(pos, torch.square((1.0 + sp) / row), torch.exp(2.0 * sn - log_gm))


# linear-ELU: s + 1 for s > 0, e^s for s <= 0.
def _lin_g(s: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, sp + 1.0, torch.exp(sn))


def _lin_log_g(s: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, torch.log1p(sp), sn)


def _lin_dlog_g(s: Tensor) -> Tensor:
    pos, sp, _ = _split(s)
    return torch.where(pos, 1.0 / (1.0 + sp), torch.ones_like(s))


def _lin_g_ratio(s: Tensor, log_gm: Tensor, row: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, (1.0 + sp) / row, torch.exp(sn - log_gm))


# log-ELU: log(1 + s) + 1 for s > 0, (1 - s)^{-1} for s <= 0.
def _loge_g(s: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, torch.log1p(sp) + 1.0, 1.0 / (1.0 - sn))


def _loge_log_g(s: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, torch.log1p(torch.log1p(sp)), -torch.log1p(-sn))


def _loge_dlog_g(s: Tensor) -> Tensor:
    # log(1 + s), not log1p(s): it is only ever added to 1, where log1p's extra digits for small s are lost to
    # rounding anyway (absolute error ~1e-7 on a term >= 1), and compiled it costs less than log1p.
    pos, sp, sn = _split(s)
    return torch.where(pos, 1.0 / ((1.0 + sp) * (1.0 + torch.log(1.0 + sp))), 1.0 / (1.0 - sn))


def _loge_g_ratio(s: Tensor, log_gm: Tensor, row: Tensor) -> Tensor:
    # row = 1 / g(m): at least 1 / 90 when m > 0 (g grows like log s), 1 - m when m <= 0; no overflow.
    # log(1 + s) + 1 as in _loge_dlog_g: the compiled weight chain measured 3.4 -> 2.8 ns per score against
    # log1p (64 x 4096 tile, one thread, 2-core Xeon).
    pos, sp, sn = _split(s)
    return torch.where(pos, (torch.log(1.0 + sp) + 1.0) * row, row / (1.0 - sn))


def _loge_ratio_row(m: Tensor, log_gm: Tensor) -> Tensor:
    return torch.exp(-log_gm)


# StableMax (Prieto et al., "Grokking at the edge of numerical stability"): s + 1 for s >= 0, (1 - s)^{-1} below:
# linear ELU's positive branch and log-ELU's negative one; order q = 1, like linear ELU (Table 1).
def _stable_g(s: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, sp + 1.0, 1.0 / (1.0 - sn))


def _stable_log_g(s: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, torch.log1p(sp), -torch.log1p(-sn))


def _stable_dlog_g(s: Tensor) -> Tensor:
    pos, sp, sn = _split(s)
    return torch.where(pos, 1.0 / (1.0 + sp), 1.0 / (1.0 - sn))


def _stable_g_ratio(s: Tensor, log_gm: Tensor, row: Tensor) -> Tensor:
    # row = g(m) itself: dividing by 1 + m keeps s = m exact at m = 3e38 (multiplying by exp(-log g(m)) lost 2e-6);
    # on the negative branch (1 - s) g(m) may overflow to inf, where the true ratio underflows to 0 anyway.
    pos, sp, sn = _split(s)
    return torch.where(pos, (1.0 + sp) / row, 1.0 / ((1.0 - sn) * row))


def _stable_ratio_row(m: Tensor, log_gm: Tensor) -> Tensor:
    pos, mp, mn = _split(m)
    return torch.where(pos, 1.0 + mp, 1.0 / (1.0 - mn))


# Largest q computed as products of the base (and one square root) rather than exp(q log base).
PRODUCT_POWER_MAX = 4.0


def _base_power(q: float) -> Callable[[Tensor], Tensor]:
    """``b -> b^q`` for a base ``b`` in (0, 1], the power ELU's weight relative to the row maximum.

    When 2q is a whole number up to ``2 PRODUCT_POWER_MAX`` (q = 0.5, 1, 1.5, 2, 3 ...) the power is a product of
    ``b`` and at most one ``sqrt(b)``: no transcendental function per score, and within about q ulps of the true
    power (q = 1, 2 give Table 1's linear and squared ELU weights bit for bit). Measured compiled on a (64, 4096)
    tile, one thread, 2-core Xeon: the whole weight chain (both branches) 4.8 ns per score with exp(q log b),
    2.4-2.6 ns with products, as squared-ELU's. Any other q uses exp(q log b).
    """
    halves = 2.0 * q
    if halves == round(halves) and q <= PRODUCT_POWER_MAX:
        whole, half = divmod(int(round(halves)), 2)

        def product_power(b: Tensor) -> Tensor:
            out = torch.sqrt(b) if half else None
            for _ in range(whole):
                out = b if out is None else out * b
            return out

        return product_power

    def exp_log_power(b: Tensor) -> Tensor:
        return torch.exp(q * torch.log(b))

    return exp_log_power


@functools.lru_cache(maxsize=None)
def power_elu_forms(q: float) -> Forms:
    """g_q(s) = (1 + elu(s))^q (App. A): (1 + s)^q for s > 0, e^{qs} for s <= 0; C^1 at 0 with g(0) = 1 and
    g'(0) = q. Growth order q: E[g(S)] is finite on Pareto(a) scores iff q < a. At q = 1 and q = 2 these are
    the linear and squared ELU of Table 1: g, log g, its derivative and the flash weights g(s)/g(m) float32 bit
    for bit (tests/test_kernels.py). One ``Forms`` per q,
    so the kernels built from it compare equal and share the attention backends' compile caches."""
    q = float(q)
    if not 0.0 < q < float("inf"):
        raise ValueError(f"power ELU order q={q} must be a finite positive number")

    def g(s: Tensor) -> Tensor:
        pos, sp, sn = _split(s)
        return torch.where(pos, (sp + 1.0) ** q, torch.exp(q * sn))

    def log_g(s: Tensor) -> Tensor:
        pos, sp, sn = _split(s)
        return torch.where(pos, q * torch.log1p(sp), q * sn)

    # Compiled (the flash path's fused blocks), torch 2.13 makes the float q a graph input, and both
    # ``base ** q`` and ``torch.full_like(s, q)`` then keep the first q they were compiled with for every other
    # q, also through the on-disk graph cache (measured: the q = 3 kernel got q = 0.5's weights and slopes).
    # Products with q stay right, so q only ever multiplies here, except in g, which attention never calls.

    def dlog_g(s: Tensor) -> Tensor:
        pos, sp, _ = _split(s)
        return torch.where(pos, q / (1.0 + sp), q * torch.ones_like(s))

    power = _base_power(q)

    def g_ratio(s: Tensor, log_gm: Tensor, row: Tensor) -> Tensor:
        # ((1 + s) / (1 + m))^q: the base is in (0, 1], so no power of a huge score overflows (q = 3 at
        # s = 3e38); the negative branch's exponent q s - log g(m) is <= 0, as for squared-ELU.
        pos, sp, sn = _split(s)
        return torch.where(pos, power((1.0 + sp) / row), torch.exp(q * sn - log_gm))

    return Forms(g, log_g, dlog_g, g_ratio, _elu_ratio_row, ("power", q))


# The hand-written kernels, by their name in heavytail.names.KERNEL_ROWS (the rows say which kernels exist).
# ``native`` names the chain of heavytail/science/flash_native.cpp that computes the same g_ratio and dlog_g.
FORMS: dict[str, Forms] = {
    "softmax": Forms(_softmax_g, _softmax_log_g, _softmax_dlog_g, _softmax_g_ratio, _no_row, ("exp", 1.0)),
    "squared_elu": Forms(_sq_g, _sq_log_g, _sq_dlog_g, _sq_g_ratio, _elu_ratio_row, ("power", 2.0)),
    "linear_elu": Forms(_lin_g, _lin_log_g, _lin_dlog_g, _lin_g_ratio, _elu_ratio_row, ("power", 1.0)),
    "log_elu": Forms(_loge_g, _loge_log_g, _loge_dlog_g, _loge_g_ratio, _loge_ratio_row, ("log_elu", 0.0)),
    "stablemax": Forms(_stable_g, _stable_log_g, _stable_dlog_g, _stable_g_ratio, _stable_ratio_row),
}
# Table 1's kernels in its order, what the paper's notebooks iterate; every registered one: names.kernel_names().
KERNEL_NAMES: tuple[str, ...] = names.KERNELS


def get_kernel(name: str | Kernel) -> Kernel:
    """Look up a registered kernel by name (a ``Kernel`` is returned unchanged).

    The name must have a row in :data:`heavytail.names.KERNEL_ROWS`; its functions are :data:`FORMS`' entry of
    that name, or built from the row's closed form. One name gives one ``Kernel`` object, which the attention
    backends' compile caches key on.

    Raises:
        ValueError: unknown name (the message lists the valid names), or a row with no functions.
    """
    if isinstance(name, Kernel):
        return name
    try:
        row = names.KERNEL_ROWS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown attention kernel {name!r}; valid kernels are {', '.join(names.kernel_names())}"
        ) from None
    return _build(name, row, FORMS.get(name))


@functools.lru_cache(maxsize=None)
def _build(name: str, row: names.KernelRow, forms: Forms | None) -> Kernel:
    if forms is None:
        if row.form != "power_elu":
            raise ValueError(f"kernel {name!r} has a row in heavytail.names but no functions: add them to "
                             "heavytail.science.kernels.FORMS or give the row a closed form")
        forms = power_elu_forms(row.order)
    return Kernel(name, forms.g, forms.log_g, forms.dlog_g, forms.g_ratio, forms.ratio_row, row.growth, forms.native)
