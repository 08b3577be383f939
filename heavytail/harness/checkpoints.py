"""A run's checkpoints and saved weights: writing and reading them, with the random state that makes a resumed run
bitwise equal to an uninterrupted one on CPU, and the refusals for a damaged file or another run's folder. The
folder layout itself is :class:`heavytail.harness.rundir.RunDir`'s."""

from __future__ import annotations

import pickle
import random
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from heavytail.harness.build import build_model
from heavytail.harness.config import RunConfig
from heavytail.harness.rundir import RunDir, config_differences
from heavytail.io import COMPLETE, atomic_torch_save, atomic_write_text, is_complete

KEEP_CHECKPOINTS = 2


def checkpoints(run_dir: Path) -> list[Path]:
    return RunDir(run_dir).checkpoints()


def rng_state(data_gen: torch.Generator) -> dict[str, Any]:
    state = {
        "data": data_gen.get_state(),
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], data_gen: torch.Generator) -> None:
    data_gen.set_state(state["data"])
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: Path, step: int, model, optimizer, scheduler, data_gen, counters) -> None:
    path = RunDir(run_dir).checkpoint_path(step)
    atomic_torch_save(
        {
            "step": step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_state(data_gen),
            "counters": dict(counters),
        },
        path,
    )
    for old in checkpoints(run_dir)[:-KEEP_CHECKPOINTS]:
        old.unlink(missing_ok=True)


# What torch.load and load_state_dict raise for a file that is truncated, overwritten or not a checkpoint of this run.
# A file cut short raises OSError (EINVAL) from torch.load at most cut points.
UNREADABLE = (RuntimeError, EOFError, KeyError, ValueError, TypeError, AttributeError, pickle.UnpicklingError,
               zipfile.BadZipFile, OSError)


def check_config(run_dir: Path, cfg: RunConfig) -> None:
    """A run folder belongs to one configuration: resuming under another would mix two runs."""
    saved_path = RunDir(run_dir).config_path
    if not saved_path.exists():
        atomic_write_text(saved_path, cfg.to_yaml())
        return
    diff = config_differences(RunConfig.from_yaml(saved_path), cfg)
    if diff:
        listing = ", ".join(f"{k}: saved {a!r}, given {b!r}" for k, (a, b) in diff.items())
        raise ValueError(f"{run_dir} holds a run of a different configuration ({listing}); use another folder")


def load_model(run_dir: str | Path, device: str | torch.device = "cpu", *, best: bool = False
               ) -> tuple[torch.nn.Module, RunConfig]:
    """The final model of a completed run (with ``best``: the weights of its best validation score, kept by
    ``keep_best``), in evaluation mode."""
    run_dir = Path(run_dir)
    if not is_complete(run_dir):
        raise FileNotFoundError(f"{run_dir} is not a completed run (no {COMPLETE} marker); train it first")
    cfg = RunDir(run_dir).config()
    if cfg is None:
        raise ValueError(f"{run_dir} has no {RunDir(run_dir).config_path.name}: not a run folder of this package "
                         "(python -m heavytail train writes one)")
    why = RunDir(run_dir).binding_refusal()
    if why is not None:
        raise ValueError(f"{run_dir}: {why}")
    model = build_model(cfg, device)
    path = RunDir(run_dir).best_model_path if best else RunDir(run_dir).model_path
    try:
        model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    except torch.OutOfMemoryError:
        raise
    except UNREADABLE as exc:  # a damaged file or another model's weights: one line naming it
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ValueError(f"{path} is not a readable model of this run ({type(exc).__name__}: {reason}); delete it and "
                         f"{RunDir(run_dir).complete_path.name} to retrain from the last checkpoint") from None
    return model.eval(), cfg
