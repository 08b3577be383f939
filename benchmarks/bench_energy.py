"""Benchmark: energy distance value + gradient (eq. 10), heavytail.science.metrics vs a naive torch.cdist autograd baseline.

2D float32 point sets from a mirrored-Pareto-like law (index 1.5), N in {1024, 4096, 16384, 65536},
batch 1 and 8. Every (method, N, batch) point runs in a fresh subprocess, so its peak RSS
(``ru_maxrss``) is its own; time is the median over repetitions of forward + backward, after one
warm-up call (which for ours also compiles or loads the fused kernel). The naive baseline is skipped
where its N x N matrices (and their gradients) would not fit the memory budget or would run for
minutes; the table says so. Targets: >= 4x faster than naive at N = 16384 (goal 0.5 s per
set on 2 cores), and N = 65536 with gradient under 1 GiB RSS.

Other engineers share the CPU, so absolute times are noisy: read the ratios, measured in the same run.

    python benchmarks/bench_energy.py            # full table (several minutes)
    python benchmarks/bench_energy.py --quick    # N in {1024, 4096}, one repetition

Writes ``benchmarks/results/energy_<date>.json`` (provenance, threads, every row).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

import _bench

GIB = 2.0**30
# Naive cdist autograd keeps ~4 float32 N x N matrices per set alive (3 distance matrices + gradient).
NAIVE_BYTES_PER_PAIR = 4 * 4
NAIVE_MEMORY_BUDGET = 6 * GIB
NAIVE_MAX_SECONDS_PER_SET = 30.0  # extrapolated from N^2 scaling: N = 65536 would be ~3 min per set


def sample(batch: int, n: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    u = torch.rand(batch, n, 2, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(batch, n, 2, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    return (sign * u.pow(-1 / 1.5)).float()


def naive(u, v):
    import torch

    def mean_dist(a, b):
        return torch.cdist(a, b).mean((-1, -2))

    return 2 * mean_dist(u, v) - mean_dist(u, u) - mean_dist(v, v)


def child(method: str, n: int, batch: int, reps: int) -> dict:
    import torch

    from heavytail.science.metrics import energy_distance

    fn = energy_distance if method == "ours" else naive
    rss_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    # Warm-up on a small problem: compiles / loads the fused kernel without inflating the peak RSS.
    uw, vw = sample(batch, 256, 1).requires_grad_(True), sample(batch, 256, 2).requires_grad_(True)
    fn(uw, vw).sum().backward()
    u, v = sample(batch, n, 3).requires_grad_(True), sample(batch, n, 4).requires_grad_(True)
    times = []
    for _ in range(reps):
        u.grad = v.grad = None
        t0 = time.perf_counter()
        value = fn(u, v)
        value.sum().backward()
        times.append(time.perf_counter() - t0)
    assert torch.isfinite(value).all() and torch.isfinite(u.grad).all()
    return {
        "median_s": statistics.median(times),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "rss_after_import_gib": rss_import,
        "value0": float(value.reshape(-1)[0]),
        "threads": torch.get_num_threads(),
    }


def naive_skip_reason(n: int, batch: int) -> str | None:
    need = NAIVE_BYTES_PER_PAIR * batch * n * n
    if need > NAIVE_MEMORY_BUDGET:
        return f"skipped: ~{need / GIB:.0f} GiB"
    if n > 16384:
        return f"skipped: ~{NAIVE_MAX_SECONDS_PER_SET * (n / 16384) ** 2 / 60:.0f} min/set"
    return None


def run_point(method: str, n: int, batch: int, reps: int, timeout: float) -> dict:
    # The child imports the package this process measures (``PYTHONPATH=<worktree>`` measures that worktree) and
    # keeps the caller's thread settings; ``run_child`` checks which checkout it imported.
    env = _bench.child_env(threads=None)
    return _bench.run_child([__file__, "--child", method, str(n), str(batch), str(reps)], env, timeout)


def fmt_time(r: dict) -> str:
    return f"{r['median_s']:.3f}" if "median_s" in r else r.get("error", r.get("skip", "-"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N in {1024, 4096}, one repetition")
    ap.add_argument("--child", nargs=4, metavar=("METHOD", "N", "BATCH", "REPS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        method, n, batch, reps = args.child
        print(_bench.child_json(child(method, int(n), int(batch), int(reps))))
        return

    record = _bench.header("bench_energy", sys.argv[1:])
    sizes = [1024, 4096] if args.quick else [1024, 4096, 16384, 65536]
    batches = [1, 8]
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2 cores shared with other engineers)", flush=True)
    rows = []
    for n in sizes:
        for batch in batches:
            reps = 1 if args.quick else {1024: 5, 4096: 5, 16384: 3}.get(n, 1)
            ours = run_point("ours", n, batch, reps, timeout=1800)
            skip = naive_skip_reason(n, batch)
            base = {"skip": skip} if skip else run_point("naive", n, batch, reps, timeout=1800)
            rows.append((n, batch, ours, base))
            print(f"  done N={n} batch={batch}: ours {fmt_time(ours)} s, naive {fmt_time(base)}", flush=True)

    print(f"load average at end: {os.getloadavg()[0]:.2f}\n")
    print("Energy distance value + gradient, 2D float32, mirrored-Pareto-like (index 1.5); median seconds per call,")
    print("peak RSS per fresh process (includes ~0.3-0.5 GiB of torch/inductor import); speedup = naive / ours.\n")
    head = ("N", "batch", "ours s", "ours s/set", "ours RSS GiB", "naive s", "naive RSS GiB", "speedup", "RSS ratio")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---:" for _ in head) + "|")
    for n, batch, ours, base in rows:
        have = "median_s" in ours and "median_s" in base
        cells = (
            str(n),
            str(batch),
            fmt_time(ours),
            f"{ours['median_s'] / batch:.3f}" if "median_s" in ours else "-",
            f"{ours['peak_rss_gib']:.2f}" if "peak_rss_gib" in ours else "-",
            fmt_time(base),
            f"{base['peak_rss_gib']:.2f}" if "peak_rss_gib" in base else "-",
            f"{base['median_s'] / ours['median_s']:.1f}x" if have else "-",
            f"{base['peak_rss_gib'] / ours['peak_rss_gib']:.1f}x" if have else "-",
        )
        print("| " + " | ".join(cells) + " |")

    by_key = {(n, b): (o, bl) for n, b, o, bl in rows}
    if (16384, 1) in by_key:
        o, bl = by_key[(16384, 1)]
        if "median_s" in o and "median_s" in bl:
            ratio = bl["median_s"] / o["median_s"]
            print(f"\ntarget N=16384, batch 1: speedup {ratio:.1f}x (need >= 4x): {'met' if ratio >= 4 else 'NOT met'}; "
                  f"{o['median_s']:.2f} s per set (goal 0.5 s)")
    if (65536, 1) in by_key and "peak_rss_gib" in by_key[(65536, 1)][0]:
        rss = by_key[(65536, 1)][0]["peak_rss_gib"]
        print(f"target N=65536 with gradient under 1 GiB RSS: {rss:.2f} GiB: {'met' if rss < 1 else 'NOT met'}")
    path = _bench.write_json("energy", {**record, "timing_method": "median over repetitions, a fresh process per "
                                        "point, points one after another (not interleaved)",
                                        "memory_method": "ru_maxrss of a fresh process per point (default "
                                        "allocator; includes the torch/inductor import)",
                                        "rows": [{"n": n, "batch": b, "ours": o, "naive": bl} for n, b, o, bl in rows]})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
