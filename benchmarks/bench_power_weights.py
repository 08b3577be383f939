"""The power ELU's weights by products, measured: flash forward+backward with (1 + s)^q / (1 + m)^q computed as
products of the base and at most one square root (``heavytail.science.kernels._base_power``) against the same
call with ``exp(q log base)``, and SDPA softmax as the common baseline, interleaved in one process, one thread,
``(1, N, d)``.

    python benchmarks/bench_power_weights.py                  # N in {1024, 4096}, d = 32, q in {0.5, 1.5, 3}
    python benchmarks/bench_power_weights.py --n 4096 --kernels elu_pow3 --rounds 30
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import _bench


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--d", type=int, default=32)
    p.add_argument("--kernels", nargs="+", default=["elu_pow0.5", "elu_pow1.5", "elu_pow3"])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, help="result file (default: benchmarks/results/power_weights_<date>.json)")
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as fn

    from heavytail import names
    from heavytail.science.flash_attention import flash
    from heavytail.science.kernels import _split, get_kernel

    threads = _bench.set_threads(args.threads)
    rows = []
    for name in args.kernels:
        kernel = get_kernel(name)
        order = names.KERNEL_ROWS[name].order

        def exp_log_ratio(s, log_gm, row, q=order):
            pos, sp, sn = _split(s)
            return torch.where(pos, torch.exp(q * torch.log((1.0 + sp) / row)), torch.exp(q * sn - log_gm))

        exp_log = dataclasses.replace(kernel, name=name + ":exp_log", g_ratio=exp_log_ratio)
        for n in args.n:
            torch.manual_seed(0)
            q, k, v = (torch.randn(1, n, args.d, requires_grad=True) for _ in range(3))

            def call(kern):
                return lambda: flash(q, k, v, kern, 2**62, True).sum().backward()

            def sdpa():
                fn.scaled_dot_product_attention(q[None], k[None], v[None]).sum().backward()

            times = _bench.interleaved({"sdpa": sdpa, "products": call(kernel), "exp_log": call(exp_log)}, args.rounds)
            summary = _bench.summarize(times, "sdpa")
            prod, el = summary["products"], summary["exp_log"]
            rows.append({"kernel": name, "q": order, "n": n, "d": args.d, "threads": threads,
                         "products": prod, "exp_log": el})
            print(f"{name:11s} N = {n:5d}: x SDPA CPU time, products {prod['cpu_ratio']:.2f}, exp(q log b) "
                  f"{el['cpu_ratio']:.2f} (wall {prod['ratio']:.2f}, {el['ratio']:.2f})", flush=True)
    out = _bench.write_json("power_weights", {**_bench.header("bench_power_weights", argv), "time": rows}, args.json)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
