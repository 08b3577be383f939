"""The fused C++ flash loop's block shape, measured: forward+backward CPU time of ``heavytail.science.flash_native``
at several (queries x keys) blocks against SDPA softmax and against the compiled tile passes, interleaved in one
process, ``(1, N, d)`` float32, one thread (what the grid's workers use).

    python benchmarks/bench_flash_native.py                      # N = 4096, d = 32, squared ELU and log-ELU
    python benchmarks/bench_flash_native.py --n 1024 16384 --blocks 64x512 128x256 --rounds 5

Writes ``benchmarks/results/flash_native_<date>.json`` (or --json); ``flash_native.BLOCK_Q`` / ``BLOCK_K`` cite it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _bench


def _block(text: str) -> tuple[int, int]:
    try:
        bq, bk = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"block {text!r}: expected QUERIESxKEYS, e.g. 64x512") from None
    if bq < 1 or bk < 1:
        raise argparse.ArgumentTypeError(f"block {text!r}: both sizes must be positive")
    return bq, bk


def _variants(n: int, args) -> dict:
    """SDPA, the C++ loop at each block shape and the compiled passes, each one forward+backward on (1, n, d)."""
    import torch
    import torch.nn.functional as F

    from heavytail.science import flash_attention, flash_native
    from heavytail.science.kernels import get_kernel

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, n, args.d, requires_grad=True) for _ in range(3))
    go = torch.randn(1, n, args.d)
    # SDPA as training calls it, (B, H, N, d): a 3-d call takes its slower math path.
    fns = {"sdpa": lambda: F.scaled_dot_product_attention(q[None], k[None], v[None]).backward(go[None])}
    for name in args.kernels:
        kernel = get_kernel(name)
        for bq, bk in args.blocks:
            def native(kernel=kernel, bq=bq, bk=bk):
                saved = flash_native.BLOCK_Q, flash_native.BLOCK_K
                flash_native.BLOCK_Q, flash_native.BLOCK_K = bq, bk
                try:
                    flash_native.native_flash(q, k, v, kernel).backward(go)
                finally:
                    flash_native.BLOCK_Q, flash_native.BLOCK_K = saved
            fns[f"{name}/{bq}x{bk}"] = native
        fns[f"{name}/passes"] = (lambda kernel=kernel: flash_attention.flash(
            q, k, v, kernel, 2**62, True, native=False).backward(go))
    return fns


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[4096])
    p.add_argument("--d", type=int, default=32)
    p.add_argument("--kernels", nargs="+", default=["squared_elu", "log_elu"])
    p.add_argument("--blocks", type=_block, nargs="+", default=[(64, 512), (128, 256), (32, 1024), (128, 512)])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, help="result file (default: benchmarks/results/flash_native_<date>.json)")
    args = p.parse_args(argv)

    from heavytail.science import flash_native

    if flash_native.extension() is None:
        sys.exit("bench_flash_native: the native extension cannot be built here (see the log above)")
    threads = _bench.set_threads(args.threads)
    rows = []
    for n in args.n:
        times = _bench.interleaved(_variants(n, args), args.rounds)
        summary = _bench.summarize(times, "sdpa")
        for variant, stats in summary.items():
            rows.append({"n": n, "d": args.d, "variant": variant, "threads": threads, **stats})
        print(f"N = {n}: " + ", ".join(f"{v} {s['cpu_ratio']:.2f}x" for v, s in summary.items()), flush=True)
    out = _bench.write_json("flash_native", {**_bench.header("bench_flash_native", argv), "time": rows}, args.json)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
