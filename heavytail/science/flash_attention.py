"""The flash-style backend of eq. 7 for any kernel g: a hand-written forward and backward over tiles.

Forward: per query tile, the scores S (eq. 1), the row maximum m and the unnormalized weights g(S)/g(m)
(:attr:`heavytail.science.kernels.Kernel.g_ratio`, one transcendental per score), accumulated over key
blocks with online rescaling when a row does not fit one block. Backward: recomputes S per tile and uses
d log g (:attr:`Kernel.dlog_g`), keeping only per-row statistics between the passes, so memory stays
O(tile) instead of O(N x L). :mod:`heavytail.science.attention` dispatches to :func:`flash`.
"""

from __future__ import annotations

import functools
import math
import types

import torch
from torch import Tensor

from heavytail.science.kernels import Kernel

def _flash_blocks(q: Tensor, k: Tensor, tile_elements: int) -> tuple[int, int]:
    """Query-tile and key-block lengths with ``batch * bq * bk <= tile_elements``.

    Whole key rows are preferred (one pass, no online rescaling); keys are split only when that
    would leave fewer than 64 query rows per tile.
    """
    batch = math.prod(q.shape[:-2])
    n, l = q.shape[-2], k.shape[-2]
    per_batch = max(1, tile_elements // max(1, batch))
    if per_batch // l >= min(64, n):
        return min(n, per_batch // l), l
    bq = min(n, 64)
    return bq, max(1, min(l, per_batch // bq))


def fresh_code(fn):
    """A copy of ``fn`` with its own code object.

    Dynamo keeps its compile cache and recompile limit per code object; giving each kernel its
    own copy stops four kernels x dtypes from exhausting one shared limit (and silently falling
    back to eager).
    """
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


@functools.lru_cache(maxsize=None)
def _block_fns(kernel: Kernel, scale: float, compiled: bool):
    """Elementwise chains of the flash backend for one kernel, fused by ``torch.compile``.

    Each takes the raw ``q k^T`` block ``s`` ``(..., n, l)`` and per-row terms of the row's largest
    scaled score ``m`` ``(..., n, 1)``: ``log_gm = log g(m)`` and ``row = Kernel.ratio_row``. The
    weights are ``g(S) / g(m)`` (``Kernel.g_ratio``: at most one transcendental function per score,
    since ``g`` is increasing) rather than ``exp(log g(S) - max log g)`` (three). Eager, the CPU
    spends its time in ~20 separate passes over each score tile (the where/log1p chain of log g and
    its derivative), which inductor fuses into one.
    """

    def fwd(s, log_gm, row):
        # Unnormalized weights g(S)/g(m) of eq. 7 and their row sum.
        p = kernel.g_ratio(s * scale, log_gm, row)
        return p, p.sum(dim=-1, keepdim=True)

    def fwd_keep(s, log_gm, row):
        # One tile holds the whole score matrix: A_g(S) itself and the derivative factor
        # (log g)'(S) / sqrt(d) that backward needs, so that backward recomputes nothing.
        ss = s * scale
        p = kernel.g_ratio(ss, log_gm, row)
        return p / p.sum(dim=-1, keepdim=True), kernel.dlog_g(ss) * scale

    def bwd(s, log_gm, row, inv_den, dp, delta):
        # A_g(S) recomputed from the stored row terms; dS = A (dP - D) (log g)'(S) / sqrt(d).
        ss = s * scale
        p = kernel.g_ratio(ss, log_gm, row) * inv_den
        return p, p * (dp - delta) * kernel.dlog_g(ss) * scale

    def bwd_kept(p, w, dp, delta):
        return p * (dp - delta) * w

    if not compiled:
        return fwd, fwd_keep, bwd, bwd_kept
    return tuple(torch.compile(fresh_code(f), dynamic=True) for f in (fwd, fwd_keep, bwd, bwd_kept))


def _row_terms(kernel: Kernel, s: Tensor, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """Row maximum of the scaled scores of a raw ``q k^T`` block, ``(..., n, l) -> (..., n, 1)``, with
    ``log g`` of it and the kernel's ``ratio_row``: per-row work, kept out of the fused per-score chain."""
    m = s.amax(dim=-1, keepdim=True) * scale
    log_gm = kernel.log_g(m)
    return m, log_gm, kernel.ratio_row(m, log_gm)


class _FlashKernelAttention(torch.autograd.Function):
    """Flash-style eq. 7 (see module docstring, backend ``"flash"``).

    Stored for backward: the output and, per query row, ``log g`` of the largest score with the
    kernel's row term and the reciprocal row sum of ``g(S)/g(m)``. When one tile holds the whole
    score matrix (``bq == N``, ``bk == L``: at most ``tile_elements`` scores), the normalized weights
    and the derivative factor are kept instead, so backward is three matmuls and one fused product.
    """

    @staticmethod
    def forward(ctx, q, k, v, kernel: Kernel, bq: int, bk: int, compiled: bool):  # noqa: D401
        scale = q.shape[-1] ** -0.5
        fwd, fwd_keep, _, _ = _block_fns(kernel, scale, compiled)
        n, l = q.shape[-2], k.shape[-2]
        ctx.kernel, ctx.bq, ctx.bk, ctx.compiled = kernel, bq, bk, compiled
        ctx.kept = bq >= n and bk >= l and any(ctx.needs_input_grad[:3])
        if ctx.kept:
            s = q @ k.transpose(-1, -2)
            _, log_gm, row = _row_terms(kernel, s, scale)
            p, w = fwd_keep(s, log_gm, row)
            out = p @ v
            ctx.save_for_backward(q, k, v, out, p, w)
            return out
        out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
        log_gm_all = torch.empty(q.shape[:-1] + (1,), dtype=q.dtype, device=q.device)
        row_all, inv_den_all = torch.empty_like(log_gm_all), torch.empty_like(log_gm_all)
        for i in range(0, n, bq):
            qi = q[..., i : i + bq, :]
            m = log_gm = row = acc = den = None
            for j in range(0, l, bk):
                s = qi @ k[..., j : j + bk, :].transpose(-1, -2)
                m_blk, log_gm_blk, row_blk = _row_terms(kernel, s, scale)
                p, sum_blk = fwd(s, log_gm_blk, row_blk)
                pv = p @ v[..., j : j + bk, :]
                if m is None:
                    m, log_gm, row, acc, den = m_blk, log_gm_blk, row_blk, pv, sum_blk
                    continue
                # Online rescaling to the new running row maximum: g(m_old)/g(m_new) = e^{log g - log g}.
                log_new = torch.maximum(log_gm, log_gm_blk)
                c_old, c_blk = torch.exp(log_gm - log_new), torch.exp(log_gm_blk - log_new)
                acc = acc * c_old + pv * c_blk
                den = den * c_old + sum_blk * c_blk
                newer = m_blk > m
                m, log_gm, row = torch.where(newer, m_blk, m), log_new, torch.where(newer, row_blk, row)
            out[..., i : i + bq, :] = acc / den
            log_gm_all[..., i : i + bq, :] = log_gm
            row_all[..., i : i + bq, :] = row
            inv_den_all[..., i : i + bq, :] = den.reciprocal()
        ctx.save_for_backward(q, k, v, out, log_gm_all, row_all, inv_den_all)
        return out

    @staticmethod
    def backward(ctx, dout):
        dout = dout.contiguous()
        _, _, bwd, bwd_kept = _block_fns(ctx.kernel, ctx.saved_tensors[0].shape[-1] ** -0.5, ctx.compiled)
        if ctx.kept:
            q, k, v, out, p, w = ctx.saved_tensors
            # D_i = sum_j P_ij dP_ij = <dO_i, O_i>: the softmax-Jacobian row term.
            delta = (dout * out).sum(dim=-1, keepdim=True)
            ds = bwd_kept(p, w, dout @ v.transpose(-1, -2), delta)
            return ds @ k, ds.transpose(-1, -2) @ q, p.transpose(-1, -2) @ dout, None, None, None, None
        q, k, v, out, log_gm_all, row_all, inv_den_all = ctx.saved_tensors
        bq, bk = ctx.bq, ctx.bk
        n, l = q.shape[-2], k.shape[-2]
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        for i in range(0, n, bq):
            qi = q[..., i : i + bq, :]
            doi = dout[..., i : i + bq, :]
            delta = (doi * out[..., i : i + bq, :]).sum(dim=-1, keepdim=True)
            rows = (log_gm_all[..., i : i + bq, :], row_all[..., i : i + bq, :], inv_den_all[..., i : i + bq, :])
            for j in range(0, l, bk):
                kj, vj = k[..., j : j + bk, :], v[..., j : j + bk, :]
                p, ds = bwd(qi @ kj.transpose(-1, -2), *rows, doi @ vj.transpose(-1, -2), delta)
                dv[..., j : j + bk, :] += p.transpose(-1, -2) @ doi
                dq[..., i : i + bq, :] += ds @ kj
                dk[..., j : j + bk, :] += ds.transpose(-1, -2) @ qi
        return dq, dk, dv, None, None, None, None


def flash(q: Tensor, k: Tensor, v: Tensor, kernel: Kernel, tile_elements: int, compiled: bool) -> Tensor:
    bq, bk = _flash_blocks(q, k, tile_elements)
    return _FlashKernelAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), kernel, bq, bk, compiled)


