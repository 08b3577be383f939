"""Shared fixtures: tiny configurations that exercise the real code paths in seconds."""

from __future__ import annotations

import pytest

from heavytail.config import RunConfig

TINY = dict(
    d_model=16, n_blocks=1, d_ff=32, n_points=64, trials_per_step=4, steps=12, warmup_steps=2,
    eval_trials=8, eval_n_points=256, eval_batch_trials=4, bootstrap_resamples=200,
    checkpoint_every=4, log_every=1, kernel="linear_elu", attention_backend="dense",
)


@pytest.fixture
def tiny_cfg() -> RunConfig:
    return RunConfig.from_dict(TINY)
