"""CPU forward+backward time and peak memory of kernel_attention, against SDPA softmax in the same run.

Each point (N, head dim, kernel, backend) runs in a fresh subprocess so that peak memory is its
own: after a warm-up call (which also pays any torch.compile), the process resets its peak-RSS
mark (Linux /proc/self/clear_refs), runs the timed repetitions and reports VmHWM - VmRSS(before),
i.e. the extra resident memory the fwd+bwd needed. Times are the minimum over repetitions (the
machine is shared; the minimum is the least noisy estimate of the cost). Ratios are against
``scaled_dot_product_attention`` softmax at the same (N, d), measured in the same run.

Backends: ``sdpa`` (baseline, softmax only), ``dense`` (reference, quadratic memory; skipped above
--max-dense-n), ``tiled`` (paper's checkpointed query tiles, eager), ``tiled_compiled`` (the same
under torch.compile, as the paper did on GPU), ``flash`` (the flash-style autograd function with
compiled elementwise blocks, what ``auto`` uses on CPU), ``flash_eager`` (same, uncompiled).

Usage:
    python benchmarks/bench_attention_cpu.py --quick          # N=1024, 4096; d=64; ~minutes
    python benchmarks/bench_attention_cpu.py                  # N in {1024, 4096, 16384}, d in {64, 256}
    python benchmarks/bench_attention_cpu.py --n 4096 --d 64 --kernels log_elu --backends flash tiled
Target: every kernel within 3x of SDPA softmax (goal 1.5x), memory linear in N.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from heavytail import names

ROOT = Path(__file__).resolve().parents[1]
ALL_BACKENDS = ("dense", "tiled", "tiled_compiled", "flash", "flash_eager")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def run_point(n: int, d: int, kernel: str, backend: str, reps: int, threads: int | None) -> dict:
    import torch
    import torch.nn.functional as F

    from heavytail.science.attention import kernel_attention

    if threads:
        torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, d, generator=g).requires_grad_() for _ in range(3))
    go = torch.randn(1, 1, n, d, generator=g)

    def step():
        if backend == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            name, _, variant = backend.partition("_")
            compiled = {"tiled": variant == "compiled", "flash": variant != "eager", "dense": None}[name]
            out = kernel_attention(q, k, v, kernel, backend=name, compiled=compiled)
        out.backward(go)
        q.grad = k.grad = v.grad = None

    t0 = time.perf_counter()
    step()  # warm-up: allocator, compile
    warm = time.perf_counter() - t0
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark
    base = _status_kib("VmRSS")
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    peak = _status_kib("VmHWM") - base
    return {"n": n, "d": d, "kernel": kernel, "backend": backend, "s": min(times), "warmup_s": warm,
            "peak_mib": peak / 1024, "threads": torch.get_num_threads()}


def _spawn(n, d, kernel, backend, reps, threads, timeout):
    cmd = [sys.executable, __file__, "--point", str(n), str(d), kernel, backend, "--reps", str(reps)]
    if threads:
        cmd += ["--threads", str(threads)]
    # A fixed mmap threshold makes glibc return every large block to the OS on free, so the
    # peak-RSS mark tracks live tensors rather than the allocator's retained heap.
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MALLOC_MMAP_THRESHOLD_="131072")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"n": n, "d": d, "kernel": kernel, "backend": backend, "error": f"timeout {timeout}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"n": n, "d": d, "kernel": kernel, "backend": backend, "error": proc.stderr.strip().splitlines()[-1:]}


def main(argv=None):
    from tqdm import tqdm

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--point", nargs=4, metavar=("N", "D", "KERNEL", "BACKEND"), help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="N in {1024, 4096}, d = 64, flash and tiled only")
    p.add_argument("--n", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--d", type=int, nargs="+", default=[64, 256])
    p.add_argument("--kernels", nargs="+", default=list(names.KERNELS), choices=names.kernel_names(),
                   help="default: Table 1's kernels")
    p.add_argument("--backends", nargs="+", default=list(ALL_BACKENDS), choices=ALL_BACKENDS)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch threads per point (default: torch's)")
    p.add_argument("--max-dense-n", type=int, default=4096, help="skip the quadratic dense backend above this N")
    p.add_argument("--timeout", type=float, default=900, help="seconds per point")
    p.add_argument("--json", type=Path, help="also write all results here")
    args = p.parse_args(argv)

    if args.point:
        n, d, kernel, backend = args.point
        print(json.dumps(run_point(int(n), int(d), kernel, backend, args.reps, args.threads)))
        return
    if args.quick:
        args.n, args.d, args.reps = [1024, 4096], [64], 2
        args.backends = [b for b in args.backends if b in ("tiled", "flash")]

    points = []
    for n in args.n:
        for d in args.d:
            points.append((n, d, "softmax", "sdpa"))
            for kernel in args.kernels:
                for backend in args.backends:
                    if backend == "dense" and n > args.max_dense_n:
                        continue
                    points.append((n, d, kernel, backend))
    results = []
    for pt in tqdm(points, desc="points", file=sys.stderr):
        reps = args.reps if pt[0] < 16384 else 1
        results.append(_spawn(*pt, reps, args.threads, args.timeout))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))

    base = {(r["n"], r["d"]): r for r in results if r["backend"] == "sdpa" and "error" not in r}
    print(f"\n{'N':>6} {'d':>4} {'kernel':<12} {'backend':<15} {'s':>8} {'x sdpa':>7} {'peak MiB':>9} {'x sdpa':>7}")
    for r in results:
        head = f"{r['n']:>6} {r['d']:>4} {r['kernel']:<12} {r['backend']:<15}"
        if "error" in r:
            print(f"{head} error: {r['error']}")
            continue
        b = base.get((r["n"], r["d"]))
        tr = f"{r['s'] / b['s']:7.2f}" if b else "      -"
        mr = f"{r['peak_mib'] / b['peak_mib']:7.2f}" if b and b["peak_mib"] > 0 else "      -"
        print(f"{head} {r['s']:8.3f} {tr} {r['peak_mib']:9.1f} {mr}")


if __name__ == "__main__":
    main()
