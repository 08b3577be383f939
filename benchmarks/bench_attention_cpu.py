"""CPU forward+backward time and peak memory of kernel_attention (eq. 7), against SDPA softmax in the same run.

Two passes (see ``benchmarks/_bench.py``):

- time: one process per thread count, with the default allocator and thread settings training runs under;
  for each (N, d) every variant (SDPA softmax and each kernel x backend) runs once per round, the variants
  taking turns, after two warm-up calls each (which pay any torch.compile). Reported: the median over rounds
  of each variant's time divided by SDPA's time in the same round ("x sdpa"), and the medians.
- memory: a fresh process per point with a fixed mmap threshold, the peak resident memory one fwd+bwd adds
  after a warm-up call ("extra MiB"), divided by SDPA's at the same (N, d) and threads.

Inputs are ``(1, 1, N, d)`` float32 queries, keys and values with gradients, as the CPU training runs use them
(one trial per step, one head). Kernels: every registered one but softmax (``heavytail.names.kernel_names()``,
so a newly added kernel is benchmarked without editing this file); softmax is the SDPA baseline.

Backends: ``flash`` (the flash-style path as ``auto`` runs it on CPU: the fused C++ loop of
``heavytail.science.flash_native`` for kernels with a native chain), ``flash_passes`` (the same algorithm as
compiled tile passes, what kernels without a native chain run), ``flash_eager`` (the passes uncompiled), ``tiled`` (the paper's checkpointed query tiles, eager),
``tiled_compiled`` (the same under torch.compile), ``dense`` (reference, quadratic memory; skipped above
--max-dense-n).

Usage:
    python benchmarks/bench_attention_cpu.py --quick      # N in {1024, 4096}, d = 32, 1 and 2 threads: minutes
    python benchmarks/bench_attention_cpu.py              # N in {1024, 4096, 16384}, d in {32, 64}
    python benchmarks/bench_attention_cpu.py --n 4096 --d 64 --kernels log_elu --backends flash tiled --threads 1

Writes ``benchmarks/results/attention_cpu_<date>.json`` (or --json). Targets: every kernel <= 1.3x SDPA's
time, extra memory <= 4x SDPA's at every N and linear in N.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _bench

from heavytail import names

ALL_BACKENDS = ("flash", "flash_passes", "flash_eager", "tiled", "tiled_compiled", "dense")
BASELINE = "sdpa"


def _variants(args) -> list[str]:
    return [BASELINE] + [f"{kernel}/{backend}" for kernel in args.kernels for backend in args.backends]


def _inputs(n: int, d: int):
    import torch

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, d, generator=g).requires_grad_() for _ in range(3))
    return q, k, v, torch.randn(1, 1, n, d, generator=g)


def _step_fn(variant: str, q, k, v, go):
    """One forward+backward of ``variant`` on the given tensors (gradients dropped afterwards)."""
    import torch.nn.functional as F

    from heavytail.science.attention import kernel_attention

    if variant == BASELINE:
        def attend():
            return F.scaled_dot_product_attention(q, k, v)
    else:
        kernel, backend = variant.split("/")
        name, _, option = backend.partition("_")
        compiled = {"tiled": option == "compiled", "flash": option != "eager", "dense": None}[name]
        native = False if option in ("passes", "eager") else None

        def attend():
            return kernel_attention(q, k, v, kernel, backend=name, compiled=compiled, native=native)

    def step():
        attend().backward(go)
        q.grad = k.grad = v.grad = None

    return step


def _skip(variant: str, n: int, args) -> bool:
    return variant.endswith("/dense") and n > args.max_dense_n


def time_pass(args) -> dict:
    """The timing pass of one thread count, in this process (the parent starts it with the thread settings)."""
    threads = _bench.set_threads(args.time_child)
    rows = []
    for n in args.n:
        for d in args.d:
            q, k, v, go = _inputs(n, d)
            fns = {name: _step_fn(name, q, k, v, go) for name in _variants(args) if not _skip(name, n, args)}
            rounds = args.rounds if n < 16384 else max(2, args.rounds // 2)
            times = _bench.interleaved(fns, rounds, warmup=2)
            summary = _bench.summarize(times, BASELINE)
            for variant, stats in summary.items():
                rows.append({"n": n, "d": d, "variant": variant, "threads": threads, **stats, "times_s": times[variant]})
            print(f"threads {threads} N {n} d {d}: " + ", ".join(f"{name} {s['ratio']:.2f}x" for name, s in summary.items()),
                  file=sys.stderr, flush=True)
    return {"threads": threads, "rows": rows}


def memory_point(n: int, d: int, variant: str, threads: int) -> dict:
    threads = _bench.set_threads(threads)
    step = _step_fn(variant, *_inputs(n, d))
    step()  # warm-up: compiles, first-call buffers
    return {"n": n, "d": d, "variant": variant, "threads": threads, "extra_mib": _bench.peak_extra_mib(step)}


def _table(time_rows: list[dict], memory_rows: list[dict]) -> str:
    mem = {(r["n"], r["d"], r["variant"], r["threads"]): r.get("extra_mib") for r in memory_rows}
    lines = [f"{'thr':>3} {'N':>6} {'d':>4} {'variant':<24} {'median s':>9} {'x sdpa':>7} {'x sdpa(min)':>11} "
             f"{'x sdpa(cpu)':>11} {'extra MiB':>9} {'x sdpa':>7}"]
    for r in time_rows:
        key = (r["n"], r["d"], r["variant"], r["threads"])
        m, mb = mem.get(key), mem.get((r["n"], r["d"], BASELINE, r["threads"]))
        mcell = f"{m:9.1f}" if m is not None else f"{'-':>9}"
        mratio = f"{m / mb:7.2f}" if m is not None and mb else f"{'-':>7}"
        lines.append(f"{r['threads']:>3} {r['n']:>6} {r['d']:>4} {r['variant']:<24} {r['median_s']:9.4f} "
                     f"{r['ratio']:7.2f} {r['ratio_of_min']:11.2f} {r['cpu_ratio']:11.2f} {mcell} {mratio}")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time-child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--memory-point", nargs=4, metavar=("N", "D", "VARIANT", "THREADS"), help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="N in {1024, 4096}, d = 32, flash only, 3 rounds")
    p.add_argument("--n", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--d", type=int, nargs="+", default=[32, 64])
    kernels = [k for k in names.kernel_names() if k != "softmax"]
    p.add_argument("--kernels", nargs="+", default=kernels, choices=names.kernel_names(),
                   help="default: every registered kernel but softmax (the SDPA baseline)")
    p.add_argument("--backends", nargs="+", default=["flash"], choices=ALL_BACKENDS)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="one timing pass per thread count")
    p.add_argument("--memory-threads", type=int, nargs="*", default=[1],
                   help="thread counts of the memory pass (none: skip it)")
    p.add_argument("--rounds", type=int, default=5, help="timed calls per variant (halved at N >= 16384)")
    p.add_argument("--max-dense-n", type=int, default=4096, help="skip the quadratic dense backend above this N")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per child process")
    p.add_argument("--json", type=Path, help="result file (default: benchmarks/results/attention_cpu_<date>.json)")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.d, args.rounds = [1024, 4096], [32], 3

    if args.time_child:
        print(_bench.child_json(time_pass(args)))
        return
    if args.memory_point:
        n, d, variant, threads = args.memory_point
        print(_bench.child_json(memory_point(int(n), int(d), variant, int(threads))))
        return

    record = _bench.header("bench_attention_cpu", argv)
    forward = ["--n", *map(str, args.n), "--d", *map(str, args.d), "--kernels", *args.kernels,
               "--backends", *args.backends, "--rounds", str(args.rounds), "--max-dense-n", str(args.max_dense_n)]
    time_rows, errors = [], []
    for threads in args.threads:
        print(f"timing pass, {threads} thread(s)", file=sys.stderr, flush=True)
        res = _bench.run_child([__file__, "--time-child", str(threads), *forward], _bench.child_env(threads),
                               args.timeout)
        if "error" in res:
            errors.append({"pass": "time", "threads": threads, "error": res["error"]})
        time_rows += res.get("rows", [])
    memory_rows = []
    for threads in args.memory_threads:
        for n in args.n:
            for d in args.d:
                for variant in _variants(args):
                    if _skip(variant, n, args):
                        continue
                    res = _bench.run_child([__file__, "--memory-point", str(n), str(d), variant, str(threads)],
                                           _bench.child_env(threads, memory=True), args.timeout)
                    memory_rows.append({"n": n, "d": d, "variant": variant, "threads": threads, **res})
                    print(f"memory {threads} thr N {n} d {d} {variant}: {res.get('extra_mib', res.get('error'))}",
                          file=sys.stderr, flush=True)
    table = _table(time_rows, memory_rows)
    print(table)
    for e in errors:
        print(f"error: {e}")
    path = _bench.write_json("attention_cpu", {**record, "time": time_rows, "memory": memory_rows,
                                               "errors": errors, "table": table.splitlines()}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
