"""Summary of an ablation grid: Tables 5-8 and the findings of Sections 4.2 and 5, from finished runs.

A grid folder holds one run folder per configuration (``outputs/<grid>/<config>/``) with ``config.yaml``,
``metrics.jsonl``, ``COMPLETE`` and ``results.json`` (written by :func:`heavytail.harness.evaluate.evaluate`).
:func:`heavytail.studies.grid_folder.finished_runs` reads them; this module turns those records into plain data
(lists of dicts) that the summary notebook renders. It computes nothing new about the runs: every ratio, bootstrap interval (eq. 36, 37), collapse label
(App. I) and Hill statistic (eq. 41) comes from ``results.json``.

Seeds. The paper trains one seed per configuration (Section 5, Limitations); a grid may train several.
Runs whose configurations differ only in ``seed`` (and in settings that do not change results:
device, checkpoint and log cadence, evaluation batch size) form one *configuration*, aggregated as:

- ratio, bootstrap endpoints, floor and candidate summaries: the median over seeds of each seed's value
  (one seed: exactly that seed's numbers, as in the paper);
- the seed range: the smallest and largest per-seed ratio, shown next to the interval, because the
  bootstrap interval describes evaluation trials at fixed weights, not training runs (App. H.2);
- bold (App. H.2: the interval contains or lies below one): the aggregated lower endpoint is <= 1;
- collapse: the configuration is labelled "collapse" when at least half of its seeds are (the same
  majority rule :func:`heavytail.science.collapse.run_label` applies to trials), and the count is reported;
- Hill E (eq. 41) and the Hill-error curve: the median over seeds; per-trial energy distances for the
  empirical CDFs (Figures 10, 11) are pooled over seeds.

Comparisons used by the findings (stated here and printed by the notebook from :data:`DEFINITIONS`):

- *collapsed*: the configuration's label is "collapse" (criterion in :mod:`heavytail.science.collapse`);
- *A lower than B*: A's bootstrap interval of the median ratio lies entirely below B's
  (``A.high < B.low``); the ratio of ratios A/B is reported as the effect size. Both ratios are against
  the same i.i.d. floor (same operator, marginals, N and seed), so the ratio of ratios is the ratio of
  the median energy distances themselves;
- *similar*: the bootstrap intervals of the median ratio of all compared configurations share a common
  point (``max(low) <= min(high)``); the largest over smallest ratio is reported alongside.

A claim needs every configuration it speaks about; if any is missing its verdict is "not run" (the
evidence still lists what the present runs show). With fewer seeds per configuration than
:data:`heavytail.studies.claims.MIN_SEEDS` it is "undecided at this power"; otherwise "reproduced" or "not
reproduced".
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from heavytail.harness.config import PACING_KEYS, RunConfig
from heavytail.studies.grid_folder import FinishedRun
from heavytail.studies.paper_numbers import paper_value
from heavytail.studies.tables import cell_text, fmt_ratio, fmt_sci, records, to_html  # noqa: F401  (re-exported)

from heavytail.names import (BENCHMARK_LABELS, BENCHMARK_MARGINALS, BENCHMARKS, KERNEL_LABELS, KERNELS,  # noqa: F401
                             MARGINAL_LABELS, NORM_LABELS, TRANSFORM_LABELS)
from heavytail.names import NORM_TABLE_ORDER as NORMS  # the paper's table order: pre-norm rows above post-norm rows
from heavytail.names import RATIO_STATISTICS as STATISTICS
# Settings that change how a run is executed but not its results; runs differing only in these and in
# the seed are seeds of one configuration.
OPERATIONAL = PACING_KEYS | {"seed"}
# What "What ran at this scale" prints, next to the paper's value (RunConfig defaults are Table 3).
SCALE_FIELDS = ("n_points", "trials_per_step", "steps", "warmup_steps", "d_model", "n_blocks", "d_ff", "n_heads",
                "lr", "precision", "attention_backend", "eval_trials", "eval_n_points", "bootstrap_resamples",
                "hill_phi", "collapse_spread")



# --------------------------------------------------------------------------------------------------
# The grid record, and choosing runs (the runs come from heavytail.studies.grid_folder.finished_runs)
# --------------------------------------------------------------------------------------------------
def grid_status_table(record: Mapping[str, Any]) -> dict[str, Any]:
    """Configurations of ``grid.json`` that did not finish, with their failing cell and error."""
    rows = [{"configuration": e.get("name", "?"), "status": e.get("status", "?"),
             "failed cell": "-" if e.get("failed_cell") is None else str(e["failed_cell"]),
             "error": e.get("error") or ""}
            for e in record["configurations"] if e.get("status") not in ("ok", "skipped")]
    counts = ", ".join(f"{n} {s}" for s, n in (record.get("counts") or {}).items() if n)
    state = "finished" if record.get("finished") else "not finished (still running or interrupted)"
    return {"title": f"Grid {record.get('grid', '?')}: {len(record['configurations'])} configurations, {counts}; "
                     f"the grid run is {state}",
            "columns": ["configuration", "status", "failed cell", "error"], "rows": rows,
            "notes": "" if rows else "every configuration finished"}


# --------------------------------------------------------------------------------------------------
# Aggregating seeds
# --------------------------------------------------------------------------------------------------
def _median(values: Sequence[float]) -> float:
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.size == 0:
        return math.nan
    finite_or_inf = arr[~np.isnan(arr)]
    return float(np.median(finite_or_inf)) if finite_or_inf.size else math.nan


def cell_key(config: Mapping[str, Any]) -> tuple[str, str, str, str, bool]:
    """The ablation axes of a configuration: (benchmark, marginals, norm, kernel, symlog)."""
    return (config["benchmark"], config["marginals"], config["norm"], config["kernel"], bool(config["symlog"]))


def aggregate(runs: Iterable[FinishedRun]) -> list[dict[str, Any]]:
    """Group runs into configurations (all settings but the seed and :data:`OPERATIONAL` ones) and
    aggregate their seeds as described in the module docstring. Returns one dict per configuration."""
    groups: dict[tuple, list[FinishedRun]] = {}
    for run in runs:
        key = tuple(sorted((k, repr(v)) for k, v in RunConfig.with_defaults(run.config).items() if k not in OPERATIONAL))
        groups.setdefault(key, []).append(run)
    aggs = [_aggregate_group(sorted(g, key=lambda r: r.config.get("seed", 0))) for g in groups.values()]
    return sorted(aggs, key=lambda a: (a["benchmark"], a["marginals"], NORMS.index(a["norm"]) if a["norm"] in NORMS else 9,
                                       KERNELS.index(a["kernel"]) if a["kernel"] in KERNELS else 9, a["symlog"]))


def _aggregate_group(runs: list[FinishedRun]) -> dict[str, Any]:
    cfg = runs[0].config
    benchmark, marginals, norm, kernel, symlog = cell_key(cfg)
    labels = [r.results["collapse"]["label"] for r in runs]
    n_collapsed = sum(label == "collapse" for label in labels)
    agg: dict[str, Any] = {
        "benchmark": benchmark, "marginals": marginals, "norm": norm, "kernel": kernel, "symlog": symlog,
        "key": (benchmark, marginals, norm, kernel, symlog),
        "config": dict(cfg), "names": [r.name for r in runs], "seeds": [r.config.get("seed") for r in runs],
        "n_seeds": len(runs),
        "collapse": {
            "label": "collapse" if 2 * n_collapsed >= len(runs) else "ok",
            "n_collapsed": n_collapsed,
            "fractions": [float(r.results["collapse"]["fraction"]) for r in runs],
        },
        # Pooled per-trial values for the empirical CDFs (Figures 10, 11). The floor pool depends on the
        # seed but not on the model, so each seed's floor is pooled once.
        "d": [x for r in runs for x in r.results["energy"]["d"]],
        "d_hat": [x for r in runs for x in r.results["energy"]["d_hat"]],
    }
    for stat in STATISTICS:
        per_seed = [r.results["energy"][stat] for r in runs]
        ratios = [float(s["ratio"]) for s in per_seed]
        low = _median([s["low"] for s in per_seed])
        agg[stat] = {
            "ratio": _median(ratios),
            "low": low,
            "high": _median([s["high"] for s in per_seed]),
            # one seed: evaluate's own flag; several: the bold rule on the aggregated interval
            "bold": bool(per_seed[0]["bold"]) if len(runs) == 1 else bool(low <= 1.0),
            "floor": _median([s["floor"] for s in per_seed]),
            "candidate": _median([s["candidate"] for s in per_seed]),
            "seed_ratios": ratios,
            "seed_min": float(np.nanmin(ratios)) if ratios else math.nan,
            "seed_max": float(np.nanmax(ratios)) if ratios else math.nan,
            "n_bold": sum(bool(s["bold"]) for s in per_seed),
        }
    hills = [r.results.get("hill") for r in runs]
    if all(h is not None for h in hills) and hills:
        agg["hill"] = {axis: {"E": _median([h["axes"][axis]["E"] for h in hills]),
                              "E_seeds": [float(h["axes"][axis]["E"]) for h in hills]} for axis in ("0", "1")}
        curves = [h.get("curve") for h in hills]
        if all(c is not None for c in curves):
            phi = list(curves[0]["phi"])
            agg["hill_curve"] = {
                "phi": phi,
                "output": {axis: [_median([c["output_abs_error"][axis][i] for c in curves]) for i in range(len(phi))]
                           for axis in ("0", "1")},
                "target": {axis: [_median([c["target_abs_error"][axis][i] for c in curves]) for i in range(len(phi))]
                           for axis in ("0", "1")},
            }
    else:
        agg["hill"] = None
    return agg


def index_cells(aggs: Iterable[Mapping[str, Any]]) -> dict[tuple, Mapping[str, Any]]:
    """Configurations by their ablation axes (:func:`cell_key`). Two configurations on one cell (a grid that
    also varies, e.g., the backend or the width) are an error naming the settings that differ."""
    cells: dict[tuple, Mapping[str, Any]] = {}
    for agg in aggs:
        other = cells.get(agg["key"])
        if other is not None:
            mine, theirs = RunConfig.with_defaults(agg["config"]), RunConfig.with_defaults(other["config"])
            differ = sorted(k for k in set(mine) - OPERATIONAL if mine.get(k) != theirs.get(k))
            raise ValueError(f"two configurations share the table cell {agg['key']} and differ in {differ}; "
                             f"select one with filter_runs(runs, {differ[0]}=...) (notebook parameter 'filters')")
        cells[agg["key"]] = agg
    return cells


def ratio_cell(agg: Mapping[str, Any] | None, statistic: str) -> dict[str, Any] | None:
    """One Table 5/6 cell: ratio with bootstrap interval, bold flag, or 'collapse'. None when not run."""
    if agg is None:
        return None
    s = agg[statistic]
    collapse = agg["collapse"]
    n = agg["n_seeds"]
    if collapse["label"] == "collapse":
        text = "collapse"
        if n > 1:
            text += f" ({collapse['n_collapsed']}/{n} seeds)"
        text += f" [ratio {fmt_ratio(s['ratio'])}]"
        bold = False
    else:
        text = f"{fmt_ratio(s['ratio'])} [{fmt_ratio(s['low'])}, {fmt_ratio(s['high'])}]"
        if n > 1:
            text += f"; seeds {fmt_ratio(s['seed_min'])}-{fmt_ratio(s['seed_max'])} (n={n})"
        if collapse["n_collapsed"]:
            text += f"; collapse in {collapse['n_collapsed']}/{n} seeds"
        bold = bool(s["bold"])
    return {"text": text, "bold": bold, "ratio": s["ratio"], "low": s["low"], "high": s["high"],
            "collapse": collapse["label"] == "collapse", "n_seeds": n}


# --------------------------------------------------------------------------------------------------
# Tables: a table is {"title", "columns", "rows": [{column: str | number | cell dict | None}], "notes"}
# --------------------------------------------------------------------------------------------------
def _norms_present(aggs: Sequence[Mapping[str, Any]], benchmark: str | None = None) -> list[str]:
    present = {a["norm"] for a in aggs if benchmark is None or a["benchmark"] == benchmark}
    return [n for n in NORMS if n in present] or ["post"]


def ratio_table(aggs: Sequence[Mapping[str, Any]], benchmark: str, statistic: str = "median") -> dict[str, Any]:
    """Table 5 (sheared swap) or 6 (matrix inverse): rows norm x kernel, columns marginals x transform,
    cells :func:`ratio_cell` under ``statistic`` ("median" or "mean"), None where the run is missing."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic={statistic!r} is not allowed; choose one of {STATISTICS}")
    if benchmark not in BENCHMARK_MARGINALS:
        raise ValueError(f"benchmark={benchmark!r} is not allowed; choose one of {tuple(BENCHMARK_MARGINALS)}")
    cells = index_cells(aggs)
    columns = [(m, s) for m in BENCHMARK_MARGINALS[benchmark] for s in (False, True)]
    labels = {c: f"{MARGINAL_LABELS[c[0]]} / {TRANSFORM_LABELS[c[1]]}" for c in columns}
    rows, missing = [], 0
    for norm in _norms_present(aggs):
        for kernel in KERNELS:
            row: dict[str, Any] = {"norm": NORM_LABELS[norm], "kernel": KERNEL_LABELS[kernel]}
            for marg, sym in columns:
                cell = ratio_cell(cells.get((benchmark, marg, norm, kernel, sym)), statistic)
                missing += cell is None
                row[labels[(marg, sym)]] = cell
            rows.append(row)
    number = 5 if benchmark == "sheared_swap" else 6
    return {
        "title": f"Table {number} ({statistic}): {BENCHMARK_LABELS[benchmark]} energy distance as a multiple of the "
                 f"i.i.d. sampling floor, with 95% bootstrap interval; bold: interval contains or lies below 1",
        "columns": ["norm", "kernel", *labels.values()],
        "rows": rows,
        "notes": f"{missing} of {len(rows) * len(columns)} cells not run" if missing else "",
    }


def hill_table(aggs: Sequence[Mapping[str, Any]], benchmark: str, axis: str | int) -> dict[str, Any]:
    """Table 7 (sheared swap) or 8 (matrix inverse): E(e, e_hat) of eq. 41 on one latent axis
    (0: lighter tail a in [2, 3]; 1: heavier tail a in [1+eps, 2]); mirrored Pareto runs only."""
    axis = str(axis)
    if axis not in ("0", "1"):
        raise ValueError(f"axis={axis!r} is not allowed; choose 0 (lighter tail) or 1 (heavier tail)")
    cells = index_cells(aggs)
    rows, missing = [], 0
    for norm in _norms_present(aggs):
        for kernel in KERNELS:
            row: dict[str, Any] = {"norm": NORM_LABELS[norm], "kernel": KERNEL_LABELS[kernel]}
            for sym in (False, True):
                agg = cells.get((benchmark, "mirrored_pareto", norm, kernel, sym))
                cell = None
                if agg is not None and agg.get("hill"):
                    h = agg["hill"][axis]
                    text = fmt_sci(h["E"])
                    if agg["n_seeds"] > 1:
                        text += f" (seeds {fmt_sci(min(h['E_seeds']))} to {fmt_sci(max(h['E_seeds']))})"
                    if agg["collapse"]["label"] == "collapse":
                        text += " (collapse)"
                    cell = {"text": text, "bold": False, "E": h["E"]}
                missing += cell is None
                row[f"mirrored Pareto / {TRANSFORM_LABELS[sym]}"] = cell
            rows.append(row)
    number = 7 if benchmark == "sheared_swap" else 8
    tail = "lighter tail, a in [2, 3]" if axis == "0" else "heavier tail, a in [1+eps, 2]"
    return {
        "title": f"Table {number}, axis {axis} ({tail}): Hill discrepancy E(e, e_hat) (eq. 41), "
                 f"{BENCHMARK_LABELS[benchmark]}; expectation 0 when model and reference Hill errors agree",
        "columns": ["norm", "kernel", "mirrored Pareto / none", "mirrored Pareto / signed-log"],
        "rows": rows,
        "notes": f"{missing} of {2 * len(rows)} cells not run" if missing else "",
    }


def scale_table(runs: Sequence[FinishedRun]) -> dict[str, Any]:
    """'What ran at this scale': the distinct values of the sizes that set the scale, next to the paper's
    (the :class:`heavytail.harness.config.RunConfig` defaults are Table 3)."""
    from heavytail.harness.config import NOT_TABLE3, RunConfig

    paper = RunConfig()
    rows = []
    for name in SCALE_FIELDS:
        values = sorted({r.config.get(name) for r in runs}, key=repr)
        # RunConfig's defaults are Table 3 except where NOT_TABLE3 says what the paper used instead
        rows.append({"setting": name, "this grid": ", ".join(str(v) for v in values) or "-",
                     "paper (Table 3)": NOT_TABLE3.get(name, str(getattr(paper, name)))})
    seeds = sorted({r.config.get("seed") for r in runs}, key=repr)
    rows.append({"setting": "seeds", "this grid": (f"{len(seeds)} per configuration ({', '.join(map(str, seeds))})"
                                                   if seeds else "-"), "paper (Table 3)": "1 per configuration"})
    n_configs = len(aggregate(runs)) if runs else 0
    rows.append({"setting": "evaluated runs (configurations)", "this grid": f"{len(runs)} ({n_configs})",
                 "paper (Table 3)": "48 (24 post-norm, 24 pre-norm; Sec. 4.2, App. G)"})
    return {"title": "What ran at this scale", "columns": ["setting", "this grid", "paper (Table 3)"], "rows": rows, "notes": ""}


def runs_table(runs: Sequence[FinishedRun]) -> dict[str, Any]:
    """One row per evaluated run: steps logged, last logged loss, skipped steps, training time, collapse."""
    rows = []
    for r in runs:
        last = r.log[-1] if r.log else {}
        rows.append({
            "run": r.name,
            "steps": last.get("step", "-"),
            "last loss": fmt_ratio(last["loss"]) if "loss" in last else "-",
            "skipped steps": last.get("n_skipped", "-"),
            "train seconds": f"{last['seconds']:.0f}" if "seconds" in last else "-",
            "collapsed trials": f"{r.results['collapse']['fraction']:.2f}",
            "label": r.results["collapse"]["label"] + (f" ({r.results['collapse']['diverged']})"
                                                       if r.results["collapse"].get("diverged") else ""),
            "median ratio": fmt_ratio(r.results["energy"]["median"]["ratio"]),
        })
    return {"title": "Evaluated runs", "columns": ["run", "steps", "last loss", "skipped steps", "train seconds",
                                                    "collapsed trials", "label", "median ratio"], "rows": rows,
            "notes": "label: ok, collapse (most evaluation trials collapsed, App. I) or diverged (more than 10 % of "
                     "steps skipped, or a non-finite ratio), with the reason"}


def comparison_table(aggs: Sequence[Mapping[str, Any]], statistic: str = "median") -> dict[str, Any]:
    """Every configuration that ran, its ratio at our scale next to the paper's (N = 16384, 50,000 steps)."""
    rows = []
    for a in aggs:
        ours = ratio_cell(a, statistic)
        rows.append({
            "benchmark": BENCHMARK_LABELS[a["benchmark"]], "marginals": MARGINAL_LABELS[a["marginals"]],
            "norm": NORM_LABELS[a["norm"]], "kernel": KERNEL_LABELS[a["kernel"]],
            "transform": TRANSFORM_LABELS[a["symlog"]], "this grid": ours,
            "paper": paper_value(a["benchmark"], a["marginals"], a["norm"], a["kernel"], a["symlog"], statistic),
        })
    return {"title": f"{statistic.capitalize()} ratio at this scale next to the paper's (bold as in the paper, App. H.2)",
            "columns": ["benchmark", "marginals", "norm", "kernel", "transform", "this grid", "paper"],
            "rows": rows, "notes": ""}
