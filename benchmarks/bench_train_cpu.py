"""CPU training throughput per kernel at the report's CPU sizes.

Times whole training steps (data draw, forward, energy-distance loss, backward, clip, AdamW) with the
same functions ``heavytail.train`` uses, for each attention kernel, and prints steps per second with
the ratio to softmax measured in the same run. Sizes default to the ``base`` of params/grid_cpu.yaml
so the number describes the report's own grid; override with --set key=value.

    python benchmarks/bench_train_cpu.py [--steps 10] [--set n_points=512 d_model=64]

The machine is shared and noisy: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import yaml

from heavytail.config import KERNELS, RunConfig
from heavytail.metrics import energy_distance
from heavytail.train import build_benchmark, build_model, build_optimizer, draw_batch, parse_overrides, training_step

ROOT = Path(__file__).resolve().parents[1]


def base_config(overrides: dict) -> RunConfig:
    grid = ROOT / "params" / "grid_cpu.yaml"
    base = (yaml.safe_load(grid.read_text()) or {}).get("base", {}) if grid.exists() else {}
    return RunConfig.from_dict({**base, **overrides})


def time_steps(cfg: RunConfig, steps: int, warmup: int) -> list[float]:
    torch.manual_seed(cfg.seed)
    device = torch.device("cpu")
    model = build_model(cfg, device)
    optimizer, _ = build_optimizer(cfg, model)
    bench = build_benchmark(cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        x, y = draw_batch(bench, cfg, gen, device)
        _, loss, grad_norm = training_step(model, optimizer, x, y, cfg, device, energy_distance)
        optimizer.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="3 timed steps per kernel")
    args = parser.parse_args()
    steps = 3 if args.quick else args.steps
    cfg = base_config(parse_overrides(args.set))
    print(
        f"threads={torch.get_num_threads()}  N={cfg.n_points}  trials/step={cfg.trials_per_step}  "
        f"D={cfg.d_model}  blocks={cfg.n_blocks}  d_ff={cfg.d_ff}  norm={cfg.norm}  backend={cfg.attention_backend}"
    )
    rows = []
    for kernel in KERNELS:
        med = statistics.median(time_steps(cfg.replace(kernel=kernel), steps, args.warmup))
        rows.append((kernel, med))
    softmax = rows[0][1]
    print(f"{'kernel':<12} {'s/step':>8} {'steps/s':>8} {'time vs softmax':>16}")
    for kernel, med in rows:
        print(f"{kernel:<12} {med:8.3f} {1 / med:8.2f} {med / softmax:15.2f}x")


if __name__ == "__main__":
    main()
