"""Flash-style eq. 7 on the CPU as one fused C++ loop (``flash_native.cpp``), for kernels with a native weight chain.

The compiled tile passes of :mod:`heavytail.science.flash_attention` leave each score tile between library calls:
a matmul writes it, one inductor graph turns it into weights, the next matmul reads it back, each call with its
dispatch cost. Here the whole loop is C++, the structure of torch's own CPU flash attention for softmax: per block of
``BLOCK_Q`` queries and ``BLOCK_K`` keys one BLAS call makes the scores, the kernel's weight chain runs over them
while they are in L2, and the next BLAS call consumes them. The algorithm and the three numbers kept per row are the
compiled path's; only its arithmetic order differs (key blocks of ``BLOCK_K`` with online rescaling).

A kernel takes this path when its :attr:`~heavytail.science.kernels.Kernel.native` names a chain written in C++
(softmax's ``"exp"``, the power ELU ``"power"`` with its order q, ``"log_elu"``); any other registered kernel runs on
the compiled passes. The extension is built once per machine on first use with torch's C++ toolchain (about a
minute; cached under ``~/.cache/torch_extensions``, or ``TORCH_EXTENSIONS_DIR``). Where it cannot be built, or with
``HEAVYTAIL_NATIVE_FLASH=0`` in the environment, the compiled passes run instead and the reason is logged once.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from pathlib import Path

import torch
from torch import Tensor
from torch.autograd.profiler import record_function

from heavytail.science.kernels import Kernel

_log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("flash_native.cpp")
ENV_SWITCH = "HEAVYTAIL_NATIVE_FLASH"
# torch.profiler's names for the C++ loop's two calls (benchmarks/profile_step.py attributes time by them).
PROFILE_FORWARD, PROFILE_BACKWARD = "heavytail::native_flash_forward", "heavytail::native_flash_backward"
# The C++ chains and their numbers in flash_native.cpp's ``enum Chain``.
CHAINS = {"exp": 0, "power": 1, "log_elu": 2}
# Queries and keys per block: a 64 x 512 score tile is 128 KiB of float32, in L2 with its partner tile in backward,
# and 64 rows keep the inner dimension of dV += A^T dO and dK += dS^T Q long enough for BLAS (the shape torch's
# CPU flash attention uses for softmax). Measured against 128 x 256 and 32 x 1024 at N = 4096, d = 32, one thread:
# see benchmarks/bench_flash_native.py.
BLOCK_Q, BLOCK_K = 64, 512
# Compiler flags per CPU capability torch dispatches to (its own kernels' flags), so at::vec uses the same ISA.
# -ffp-contract=off: the chains rely on q s - log g(m) <= 0 for s <= m, which holds when q s and log g(m) = q m are
# rounded alike; GCC's default contraction into one FMA rounds only the sum (at m = -1e30 it gave e^{+1e23}).
_ISA_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
}


def enabled() -> bool:
    """Whether the native path may be used at all (``HEAVYTAIL_NATIVE_FLASH=0`` switches it off)."""
    return os.environ.get(ENV_SWITCH, "1") != "0"


@functools.lru_cache(maxsize=None)
def extension():
    """The compiled extension module, or None where it cannot be built (the reason logged once)."""
    capability = torch.backends.cpu.get_cpu_capability()
    isa = _ISA_FLAGS.get(capability, [])
    name = f"heavytail_flash_{capability.lower()}"
    # The ninja of this environment (a dependency), also when its bin folder is not on PATH (python run by path).
    path = os.environ.get("PATH", "")
    here = str(Path(sys.executable).parent)
    if here not in path.split(os.pathsep):
        os.environ["PATH"] = here + os.pathsep + path
    try:
        from torch.utils.cpp_extension import load

        _log.info("loading native flash attention %s (built once per machine, about a minute)", name)
        # -fopenmp: at::parallel_for is OpenMP in torch's CPU build; without it the loop runs on one thread.
        flags = ["-O3", "-ffp-contract=off", "-fopenmp", *isa, f"-DCPU_CAPABILITY={capability}"]
        return load(name, [str(SOURCE)], extra_cflags=flags, extra_ldflags=["-fopenmp"], verbose=False)
    except Exception as exc:  # no compiler, no headers, a failed build: the compiled passes stand in
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        _log.warning("native flash attention unavailable (%s: %s); using the compiled tile passes",
                     type(exc).__name__, first)
        return None


def supports(kernel: Kernel, q: Tensor) -> bool:
    """Whether the C++ loop computes this kernel for these inputs: a native chain, float32, CPU, non-empty."""
    return (kernel.native is not None and kernel.native[0] in CHAINS and q.dtype == torch.float32
            and q.device.type == "cpu" and q.numel() > 0)


class _NativeFlash(torch.autograd.Function):
    """Eq. 7 on contiguous ``(B, N, d), (B, L, d), (B, L, d_v)`` float32 tensors. Saved for backward: the inputs,
    the output and per row ``log g(m)``, the kernel's row term and ``1 / sum`` ``(B, N, 3)``."""

    @staticmethod
    def forward(ctx, q, k, v, chain: int, order: float, ext):  # noqa: D401
        with record_function(PROFILE_FORWARD):  # the C++ loop is no aten op: name it for torch.profiler
            out, rows = ext.forward(q, k, v, chain, order, BLOCK_Q, BLOCK_K)
        ctx.save_for_backward(q, k, v, out, rows)
        ctx.chain, ctx.order, ctx.ext = chain, order, ext
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, rows = ctx.saved_tensors
        with record_function(PROFILE_BACKWARD):
            dq, dk, dv = ctx.ext.backward(q, k, v, out, dout.contiguous(), rows, ctx.chain, ctx.order, BLOCK_Q,
                                          BLOCK_K)
        return dq, dk, dv, None, None, None


def native_flash(q: Tensor, k: Tensor, v: Tensor, kernel: Kernel) -> Tensor | None:
    """Eq. 7 for ``(B, N, d), (B, L, d), (B, L, d_v)`` through the C++ loop; None when this call cannot take it
    (see :func:`supports`, :func:`enabled`, :func:`extension`)."""
    if not (enabled() and supports(kernel, q)):
        return None
    ext = extension()
    if ext is None:
        return None
    chain, order = kernel.native
    return _NativeFlash.apply(q.contiguous(), k.contiguous(), v.contiguous(), CHAINS[chain], float(order), ext)


def chain_terms(scores: Tensor, kernel: Kernel) -> tuple[Tensor, Tensor, Tensor]:
    """The C++ chain alone on raw scores ``(R, L)`` float32 at scale 1: the forward's weights ``g(s)/g(m)`` per
    row, the backward's weights and ``(log g)'(s)``, each ``(R, L)`` (for comparing with the kernel's functions)."""
    ext = extension()
    if ext is None or kernel.native is None:
        raise RuntimeError(f"no native chain for kernel {kernel.name!r} on this machine")
    chain, order = kernel.native
    return tuple(ext.chain_terms(scores.contiguous(), CHAINS[chain], float(order)))
