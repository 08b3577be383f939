"""CPU training throughput per kernel at the report's CPU sizes.

Times whole training steps (data draw, forward, energy-distance loss, backward, clip, AdamW) with the
same functions ``heavytail.harness.train`` uses, for each attention kernel, and prints steps per second with
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

from heavytail.harness.config import KERNELS, RunConfig
from heavytail.science.metrics import energy_distance
from heavytail.harness.train import build_benchmark, build_model, build_optimizer, draw_batch, parse_overrides, training_step

ROOT = Path(__file__).resolve().parents[1]


def base_config(overrides: dict) -> RunConfig:
    grid = ROOT / "params" / "grid_cpu.yaml"
    base = (yaml.safe_load(grid.read_text()) or {}).get("base", {}) if grid.exists() else {}
    return RunConfig.from_dict({**base, **overrides})


class _Stepper:
    """One kernel's model, optimizer and data stream; ``step()`` times one whole training step."""

    def __init__(self, cfg: RunConfig):
        torch.manual_seed(cfg.seed)
        self.cfg, self.device = cfg, torch.device("cpu")
        self.model = build_model(cfg, self.device)
        self.optimizer, _ = build_optimizer(cfg, self.model)
        self.bench = build_benchmark(cfg)
        self.gen = torch.Generator().manual_seed(cfg.seed)

    def step(self) -> float:
        t0 = time.perf_counter()
        x, y = draw_batch(self.bench, self.cfg, self.gen, self.device)
        training_step(self.model, self.optimizer, x, y, self.cfg, self.device, energy_distance)
        self.optimizer.step()
        return time.perf_counter() - t0


def time_kernels(cfg: RunConfig, steps: int, warmup: int) -> dict[str, list[float]]:
    """Step times per kernel, the kernels taking turns step by step: a noisy neighbour slows every
    kernel alike instead of whichever happened to run while it was busy."""
    steppers = {kernel: _Stepper(cfg.replace(kernel=kernel)) for kernel in KERNELS}
    for stepper in steppers.values():
        for _ in range(warmup):  # compiles the flash blocks, fills the allocator
            stepper.step()
    times: dict[str, list[float]] = {kernel: [] for kernel in steppers}
    for _ in range(steps):
        for kernel, stepper in steppers.items():
            times[kernel].append(stepper.step())
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
    rows = [(kernel, statistics.median(t)) for kernel, t in time_kernels(cfg, steps, args.warmup).items()]
    softmax = rows[0][1]
    print(f"{'kernel':<12} {'s/step':>8} {'steps/s':>8} {'time vs softmax':>16}")
    for kernel, med in rows:
        print(f"{kernel:<12} {med:8.3f} {1 / med:8.2f} {med / softmax:15.2f}x")


if __name__ == "__main__":
    main()
