"""The kernels' weight chains, measured: flash forward+backward with each kernel's current elementwise forms against
the same call with the forms they replaced, and SDPA softmax as the common baseline, interleaved in one process,
one thread, ``(1, N, d)``.

- power ELU (App. A): (1 + s)^q / (1 + m)^q as products of the base and at most one square root
  (``heavytail.science.kernels._base_power``), formerly ``exp(q log base)``;
- log-ELU (Table 1): ``log(1 + s)`` in the weight and its derivative, formerly ``log1p(s)``.

    python benchmarks/bench_weight_chains.py                 # N in {1024, 4096}, d = 32, four kernels
    python benchmarks/bench_weight_chains.py --n 4096 --kernels elu_pow3 --rounds 30
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import _bench


def former_forms(name: str, order: float) -> dict:
    """The elementwise forms ``name`` used before, as ``Kernel`` field replacements."""
    import torch

    from heavytail.science.kernels import _split

    if name == "log_elu":
        def g_ratio(s, log_gm, row):
            pos, sp, sn = _split(s)
            return torch.where(pos, (torch.log1p(sp) + 1.0) * row, row / (1.0 - sn))

        def dlog_g(s):
            pos, sp, sn = _split(s)
            return torch.where(pos, 1.0 / ((1.0 + sp) * (1.0 + torch.log1p(sp))), 1.0 / (1.0 - sn))

        return {"g_ratio": g_ratio, "dlog_g": dlog_g}

    def power_ratio(s, log_gm, row, q=order):
        pos, sp, sn = _split(s)
        return torch.where(pos, torch.exp(q * torch.log((1.0 + sp) / row)), torch.exp(q * sn - log_gm))

    return {"g_ratio": power_ratio}


FORMER = {"log_elu": "log1p", "elu_pow0.5": "exp(q log b)", "elu_pow1.5": "exp(q log b)", "elu_pow3": "exp(q log b)"}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--d", type=int, default=32)
    p.add_argument("--kernels", nargs="+", default=list(FORMER), choices=list(FORMER))
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, help="result file (default: benchmarks/results/weight_chains_<date>.json)")
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as fn

    from heavytail import names
    from heavytail.science.flash_attention import flash
    from heavytail.science.kernels import get_kernel

    threads = _bench.set_threads(args.threads)
    rows = []
    for name in args.kernels:
        kernel = get_kernel(name)
        former = dataclasses.replace(kernel, name=f"{name}:former",
                                     **former_forms(name, names.KERNEL_ROWS[name].order))
        for n in args.n:
            torch.manual_seed(0)
            q, k, v = (torch.randn(1, n, args.d, requires_grad=True) for _ in range(3))

            def call(kern, qkv=(q, k, v)):
                return lambda: flash(*qkv, kern, 2**62, True).sum().backward()

            def sdpa(qkv=(q, k, v)):
                fn.scaled_dot_product_attention(*(t[None] for t in qkv)).sum().backward()

            times = _bench.interleaved({"sdpa": sdpa, "current": call(kernel), "former": call(former)}, args.rounds)
            summary = _bench.summarize(times, "sdpa")
            now, was = summary["current"], summary["former"]
            rows.append({"kernel": name, "former": FORMER[name], "n": n, "d": args.d, "threads": threads,
                         "current": now, "former_forms": was})
            print(f"{name:11s} N = {n:5d}: x SDPA CPU time, current {now['cpu_ratio']:.2f}, former "
                  f"({FORMER[name]}) {was['cpu_ratio']:.2f} (wall {now['ratio']:.2f}, {was['ratio']:.2f})", flush=True)
    out = _bench.write_json("weight_chains", {**_bench.header("bench_weight_chains", argv), "time": rows}, args.json)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
