"""How much memory a run needs, estimated from its configuration before it starts, and the refusal when it cannot fit.

Training keeps, per block, the activations backward needs (linear in N) and, on the dense backend only, the whole
score matrix with its weights and their gradient (3 float32 numbers per score: quadratic in N); ``tiled`` holds one
checkpointed tile at a time and ``auto`` / ``flash`` / ``flex`` / ``sdpa`` a few numbers per row. The energy distance
of eq. 10 reduces its N x N distances in fused row blocks (linear in N). Evaluation holds one block's activations and,
on dense, the scores of ``eval_batch_trials`` trials at ``eval_n_points``. The estimate is the larger of training and
evaluation. Measured against the peak resident memory of one training step (N = 4096, 4 trials, d = 32, 2 blocks):
dense 1.8 GB estimated for 2.1 GB used, auto 0.15 GB for 0.16 GB; enough to refuse a run that asks for many times the
machine (a dense N = 200,000 asks for hundreds of TB), not one that fits. Torch-free: the grid process reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from heavytail.harness.config import RunConfig

FLOAT = 4  # bytes per float32
TILE_ELEMENTS = 2**22  # heavytail.science.attention.DEFAULT_TILE_ELEMENTS (not imported: that module loads torch)


@dataclass(frozen=True)
class Estimate:
    total: int  # bytes
    attention: int  # of which the score matrices
    phase: str  # "training" or "evaluation", whichever needs more


def _phase(trials: int, n: int, cfg: RunConfig, grad: bool) -> tuple[int, int]:
    d, f, blocks, heads = cfg.d_model, cfg.d_ff, cfg.n_blocks, cfg.n_heads
    kept = blocks if grad else 1  # without gradients one block's tensors live at a time
    activations = kept * trials * n * (24 * d + 6 * f) * FLOAT  # measured: 2x the block's own tensors
    scores = trials * heads * n * n
    if cfg.attention_backend == "dense":
        attention = kept * scores * FLOAT * (3 if grad else 2)
    elif cfg.attention_backend == "tiled":
        attention = 3 * min(scores, TILE_ELEMENTS) * FLOAT
    else:
        attention = 0  # a few numbers per row, in the activations' order
    return activations + attention, attention


def estimate(cfg: RunConfig, n: int | None = None) -> Estimate:
    """``cfg``'s estimate, or with ``n`` points both trained and evaluated."""
    train, train_attention = _phase(cfg.trials_per_step, n or cfg.n_points, cfg, grad=True)
    evaluation, eval_attention = _phase(min(cfg.eval_batch_trials, cfg.eval_trials), n or cfg.eval_n_points, cfg,
                                        grad=False)
    if train >= evaluation:
        return Estimate(train, train_attention, "training")
    return Estimate(evaluation, eval_attention, "evaluation")


def machine_memory() -> int | None:
    """This machine's memory in bytes, or its cgroup's limit when lower (a container, a SLURM allocation)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n < 1e11 else f"{n / 1e9:,.0f} GB"


def _largest_n(cfg: RunConfig, limit: int) -> int:
    """The largest N (training and evaluation alike) whose estimate fits ``limit``, by bisection."""
    lo, hi = 1, max(cfg.n_points, cfg.eval_n_points)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate(cfg, mid).total <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def refusal(cfg: RunConfig, limit: int | None, where: str = "this machine") -> str | None:
    """Why ``cfg`` cannot fit ``limit`` bytes (one line: the estimate and what fits), or None when it fits."""
    if limit is None:
        return None
    need = estimate(cfg)
    if need.total <= limit:
        return None
    fits = _largest_n(cfg, limit)
    advice = f"N up to {fits:,} fits"
    if need.attention > need.total // 2:
        advice += (f" with attention_backend={cfg.attention_backend!r}; attention_backend='auto' or 'flash' keeps "
                   f"memory linear in N")
    return (f"{cfg.name} needs about {_gb(need.total)} for its {need.phase} (N = {cfg.n_points:,} trained, "
            f"{cfg.eval_n_points:,} evaluated, attention_backend={cfg.attention_backend!r}) but {where} has "
            f"{_gb(limit)}: {advice}")


def check(cfg: RunConfig, limit: int | None = None, where: str = "this machine") -> None:
    """Raise ValueError (one line) when ``cfg`` cannot fit ``limit`` (default: this machine's memory)."""
    why = refusal(cfg, machine_memory() if limit is None else limit, where)
    if why:
        raise ValueError(why)
