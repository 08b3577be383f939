"""Building a run's parts from its configuration: the device, the benchmark (Section 3.1, App. D), the model
(Section 3.3, Table 3) and the optimizer with its schedule (Table 3)."""

from __future__ import annotations

import torch

from heavytail.harness.config import RunConfig


def resolve_device(cfg: RunConfig) -> torch.device:
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but torch sees no CUDA device; use device='cpu' or 'auto'")
    return torch.device(cfg.device)


def build_benchmark(cfg: RunConfig):
    from heavytail.science.operators import Benchmark

    return Benchmark(cfg.benchmark, cfg.marginals, tail_regime=cfg.tail_regime)


def build_model(cfg: RunConfig, device: torch.device | str = "cpu") -> torch.nn.Module:
    from heavytail.science.model import MeasureTransformer, ModelConfig

    return MeasureTransformer(ModelConfig(**cfg.model_kwargs())).to(device)


def build_optimizer(cfg: RunConfig, model: torch.nn.Module):
    """AdamW with a linear warmup into a cosine decay to zero at ``cfg.horizon``, from torch's own schedulers
    (Table 3)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    decay = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, cfg.horizon - cfg.warmup_steps))
    if cfg.warmup_steps == 0:
        return optimizer, decay
    warmup = torch.optim.lr_scheduler.LinearLR(
        optimizer, start_factor=1.0 / (cfg.warmup_steps + 1), end_factor=1.0, total_iters=cfg.warmup_steps
    )
    schedule = torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, decay], milestones=[cfg.warmup_steps])
    return optimizer, schedule
