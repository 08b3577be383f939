"""What subnormal floats cost a CPU training step, per kernel: steps with the CPU's default floating-point mode
next to steps with subnormals flushed to zero (``torch.set_flush_denormal(True)``: FTZ and DAZ), interleaved.

At N = 4096 block 0 sees the raw heavy-tailed inputs, whose scores spread over many orders of magnitude (eq. 1):
softmax's weights e^(s - m) then land between 2^-149 and 2^-126 for some batches, and arithmetic on such
subnormals takes a microcode assist per operation. Each kernel gets two models, optimizers and data streams from
the same seed (one per mode) built as ``bench_train_cpu.py`` builds them; per round every (kernel, mode) runs one
whole training step, so both modes see the same batches. Reported per kernel and mode: the median CPU seconds per
step, the spread over rounds, and the median over rounds of flushed / default within a round; and each kernel's
step over softmax's in each mode. Training itself runs in the default mode.

    python benchmarks/bench_subnormals.py                 # N = 4096, one thread, 10 rounds
    python benchmarks/bench_subnormals.py --n 1024 --rounds 6
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import _bench
import torch

from bench_train_cpu import BASELINE, _Stepper, base_config
from heavytail import names

MODES = {"default": False, "flushed": True}


def measure(n: int, rounds: int, warmup: int, threads: int) -> dict:
    threads = _bench.set_threads(threads)
    cfg = base_config({"n_points": n})
    kernels = names.kernel_names()
    steppers = {(k, mode): _Stepper(cfg.replace(kernel=k)) for k in kernels for mode in MODES}
    cpu = {key: [] for key in steppers}
    try:
        for r in range(warmup + rounds):
            for (k, mode), stepper in steppers.items():
                torch.set_flush_denormal(MODES[mode])
                c0 = time.process_time()
                stepper.step()
                if r >= warmup:
                    cpu[(k, mode)].append(time.process_time() - c0)
            print(f"round {r + 1}/{warmup + rounds}", file=sys.stderr, flush=True)
    finally:
        torch.set_flush_denormal(False)
    rows = []
    for k in kernels:
        row = {"kernel": k}
        for mode in MODES:
            ts, base = cpu[(k, mode)], cpu[(BASELINE, mode)]
            row[mode] = {"cpu_s": ts, "median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts),
                         "x_softmax": statistics.median(t / b for t, b in zip(ts, base))}
        row["flushed_over_default"] = statistics.median(
            f / d for f, d in zip(cpu[(k, "flushed")], cpu[(k, "default")]))
        rows.append(row)
    return {"n": n, "threads": threads, "rounds": rounds, "config": cfg.to_dict(), "rows": rows}


def table(result: dict) -> str:
    lines = [f"N = {result['n']}, {result['threads']} thread(s), {result['rounds']} rounds; CPU s per step",
             f"{'kernel':<12} {'default s':>9} {'(min-max)':>13} {'x softmax':>9} {'flushed s':>9} {'(min-max)':>13} "
             f"{'x softmax':>9} {'flushed/default':>15}"]
    for r in result["rows"]:
        d, f = r["default"], r["flushed"]
        lines.append(f"{r['kernel']:<12} {d['median_s']:9.3f} {d['min_s']:6.3f}-{d['max_s']:<6.3f} "
                     f"{d['x_softmax']:9.2f} {f['median_s']:9.3f} {f['min_s']:6.3f}-{f['max_s']:<6.3f} "
                     f"{f['x_softmax']:9.2f} {r['flushed_over_default']:15.2f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--json", type=Path, help="result file (default: benchmarks/results/subnormals_<date>.json)")
    args = p.parse_args(argv)
    record = _bench.header("bench_subnormals", argv)
    result = measure(args.n, args.rounds, args.warmup, args.threads)
    text = table(result)
    print(text)
    path = _bench.write_json("subnormals", {**record, **result, "table": text.splitlines()}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
