"""Why softmax fails at Table 3's model, tested by intervention (Sec. 4.2's hypothesis; App. I's future work).

The paper's explanation: "exponential weighting amplifies the influence of extreme samples and contributes to the
observed collapse" (Sec. 4.2). At the ladder's rung R2 softmax's block 0, the only block that sees the raw
heavy-tailed tokens, is absorbed (most rows' top weight exactly 1) from about step 200 and its W_Q/W_K gradient
falls by x6e-4 to x4e-7, while log-ELU's is never absorbed; and softmax never learns there (P5's rule: never
learned, 6 of 6 seeds), where the paper's learned first. Two studies, their rules written here before any run:

**The screen** (``params/grid_mechanism_screen.yaml``): the first :data:`SCREEN_STEPS` steps of R2's recipe (sheared
swap, mirrored Pareto, post-norm, Table 3's model, float32, subnormals flushed, the 50,000-step schedule), softmax
(SDPA) and log-ELU, seeds 0-1, in each :data:`SETTINGS` (the paper's batch direction: 4 and 16 trials per step; a
smaller rate; a longer warm-up; N = 4096). Softmax *learns* in a setting when, on every screened seed, its median
training loss over steps :data:`SCREEN_WINDOW` (regularly logged rows) is at most :data:`LEARN_FACTOR` x log-ELU's
on the same seed (:func:`learns`). The cheapest setting that learns (:data:`SETTINGS` is in order of cost) is followed
with six seeds for 6,000 steps and read by P5's rule (:mod:`heavytail.studies.collapse.tables56`).

**The interventions** (``params/grid_mechanism_interventions.yaml``): R2's recipe exactly, 6,000 steps, seeds 0-5,
plain softmax being R2's own runs (the ladder's map): :data:`INTERVENTIONS`. Per intervention, against plain softmax
on the same seeds (:func:`findings`):

1. ``prevents-<name>``: the intervention's share of runs labelled collapsed (at least half its evaluation trials
   collapsed), Clopper-Pearson 95 % interval below 1/2: reproduced (it prevents the failure); above 1/2: not
   reproduced; otherwise undecided (six seeds at least);
2. ``fewer-steps-<name>``: softmax's share of regularly logged steps with a collapsed batch minus the
   intervention's, paired by seed, sign-flip test (reproduced: fewer collapsed steps with the intervention);
3. ``closer-<name>``: softmax's ratio to the floor over the intervention's, paired by seed (log), sign-flip test
   (reproduced: the intervention ends closer to the target).

**The hypothesis row** (``hypothesis``): "exponential weighting of extreme samples causes the failure" is
*supported* when log-ELU in block 0 alone (``block0-log-elu``) and StableMax everywhere (``stablemax``) both
prevent it (rule 1 reproduced for both); *not supported* when log-ELU in block 0 alone does not (rule 1 not
reproduced: softmax fails with block 0 changed) and softmax in block 0 alone (``block0-softmax``) does not fail
either (its rule 1 reproduced); *undecided* otherwise; the row names the interventions that decided it. QK-norm
(``qk-norm``) bounds the score without changing the kernel: its prevention says the unbounded score matters,
whatever the weighting.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from heavytail.studies import claims as C
from heavytail.studies.collapse import tables56 as T
from heavytail.studies.collapse import tables56_rules as R
from heavytail.studies.core import collapsed_steps, map_extent, paired_by_seed
from heavytail.studies.run_record import RunRecord, records

NOTEBOOK = "09_collapse_ladder"
Run = Mapping[str, Any]

# ------------------------------------------------------------------------------------------------ the screen
SCREEN_STEPS = 1500
SCREEN_WINDOW = (1000, 1500)  # steps [lo, hi] whose logged losses the screen's criterion reads
LEARN_FACTOR = T.LEARN_FACTOR  # the same "within x2 of log-ELU" as P5's "learned"
SCREEN_SEEDS = (0, 1)
SCREEN_KERNELS = ("softmax", "log_elu")
# name -> the RunConfig keys it changes from R2's recipe; cheapest first (steps cost about N x trials per step)
SETTINGS: dict[str, dict[str, Any]] = {
    "lr3e-4": {"lr": 3e-4},
    "warmup5000": {"warmup_steps": 5000},
    "trials4": {"trials_per_step": 4},
    "n4096": {"n_points": 4096},
    "trials16": {"trials_per_step": 16},
}


def window_median(run: Run, window: tuple[int, int] = SCREEN_WINDOW) -> float:
    """The median training loss over the regularly logged steps in ``window`` (NaN when none)."""
    steps, loss = T.regular_rows(run["trace"], RunRecord.from_summary(run).log_every)
    keep = (steps >= window[0]) & (steps <= window[1]) & np.isfinite(loss)
    return float(np.median(loss[keep])) if keep.any() else math.nan


def learns(soft: Sequence[Run], log: Sequence[Run]) -> dict[str, Any]:
    """The screen's criterion for one setting: per seed, softmax's window median over log-ELU's; softmax learns
    when every seed that has both is within :data:`LEARN_FACTOR` (and at least one seed has both)."""
    by = {r.seed: r for r in records(log)}
    ratios = {r.seed: window_median(r) / window_median(by[r.seed]) for r in records(soft) if r.seed in by}
    ok = bool(ratios) and all(math.isfinite(v) and v <= LEARN_FACTOR for v in ratios.values())
    return {"learns": ok, "ratios": ratios}


def setting_of(config: Mapping[str, Any]) -> str | None:
    """The screen setting a run configuration is: the one of :data:`SETTINGS` whose keys it changes from
    R2's recipe (:data:`tables56.RECIPE`), every other screened key at R2's value; None for anything else."""
    screened = {k for keys in SETTINGS.values() for k in keys}
    for name, keys in SETTINGS.items():
        wanted = {k: keys.get(k, T.RECIPE[k]) for k in screened}
        if all(config.get(k) == v for k, v in wanted.items()):
            return name
    return None


def by_setting(runs: Sequence[Run]) -> dict[str, dict[str, dict[int, Run]]]:
    """{setting: {"softmax" | "log_elu": {seed: run}}} in :data:`SETTINGS`'s order."""
    out: dict[str, dict[str, dict[int, Run]]] = {name: {} for name in SETTINGS}
    for r in records(runs):
        name = setting_of(r.config)
        if name is not None and r.kernel in SCREEN_KERNELS:
            out[name].setdefault(r.kernel, {})[r.seed] = r
    return {k: v for k, v in out.items() if v}


def screen_state(verdict: Mapping[str, Any], seeds: int = len(SCREEN_SEEDS)) -> str:
    """The criterion's answer for one setting (:func:`learns`'s result): "no" as soon as one seed fails it; "yes"
    only once every screened seed has both kernels; before that "so far (k of n seeds)"; "not run" without a pair."""
    if not verdict["ratios"]:
        return "not run"
    if not verdict["learns"]:
        return "no"
    done = len(verdict["ratios"])
    return "yes" if done >= seeds else f"so far ({done} of {seeds} seeds)"


def screen_states(runs: Sequence[Run]) -> dict[str, str]:
    """:func:`screen_state` per setting of :data:`SETTINGS`, in its order (every setting, "not run" included)."""
    found = by_setting(runs)
    return {name: screen_state(learns(list(found.get(name, {}).get("softmax", {}).values()),
                                      list(found.get(name, {}).get("log_elu", {}).values()))) for name in SETTINGS}


# ------------------------------------------------------------------------------------------- the interventions
# name -> the RunConfig keys of the intervention (the recipe and seeds are R2's)
INTERVENTIONS: dict[str, dict[str, Any]] = {
    "block0-log-elu": {"kernel": "softmax", "attention_backend": "sdpa", "split_kernel": "log_elu", "split_block": 0},
    "block0-softmax": {"kernel": "log_elu", "attention_backend": "auto", "split_kernel": "softmax", "split_block": 0},
    "qk-norm": {"kernel": "softmax", "attention_backend": "sdpa", "qk_norm": True},
    "stablemax": {"kernel": "stablemax", "attention_backend": "auto"},
}
INTERVENTION_KEYS = ("kernel", "split_kernel", "split_block", "qk_norm")


NO_INTERVENTION = {"split_kernel": "", "split_block": -1, "qk_norm": False}  # RunConfig's defaults


def intervention_of(config: Mapping[str, Any]) -> str | None:
    """The intervention a run configuration is (None for plain softmax or anything else)."""
    full = {**NO_INTERVENTION, **config}
    for name, keys in INTERVENTIONS.items():
        wanted = {**NO_INTERVENTION, **keys}
        if all(full.get(k) == wanted.get(k) for k in INTERVENTION_KEYS):
            return name
    return None


def _on_r2(config: Mapping[str, Any]) -> bool:
    base = {**config, "kernel": "softmax", "attention_backend": "sdpa", "eval_trials": T.RECIPE["eval_trials"]}
    return T.cell_of(base) == T.Cell("post", "softmax", False, "swap-pareto")


def groups(runs: Sequence[Run]) -> tuple[list[Run], dict[str, list[Run]]]:
    """(plain softmax at R2, {intervention: its runs at R2's recipe}), each ordered by seed."""
    plain, by = [], {}
    for r in records(runs):
        if not _on_r2(r.config):
            continue
        name = intervention_of(r.config)
        if name is not None:
            by.setdefault(name, []).append(r)
        elif r.kernel == "softmax" and not r.split_kernel and not r.qk_norm:
            plain.append(r)
    key = lambda r: r.seed  # noqa: E731
    return sorted(plain, key=key), {k: sorted(v, key=key) for k, v in by.items()}


def findings(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Rules 1-3 per intervention that has runs, then the hypothesis row."""
    plain, by = groups(runs)
    out: list[dict[str, Any]] = []
    decided: dict[str, str] = {}
    for name, mine in by.items():
        d = R.avoids(mine)
        decided[name] = d.verdict
        where = map_extent([*plain, *mine]) + "; rung R2's recipe, the attention changed only"
        out.append(C.make_claim(
            f"prevents-{name}", f"The intervention {name} prevents softmax's failure at R2 (most runs not collapsed)",
            "Sec. 4.2 (hypothesis)", "not tested in the paper", d, f"share of {name} runs labelled collapsed", where,
            f"runs labelled collapsed: {name} {R.count(mine)}, plain softmax {R.count(plain)}",
            {"notebook": NOTEBOOK, "section": "Interventions", "figures": []}).to_dict())
        for cid, what, value in (("fewer-steps", "share of logged steps with a collapsed batch", collapsed_steps),
                                 ("closer", "log ratio to the floor", R._log_ratio)):
            diffs = paired_by_seed(plain, mine, value)
            dd = C.graded_rule(list(diffs.values()), min_seeds=T.MIN_SEEDS) if diffs else C.Decision(
                C.NOT_RUN, None, "no seed has both")
            out.append(C.make_claim(
                f"{cid}-{name}", f"Plain softmax's {what} exceeds {name}'s at R2, seed by seed",
                "Sec. 4.2 (hypothesis)", "not tested in the paper", dd, f"softmax - {name}, {what}", where,
                "per seed: " + ", ".join(f"{s}: {v:+.3g}" for s, v in diffs.items()),
                {"notebook": NOTEBOOK, "section": "Interventions", "figures": []}).to_dict())
    out.append(hypothesis(decided))
    return out


def hypothesis(decided: Mapping[str, str]) -> dict[str, Any]:
    """The hypothesis row from rule 1's verdicts per intervention (see the module docstring)."""
    b0, stable, mirror = (decided.get(k, C.NOT_RUN) for k in ("block0-log-elu", "stablemax", "block0-softmax"))
    if b0 == C.REPRODUCED and stable == C.REPRODUCED:
        verdict, by = C.REPRODUCED, "block0-log-elu and stablemax both prevent it"
    elif b0 == C.NOT_REPRODUCED and mirror == C.REPRODUCED:
        verdict, by = C.NOT_REPRODUCED, "log-ELU in block 0 does not prevent it, and softmax in block 0 alone does not cause it"
    elif C.NOT_RUN in (b0, stable) and not decided:
        verdict, by = C.NOT_RUN, "no intervention has run"
    else:
        verdict, by = C.UNDECIDED, ", ".join(f"{k}: {v}" for k, v in decided.items()) or "no intervention has run"
    return C.Claim("hypothesis", "Exponential weighting of extreme samples causes softmax's failure at Table 3's model",
                   "Sec. 4.2", "the paper's explanation, proposed, not tested", verdict, seeds=None, evidence=by,
                   decided_by={"notebook": NOTEBOOK, "section": "Interventions", "figures": []}).to_dict()
