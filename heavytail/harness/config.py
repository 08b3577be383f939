"""One run's configuration: a frozen dataclass validated once, before any compute.

The defaults are the paper's recipe (Table 3, App. E.3): a six-block post-norm transformer with
D = 256, feed-forward width 512, one head, AdamW at lr 1e-3 with no weight decay, a cosine schedule
with warmup, gradient clipping at 1.0, non-finite steps skipped, 50,000 steps of 64 trials x 16384
points, evaluated on 128 trials at N = 16384 with 2000 bootstrap resamples. Defaults that differ from
the paper's, or that it does not state, are listed in :data:`NOT_TABLE3` (the summary prints them next
to Table 3): the precision (float32 for every kernel, a deliberate common precision; the paper trained
under bf16 autocast), the warmup length and the collapse threshold.

Papermill passes parameters as a dict, the command line as YAML: both go through
:meth:`RunConfig.from_dict`, which rejects unknown keys and invalid values by name.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from heavytail import names
from heavytail.names import (BACKENDS, BENCHMARKS, DEVICES, ENERGY_BACKENDS, KERNELS, MARGINALS, NORMS, PRECISIONS,
                             TAIL_REGIMES)

__all__ = ["RunConfig", "PACING_KEYS", "EVALUATION_KEYS", "NOT_TABLE3", "BACKENDS", "BENCHMARKS", "DEVICES", "KERNELS", "MARGINALS", "NORMS",
           "PRECISIONS", "TAIL_REGIMES"]
# Keys that change how a run is paced, placed or logged, never the numbers it produces: a run folder may
# be resumed under other values, and runs differing only in these are the same configuration.
PACING_KEYS = frozenset({"checkpoint_every", "log_every", "eval_batch_trials", "device", "track_attention",
                         "dense_log_window"})
SEED_MAX = 2**32 - 1
# Keys that change only how finished weights are scored (App. H.2, J.1): a run's evaluation may be redone under other
# values (more trials, another N) without retraining, so the binding of config and weights leaves them out.
EVALUATION_KEYS = frozenset({"eval_trials", "eval_n_points", "eval_at_train_n", "bootstrap_resamples", "hill_phi",
                             "collapse_spread"})
# Defaults that are not the paper's Table 3 value: key -> what the paper used. float32 precision is a
# deliberate common precision for every kernel (the paper trained under bf16 autocast, App. E.4); the
# warmup length and the collapse threshold are ours, since the paper states neither.
NOT_TABLE3 = {
    "precision": "bf16 autocast",
    "warmup_steps": "not stated",
    "collapse_spread": "not stated",
}


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines one training run and its evaluation (Table 3 defaults)."""

    # task (Section 3.2, App. D)
    benchmark: str = "sheared_swap"
    marginals: str = "mirrored_pareto"
    # Pi_eta's tail index ranges of the mirrored Pareto marginals (Section 3.2.1): a row of
    # heavytail.names.TAIL_REGIMES; "paper" is the paper's, a in [2, 3] and [1 + eps, 2] on the two latent axes.
    tail_regime: str = "paper"
    # model (Section 3.3, App. E.1, Table 3)
    kernel: str = "softmax"
    norm: str = "post"
    symlog: bool = False
    d_model: int = 256
    n_blocks: int = 6
    d_ff: int = 512
    n_heads: int = 1
    alpha_rs: float = 4.899
    attention_backend: str = "auto"
    # Interventions on the attention (none by default, so Table 3's model is unchanged): ``split_kernel`` computes
    # eq. 7 with another registered kernel in block ``split_block`` only (block 0 is the one that sees the raw
    # heavy-tailed tokens); ``qk_norm`` layer-normalises each head's queries and keys before the score of eq. 1.
    split_kernel: str = ""
    split_block: int = -1
    qk_norm: bool = False
    # optimisation (Table 3)
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 1000  # not stated in the paper: 2 % of 50,000 steps, our choice
    # The cosine schedule's horizon; 0: ``steps``. Training the first ``steps`` of a longer schedule follows the
    # paper's learning rate over those steps exactly (its 50,000-step schedule is near its peak at step ~3,500,
    # where its softmax runs collapsed, App. I), which a schedule compressed into ``steps`` would not.
    schedule_steps: int = 0
    grad_clip: float = 1.0
    skip_nonfinite: bool = True
    loss_p: float = 1.0
    # How eq. 10 is computed in training and evaluation (heavytail.names.ENERGY_BACKENDS): both accumulate in float64
    # and differ by rounding only. "eager" skips torch.compile, whose few seconds per process a short run never
    # earns back; it changes the last bits of the numbers, so it is part of the configuration.
    energy_backend: str = "auto"
    steps: int = 50_000
    n_points: int = 16_384
    trials_per_step: int = 64
    # evaluation (App. H.2, J.1)
    eval_trials: int = 128
    eval_n_points: int = 16_384
    bootstrap_resamples: int = 2000
    hill_phi: float = 0.1
    # Also score the model at its training N (besides eval_n_points), so a study that varies N can compare
    # runs at one common N and each at the N it was trained on (results.json's "at_train_n").
    eval_at_train_n: bool = False
    # A trial's output has collapsed when, on some axis, its interquartile range is below this
    # fraction of the target's (App. I shows collapsed outputs concentrated near one location).
    collapse_spread: float = 0.05  # our threshold; the paper gives no number
    # run
    seed: int = 0
    device: str = "auto"
    precision: str = "float32"
    # TensorFloat-32 matmuls and convolutions on CUDA (torch.backends.cuda.matmul.allow_tf32 and
    # torch.backends.cudnn.allow_tf32), set for training and evaluation. Off: "float32" means IEEE float32
    # (23 mantissa bits); on: float32 matmuls round their inputs to TF32's 10 and run at the tensor cores'
    # rate. It changes numbers, so it is part of the configuration. No effect on CPU.
    tf32: bool = False
    # Flush subnormal floats to zero (torch.set_flush_denormal) while training and evaluating. Softmax in
    # float32 on heavy-tailed batches produces subnormal weights, and subnormal arithmetic runs up to ~20x
    # slower on x86 (benchmarks/bench_subnormals.py). It changes numbers (values below 1.2e-38 become 0),
    # so it is part of the configuration, recorded with every run; off by default, as every map before it.
    flush_subnormals: bool = False
    # Convergence (stopping rule, heavytail.harness.stopping): every ``val_every`` steps the model is scored on
    # a fixed validation set of ``val_trials`` trials at the training N (its own stream, never the training or
    # evaluation draws); with ``stop_tolerance`` > 0 the run stops once the best validation score of the last
    # fifth of the steps so far improves on the best before it by less than that fraction, and not before
    # ``stop_min_steps``. ``steps`` is then the cap. 0 / 0.0: no validation, train to ``steps``.
    val_every: int = 0
    val_trials: int = 16
    stop_tolerance: float = 0.0
    stop_min_steps: int = 0
    # Keep the weights of the best validation score so far (``model_best.pt``) and evaluate them as well as the
    # final weights: a fixed budget's result is then the best validated model, not wherever the last step left
    # it (results.json's "best_weights"). Needs ``val_every`` > 0.
    keep_best: bool = False
    checkpoint_every: int = 500
    log_every: int = 10
    eval_batch_trials: int = 8  # trials per forward pass at evaluation: memory, not results (each trial draws from its own stream)
    # Log per-block attention statistics and gradient norms (App. I, future work): diagnostics only.
    track_attention: bool = False
    # With track_attention: per-block statistics at every step, the last ``dense_log_window`` steps kept in
    # memory and written when a batch collapses after a healthy stretch, and every step logged for the
    # ``dense_log_window`` steps after it, so the steps around a collapse onset are at full resolution (App. I).
    dense_log_window: int = 0

    def __post_init__(self) -> None:
        _validate(self)

    # ----------------------------------------------------------------------------- loading
    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None = None, **overrides: Any) -> "RunConfig":
        """Build from a mapping (papermill parameters, a YAML section); unknown keys are errors."""
        merged = {**(values or {}), **overrides}
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(merged) - allowed)
        if unknown:
            raise ValueError(
                f"unknown configuration key(s) {unknown}; allowed keys are: {', '.join(sorted(allowed))}"
            )
        typed = {}
        for f in fields(cls):
            if f.name in merged:
                typed[f.name] = _coerce(f.name, merged[f.name], type(getattr(cls, f.name)))
        return cls(**typed)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> "RunConfig":
        from heavytail.cli import read_yaml  # a YAML syntax error: one line naming the file and line

        data = read_yaml(path) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of configuration keys, got {type(data).__name__}")
        return cls.from_dict(data, **overrides)

    @classmethod
    def with_defaults(cls, recorded: Mapping[str, Any]) -> dict[str, Any]:
        """A recorded configuration with the defaults of the settings added since it was recorded (the run took
        them then), so that it compares equal to a new run's of the same configuration."""
        return {**_defaults(), **recorded}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def replace(self, **changes: Any) -> "RunConfig":
        return RunConfig.from_dict(self.to_dict(), **changes)

    # --------------------------------------------------------------------------- derived
    @property
    def horizon(self) -> int:
        """The steps the learning-rate schedule spans (``schedule_steps``, or ``steps`` when 0)."""
        return self.schedule_steps or self.steps

    @property
    def hill_k(self) -> int:
        """k = floor(phi N) at the evaluation size (eq. 38, :func:`heavytail.names.hill_k`)."""
        return names.hill_k(self.eval_n_points, self.hill_phi)

    @property
    def name(self) -> str:
        """A short, filesystem-safe label of the ablation axes."""
        transform = "symlog" if self.symlog else "none"
        return f"{self.benchmark}-{self.marginals}-{self.kernel}-{self.norm}-{transform}-seed{self.seed}"

    def model_kwargs(self) -> dict[str, Any]:
        """The :class:`heavytail.science.model.ModelConfig` arguments this run uses: every setting of the model
        that a run states (the model has no defaults of its own for them). The kernel goes out resolved (a
        :class:`heavytail.science.kernels.Kernel`): its name was checked once, here, and is not looked up again
        on its way to the attention call."""
        from heavytail.science.kernels import get_kernel  # lazy: validating a grid file needs no torch

        return dict(
            d_model=self.d_model,
            n_blocks=self.n_blocks,
            d_ff=self.d_ff,
            n_heads=self.n_heads,
            kernel=get_kernel(self.kernel),
            norm=self.norm,
            alpha_rs=self.alpha_rs,
            symlog=self.symlog,
            backend=self.attention_backend,
            split_kernel=get_kernel(self.split_kernel) if self.split_kernel else None,
            split_block=self.split_block if self.split_kernel else None,
            qk_norm=self.qk_norm,
        )


@functools.lru_cache(maxsize=1)
def _defaults() -> Mapping[str, Any]:
    return MappingProxyType(RunConfig().to_dict())


def _coerce(name: str, value: Any, kind: type) -> Any:
    """YAML and papermill hand over strings or ints where floats are meant; accept those, nothing else."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"{name} must be true or false, got {value!r}")
    if kind is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        return int(value)
    if kind is float:
        if isinstance(value, bool):
            raise ValueError(f"{name} must be a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def _positive(cfg: RunConfig, *keys: str, allow_zero: bool = False) -> None:
    for name in keys:
        value = getattr(cfg, name)
        bad = (value < 0) if allow_zero else (value <= 0)
        if not math.isfinite(value) or bad:
            bound = ">= 0" if allow_zero else "> 0"
            raise ValueError(f"{name}={value!r} is not allowed; it must be finite and {bound}")


def _validate_split(cfg: RunConfig) -> None:
    """``split_kernel`` / ``split_block``: both or neither; another registered kernel than ``kernel``; a block of a
    model of two blocks or more (a one-block model has no block structure to split)."""
    if not cfg.split_kernel:
        if cfg.split_block != -1:
            raise ValueError(f"split_block={cfg.split_block} needs split_kernel (the kernel that block computes eq. 7 "
                             "with); leave split_block unset otherwise")
        return
    _choice("split_kernel", cfg.split_kernel, names.kernel_names())
    if cfg.split_kernel == cfg.kernel:
        raise ValueError(f"split_kernel={cfg.split_kernel!r} is the run's kernel: a split needs another kernel")
    if cfg.n_blocks < 2:
        raise ValueError(f"split_kernel={cfg.split_kernel!r} needs n_blocks >= 2: a model of n_blocks={cfg.n_blocks} "
                         "has no block structure to split")
    if not 0 <= cfg.split_block < cfg.n_blocks:
        raise ValueError(f"split_block={cfg.split_block} is outside the model: its blocks are 0-{cfg.n_blocks - 1}")


def _validate(cfg: RunConfig) -> None:
    _choice("benchmark", cfg.benchmark, BENCHMARKS)
    _choice("marginals", cfg.marginals, MARGINALS)
    _choice("tail_regime", cfg.tail_regime, tuple(TAIL_REGIMES))
    _choice("kernel", cfg.kernel, names.kernel_names())
    _choice("norm", cfg.norm, NORMS)
    _choice("device", cfg.device, DEVICES)
    _choice("precision", cfg.precision, PRECISIONS)
    _choice("attention_backend", cfg.attention_backend, BACKENDS)
    _choice("energy_backend", cfg.energy_backend, ENERGY_BACKENDS)
    why = names.task_refusal(cfg.benchmark, cfg.marginals)
    if why is not None:
        raise ValueError(f"benchmark={cfg.benchmark!r} with marginals={cfg.marginals!r} is not allowed: {why}; "
                         f"{cfg.benchmark} takes marginals {', '.join(names.BENCHMARK_MARGINALS[cfg.benchmark])}")
    why = names.regime_refusal(cfg.marginals, cfg.tail_regime)
    if why is not None:
        raise ValueError(why)
    _positive(cfg, "d_model", "n_blocks", "d_ff", "n_heads", "lr", "grad_clip", "steps", "n_points",
              "trials_per_step", "eval_trials", "eval_n_points", "bootstrap_resamples",
              "checkpoint_every", "log_every", "eval_batch_trials", "collapse_spread")
    _positive(cfg, "alpha_rs")  # the residual scale divides the residual stream (App. E.1)
    _positive(cfg, "weight_decay", "warmup_steps", "schedule_steps", "seed", "val_every", "val_trials", "stop_tolerance",
              "stop_min_steps", "dense_log_window", allow_zero=True)
    if cfg.seed > SEED_MAX:  # numpy's global seed, from which a run's streams derive, takes 32 bits
        raise ValueError(f"seed={cfg.seed} is not allowed; it must lie in 0-{SEED_MAX}")
    if cfg.val_trials < 1:
        raise ValueError(f"val_trials={cfg.val_trials} is not allowed; the validation set needs at least one trial")
    if not cfg.stop_tolerance < 1:
        raise ValueError(f"stop_tolerance={cfg.stop_tolerance} is not allowed; it is a fraction in [0, 1)")
    if cfg.stop_tolerance > 0 and cfg.val_every == 0:
        raise ValueError(f"stop_tolerance={cfg.stop_tolerance} needs val_every > 0: the stopping rule reads the "
                         "validation scores")
    if cfg.keep_best and cfg.val_every == 0:
        raise ValueError("keep_best=true needs val_every > 0: the best weights are the best validation score's")
    if cfg.val_every > cfg.steps:
        raise ValueError(f"val_every={cfg.val_every} is larger than steps={cfg.steps}: no validation would run")
    if cfg.stop_min_steps > cfg.steps:
        raise ValueError(f"stop_min_steps={cfg.stop_min_steps} is larger than the step cap steps={cfg.steps}")
    if cfg.dense_log_window and not cfg.track_attention:
        raise ValueError(f"dense_log_window={cfg.dense_log_window} needs track_attention=true: the window holds "
                         "the per-block attention statistics")
    why = names.backend_refusal(cfg.attention_backend, cfg.kernel)
    if why is not None:
        raise ValueError(f"attention_backend={cfg.attention_backend!r} {why}")
    _validate_split(cfg)
    if cfg.attention_backend == "flex" and cfg.device == "cpu":
        raise ValueError("attention_backend='flex' cannot train on device='cpu': flex_attention has no CPU backward; "
                         "use attention_backend='auto', 'flash' or 'tiled' on the CPU")
    if cfg.d_model % cfg.n_heads:
        raise ValueError(f"d_model={cfg.d_model} must be divisible by n_heads={cfg.n_heads}")
    if not 0 < cfg.loss_p < 2:
        raise ValueError(f"loss_p={cfg.loss_p!r} is not allowed; the energy distance needs p in (0, 2) (eq. 9)")
    # The Hill threshold at every N the run is scored at (eq. 38): eval_n_points, and n_points with eval_at_train_n.
    for key in ("eval_n_points", "n_points") if cfg.eval_at_train_n else ("eval_n_points",):
        try:
            names.hill_k(getattr(cfg, key), cfg.hill_phi)
        except ValueError as err:
            raise ValueError(f"{err} ({key}={getattr(cfg, key)})") from None
    if cfg.n_points < 2 or cfg.eval_n_points < 2:
        raise ValueError("n_points and eval_n_points must be at least 2: an ensemble of one point has no spread")
    if cfg.schedule_steps and cfg.schedule_steps < cfg.steps:
        raise ValueError(f"schedule_steps={cfg.schedule_steps} is shorter than steps={cfg.steps}; the schedule must "
                         "cover every step (0: steps)")
    # The warm-up is part of the schedule, which may run past this run's steps (a run of the first 1,500 steps of a
    # 50,000-step schedule with a 5,000-step warm-up is one); it must end before the schedule does.
    if cfg.warmup_steps >= cfg.horizon and cfg.horizon > 1:
        raise ValueError(f"warmup_steps={cfg.warmup_steps} must be smaller than the schedule's "
                         + (f"schedule_steps={cfg.schedule_steps}" if cfg.schedule_steps else f"steps={cfg.steps}"))
    if cfg.collapse_spread >= 1:
        raise ValueError(f"collapse_spread={cfg.collapse_spread} must lie in (0, 1)")
