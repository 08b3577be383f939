"""Hand-built run summaries for the studies' tests: a test names the parts its claim reads (configuration keys,
ratio, collapse label, trace) and :func:`complete` fills the rest of what a run record requires
(:data:`heavytail.studies.run_record.RUN_KEYS`, :data:`~heavytail.studies.run_record.CONFIG_KEYS`) with
RunConfig's defaults and neutral values, so a test says only what it is about."""

from __future__ import annotations

from typing import Any

from heavytail.harness.config import RunConfig
from heavytail.studies.run_record import CONFIG_KEYS

_DEFAULTS = RunConfig().to_dict()


def complete(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` with every part a run record requires: configuration keys it lacks at RunConfig's defaults, a name
    from its kernel and seed, a median ratio of 1, the mean equal to the median and an ``ok`` label."""
    config = {**{k: _DEFAULTS[k] for k in CONFIG_KEYS}, **run.get("config", {})}
    median = run.get("median", {"ratio": 1.0})
    collapse = {"label": "ok", "fraction": 0.0, **run.get("collapse", {})}
    return {**run, "name": run.get("name", f"{config['kernel']}-{config['seed']}"), "config": config,
            "median": median, "mean": run.get("mean", median), "collapse": collapse}
