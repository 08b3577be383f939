"""What the collapse ladder's onset watch costs a training step: steps with per-block attention statistics and
gradient norms (``track_attention`` with ``dense_log_window``, computed at every step so the steps before an onset
can be written at full resolution) next to the same steps without them, interleaved.

The configurations are the ladder's own (``params/grid_collapse_ladder.yaml``, the R4 cells by default: bf16
autocast, symlog, softmax through SDPA and log-ELU), built as ``bench_train_cpu.py`` builds its steppers, under
the training loop's contexts (subnormals flushed as the grid sets them, float32 matmul precision). Each kernel gets
two models, optimizers and data streams from the same seed, so both modes see the same batches. Besides whole
steps, each statistic the model computes per block (``KernelSelfAttention.forward`` with ``stats``) is timed
alone on one block's queries and keys, to say where the cost lies:

- ``weights``: the ``stats_rows x N`` weight matrix (largest weight, entropy, absorption);
- ``max_abs_score``: the largest |S| of eq. 1 over all N query rows (a no-grad N x N score pass);
- ``spectral_norm``: the spectral norm of W_Q W_K^T / sqrt(d_h) (an SVD of a D x D matrix per head).

    python benchmarks/bench_ladder_logging.py                  # R4 cells, one thread, 8 rounds
    python benchmarks/bench_ladder_logging.py --rung R3 --rounds 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import _bench
import torch

from bench_train_cpu import _Stepper
from heavytail.harness import cpu_bf16
from heavytail.harness.train import draw_batch, training_step
from heavytail.harness.precision import float32_matmuls, subnormals
from heavytail.pipeline.grid_file import GridSpec
from heavytail.science.attention import attention_weights, max_abs_score
from heavytail.science.metrics import energy_distance
from heavytail.science.transforms import symlog

GRID = _bench.ROOT / "params" / "grid_collapse_ladder.yaml"
# The ladder's cells per rung, as (precision, symlog); see heavytail.studies.collapse.ladder.RUNGS.
RUNG_CELLS = {"R2": ("float32", False), "R3": ("bf16", False), "R4": ("bf16", True)}
MODES = ("plain", "tracked")


def ladder_configs(rung: str, seed: int = 0, **overrides) -> dict[str, object]:
    """The ladder's configurations of ``rung`` for ``seed``, by ``<kernel>-<backend>``; ``overrides`` replace keys
    (the tests shrink the model)."""
    precision, symlog = RUNG_CELLS[rung]
    out = {}
    for cfg in GridSpec.from_yaml(GRID).configs:
        if cfg.seed == seed and cfg.precision == precision and cfg.symlog == symlog:
            out[f"{cfg.kernel}-{cfg.attention_backend}"] = cfg.replace(**overrides) if overrides else cfg
    return out


class _Tracked(_Stepper):
    """A stepper whose step computes the ladder's per-block statistics (the list the training loop logs)."""

    def step(self) -> None:
        x, y = draw_batch(self.bench, self.cfg, self.gen, self.device)
        training_step(self.model, self.optimizer, x, y, self.cfg, self.device, energy_distance, stats=[])
        self.optimizer.step()


def _statistic_fns(stepper: _Stepper) -> dict[str, callable]:
    """Each per-block statistic alone, on block 0's queries and keys of one batch (float32, as the model computes
    them outside autocast)."""
    cfg, model = stepper.cfg, stepper.model
    x, _ = draw_batch(stepper.bench, cfg, torch.Generator().manual_seed(cfg.seed), stepper.device)
    attn = model.blocks[0].attn
    with torch.no_grad():
        h = model.w_in(symlog(x) if model.cfg.symlog else x)  # block 0's input, as MeasureTransformer.forward
        q, k = attn._heads(attn.q(h)).float(), attn._heads(attn.k(h)).float()
    rows = model.cfg.stats_rows

    @torch.no_grad()
    def weights():
        w = attention_weights(q[..., :rows, :], k, attn.kernel)
        (w * torch.log(w.clamp_min(torch.finfo(w.dtype).tiny))).sum(-1)

    @torch.no_grad()
    def scores():
        max_abs_score(q, k, model.cfg.tile_elements)

    return {"weights": weights, "max_abs_score": scores, "spectral_norm": attn.score_form_norm}


def measure(rung: str, rounds: int, warmup: int, threads: int, **overrides) -> dict:
    threads = _bench.set_threads(threads)
    configs = ladder_configs(rung, **overrides)
    rows = []
    for name, cfg in configs.items():
        steppers = {"plain": _Stepper(cfg), "tracked": _Tracked(cfg)}
        with float32_matmuls(cfg, torch.device("cpu")), subnormals(cfg):
            steps = _bench.interleaved({m: s.step for m, s in steppers.items()}, rounds, warmup)
            parts = _bench.interleaved(_statistic_fns(steppers["plain"]), rounds, warmup)
        summary = _bench.summarize(steps, "plain")
        n_blocks = cfg.n_blocks
        rows.append({
            "cell": name, "config": cfg.to_dict(), "steps": steps, "summary": summary,
            # per step: every block computes each statistic once
            "statistics_per_step_s": {p: n_blocks * statistics.median(t["wall"]) for p, t in parts.items()},
        })
        print(f"{name}: done", file=sys.stderr, flush=True)
    # what a bf16 rung's cost rests on: whether this CPU's bf16 matmuls are native, and the two rates
    return {"rung": rung, "threads": threads, "rounds": rounds, "rows": rows, "cpu_native_bf16": cpu_bf16.native(),
            "matmul_rates": {"size": 512, **cpu_bf16.matmul_rates(size=512)}}


def table(result: dict) -> str:
    m = result["matmul_rates"]
    lines = [f"native bf16 matmuls: {result['cpu_native_bf16']}; a {m['size']}^3 matmul: {m['float32_gflops']:.1f} GFLOP/s "
             f"in float32, {m['bf16_gflops']:.1f} in bf16",
             f"ladder rung {result['rung']}, {result['threads']} thread(s), {result['rounds']} rounds; wall s per step",
             f"{'cell':<16} {'plain s':>8} {'tracked s':>9} {'tracked/plain':>13} {'(cpu)':>6}   "
             "statistics per step, all blocks: weights / max|S| / spectral norm (s)"]
    for r in result["rows"]:
        s, parts = r["summary"], r["statistics_per_step_s"]
        lines.append(f"{r['cell']:<16} {s['plain']['median_s']:8.3f} {s['tracked']['median_s']:9.3f} "
                     f"{s['tracked']['ratio']:13.2f} {s['tracked']['cpu_ratio']:6.2f}   "
                     f"{parts['weights']:.3f} / {parts['max_abs_score']:.3f} / {parts['spectral_norm']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rung", choices=sorted(RUNG_CELLS), default="R4")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--json", type=Path, help="result file (default: benchmarks/results/ladder_logging_<date>.json)")
    args = p.parse_args(argv)
    record = _bench.header("bench_ladder_logging", argv)
    result = measure(args.rung, args.rounds, args.warmup, args.threads)
    text = table(result)
    print(text)
    path = _bench.write_json("ladder_logging", {**record, **result, "table": text.splitlines()}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
