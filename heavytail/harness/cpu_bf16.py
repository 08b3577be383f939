"""Whether this CPU computes bf16 matmuls natively, and what bf16 autocast costs here when it does not.

Under bf16 autocast (the paper's precision for softmax, App. E.4) every linear layer's matmul runs in bf16. On the
CPU, oneDNN does that natively where the processor has AVX512-BF16 or AMX; elsewhere (AVX2-only processors, many
AMD EPYCs among them) torch takes a reference path that is tens of times slower than float32, so a bf16 run that
takes an hour on one machine takes most of a day on the other (``benchmarks/bench_ladder_logging.py`` records a
ladder step on such a CPU). The two paths may also round differently, so which one trained a run is part of its
record.
"""

from __future__ import annotations

import time

import torch


def native() -> bool | None:
    """Whether oneDNN reports native bf16 support on this CPU; None where this torch cannot say."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return None


def matmul_rates(size: int = 256, repeats: int = 3) -> dict[str, float]:
    """GFLOP/s of a ``size x size`` matmul in float32 and in bf16 on this CPU (best of ``repeats`` after one warm-up
    each), and ``slowdown``: float32's rate over bf16's. About 0.1 s where bf16 is not native."""
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


def slow_bf16_warning(n_runs: int) -> str | None:
    """The warning for ``n_runs`` runs under bf16 autocast about to train on this CPU, or None where bf16 is native
    (or torch cannot say). Measures the two matmul rates, so it names this machine's slowdown."""
    if n_runs < 1 or native() is not False:
        return None
    r = matmul_rates()
    runs = "1 run" if n_runs == 1 else f"{n_runs} runs"
    return (f"{runs} under bf16 autocast on a CPU without native bf16 matmuls (oneDNN reports none: no AVX512-BF16 "
            f"or AMX): a 256 x 256 matmul runs at {r['bf16_gflops']:.1f} GFLOP/s in bf16 here against "
            f"{r['float32_gflops']:.1f} in float32 ({r['slowdown']:.0f}x slower), so each step will take many times "
            "longer than on a CPU with it")
