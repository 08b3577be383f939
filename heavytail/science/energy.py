"""Energy distance between point sets: the V-statistic of eq. 10 at the paper's scale.

The squared energy distance (eq. 9) and its V-statistic estimator (eq. 10),

    E_p^2(U, V) = 2/(N M) sum_ij |u_i - v_j|^p - 1/N^2 sum_ij |u_i - u_j|^p - 1/M^2 sum_ij |v_i - v_j|^p,

is the training loss (eq. 4, 64 sets x 16384 points per step) and the evaluation metric (App. H).
For N = M it is exactly eq. 10; for N != M it is the V-statistic that ``dcor.energy_distance`` and
``scipy.stats.energy_distance(x, y)**2`` compute.

Why this is written by hand rather than taken from a library: ``torch.cdist`` autograd materializes the
N x M matrix and its gradient (3.5 GB and 10 s per set at N = 16384 on the 2-core machine), dcor and
geomloss are slower still, and KeOps' online reductions lose 16 % to cancellation on heavy tails
(measured on two mirrored-Pareto samples of index 1.5). Nothing available computes value and gradient in O(N) memory with float64 accumulation.

Formulation. Stack W = [U; V] ((N+M) x d) with weights w = [1/N ... 1/N, -1/M ... -1/M]. Then

    E = - sum_ab w_a w_b |W_a - W_b|^p                                       (eq. 10 rewritten)
    dE/dW_a = -2 w_a g_a,   g_a = sum_b w_b p |W_a - W_b|^(p-2) (W_a - W_b)   (the 2: pair symmetry)

so one sweep over rows a of W, with the row reductions s_a = sum_b w_b |W_a - W_b|^p (in float64)
and g_a, gives both the value E = -sum_a w_a s_a and the whole gradient. The sweep runs in row
blocks; each block's reduction over all columns is a fused kernel (``torch.compile`` / inductor: no
block x (N+M) temporary is ever written, memory is O(N + M)) or, as a fallback, an eager loop over
(rows x 2048) tiles (memory O(block x 2048)). When a gradient is needed it is computed in the forward
pass of the custom autograd function and saved, since it needs the same distances: backward only
scales it by the incoming gradient. Double backward is not supported.

Numerics (on heavy tails E is a small difference of huge means). Pairwise
distances are formed from coordinate differences (never |a|^2 + |b|^2 - 2ab, which cancels
catastrophically when |a| is large), each row reduction (value and gradient) and the final sum
accumulate in float64, and the weights 1/N, 1/M enter in float64 (in float32, fl(1/N) and fl(1/M)
would not cancel for N != M). The per-pair terms stay in the input dtype, which is what makes the
kernel fast; their rounding is the remaining error (see the float32 bound in tests/test_energy.py). Inputs are rescaled by an exact power of two when
their magnitude would overflow the squared distances, so huge finite values still evaluate. The
gradient of |x|^p at coincident points is set to 0 (the symmetric subgradient; no NaN on duplicates).

For d = 1 and p = 1 the exact O(N log N) CDF form is used instead (``energy_distance_1d``).
"""

from __future__ import annotations

import math
import threading
import warnings

import torch
from torch.autograd.function import once_differentiable

from heavytail.names import ENERGY_BACKENDS

__all__ = ["ENERGY_BACKENDS", "check_finite", "energy_distance", "energy_distance_1d"]

# Row block of one fused-kernel call, and the tile of the eager fallback. The fused kernel never
# materializes a block, so its row block only bounds the per-call output; the eager tile
# (rows x _EAGER_COLS floats, a few MiB) keeps its temporaries in cache.
_COMPILED_ROWS = 8192
_EAGER_ROWS = 256
_EAGER_COLS = 2048
_EAGER_TILE = _EAGER_ROWS * _EAGER_COLS


def check_finite(x: torch.Tensor, name: str, event_ndim: int = 0) -> None:
    """Raise ``ValueError`` when ``x`` holds NaN or +-inf, saying how many points are bad.

    ``event_ndim`` trailing dimensions form one point (1 for point sets ``(..., N, d)``), so the
    count is of points with at least one non-finite coordinate. Huge finite values pass.
    """
    if x.is_floating_point() or x.is_complex():
        bad = ~torch.isfinite(x)
        if event_ndim > 0:
            bad = bad.flatten(-event_ndim).any(-1) if x.dim() >= event_ndim else bad
        n_bad = int(bad.sum())
        if n_bad:
            first = tuple(int(i) for i in torch.nonzero(bad)[0])
            raise ValueError(
                f"{name} holds {n_bad} non-finite {'points' if event_ndim else 'values'} "
                f"(NaN or inf) out of {bad.numel()} (first at index {first}); "
                "only finite samples are allowed"
            )


def _validate_p(p: float) -> float:
    p = float(p)
    if not 0.0 < p < 2.0:
        raise ValueError(f"p={p} is outside the allowed range 0 < p < 2 of eq. 9")
    return p


def _as_float_tensor(x, name: str) -> torch.Tensor:
    x = torch.as_tensor(x)
    if x.is_complex():
        raise TypeError(f"{name} must be real, got dtype {x.dtype}")
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    return x


def _pow2_scales(x: torch.Tensor) -> torch.Tensor:
    """(B,) float64 exact powers of two bringing each set's max |x| near 1 where squared
    distances could over- or underflow in x's dtype, else 1. x: (B, n, d)."""
    big = 2.0 ** (math.ceil(math.log2(torch.finfo(x.dtype).max)) // 2 - 8)
    amax = x.detach().abs().amax(dim=(-1, -2)).to(torch.float64)
    risky = (amax > big) | ((amax > 0) & (amax < 1.0 / big))
    return torch.where(risky, torch.exp2(-torch.floor(torch.log2(amax))), torch.ones_like(amax))


# ---------------------------------------------------------------------------------------------
# Row kernels: for rows a (B, b, d) against all points x (B, n, d) with weights w64 (n,), return
# s (B, b) = sum_j w_j |a_i - x_j|^p and g (B, b, d) = sum_j w_j p |a_i - x_j|^(p-2) (a_i - x_j),
# both accumulated in float64 from per-pair terms formed in the input dtype.
# The same Python body runs eagerly on tiles or fused by inductor over whole rows.
# ---------------------------------------------------------------------------------------------


def _diffs(a: torch.Tensor, x: torch.Tensor):
    # Coordinate differences, not the |a|^2 + |b|^2 - 2ab expansion (cancels on heavy tails).
    diffs = [a[..., :, k, None] - x[..., None, :, k] for k in range(a.shape[-1])]
    d2 = diffs[0] * diffs[0]
    for dk in diffs[1:]:
        d2 = d2 + dk * dk
    return diffs, d2


def _rows_value_p1(a, x, w64):
    _, d2 = _diffs(a, x)
    return (torch.sqrt(d2).to(torch.float64) * w64).sum(-1)


def _rows_value_grad_p1(a, x, w64):
    diffs, d2 = _diffs(a, x)
    dist = torch.sqrt(d2)
    s = (dist.to(torch.float64) * w64).sum(-1)
    # grad of |z| is z/|z|, and 0 at coincident points (no NaN with duplicated points)
    r = torch.where(d2 > 0, 1.0 / dist, 0.0)
    g = torch.stack([((dk * r).to(torch.float64) * w64).sum(-1) for dk in diffs], -1)
    return s, g


def _rows_value_grad_p(a, x, w64, p):
    diffs, d2 = _diffs(a, x)
    # |z|^p = exp(p/2 log |z|^2); at z = 0 this is exp(-inf) = 0 for p > 0
    dist_p = torch.exp(0.5 * p * torch.log(d2))
    s = (dist_p.to(torch.float64) * w64).sum(-1)
    # grad of |z|^p is p |z|^(p-2) z, set to 0 at coincident points
    r = torch.where(d2 > 0, p * dist_p / d2, 0.0)
    g = torch.stack([((dk * r).to(torch.float64) * w64).sum(-1) for dk in diffs], -1)
    return s, g


_KERNELS = {"value": _rows_value_p1, "p1": _rows_value_grad_p1, "p": _rows_value_grad_p}
_compiled: dict = {}
_compiled_lock = threading.Lock()
_compile_failed: dict = {}


def _get_compiled(kind: str):
    with _compiled_lock:
        if kind not in _compiled:
            _compiled[kind] = torch.compile(_KERNELS[kind], dynamic=True)
        return _compiled[kind]


def _compiled_available(device: torch.device) -> bool:
    """Whether the fused kernel can be built for ``device``: inductor emits C++/OpenMP on CPU and Triton
    on CUDA (float64 reductions included), and nothing elsewhere; a device whose compile failed once
    in this process stays on the eager tiles."""
    if _compile_failed.get(device.type):
        return False
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return has_triton()
    return device.type == "cpu"


def _rows_compiled(kind, a, x, w64, extra):
    # Unbacked batch size: one graph serves B = 1 and B > 1 (no 0/1 specialization, no recompiles).
    torch._dynamo.decorators.mark_unbacked(a, 0)
    torch._dynamo.decorators.mark_unbacked(x, 0)
    out = _get_compiled(kind)(a, x, w64, *extra)
    return (out, None) if kind == "value" else out


def _rows_eager(kind, a, x, w64, extra):
    fn = _KERNELS[kind]
    batch, rows, d = a.shape
    s = torch.zeros(batch, rows, dtype=torch.float64, device=a.device)
    g = None if kind == "value" else torch.zeros(batch, rows, d, dtype=torch.float64, device=a.device)
    cols = min(_EAGER_COLS, x.shape[1])
    step = max(1, _EAGER_TILE // (rows * cols))  # sets per tile
    for b0 in range(0, batch, step):
        bs = slice(b0, b0 + step)
        for j in range(0, x.shape[1], cols):
            js = slice(j, j + cols)
            out = fn(a[bs], x[bs, js], w64[js], *extra)
            if kind == "value":
                s[bs] += out
            else:
                s[bs] += out[0]
                g[bs] += out[1]
    return s, g


def _energy_and_grad(u, v, p, need_grad, backend, block_size):
    """E (B,) float64 and, if asked, dE/du (B, N, d), dE/dv (B, M, d), for u (B, N, d), v (B, M, d)."""
    n_u, n_v = u.shape[-2], v.shape[-2]
    x = torch.cat([u, v], -2)
    scale = _pow2_scales(x)
    if bool((scale != 1.0).any()):
        x = x * scale.to(x.dtype)[:, None, None]  # exact: powers of two
    x = x.contiguous()
    w64 = torch.cat(
        [
            torch.full((n_u,), 1.0 / n_u, dtype=torch.float64, device=x.device),
            torch.full((n_v,), -1.0 / n_v, dtype=torch.float64, device=x.device),
        ]
    )
    kind = ("p1" if need_grad else "value") if p == 1.0 else "p"
    extra = (torch.tensor(p, dtype=x.dtype, device=x.device),) if kind == "p" else ()
    rows_fn = _rows_compiled if backend == "compiled" else _rows_eager
    rows = block_size or (_COMPILED_ROWS if backend == "compiled" else _EAGER_ROWS)
    parts = [rows_fn(kind, x[:, i : i + rows].contiguous(), x, w64, extra) for i in range(0, x.shape[1], rows)]
    s = torch.cat([s for s, _ in parts], -1)
    value = -(s * w64).sum(-1) * scale ** (-p)  # E = -sum_a w_a s_a
    if not need_grad:
        return value, None, None
    factor = (-2.0 * scale ** (1.0 - p))[:, None, None] * w64[:, None]  # dE/dW_a = -2 w_a g_a
    grad = (torch.cat([g for _, g in parts], -2) * factor).to(x.dtype)
    return value, grad[:, :n_u], grad[:, n_u:]


def _resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in ENERGY_BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {ENERGY_BACKENDS}")
    if backend == "eager":
        return "eager"
    if _compiled_available(device):
        return "compiled"
    if backend == "compiled":
        raise RuntimeError(f"the compiled backend is unavailable on {device.type} (see earlier warning)")
    return "eager"


def _batched(u, v, p, need_grad, backend, block_size):
    batch = u.shape[:-2]
    uf = u.reshape((-1,) + u.shape[-2:])
    vf = v.reshape((-1,) + v.shape[-2:])
    if uf.shape[0] == 0:  # an empty batch: nothing to compute
        return u.new_zeros(batch), torch.zeros_like(u), torch.zeros_like(v)
    try:
        value, gu, gv = _energy_and_grad(uf, vf, p, need_grad, backend, block_size)
    except Exception as exc:  # a missing C++ compiler, an unsupported device: fall back, once
        if backend != "compiled" or not _is_compile_error(exc):
            raise
        _compile_failed[u.device.type] = True
        warnings.warn(f"energy_distance: torch.compile failed ({exc!r}); using the eager tiled backend")
        value, gu, gv = _energy_and_grad(uf, vf, p, need_grad, "eager", block_size)
    value = value.reshape(batch).to(u.dtype)
    if not need_grad:
        return value, None, None
    return value, gu.reshape(u.shape), gv.reshape(v.shape)


def _is_compile_error(exc: Exception) -> bool:
    # Dynamo and inductor failures, and Triton's own (a kernel that needs more shared memory or registers
    # than the GPU has is refused at launch with triton.runtime.errors.OutOfResources).
    mod = type(exc).__module__
    return mod.startswith(("torch._dynamo", "torch._inductor", "triton")) or "compile" in str(exc).lower()


class _EnergyDistance(torch.autograd.Function):
    """Value and gradient of eq. 10 in one blocked sweep; backward rescales the saved gradient."""

    @staticmethod
    def forward(ctx, u, v, p, backend, block_size):
        need_grad = bool(ctx.needs_input_grad[0] or ctx.needs_input_grad[1])
        value, gu, gv = _batched(u, v, p, need_grad, backend, block_size)
        if need_grad:
            ctx.save_for_backward(gu, gv)
        return value

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_value):
        gu, gv = ctx.saved_tensors
        scale = grad_value[..., None, None]
        grad_u = (scale * gu).to(gu.dtype) if ctx.needs_input_grad[0] else None
        grad_v = (scale * gv).to(gv.dtype) if ctx.needs_input_grad[1] else None
        return grad_u, grad_v, None, None, None


def _prepare_sets(u, v):
    u = _as_float_tensor(u, "u")
    v = _as_float_tensor(v, "v")
    for name, t in (("u", u), ("v", v)):
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., N, d), got {tuple(t.shape)}; use (N, 1) for 1D samples")
        if t.shape[-2] < 1:
            raise ValueError(f"{name} is empty: shape {tuple(t.shape)} has no points")
    if u.shape[-1] != v.shape[-1]:
        raise ValueError(
            f"u and v must live in the same space: last dimensions differ (u: {tuple(u.shape)}, v: {tuple(v.shape)})"
        )
    if u.device != v.device:
        raise ValueError(f"u and v are on different devices ({u.device}, {v.device})")
    check_finite(u, "u", event_ndim=1)
    check_finite(v, "v", event_ndim=1)
    return _broadcast_pair(u, v, ("u", "v"), event_ndim=2)


def _broadcast_pair(a, b, names: tuple[str, str], event_ndim: int):
    """Promote to a common dtype and broadcast the batch dimensions (all but the last ``event_ndim``)."""
    dtype = torch.promote_types(a.dtype, b.dtype)
    batch_a, batch_b = a.shape[:-event_ndim], b.shape[:-event_ndim]
    try:
        batch = torch.broadcast_shapes(batch_a, batch_b)
    except RuntimeError as exc:
        raise ValueError(
            f"batch dimensions of {names[0]} {tuple(batch_a)} and {names[1]} {tuple(batch_b)} do not broadcast"
        ) from exc
    return a.to(dtype).expand(batch + a.shape[-event_ndim:]), b.to(dtype).expand(batch + b.shape[-event_ndim:])


def energy_distance(u, v, p: float = 1.0, block_size: int | None = None, *, backend: str = "auto") -> torch.Tensor:
    """Squared energy distance V-statistic of eq. 10 between point sets, with exact gradients.

    Args:
        u: ``(..., N, d)`` points.
        v: ``(..., M, d)`` points; batch dimensions broadcast with ``u``'s, ``M`` may differ from ``N``.
        p: exponent in (0, 2) (eq. 9); the paper uses p = 1.
        block_size: rows of the stacked ``(N + M, d)`` set per kernel call (default 8192 for the fused
            kernel, 256 for the eager tiles). Memory is O((N + M) d) for the fused kernel and
            O(block_size x 2048) for the eager one.
        backend: "auto" (fused ``torch.compile`` kernel where it is available, else "eager"),
            "compiled" or "eager". With d == 1 and p == 1, "auto" uses the exact O(N log N)
            ``energy_distance_1d``.

    Returns:
        ``(...)`` tensor of the dtype of the inputs, computed with float64 accumulation.
        Differentiable with respect to ``u`` and ``v`` (first order).

    Raises:
        ValueError: p outside (0, 2), NaN/inf points (with their count), mismatched ``d``,
            batch shapes that do not broadcast, empty sets.
    """
    p = _validate_p(p)
    if block_size is not None and (int(block_size) != block_size or block_size < 1):
        raise ValueError(f"block_size={block_size} must be a positive integer or None")
    u, v = _prepare_sets(u, v)
    if backend == "auto" and u.shape[-1] == 1 and p == 1.0:
        return energy_distance_1d(u[..., 0], v[..., 0])
    resolved = _resolve_backend(backend, u.device)
    return _EnergyDistance.apply(u, v, p, resolved, block_size)


def energy_distance_1d(x, y) -> torch.Tensor:
    """Exact 1D energy distance (eq. 10, p = 1) in O(N log N) by the CDF form; differentiable.

    For p = 1 in one dimension, E(U, V) = 2 * integral (F_U - F_V)^2 dz, and for empirical laws the
    integrand is constant between consecutive points of the merged sorted sample z_(1) <= ... <= z_(K):

        E = 2 sum_k (z_(k+1) - z_(k)) (F_U(z_(k)) - F_V(z_(k)))^2.

    The CDF differences are exact ratios of counts and the gaps are formed in float64, so this stays
    accurate in float32 at N = 2^20, unlike the sorted-sum form sum_k (2k - N - 1) z_(k), which
    cancels. Gradients flow through the sorted values (the counts are piecewise constant).

    Args:
        x: ``(..., N)`` samples; y: ``(..., M)`` samples, batch dimensions broadcast.

    Returns:
        ``(...)`` tensor in the inputs' dtype; equals ``scipy.stats.energy_distance(x, y) ** 2``.
    """
    x = _as_float_tensor(x, "x")
    y = _as_float_tensor(y, "y")
    for name, t in (("x", x), ("y", y)):
        if t.dim() < 1 or t.shape[-1] < 1:
            raise ValueError(f"{name} must have shape (..., N) with N >= 1, got {tuple(t.shape)}")
    check_finite(x, "x")
    check_finite(y, "y")
    x, y = _broadcast_pair(x, y, ("x", "y"), event_ndim=1)
    n, m = x.shape[-1], y.shape[-1]
    z = torch.cat([x, y], -1)
    scale = float(_pow2_scales(z.reshape(1, -1, 1))[0]) if z.numel() else 1.0
    z_sorted, order = torch.sort(z, dim=-1)
    # F_U - F_V at each merged order statistic, from exact integer counts
    from_x = (order < n).to(torch.int64)
    count_x = from_x.cumsum(-1)
    count_y = torch.arange(1, n + m + 1, device=z.device) - count_x
    cdf_gap = count_x.to(torch.float64) / n - count_y.to(torch.float64) / m
    z64 = z_sorted.to(torch.float64) * scale  # exact for float32 input; scale is a power of two
    gaps = z64[..., 1:] - z64[..., :-1]
    value = 2.0 * (gaps * cdf_gap[..., :-1].square()).sum(-1) / scale
    return value.to(z.dtype)
