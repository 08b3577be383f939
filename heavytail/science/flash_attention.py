"""The flash-style backend of eq. 7 for any kernel g: a hand-written forward and backward over cache-sized tiles.

Forward: per query tile, the scores S (eq. 1), the row maximum m and the unnormalized weights g(S)/g(m)
(:attr:`heavytail.science.kernels.Kernel.g_ratio`, one transcendental per score since g is increasing), their
row sum and product with the values; a row that does not fit one tile is split into key blocks accumulated with
online rescaling. Backward recomputes S per tile and uses d log g (:attr:`Kernel.dlog_g`):

    A = g(S) / sum g,   dV = A^T dO,   dS = A (dO V^T - D) (log g)'(S) / sqrt(d),   D = rowsum(dO * O),
    dQ = dS K,   dK = dS^T Q.

Only per-row statistics (log g(m), the kernel's ``ratio_row``, 1 / sum) are kept between the passes, so memory
is O(tile) instead of O(N x L); when the whole score matrix is small (``KEEP_ELEMENTS``) it is one tile and the
weights are kept instead, so backward recomputes nothing. :mod:`heavytail.science.attention` dispatches to :func:`flash`,
which hands float32 CPU calls of a kernel with a native chain to the fused C++ loop of
:mod:`heavytail.science.flash_native` (the same algorithm without a library call per tile) and runs the passes
below for everything else.

Each pass over one tile is one ``torch.compile`` graph (inductor, C++ on CPU): the score matmul(s), the kernel's
elementwise chain with its row reductions, and the matmuls that consume the tile, so a tile is read while it is
still in cache, and one Python call dispatches it. Tiles are ``FLASH_TILE_ELEMENTS`` scores at most (sized for a
CPU core's L2, see the measurement there), every query tile of a call has the same shape (the last one overlaps
the previous instead of being shorter), and each tile shape gets its own static graph, whose call costs half
what a dynamic-shape graph's does.
"""

from __future__ import annotations

import functools
import math
import types

import torch
from torch import Tensor

from heavytail.science import flash_native
from heavytail.science.kernels import Kernel

# Scores per tile, summed over the batch. Measured on a 2-core Xeon (2 MiB L2 per core, shared with other jobs),
# forward+backward CPU time against SDPA softmax in the same process, kernels interleaved, one thread, (1, 1, N, 32):
# 2^17 / 2^18 / 2^19 scores gave squared ELU 2.52x / 1.86x / 2.20x and log ELU 3.01x / 2.56x / 2.36x SDPA at
# N = 4096, and at N = 16384 2^18 with 64-row tiles 2.08x against 2.20x for 2^19 (squared ELU). Smaller tiles pay
# one graph call per tile (~50-100 us of dispatch, ~0.5 ns per score at 2^17); larger ones leave L2 (a backward
# tile holds S, dP and then A and dS: 3 x 1 MiB at 2^18). The tiles also bound the extra memory: at 2^18 it is
# within 4x of SDPA's beyond KEEP_ELEMENTS (below it, memory is traded for time).
FLASH_TILE_ELEMENTS = 2**18
# Up to this many scores (summed over the batch) one tile holds the whole score matrix and forward keeps the
# weights for backward (2 x 4 bytes per score: 8 MiB at N = 1024), which then recomputes nothing.
# Forward+backward CPU time, kept / 2^18 tiles, (1, N, 32), one thread, interleaved (benchmarks/bench_flash_keep.py,
# results/flash_keep_20261201.json, quiet machine): N = 1024 log ELU 0.76, ELU^0.5 0.64, squared ELU 0.82; N = 2048
# 0.86 / 0.74 / 0.86. Kept up to N = 1024 for one head and trial (8 MiB); at N = 2048 it would cost 32 MiB, ~15x
# SDPA's extra memory, for a smaller gain.
KEEP_ELEMENTS = 2**20
# Fewest query rows per tile before keys are split instead: dV += A^T dO and dK += dS^T Q have inner dimension
# equal to the tile's rows, and below 64 rows their matmuls slow down more than online rescaling costs.
MIN_ROWS = 64
# Tile shapes per kernel, head dim and pass that get their own static graph; further shapes share a dynamic one.
STATIC_SHAPES = 4


def fresh_code(fn):
    """A copy of ``fn`` with its own code object.

    Dynamo keeps its compile cache and recompile limit per code object; giving each kernel (and here each tile
    shape) its own copy stops them from exhausting one shared limit (and silently falling back to eager).
    """
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _flash_blocks(batch: int, n: int, l: int, tile_elements: int) -> tuple[int, int]:
    """Query-tile and key-block lengths with ``batch * bq * bk <= tile_elements``.

    Whole key rows are preferred (one pass, no online rescaling); keys are split only when that would leave
    fewer than ``MIN_ROWS`` query rows per tile.
    """
    per_batch = max(1, tile_elements // max(1, batch))
    if per_batch // l >= min(MIN_ROWS, n):
        return min(n, per_batch // l), l
    bq = min(n, MIN_ROWS)
    return bq, max(1, min(l, per_batch // bq))


def _tiles(n: int, b: int) -> list[tuple[int, int]]:
    """``(start, skip)`` of tiles of exactly ``b`` rows covering ``range(n)``: when ``b`` does not divide ``n`` the
    last tile overlaps the one before by ``skip`` rows, so that every tile has one shape (one compiled graph)."""
    starts = list(range(0, n - b + 1, b))
    if starts[-1] + b < n:
        starts.append(n - b)
    return [(s, 0 if t == 0 else starts[t - 1] + b - s) for t, s in enumerate(starts)]


def _passes(kernel: Kernel, scale: float) -> dict:
    """The per-tile passes for one kernel, on ``(B, rows, d)`` tensors; ``s`` is the raw ``q k^T`` tile and
    ``scale = 1 / sqrt(d)`` (eq. 1). Row terms are ``(B, rows, 1)``."""

    def row_terms(s):
        # g is increasing, so the row maximum of log g(S) is log g of the row's largest score.
        m = s.amax(dim=-1, keepdim=True) * scale
        log_gm = kernel.log_g(m)
        return m, log_gm, kernel.ratio_row(m, log_gm)

    def fwd_rows(q, k, v):
        # Whole key rows: O = (g(S)/g(m)) V / sum_l g(S_l)/g(m) (eq. 7), and the row terms backward needs
        # (log g(m), ratio_row, 1/sum) packed as (B, rows, 3).
        s = torch.bmm(q, k.transpose(1, 2))
        _, log_gm, row = row_terms(s)
        p = kernel.g_ratio(s * scale, log_gm, row)
        den = p.sum(dim=-1, keepdim=True)
        return torch.bmm(p, v) / den, torch.cat([log_gm, row, den.reciprocal()], dim=-1)

    def fwd_keep(q, k, v):
        # One tile holds the whole score matrix: A_g(S) and the derivative factor (log g)'(S) / sqrt(d) are kept.
        s = torch.bmm(q, k.transpose(1, 2))
        _, log_gm, row = row_terms(s)
        ss = s * scale
        p = kernel.g_ratio(ss, log_gm, row)
        p = p / p.sum(dim=-1, keepdim=True)
        return torch.bmm(p, v), p, kernel.dlog_g(ss) * scale

    def fwd_block0(q, k, v):
        # The first key block of a split row: its own maximum, weights, sum and weighted values.
        s = torch.bmm(q, k.transpose(1, 2))
        m, log_gm, row = row_terms(s)
        p = kernel.g_ratio(s * scale, log_gm, row)
        return m, log_gm, row, torch.bmm(p, v), p.sum(dim=-1, keepdim=True)

    def fwd_block(q, k, v, m_run, log_run, row_run, acc, den):
        # A further key block: rescale both sums to the larger maximum, g(m_old)/g(m_new) = e^{log g - log g}.
        m, log_gm, row, pv, ssum = fwd_block0(q, k, v)
        log_new = torch.maximum(log_run, log_gm)
        c_old, c_blk = torch.exp(log_run - log_new), torch.exp(log_gm - log_new)
        newer = m > m_run
        return (torch.where(newer, m, m_run), log_new, torch.where(newer, row, row_run),
                acc * c_old + pv * c_blk, den * c_old + ssum * c_blk)

    def weights_and_ds(q, k, v, do, rows):
        # rows (B, rows, 4): log g(m), ratio_row, 1/sum and D = rowsum(dO * O), the softmax-Jacobian row term.
        log_gm, row, inv_den, delta = rows[..., 0:1], rows[..., 1:2], rows[..., 2:3], rows[..., 3:4]
        s = torch.bmm(q, k.transpose(1, 2))
        dp = torch.bmm(do, v.transpose(1, 2))
        ss = s * scale
        p = kernel.g_ratio(ss, log_gm, row) * inv_den
        return p, p * (dp - delta) * kernel.dlog_g(ss) * scale

    def bwd_rows(q, k, v, do, rows):
        # Whole key rows: this tile's dQ is complete (dS K over every key).
        p, ds = weights_and_ds(q, k, v, do, rows)
        return p, ds, torch.bmm(ds, k)

    def bwd_keep(q, k, v, do, out, p, w):
        delta = (do * out).sum(dim=-1, keepdim=True)
        ds = p * (torch.bmm(do, v.transpose(1, 2)) - delta) * w
        return torch.bmm(ds, k), torch.bmm(ds.transpose(1, 2), q), torch.bmm(p.transpose(1, 2), do)

    return {"fwd_rows": fwd_rows, "fwd_keep": fwd_keep, "fwd_block0": fwd_block0, "fwd_block": fwd_block,
            "bwd_block": weights_and_ds, "bwd_rows": bwd_rows, "bwd_keep": bwd_keep}


@functools.lru_cache(maxsize=None)
def _eager(kernel: Kernel, scale: float) -> dict:
    return _passes(kernel, scale)


# (kernel, scale, pass) -> {tile shapes and dtypes: compiled pass}, and the dynamic graph shared beyond STATIC_SHAPES.
_STATIC: dict[tuple, dict[tuple, object]] = {}
_DYNAMIC: dict[tuple, object] = {}


def _pass(kernel: Kernel, scale: float, compiled: bool, name: str, *tensors: Tensor):
    """The pass ``name`` for tensors shaped like ``tensors``: eager, or its compiled graph (static per tile shape:
    a call of a static graph costs ~50 us against ~100 us for a dynamic one, measured with 8 inputs)."""
    if not compiled:
        return _eager(kernel, scale)[name]
    key = (kernel, scale, name)
    shapes = tuple((tuple(t.shape), t.dtype) for t in tensors)
    graphs = _STATIC.setdefault(key, {})
    fn = graphs.get(shapes)
    if fn is None:
        if len(graphs) >= STATIC_SHAPES:
            if key not in _DYNAMIC:
                _DYNAMIC[key] = torch.compile(fresh_code(_eager(kernel, scale)[name]), dynamic=True)
            return _DYNAMIC[key]
        fn = graphs[shapes] = torch.compile(fresh_code(_eager(kernel, scale)[name]), dynamic=False)
    return fn


class _FlashKernelAttention(torch.autograd.Function):
    """Flash-style eq. 7 on ``(B, N, d)`` views (see the module docstring).

    Stored for backward: the output and, per query row, ``log g`` of the largest score, the kernel's row term and
    the reciprocal row sum of ``g(S)/g(m)`` (``(B, N, 3)``; backward appends D as a fourth column). When one
    tile holds the whole score matrix (``bq == N``, ``bk == L``), the normalized weights and the derivative factor
    are kept instead, so backward is one graph of four matmuls and one fused product.
    """

    @staticmethod
    def forward(ctx, q, k, v, kernel: Kernel, bq: int, bk: int, compiled: bool):  # noqa: D401
        n, l = q.shape[1], k.shape[1]
        scale = q.shape[-1] ** -0.5
        ctx.kernel, ctx.bq, ctx.bk, ctx.compiled = kernel, bq, bk, compiled
        ctx.kept = bq >= n and bk >= l and any(ctx.needs_input_grad[:3])
        if ctx.kept:
            out, p, w = _pass(kernel, scale, compiled, "fwd_keep", q, k, v)(q, k, v)
            ctx.save_for_backward(q, k, v, out, p, w)
            return out
        b = q.shape[0]
        out = q.new_empty(b, n, v.shape[-1])
        rows = q.new_empty(b, n, 3)
        tiles = _tiles(n, bq)
        if bk >= l:
            fwd = _pass(kernel, scale, compiled, "fwd_rows", q[:, :bq], k, v)
            for i, _ in tiles:  # an overlapping last tile recomputes rows already written, to the same values
                out[:, i : i + bq], rows[:, i : i + bq] = fwd(q[:, i : i + bq], k, v)
        else:
            for i, _ in tiles:
                qi = q[:, i : i + bq]
                state = _pass(kernel, scale, compiled, "fwd_block0", qi, k[:, :bk], v[:, :bk])(qi, k[:, :bk], v[:, :bk])
                for j in range(bk, l, bk):
                    kj, vj = k[:, j : j + bk], v[:, j : j + bk]
                    state = _pass(kernel, scale, compiled, "fwd_block", qi, kj, vj, *state)(qi, kj, vj, *state)
                _, log_gm, row, acc, den = state
                out[:, i : i + bq] = acc / den
                rows[:, i : i + bq] = torch.cat([log_gm, row, den.reciprocal()], dim=-1)
        ctx.save_for_backward(q, k, v, out, rows)
        return out

    @staticmethod
    def backward(ctx, dout):
        kernel, compiled, bq, bk = ctx.kernel, ctx.compiled, ctx.bq, ctx.bk
        do = dout.contiguous()
        if ctx.kept:
            q, k, v, out, p, w = ctx.saved_tensors
            scale = q.shape[-1] ** -0.5
            return (*_pass(kernel, scale, compiled, "bwd_keep", q, k, v, do, out, p, w)(q, k, v, do, out, p, w),
                    None, None, None, None)
        q, k, v, out, rows = ctx.saved_tensors
        scale = q.shape[-1] ** -0.5
        n, l = q.shape[1], k.shape[1]
        rows = torch.cat([rows, (do * out).sum(dim=-1, keepdim=True)], dim=-1)  # (B, N, 4), D last
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        whole = bk >= l
        for i, skip in _tiles(n, bq):
            qi, doi, ri = q[:, i : i + bq], do[:, i : i + bq], rows[:, i : i + bq]
            if skip:
                # Rows the previous tile already did: dO = 0 there (so dP = D = 0 and dS = 0) adds nothing twice.
                doi, ri = doi.clone(), ri.clone()
                doi[:, :skip] = 0
                ri[:, :skip, 3] = 0
            if whole:
                p, ds, dqi = _pass(kernel, scale, compiled, "bwd_rows", qi, k, v, doi, ri)(qi, k, v, doi, ri)
                dq[:, i + skip : i + bq] = dqi[:, skip:]
                dv.baddbmm_(p.transpose(1, 2), doi)
                dk.baddbmm_(ds.transpose(1, 2), qi)
                continue
            for j in range(0, l, bk):
                kj, vj = k[:, j : j + bk], v[:, j : j + bk]
                p, ds = _pass(kernel, scale, compiled, "bwd_block", qi, kj, vj, doi, ri)(qi, kj, vj, doi, ri)
                dv[:, j : j + bk].baddbmm_(p.transpose(1, 2), doi)
                dk[:, j : j + bk].baddbmm_(ds.transpose(1, 2), qi)
                dq[:, i : i + bq].baddbmm_(ds, kj)
        return dq, dk, dv, None, None, None, None


def flash(q: Tensor, k: Tensor, v: Tensor, kernel: Kernel, tile_elements: int, compiled: bool,
          native: bool | None = None) -> Tensor:
    """Eq. 7 with the flash-style backward: ``(..., N, d), (..., L, d), (..., L, d_v) -> (..., N, d_v)``.

    ``native``: True runs the fused C++ loop of :mod:`heavytail.science.flash_native` (raises where it cannot),
    False never does, None (the default) does when ``compiled`` and the kernel, dtype and machine allow it. The
    compiled passes' tiles hold at most ``min(tile_elements, FLASH_TILE_ELEMENTS)`` scores."""
    n, l, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    lead = q.shape[:-2]
    batch = math.prod(lead)
    if native or (native is None and compiled):
        q3, k3, v3 = (t.reshape(batch, -1, t.shape[-1]) for t in (q, k, v))
        out = flash_native.native_flash(q3, k3, v3, kernel)
        if out is not None:
            return out.reshape(*lead, n, dv)
        if native:
            # Switched off, nothing may be built, not even to say whether it would build.
            built = flash_native.enabled() and flash_native.extension() is not None
            raise RuntimeError(f"native flash attention cannot run kernel {kernel.name!r} on {q.device} {q.dtype} "
                               f"here (native chain {kernel.native}; switched on: {flash_native.enabled()}; built: "
                               f"{built})")
    if batch * n * l <= min(tile_elements, KEEP_ELEMENTS):
        bq, bk = n, l  # one tile: the weights are kept when a gradient is needed
    else:
        bq, bk = _flash_blocks(batch, n, l, min(tile_elements, FLASH_TILE_ELEMENTS))
    q3, k3, v3 = (t.contiguous().reshape(batch, -1, t.shape[-1]) for t in (q, k, v))
    return _FlashKernelAttention.apply(q3, k3, v3, kernel, bq, bk, compiled).reshape(*lead, n, dv)
