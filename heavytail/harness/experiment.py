"""One configuration's unit of work: train (or resume) it and evaluate it, into its run folder.

What notebook 04 executes once per grid configuration, and what a script calls for one run. Training
resumes from the folder's last checkpoint and refuses a folder that holds another run
(:mod:`heavytail.harness.train`); an evaluation already in the folder is reused when it belongs to this run
(the staleness rule of :mod:`heavytail.harness.rundir`), and made otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from heavytail.harness.config import RunConfig
from heavytail.harness.rundir import RunDir


@dataclass(frozen=True)
class Outcome:
    """What one unit of work left in its run folder."""

    config: RunConfig
    run: RunDir
    state_before: str  # 'new', 'resumable from step_XXXXXXXX' or 'complete' (RunDir.state)
    results: Mapping[str, Any]  # results.json
    evaluated_now: bool
    log: tuple[Mapping[str, Any], ...]  # metrics.jsonl

    @property
    def n_skipped(self) -> int:
        """Training steps skipped as non-finite (Table 3)."""
        return int(self.log[-1]["n_skipped"]) if self.log else 0


def run_configuration(config: "RunConfig | Mapping[str, Any]", run_dir: "str | os.PathLike", *,
                      floor_cache: "str | os.PathLike | None" = None, quiet: bool = True,
                      device: str | None = None) -> Outcome:
    """Train (or resume) ``config`` in ``run_dir``, then evaluate it there (``results.json``).

    ``config``: a RunConfig or a mapping of its keys (validated here, before any compute).
    ``floor_cache``: folder of the shared sampling-floor pools (default: ``<run_dir>/../_floors``).
    ``device``: where to evaluate (default: the configuration's device, 'auto' resolved).
    """
    from heavytail.harness.evaluate import evaluate  # torch loads only when there is work to do
    from heavytail.harness.build import resolve_device
    from heavytail.harness.train import train

    cfg = config if isinstance(config, RunConfig) else RunConfig.from_dict(config)
    run = RunDir(run_dir)
    before = run.state()
    train(cfg, run.path, quiet=quiet)
    if run.has_results() and run.stale_results() is None:
        results, now = run.results(), False
    else:
        device = device if device is not None else str(resolve_device(cfg))
        results, now = evaluate(run.path, floor_cache=floor_cache, quiet=quiet, device=device), True
    return Outcome(config=cfg, run=run, state_before=before, results=results, evaluated_now=now,
                   log=tuple(run.training_log()))


def default_run_dir(cfg: RunConfig, report: str = "scratch", root: "str | os.PathLike | None" = None) -> Path:
    """Where an interactive run of ``cfg`` lives: ``<repo>/outputs/<report>/<configuration name>/``."""
    from heavytail.harness.artifacts import repo_root

    return Path(root) if root is not None else repo_root() / "outputs" / report / cfg.name
