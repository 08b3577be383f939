"""CPU time of a whole training step per kernel, next to the attention forward+backward alone, against softmax.

A step is what ``heavytail.harness.train`` runs (data draw, forward, energy-distance loss, backward, clip, AdamW),
built from the same functions. The attention alone is ``kernel_attention`` forward+backward at the model's shapes,
``(trials, heads, N, D / heads)``, on the backend the run configuration names (``auto``: SDPA for softmax, the
flash path for the other kernels on CPU). Every registered kernel (``heavytail.names.kernel_names()``) runs.

Passes (see ``benchmarks/_bench.py``): one timing process per thread count, with training's allocator and
threads, the kernels taking turns step by step (ratios: the median over rounds of kernel / softmax within a
round); then, unless --no-memory, a fresh process per (N, kernel) for the peak memory one step adds.

Sizes: the ``base`` of params/grid_cpu.yaml at one trial per step (D = 32, 2 blocks), N in {1024, 4096};
override with --n and --set key=value.

    python benchmarks/bench_train_cpu.py --quick       # 3 rounds, 1 and 2 threads, N in {1024, 4096}: minutes
    python benchmarks/bench_train_cpu.py [--rounds 8] [--threads 1] [--set d_model=64]

Writes ``benchmarks/results/train_cpu_<date>.json`` (or --json). Target: every kernel's step <= 1.15x softmax's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import _bench
import torch
import yaml

from heavytail import names
from heavytail.harness.config import RunConfig
from heavytail.harness.build import build_benchmark, build_model, build_optimizer
from heavytail.harness.train import draw_batch, parse_overrides, training_step
from heavytail.science.attention import kernel_attention
from heavytail.science.metrics import energy_distance

BASELINE = "softmax"
# The brief's CPU setting: one trial per step (the phase diagram's and the kernel-gap map's regime).
DEFAULTS = {"trials_per_step": 1}


def base_config(overrides: dict) -> RunConfig:
    grid = _bench.ROOT / "params" / "grid_cpu.yaml"
    base = (yaml.safe_load(grid.read_text()) or {}).get("base", {}) if grid.exists() else {}
    return RunConfig.from_dict({**base, **DEFAULTS, **overrides})


class _Stepper:
    """One kernel's model, optimizer and data stream; ``step()`` runs one whole training step."""

    def __init__(self, cfg: RunConfig):
        torch.manual_seed(cfg.seed)
        self.cfg, self.device = cfg, torch.device("cpu")
        self.model = build_model(cfg, self.device)
        self.optimizer, _ = build_optimizer(cfg, self.model)
        self.bench = build_benchmark(cfg)
        self.gen = torch.Generator().manual_seed(cfg.seed)

    def step(self) -> None:
        x, y = draw_batch(self.bench, self.cfg, self.gen, self.device)
        training_step(self.model, self.optimizer, x, y, self.cfg, self.device, energy_distance)
        self.optimizer.step()


def _attention_fn(cfg: RunConfig):
    """Forward+backward of the model's attention alone: ``(trials, heads, N, D / heads)`` inputs."""
    g = torch.Generator().manual_seed(cfg.seed)
    shape = (cfg.trials_per_step, cfg.n_heads, cfg.n_points, cfg.d_model // cfg.n_heads)
    q, k, v = (torch.randn(shape, generator=g).requires_grad_() for _ in range(3))
    go = torch.randn(shape, generator=g)

    def step():
        kernel_attention(q, k, v, cfg.kernel, backend=cfg.attention_backend).backward(go)
        q.grad = k.grad = v.grad = None

    return step


def time_pass(args, overrides: dict) -> dict:
    threads = _bench.set_threads(args.time_child)
    rows = []
    for n in args.n:
        cfg = base_config({**overrides, "n_points": n})
        kernels = names.kernel_names()
        steppers = {kernel: _Stepper(cfg.replace(kernel=kernel)) for kernel in kernels}
        step_times = _bench.interleaved({k: s.step for k, s in steppers.items()}, args.rounds, args.warmup)
        attn_times = _bench.interleaved({k: _attention_fn(cfg.replace(kernel=k)) for k in kernels}, args.rounds,
                                        args.warmup)
        steps, attn = _bench.summarize(step_times, BASELINE), _bench.summarize(attn_times, BASELINE)
        for kernel in kernels:
            rows.append({"n": n, "kernel": kernel, "threads": threads, "step": steps[kernel], "attention": attn[kernel],
                         "step_times_s": step_times[kernel], "attention_times_s": attn_times[kernel],
                         # the step's time in its attention calls, assuming they cost what they cost alone
                         "attention_share": cfg.n_blocks * attn[kernel]["median_s"] / steps[kernel]["median_s"]})
        print(f"threads {threads} N {n}: " + ", ".join(f"{k} {steps[k]['ratio']:.2f}x" for k in kernels),
              file=sys.stderr, flush=True)
    return {"threads": threads, "config": base_config(overrides).to_dict(), "rows": rows}


def memory_point(n: int, kernel: str, threads: int, overrides: dict) -> dict:
    threads = _bench.set_threads(threads)
    stepper = _Stepper(base_config({**overrides, "n_points": n, "kernel": kernel}))
    stepper.step()
    stepper.step()  # the optimizer's state exists from the first step on
    return {"extra_mib": _bench.peak_extra_mib(stepper.step), "threads": threads}


def _table(rows: list[dict], memory: list[dict]) -> str:
    mem = {(r["n"], r["kernel"], r["threads"]): r.get("extra_mib") for r in memory}
    lines = [f"{'thr':>3} {'N':>6} {'kernel':<12} {'step s':>8} {'x softmax':>9} {'(cpu)':>6} {'attn s':>8} "
             f"{'x softmax':>9} {'(cpu)':>6} {'attn share':>10} {'step MiB':>9}"]
    for r in rows:
        m = mem.get((r["n"], r["kernel"], r["threads"]))
        st, at = r["step"], r["attention"]
        lines.append(f"{r['threads']:>3} {r['n']:>6} {r['kernel']:<12} {st['median_s']:8.3f} {st['ratio']:9.2f} "
                     f"{st['cpu_ratio']:6.2f} {at['median_s']:8.4f} {at['ratio']:9.2f} {at['cpu_ratio']:6.2f} "
                     f"{r['attention_share']:10.2f} " + (f"{m:9.1f}" if m is not None else f"{'-':>9}"))
    return "\n".join(lines)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--memory-point", nargs=3, metavar=("N", "KERNEL", "THREADS"), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="one timing pass per thread count")
    parser.add_argument("--rounds", "--steps", type=int, default=6, help="timed steps per kernel")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory pass")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="3 timed steps per kernel")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per child process")
    parser.add_argument("--json", type=Path, help="result file (default: benchmarks/results/train_cpu_<date>.json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = 3
    overrides = parse_overrides(args.set)

    if args.time_child:
        print(_bench.child_json(time_pass(args, overrides)))
        return
    if args.memory_point:
        n, kernel, threads = args.memory_point
        print(_bench.child_json(memory_point(int(n), kernel, int(threads), overrides)))
        return

    record = _bench.header("bench_train_cpu", argv)
    forward = ["--n", *map(str, args.n), "--rounds", str(args.rounds), "--warmup", str(args.warmup), "--set", *args.set]
    rows, errors, config = [], [], None
    for threads in args.threads:
        print(f"timing pass, {threads} thread(s)", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        res = _bench.run_child([__file__, "--time-child", str(threads), *forward], _bench.child_env(threads),
                               args.timeout)
        if "error" in res:
            errors.append({"pass": "time", "threads": threads, "error": res["error"]})
        rows += res.get("rows", [])
        config = res.get("config", config)
        print(f"  {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    memory = []
    if not args.no_memory:
        for n in args.n:
            for kernel in names.kernel_names():
                res = _bench.run_child([__file__, "--memory-point", str(n), kernel, "1", "--set", *args.set],
                                       _bench.child_env(1, memory=True), args.timeout)
                memory.append({"n": n, "kernel": kernel, "threads": 1, **res})
    table = _table(rows, memory)
    print(table)
    for e in errors:
        print(f"error: {e}")
    path = _bench.write_json("train_cpu", {**record, "config": config, "time": rows, "memory": memory,
                                           "errors": errors, "table": table.splitlines()}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
