"""Kernel attention, eq. 7, with the scaled scores of eq. 1, on several backends.

    S = q k^T / sqrt(d_K)                                  (eq. 1)
    attention_g = A_g(S) z,   A_g(S)_ij = g(S_ij) / sum_l g(S_il)   (eq. 7)

Every backend evaluates eq. 7 as ``softmax(log g(S))`` (valid because ``g > 0``, Table 1), i.e.
with the row maximum of ``log g`` subtracted. The literal ``g / sum g`` is ``0 / 0 = NaN`` in
float32 for a row whose scores all lie below about -104 (``e^s`` underflows); in log space such
a row is an ordinary softmax.

Backends (``BACKENDS``), all for non-causal ``(B, H, N, d)`` queries and ``(B, H, L, d)`` keys/values:

- ``"dense"``: materializes the ``(B, H, N, L)`` scores; the reference the tests use (run it in
  float64 for ground truth). Memory quadratic in N.
- ``"tiled"``: the paper's method (App. E.4): query tiles capped at ``tile_elements`` score
  elements, each recomputed in backward by activation checkpointing. Memory linear in N.
- ``"flash"``: a flash-style ``torch.autograd.Function`` written here because no CPU library
  kernel takes a custom score map with a backward (``flex_attention`` has no CPU backward in
  torch 2.13). Query tiles of whole key rows (key blocks with online rescaling to the running row
  maximum when a row does not fit), at most ``min(tile_elements, FLASH_TILE_ELEMENTS)`` scores, sized
  for a CPU core's L2, each tile's pass one compiled graph; only the output and three numbers per
  query row are stored, and backward recomputes the scores tile by tile with the hand-written
  derivative ``Kernel.dlog_g``. When one tile holds all N x L scores, the weights are kept instead
  and backward recomputes nothing. Memory linear in N. It lives in :mod:`heavytail.science.flash_attention`;
  for float32 on CPU and a kernel with a native weight chain (``Kernel.native``: every kernel registered
  today) the same algorithm runs as one fused C++ loop, :mod:`heavytail.science.flash_native`.
- ``"flex"``: ``torch.nn.attention.flex_attention`` (compiled) with ``score_mod = log g`` (the
  score it receives is already scaled by 1/sqrt(d)) and an all-True block mask of 128-blocks
  (without one, CPU flex treats the sequence as one block: +1 GiB per thread at N = 16384). On
  CUDA it trains; on CPU it runs forward only, so requesting gradients there raises.
- ``"sdpa"``: ``scaled_dot_product_attention``, softmax only (FlashAttention on CUDA); which kernels a
  backend computes is its row in ``heavytail.names.BACKEND_ROWS`` (:func:`heavytail.names.backend_refusal`).
- ``"auto"``: the first backend of ``auto_candidates`` that runs for the call's kernel, device,
  dtype and shapes (see ``select_backend``); the choice is made once per case, logged, and
  readable through ``recording_backends``.

Heavy-tailed inputs and softmax gradients: with Pareto(1.1) tokens the scores reach ~1e6-1e7,
where adjacent float32 numbers are ~0.06-0.5 apart. Softmax weights ``e^{S - lse}`` then change by
factors ``e^{0.5}`` with one rounding of S, so any float32 backward that recomputes S with a
different summation order than the forward (SDPA's CPU kernel, flex) and subtracts the stored
log-sum-exp can return softmax gradients wrong by many times their size. The ELU kernels' ``log g``
grows like ``log s`` or slower, which compresses that range, and their gradients stay accurate on
every backend. ``tests/test_attention.py::test_heavy_tail_gradients`` measures the error of every
backend against float64 and records where softmax's gradients cannot be trusted.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from heavytail import names
from heavytail.science import flash_native
from heavytail.science.flash_attention import flash, fresh_code
from heavytail.science.kernels import Kernel, get_kernel

__all__ = [
    "BACKENDS",
    "DEFAULT_TILE_ELEMENTS",
    "Candidate",
    "auto_candidates",
    "kernel_attention",
    "recording_backends",
    "select_backend",
    "attention_weights",
    "scaled_scores",
]

# The backends and which kernels each computes are heavytail.names.BACKEND_ROWS.
BACKENDS = names.BACKENDS

# Score elements per tile (summed over batch and heads): 2^22 float32 = 16 MiB, which keeps a
# tile in a CPU's cache hierarchy. The paper's H200 runs used 2^31 (8 GiB per tile, App. E.4).
DEFAULT_TILE_ELEMENTS = 2**22
FLEX_BLOCK_SIZE = 128

# flex_attention's Triton kernels for the fallback chain of "auto" on CUDA, largest first. The
# autotuned defaults can ask for more shared memory than a GPU has at head dim 256 in float32 (the
# backward holds q, k, v, dO tiles of block x 256 floats each: fine on Hopper's 227 KiB, too much on
# 100 KiB parts); halving the blocks and using one pipeline stage roughly halves and quarters that.
# Every block divides FLEX_BLOCK_SIZE, as the block mask requires; backward blocks keep
# BLOCK_N1 % BLOCK_M1 == 0 and BLOCK_M2 % BLOCK_N2 == 0.
FLEX_KERNEL_OPTIONS: tuple[tuple[str, dict | None], ...] = (
    ("flex", None),
    ("flex:blocks64", {"BLOCK_M": 64, "BLOCK_N": 32, "num_stages": 1, "num_warps": 4,
                       "bwd_BLOCK_M1": 32, "bwd_BLOCK_N1": 64, "bwd_BLOCK_M2": 64, "bwd_BLOCK_N2": 32}),
    ("flex:blocks32", {"BLOCK_M": 32, "BLOCK_N": 16, "num_stages": 1, "num_warps": 4,
                       "bwd_BLOCK_M1": 16, "bwd_BLOCK_N1": 32, "bwd_BLOCK_M2": 32, "bwd_BLOCK_N2": 16}),
)

_log = logging.getLogger(__name__)


def scaled_scores(q: Tensor, k: Tensor) -> Tensor:
    """S = q k^T / sqrt(d_K) (eq. 1): ``(..., N, d), (..., L, d) -> (..., N, L)``."""
    return (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)


def max_abs_score(q: Tensor, k: Tensor, tile_elements: int = DEFAULT_TILE_ELEMENTS) -> Tensor:
    """max |S| over every entry of eq. 1, ``(..., N, d), (..., L, d) -> ()``, one tile of query rows at a
    time so memory stays O(tile_elements) (the full N x L score matrix never exists)."""
    rows = max(1, tile_elements // max(1, k.shape[-2] * math.prod(q.shape[:-2])))
    best = q.new_zeros(())
    for start in range(0, q.shape[-2], rows):
        best = torch.maximum(best, scaled_scores(q[..., start : start + rows, :], k).abs().amax())
    return best


def attention_weights(q: Tensor, k: Tensor, kernel: str | Kernel) -> Tensor:
    """A_g(S) of eq. 7 in log space: ``(..., N, d), (..., L, d) -> (..., N, L)``; rows sum to 1."""
    kernel = get_kernel(kernel)
    return torch.softmax(kernel.log_g(scaled_scores(q, k)), dim=-1)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # Half precisions accumulate row sums and log g badly; the hand-written paths run in float32
    # (as the paper's custom kernels did, App. E.4) and cast the output back.
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _dense(q: Tensor, k: Tensor, v: Tensor, kernel: Kernel) -> Tensor:
    return attention_weights(q, k, kernel) @ v


def _rows_per_tile(q: Tensor, k: Tensor, tile_elements: int) -> int:
    batch = math.prod(q.shape[:-2])
    return max(1, tile_elements // max(1, batch * k.shape[-2]))


@functools.lru_cache(maxsize=1)
def _compiled_dense():
    return torch.compile(_dense, dynamic=False)


def _tiled(q: Tensor, k: Tensor, v: Tensor, kernel: Kernel, tile_elements: int, compiled: bool) -> Tensor:
    rows = _rows_per_tile(q, k, tile_elements)
    tile_fn = _compiled_dense() if compiled else _dense
    recompute = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    outs = []
    for start in range(0, q.shape[-2], rows):
        qt = q[..., start : start + rows, :]
        if recompute:
            outs.append(checkpoint(tile_fn, qt, k, v, kernel, use_reentrant=False))
        else:
            outs.append(tile_fn(qt, k, v, kernel))
    return torch.cat(outs, dim=-2)


@functools.lru_cache(maxsize=None)
def _score_mod(kernel: Kernel):
    log_g = kernel.log_g

    def score_mod(score, b, h, q_idx, kv_idx):
        # log g is built from torch.where (never Tensor.clamp: compiled CPU flex in bf16 returns
        # wrong outputs with clamp in the score modifier, measured on torch 2.13). The score is
        # cast to float32 first: log and log1p of a half-precision score have failed to lower.
        return log_g(score.to(torch.float32))

    return score_mod


def _flex_call(q, k, v, score_mod, block_mask, kernel_options):
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, kernel_options=kernel_options)


@functools.lru_cache(maxsize=None)
def _compiled_flex(kernel: Kernel):
    # One compiled function (its own code object, see flash_attention.fresh_code) per kernel: each kernel's
    # score_mod, shapes and kernel options then count against their own recompile limit.
    return torch.compile(fresh_code(_flex_call), dynamic=False)


def _all_true(b, h, q_idx, kv_idx):
    return q_idx >= 0


@functools.lru_cache(maxsize=32)
def _full_block_mask(n: int, l: int, device: str):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(_all_true, None, None, n, l, device=device, BLOCK_SIZE=FLEX_BLOCK_SIZE)


def _flex(q: Tensor, k: Tensor, v: Tensor, kernel: Kernel, kernel_options: dict | None = None) -> Tensor:
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if q.device.type != "cuda" and needs_grad:
        raise RuntimeError(
            "backend='flex' has no backward on CPU (torch.nn.attention.flex_attention, torch "
            f"{torch.__version__}); use backend='flash' or 'auto' for CPU training, or run flex "
            "under torch.no_grad()"
        )
    if q.ndim != 4:
        raise ValueError(f"backend='flex' needs (B, H, N, d) inputs, got q of shape {tuple(q.shape)}")
    mask = _full_block_mask(q.shape[-2], k.shape[-2], str(q.device))
    return _compiled_flex(kernel)(q, k, v, _score_mod(kernel), mask, kernel_options)


@dataclass(frozen=True)
class Candidate:
    """One way ``"auto"`` may run eq. 7: a backend of ``BACKENDS`` and its options.

    ``label`` names it in logs and run records (``"flex:blocks64"`` is flex with smaller Triton blocks,
    ``"flash:eager"`` the flash path without its compiled blocks, ``"flash:native"`` its fused C++ loop);
    ``kernel_options`` are flex's, as sorted ``(key, value)`` pairs; ``compiled`` overrides ``kernel_attention``'s
    argument when set; ``native`` is :func:`~heavytail.science.flash_attention.flash`'s.
    """

    label: str
    backend: str
    kernel_options: tuple[tuple[str, object], ...] | None = None
    compiled: bool | None = None
    native: bool | None = None


def auto_candidates(kernel: str | Kernel, device: torch.device | str, dtype: torch.dtype) -> tuple[Candidate, ...]:
    """The backends ``"auto"`` tries, in order, until one runs (forward, and backward when gradients
    are needed) for the call's shapes; the fastest measured first, the least demanding last.

    - softmax: ``"sdpa"`` (a fused library kernel; FlashAttention on CUDA), then ``"tiled"``.
    - other kernels on CUDA in float32/bf16/fp16: ``"flex"`` with autotuned Triton blocks, flex with
      the smaller blocks of ``FLEX_KERNEL_OPTIONS`` (when the GPU's shared memory or the lowering
      refuses the defaults), then the hand-written ``"flash"`` path, then checkpointed ``"tiled"``.
    - other kernels on CPU, or float64 anywhere: ``"flash:native"`` (the fused C++ loop, on CPU for a kernel with
      a native chain computed in float32, which bf16 and fp16 calls are too), ``"flash"`` (compiled blocks),
      ``"flash"`` eager (no C++ compiler), ``"tiled"``. On CPU flex has no backward, and for forward-only use its one-off
      compile (tens of seconds) outweighs its speed-up unless many calls follow; pass
      ``backend="flex"`` explicitly for long CPU inference. ``benchmarks/bench_attention_cpu.py``
      holds the measurements behind this order.
    """
    kernel = get_kernel(kernel)
    device = torch.device(device)
    if names.backend_refusal("sdpa", kernel.name) is None:  # a fused library kernel computes it
        return (Candidate("sdpa", "sdpa"), Candidate("tiled", "tiled"))
    tail = (Candidate("flash", "flash", native=False), Candidate("flash:eager", "flash", compiled=False),
            Candidate("tiled", "tiled"))
    if (device.type == "cpu" and _compute_dtype(dtype) == torch.float32 and kernel.native is not None
            and flash_native.enabled()):  # switched off, the loop is not even tried (trying it would build it)
        tail = (Candidate("flash:native", "flash", native=True),) + tail
    if device.type == "cuda" and dtype in (torch.float32, torch.bfloat16, torch.float16):
        flex = tuple(
            Candidate(label, "flex", None if opts is None else tuple(sorted(opts.items())))
            for label, opts in FLEX_KERNEL_OPTIONS
        )
        return flex + tail
    return tail


def select_backend(kernel: str | Kernel, device: torch.device | str, dtype: torch.dtype, requires_grad: bool) -> str:
    """The backend ``"auto"`` prefers for a case: the first of :func:`auto_candidates` (which one
    actually runs is decided on the first call, when the preferred one may fail to compile)."""
    return auto_candidates(kernel, device, dtype)[0].backend


# "auto"'s choice per (kernel, device, dtype, shapes, gradients): made once, on the first call.
_AUTO_CHOICE: dict[tuple, tuple[Candidate, str]] = {}
_RECORDERS: list[dict] = []


@contextlib.contextmanager
def recording_backends():
    """Collect the backend every ``kernel_attention`` call inside the block ran on.

    Yields a dict ``"kernel device dtype train|eval" -> {"backend": label, "reason": why}`` that
    fills as calls happen (labels of :class:`Candidate`, or the backend that was requested);
    a run records it so that its results say which attention actually computed them.
    """
    record: dict[str, dict[str, str]] = {}
    _RECORDERS.append(record)
    try:
        yield record
    finally:
        _RECORDERS.remove(record)


def _note(kernel: Kernel, q: Tensor, needs_grad: bool, label: str, reason: str) -> None:
    key = f"{kernel.name} {q.device.type} {str(q.dtype).removeprefix('torch.')} {'train' if needs_grad else 'eval'}"
    for record in _RECORDERS:
        entry = record.get(key)
        if entry is None:
            record[key] = {"backend": label, "reason": reason}
        elif label not in entry["backend"].split("+"):
            # Another shape of the same case took another backend: keep both.
            entry["backend"] += f"+{label}"
            entry["reason"] += f"; {reason}"


def _run(cand: Candidate, q: Tensor, k: Tensor, v: Tensor, kernel: Kernel, tile_elements: int, compiled: bool | None,
         native: bool | None = None):
    backend = cand.backend
    if cand.compiled is not None:
        compiled = cand.compiled
    if cand.native is not None:
        native = cand.native
    if compiled is not False and backend in ("flash", "tiled") and q.device.type == "cpu" and not flash_native.compiler():
        # Without a C++ compiler neither the loop nor a compiled pass can be built: the eager passes compute the same
        # numbers, so a backend that validated still runs (one warning for the machine).
        flash_native.warn_no_compiler()
        compiled, native = False, False if native is None else native
    refusal = names.backend_refusal(backend, kernel.name)
    if refusal is not None:
        raise ValueError(f"backend={backend!r} {refusal}")
    if backend == "sdpa":
        return F.scaled_dot_product_attention(q, k, v)
    dtype = q.dtype
    ct = _compute_dtype(dtype)
    # The paper's custom attention ran in float32 while the model stayed under bf16 autocast (App. E.4).
    # Casting q, k, v is not enough: autocast would cast every matmul inside back to bf16, so it is
    # switched off for the hand-written paths (softmax via SDPA above keeps the autocast precision).
    with torch.autocast(device_type=q.device.type, enabled=False):
        q, k, v = q.to(ct), k.to(ct), v.to(ct)
        if backend == "flex":
            out = _flex(q, k, v, kernel, None if cand.kernel_options is None else dict(cand.kernel_options))
        elif backend == "dense":
            out = _dense(q, k, v, kernel)
        elif backend == "tiled":
            out = _tiled(q, k, v, kernel, tile_elements, bool(compiled))
        else:
            out = flash(q, k, v, kernel, tile_elements, compiled is not False, native)
    return out.to(dtype)


def _probe(cand: Candidate, q, k, v, kernel: Kernel, tile_elements: int, compiled: bool | None) -> None:
    """Forward and backward once on detached copies: a backward that cannot compile or launch (flex's
    shared-memory limit) fails only inside ``loss.backward()``, too late to choose another backend."""
    copies = [t.detach().clone().requires_grad_(t.requires_grad) for t in (q, k, v)]
    with torch.enable_grad():
        out = _run(cand, *copies, kernel, tile_elements, compiled)
        wanted = [t for t in copies if t.requires_grad]
        torch.autograd.grad(out, wanted, torch.ones_like(out))
    if q.device.type == "cuda":
        torch.cuda.synchronize(q.device)


def _auto(q, k, v, kernel: Kernel, tile_elements: int, compiled: bool | None, needs_grad: bool) -> Tensor:
    key = (kernel.name, str(q.device), q.dtype, tuple(q.shape), tuple(k.shape), tuple(v.shape), needs_grad,
           tile_elements, compiled)
    chosen = _AUTO_CHOICE.get(key)
    if chosen is not None:
        _note(kernel, q, needs_grad, chosen[0].label, chosen[1])
        return _run(chosen[0], q, k, v, kernel, tile_elements, compiled)
    failures = []
    for cand in auto_candidates(kernel, q.device, q.dtype):
        try:
            if needs_grad:
                _probe(cand, q, k, v, kernel, tile_elements, compiled)
            out = _run(cand, q, k, v, kernel, tile_elements, compiled)
        except Exception as exc:  # a compile, lowering or launch failure: try the next backend
            first_line = (str(exc).strip().splitlines() or [""])[0][:200]
            failures.append(f"{cand.label} failed ({type(exc).__name__}: {first_line})")
            if q.device.type == "cuda":
                torch.cuda.empty_cache()
            last = exc
            continue
        case = f"{kernel.name} on {q.device.type} {str(q.dtype).removeprefix('torch.')}, shapes q {tuple(q.shape)}"
        if failures:
            reason = "; ".join(failures) + f"; {cand.label} runs"
            _log.warning("attention backend for %s: %s (%s)", case, cand.label, reason)
        else:
            reason = f"first choice for {kernel.name} on {q.device.type}"
            _log.info("attention backend for %s: %s (%s)", case, cand.label, reason)
        _AUTO_CHOICE[key] = (cand, reason)
        _note(kernel, q, needs_grad, cand.label, reason)
        return out
    raise RuntimeError(
        f"no attention backend runs kernel {kernel.name!r} on {q.device} {q.dtype} with q {tuple(q.shape)}: "
        + "; ".join(failures)
    ) from last


def kernel_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    kernel: str | Kernel,
    backend: str = "auto",
    tile_elements: int = DEFAULT_TILE_ELEMENTS,
    compiled: bool | None = None,
    native: bool | None = None,
) -> Tensor:
    """Non-causal kernel attention, eq. 7 with the scaling of eq. 1, ``softmax(log g(S)) v``.

    Args:
        q: queries ``(B, H, N, d)`` (any leading dims for dense/tiled/flash/sdpa).
        k: keys ``(B, H, L, d)``.
        v: values ``(B, H, L, d_v)``.
        kernel: a name from ``heavytail.names.kernel_names()`` or a ``Kernel``.
        backend: one of ``BACKENDS``.
        tile_elements: score elements per tile for ``"tiled"``, and at most that many for ``"flash"`` (whose
            tiles are also capped at ``flash_attention.FLASH_TILE_ELEMENTS``, sized for the CPU cache).
        compiled: use compiled code inside ``"flash"`` (the fused C++ loop of
            :mod:`heavytail.science.flash_native` where the kernel has a native chain on a float32 CPU call, else
            one ``torch.compile`` graph per pass over a tile) or ``"tiled"`` (each tile, as the paper did on GPU).
            ``None``: flash compiled, tiled eager. The first call per kernel, dtype and tile shape pays the compile
            (seconds on CPU; the C++ loop is built once per machine, about a minute).
        native: for ``"flash"``: True requires the fused C++ loop, False keeps the compiled passes, None (default)
            takes the loop where it can run (``"auto"`` tries it first on CPU float32 and records which ran).

    Returns:
        ``(B, H, N, d_v)`` in the dtype of ``q``.
    """
    kernel = get_kernel(kernel)
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; valid backends are {', '.join(BACKENDS)}")
    if not (q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2] and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; need "
            "q (..., N, d), k (..., L, d), v (..., L, d_v) with equal leading dims"
        )
    if tile_elements < 1:
        raise ValueError(f"tile_elements={tile_elements}; must be a positive integer")
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if backend == "auto":
        return _auto(q, k, v, kernel, tile_elements, compiled, needs_grad)
    _note(kernel, q, needs_grad, backend, "requested")
    return _run(Candidate(backend, backend), q, k, v, kernel, tile_elements, compiled, native)
