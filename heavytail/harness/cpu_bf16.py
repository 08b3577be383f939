"""bf16 autocast on a CPU: whether oneDNN computes bf16 matmuls natively here, and, where it does not, the same
arithmetic computed at float32's speed.

Under bf16 autocast (the paper's precision for softmax, App. E.4) every linear layer's matmul runs in bf16, and
softmax's attention through SDPA too. On the CPU, oneDNN does that natively where the processor has AVX512-BF16 or
AMX; elsewhere (AVX2-only processors, many AMD EPYCs among them) torch takes a reference path that is tens of times
slower than float32, so a ladder run of an hour took most of a day (``benchmarks/bench_ladder_logging.py`` records
a step on such a CPU).

What those bf16 operations compute is exactly representable in float32: bf16 operands (8-bit significands, whose
products are exact in float32's 24 bits), products summed in float32, the result rounded to bf16 (round to
nearest even). :class:`Emulated` computes them that way, with float32 matmuls, for the operations whose bf16
kernels are slow here:

- ``mm``, ``addmm``, ``bmm``, ``baddbmm``: ``round_bf16(beta * c + alpha * (a @ b))``, the float32 sum rounded once;
- the backward of SDPA's CPU flash kernel (torch's ``_scaled_dot_product_flash_attention_for_cpu_backward``), block
  by block as that kernel runs: query blocks of 256 / 64 / 32 rows (for N >= 768 / >= 192 / less) against key
  blocks of 512; the weights ``exp(scale * q k^T - lse)`` and ``P * (dO V^T - rowsum(dO * O))`` rounded to bf16
  before their matmuls, and dQ, dK, dV rounded to bf16 after each block's contribution, as the kernel accumulates
  them in its bf16 outputs. Rounding the weights matters: the float32 kernel's result, rounded once at the end,
  differs from torch's bf16 result in about half the elements.

SDPA's forward keeps torch's own kernel (it is fast here), and so does every other operation: the dispatch mode
changes no operation but these. Only the order of each float32 sum can differ from torch's path, so about one
element in ten thousand lands one bf16 step away (``tests/test_cpu_bf16.py`` compares both on this machine). A run
records which path trained it (:func:`path`).
"""

from __future__ import annotations

import contextlib
import contextvars
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_BF16 = torch.bfloat16
_aten = torch.ops.aten
# The CPU flash kernel's blocks (query rows by sequence length, key rows), as torch's FlashAttentionKernel.cpp
# dispatches them without a mask: they decide where its backward rounds its running sums to bf16.
_KEY_BLOCK = 512


def native() -> bool | None:
    """Whether oneDNN reports native bf16 support on this CPU; None where this torch cannot say."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return None


PATHS = ("torch", "emulated")
_chosen: contextvars.ContextVar[str | None] = contextvars.ContextVar("bf16_path", default=None)


@contextlib.contextmanager
def chosen(path_name: str):
    """Inside the block, CPU bf16 runs take ``path_name`` (one of :data:`PATHS`) whatever this CPU has: how the
    tests and ``benchmarks/bench_bf16_emulation.py`` put the two paths side by side on one machine."""
    if path_name not in PATHS:
        raise ValueError(f"bf16 path {path_name!r} is not one of {PATHS}")
    token = _chosen.set(path_name)
    try:
        yield
    finally:
        _chosen.reset(token)


def emulates(precision: str, device: torch.device) -> bool:
    """Whether training at ``precision`` on ``device`` runs its bf16 matmuls through :class:`Emulated`: bf16
    autocast, on a CPU whose oneDNN reports no native bf16 (where torch cannot say, its own path is kept), unless
    :func:`chosen` says otherwise."""
    if precision != "bf16" or device.type != "cpu":
        return False
    forced = _chosen.get()
    return forced == "emulated" if forced is not None else native() is False


def path(precision: str, device: torch.device) -> str | None:
    """Which arithmetic computes a run's bf16 matmuls: ``"emulated"`` (:class:`Emulated`), ``"torch"`` (torch's own
    kernels, native or not) or None for a run without bf16 autocast."""
    if precision != "bf16":
        return None
    return "emulated" if emulates(precision, device) else "torch"


def emulation(precision: str, device: torch.device):
    """A context in which bf16 matmuls run through :class:`Emulated` where :func:`emulates` says so; else nothing.
    Wrap the model's forward (inside autocast) and the backward in it, not the loss: the dispatch mode would send
    the energy distance's compiled kernel (float32) back to eager."""
    return Emulated() if emulates(precision, device) else contextlib.nullcontext()


def _round(x: torch.Tensor) -> torch.Tensor:
    return x.to(_BF16)


def _all_bf16_cpu(*tensors) -> bool:
    return all(isinstance(t, torch.Tensor) and t.dtype == _BF16 and t.device.type == "cpu" for t in tensors)


def _add_product(c: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor, beta=1, alpha=1) -> torch.Tensor:
    """round_bf16(beta * c + alpha * (a @ b)), every term in float32; ``c`` is ignored when beta is 0 (as torch's
    kernels ignore it, NaNs included)."""
    prod = a.float() @ b.float()
    if alpha != 1:
        prod = prod * alpha
    if c is not None and beta != 0:
        prod = prod + (c.float() if beta == 1 else beta * c.float())
    return _round(prod)


def _query_block(n: int) -> int:
    return 256 if n >= 768 else 64 if n >= 192 else 32


def sdpa_backward(grad_out, q, k, v, out, lse, scale=None):
    """Gradients of SDPA (no mask, no dropout, not causal) as torch's CPU flash kernel computes them in bf16, from
    ``(..., N, d)`` bf16 ``q``, ``out``, ``grad_out``, ``(..., M, d)`` ``k``, ``v`` and the float32 log-sum-exp
    ``(..., N)`` of the forward; returns ``(dq, dk, dv)`` in bf16."""
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    s = d**-0.5 if scale is None else scale
    qf, kf, vf, gof = q.float(), k.float(), v.float(), grad_out.float()
    dsum = (gof * out.float()).sum(-1, keepdim=True)
    dq, dk, dv = (torch.zeros(t.shape, dtype=_BF16) for t in (q, k, v))
    rows = _query_block(n)
    for i in range(0, n, rows):
        qi, goi, lse_i, dsum_i = qf[..., i:i + rows, :], gof[..., i:i + rows, :], lse[..., i:i + rows, None], \
            dsum[..., i:i + rows, :]
        for j in range(0, m, _KEY_BLOCK):
            kj, vj = kf[..., j:j + _KEY_BLOCK, :], vf[..., j:j + _KEY_BLOCK, :]
            p = torch.exp(s * (qi @ kj.transpose(-1, -2)) - lse_i)  # the forward's weights, from its lse
            dv[..., j:j + _KEY_BLOCK, :] = _add_product(dv[..., j:j + _KEY_BLOCK, :],
                                                       _round(p).transpose(-1, -2), goi)
            ds = _round(p * (goi @ vj.transpose(-1, -2) - dsum_i))  # the softmax's backward, rounded as the kernel
            dq[..., i:i + rows, :] = _add_product(dq[..., i:i + rows, :], ds, kj, alpha=s)
            dk[..., j:j + _KEY_BLOCK, :] = _add_product(dk[..., j:j + _KEY_BLOCK, :], ds.transpose(-1, -2), qi,
                                                       alpha=s)
    return dq, dk, dv


class Emulated(TorchDispatchMode):
    """bf16 ``mm``/``addmm``/``bmm``/``baddbmm`` and SDPA's CPU backward computed with float32 matmuls and rounded
    to bf16 as torch's kernels round (the module's docstring); every other operation, and these on other dtypes
    or devices, run as they would without the mode."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (_aten.mm.default, _aten.bmm.default) and _all_bf16_cpu(*args):
            return _add_product(None, *args)
        if func in (_aten.addmm.default, _aten.baddbmm.default) and _all_bf16_cpu(*args):
            return _add_product(*args, **kwargs)
        if func is _aten._scaled_dot_product_flash_attention_for_cpu_backward.default and _all_bf16_cpu(*args[:5]):
            grad_out, q, k, v, out, lse, dropout_p, is_causal = args
            if dropout_p == 0 and not is_causal and kwargs.get("attn_mask") is None:
                return sdpa_backward(grad_out, q, k, v, out, lse, kwargs.get("scale"))
        return func(*args, **kwargs)


def matmul_rates(size: int = 256, repeats: int = 3) -> dict[str, float]:
    """GFLOP/s of a ``size x size`` matmul in float32 and in bf16 (torch's own kernel) on this CPU (best of
    ``repeats`` after one warm-up each), and ``slowdown``: float32's rate over bf16's. About 0.1 s where bf16 is
    not native."""
    flops = 2.0 * size**3
    gen = torch.Generator().manual_seed(0)
    rates = {}
    for dtype, key in ((torch.float32, "float32_gflops"), (torch.bfloat16, "bf16_gflops")):
        a, b = (torch.randn(size, size, generator=gen).to(dtype) for _ in range(2))
        a @ b
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
        rates[key] = flops / max(best, 1e-9) / 1e9
    rates["slowdown"] = rates["float32_gflops"] / rates["bf16_gflops"]
    return rates


def emulation_notice(n_runs: int) -> str | None:
    """The line for ``n_runs`` runs under bf16 autocast about to train on this CPU where their bf16 matmuls are
    emulated, or None where they are not (bf16 native, or torch cannot say)."""
    if n_runs < 1 or native() is not False:
        return None
    runs = "1 run" if n_runs == 1 else f"{n_runs} runs"
    return (f"{runs} under bf16 autocast on a CPU without native bf16 matmuls (oneDNN reports no AVX512-BF16 or AMX): "
            "their bf16 matmuls and SDPA's backward are emulated, bf16 operands multiplied in float32 and rounded to "
            "bf16 as torch's kernels round, at float32's speed (heavytail/harness/cpu_bf16.py); each run records "
            "bf16_matmuls = emulated")
