"""bf16 autocast on this CPU, torch's own kernels against the float32 emulation (``heavytail.harness.cpu_bf16``), on
the collapse ladder's own cells (R4 by default: bf16 autocast, symlog, softmax through SDPA and log-ELU):

- **speed**: whole training steps through torch's bf16 kernels, through the emulation, and the same cell in
  float32, interleaved, under the training loop's contexts (subnormals flushed as the grid sets them);
- **agreement**: one step's loss and gradients from the same weights and batch through each path. The scale is
  bf16's own effect, float32's gradients against torch's bf16 ones; against it, the emulation's distance from
  torch's path, and torch's path against itself with every weight nudged by a relative 2^-22 (a few float32
  units, invisible to bf16 except where a value sits on a rounding boundary): the distance any rounding flip
  propagated through six blocks gives.

    python benchmarks/bench_bf16_emulation.py                 # R4, one thread, 3 rounds
    python benchmarks/bench_bf16_emulation.py --rung R3 --rounds 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _bench
import torch

from bench_ladder_logging import RUNG_CELLS, ladder_configs
from bench_train_cpu import _Stepper
from heavytail.harness import cpu_bf16
from heavytail.harness.build import build_benchmark, build_model, build_optimizer
from heavytail.harness.train import draw_batch, training_step
from heavytail.harness.precision import float32_matmuls, subnormals
from heavytail.science.metrics import energy_distance

NUDGE = 2.0**-22
PATHS = ("torch", "emulated", "float32")


def _config(cfg, path: str):
    """``cfg`` as ``path`` trains it: ``"float32"`` is the same cell without autocast."""
    return cfg.replace(precision="float32") if path == "float32" else cfg


def _chosen(path: str):
    """The bf16 path to choose for ``path`` (float32 has none; any choice leaves it alone)."""
    return cpu_bf16.chosen(path if path in cpu_bf16.PATHS else "torch")


class _PathStepper(_Stepper):
    """A stepper whose steps take one of :data:`PATHS`."""

    def __init__(self, cfg, path: str):
        super().__init__(_config(cfg, path))
        self.path = path

    def step(self) -> None:
        with _chosen(self.path):
            super().step()


def one_step(cfg, path: str, nudge: float = 0.0) -> tuple[float, torch.Tensor]:
    """The loss and the flattened gradients of the first step of ``cfg`` through ``path``; ``nudge`` multiplies
    every weight by 1 +- nudge (a fixed random sign) first."""
    c = _config(cfg, path)
    torch.manual_seed(c.seed)
    model = build_model(c, torch.device("cpu"))
    optimizer, _ = build_optimizer(c, model)
    if nudge:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + nudge * torch.randn(p.shape, generator=g).sign())
    x, y = draw_batch(build_benchmark(c), c, torch.Generator().manual_seed(c.seed), torch.device("cpu"))
    with _chosen(path):
        _, loss, _ = training_step(model, optimizer, x, y, c, torch.device("cpu"), energy_distance)
    return loss, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def agreement(cfg) -> dict[str, float]:
    with float32_matmuls(cfg, torch.device("cpu")), subnormals(cfg):
        (lt, gt), (le, ge), (lf, gf), (ln, gn) = (one_step(cfg, "torch"), one_step(cfg, "emulated"),
                                                  one_step(cfg, "float32"), one_step(cfg, "torch", NUDGE))
    scale = float((gf - gt).norm())
    return {"loss": {"torch": lt, "emulated": le, "float32": lf, "torch_nudged": ln},
            "grad_float32_vs_torch": scale,
            "grad_emulated_vs_torch": float((ge - gt).norm()) / scale,
            "grad_torch_nudged_vs_torch": float((gn - gt).norm()) / scale,
            "grad_identical_share": float((ge == gt).float().mean())}


def measure(rung: str, rounds: int, warmup: int, threads: int, **overrides) -> dict:
    threads = _bench.set_threads(threads)
    rows = []
    for name, cfg in ladder_configs(rung, **overrides).items():
        steppers = {p: _PathStepper(cfg, p) for p in PATHS}
        with float32_matmuls(cfg, torch.device("cpu")), subnormals(cfg):
            steps = _bench.interleaved({p: s.step for p, s in steppers.items()}, rounds, warmup)
        rows.append({"cell": name, "config": cfg.to_dict(), "steps": steps,
                     "summary": _bench.summarize(steps, "torch"), "agreement": agreement(cfg)})
        print(f"{name}: done", file=sys.stderr, flush=True)
    return {"rung": rung, "threads": threads, "rounds": rounds, "rows": rows, "cpu_native_bf16": cpu_bf16.native(),
            "nudge": NUDGE, "matmul_rates": {"size": 512, **cpu_bf16.matmul_rates(size=512)}}


def table(result: dict) -> str:
    m = result["matmul_rates"]
    lines = [f"native bf16 matmuls: {result['cpu_native_bf16']}; a {m['size']}^3 matmul: {m['float32_gflops']:.1f} "
             f"GFLOP/s in float32, {m['bf16_gflops']:.1f} in bf16 (torch's kernel)",
             f"ladder rung {result['rung']}, {result['threads']} thread(s), {result['rounds']} rounds; wall s per step; "
             "gradient distances over |float32 - torch bf16|",
             f"{'cell':<14} {'torch s':>8} {'emulated s':>10} {'float32 s':>9} {'torch/emul':>10}   "
             f"{'emul-torch':>10} {'nudged torch-torch':>18}"]
    for r in result["rows"]:
        s, a = r["summary"], r["agreement"]
        lines.append(f"{r['cell']:<14} {s['torch']['median_s']:8.3f} {s['emulated']['median_s']:10.3f} "
                     f"{s['float32']['median_s']:9.3f} {1 / s['emulated']['ratio']:10.1f}   "
                     f"{a['grad_emulated_vs_torch']:10.3f} {a['grad_torch_nudged_vs_torch']:18.3f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rung", choices=[r for r, (precision, _) in RUNG_CELLS.items() if precision == "bf16"],
                   default="R4")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", type=Path, help="result file (default: benchmarks/results/bf16_emulation_<date>.json)")
    args = p.parse_args(argv)
    record = _bench.header("bench_bf16_emulation", argv)
    result = measure(args.rung, args.rounds, args.warmup, args.threads)
    text = table(result)
    print(text)
    path = _bench.write_json("bf16_emulation", {**record, **result, "table": text.splitlines()}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
