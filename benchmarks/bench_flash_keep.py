"""The compiled passes' one-tile threshold, measured: forward+backward with the whole score matrix in one tile and the
weights kept for backward, against the same call on cache-sized tiles that backward recomputes
(``heavytail.science.flash_attention.KEEP_ELEMENTS``), interleaved in one process, one thread, ``(1, N, d)``.

    python benchmarks/bench_flash_keep.py                 # N in {1024, 2048}, d = 32, three kernels
    python benchmarks/bench_flash_keep.py --n 512 1024 --kernels log_elu --rounds 40
"""

from __future__ import annotations

import argparse
import sys

from pathlib import Path

import _bench


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[1024, 2048])
    p.add_argument("--d", type=int, default=32)
    p.add_argument("--kernels", nargs="+", default=["log_elu", "elu_pow0.5", "squared_elu"])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, help="result file (default: benchmarks/results/flash_keep_<date>.json)")
    args = p.parse_args(argv)

    import torch

    from heavytail.science import flash_attention as F
    from heavytail.science.kernels import get_kernel

    threads = _bench.set_threads(args.threads)
    rows = []
    for name in args.kernels:
        kernel = get_kernel(name)
        for n in args.n:
            torch.manual_seed(0)
            q, k, v = (torch.randn(1, n, args.d, requires_grad=True) for _ in range(3))

            def call(keep: int, qkv=(q, k, v), kernel=kernel):
                def fn():
                    F.KEEP_ELEMENTS = keep
                    F.flash(*qkv, kernel, 2**62, True, native=False).sum().backward()
                return fn

            times = _bench.interleaved({"tiles": call(0), "kept": call(n * n)}, args.rounds)
            s = _bench.summarize(times, "tiles")["kept"]
            rows.append({"kernel": name, "n": n, "d": args.d, "threads": threads, **s})
            print(f"{name:12s} N = {n:5d}: kept / tiles CPU time {s['cpu_ratio']:.2f} (wall {s['ratio']:.2f})",
                  flush=True)
    out = _bench.write_json("flash_keep", {**_bench.header("bench_flash_keep", argv), "time": rows}, args.json)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
