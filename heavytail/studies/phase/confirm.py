"""The confirmatory trained test of App. A's boundary, pre-registered before its runs (params/grid_phase_confirm.yaml).

The shipped phase map cannot decide which boundary its cells follow: its statistic (the ratio to the floor)
grows wherever the floor falls, five seeds make its joint rule *reproduced* almost impossible, and the rules
"q + 1 >= a_lo", "q + 1 >= a_hi" and "q >= a_lo" all fit it. This test is fixed before any of its runs:

- **candidate rules** (:data:`RULES`): growth with N where q + 1 >= a_lo (App. A's condition fails on some trial
  of the regime: the pre-registered prediction, heavytail.studies.phase.diagram.predicted_growth), where
  q + 1 >= a_hi (it fails on most trials), or where q >= a_lo (the normaliser E[g(S)] itself diverges,
  heavytail.names' description of the regimes);
- **deciding cells** (:func:`deciding_cells`): the (kernel, regime) cells where the rules disagree, and only
  those (elsewhere every rule predicts the same, so a cell there decides nothing between them);
- **endpoint** (:func:`excess_endpoint`, :func:`run_endpoint`): floor-free. Per run, the log of the median over
  evaluation trials of the energy distance's excess over that trial's floor (eq. 36's numerator minus its
  denominator, at the training N); a model whose error does not depend on N has an excess that does not either,
  whereas the ratio to a falling floor grows. A run whose median excess is not positive sits at its floor and
  has no endpoint (NaN: no number put in place of the log would be measured). Per seed, the least-squares slope
  of that log on log2 N (:func:`slopes`); a seed with a run without an endpoint has no slope in that cell
  (heavytail.studies.claims.per_seed_slopes: nothing is imputed), and :func:`confirm` reports every such run;
- **per-cell prediction**: *grows* (slope > 0: the growth rule's interval above 0) or *bounded* (slope below
  log 1.10 per doubling: the interval below heavytail.studies.claims.GROWTH_MARGIN);
- **decision** (:func:`confirm_verdict`): each deciding cell by the growth rule at the Bonferroni level
  1 - 0.05 / cells, once every registered run of the cell (:func:`registered_runs`) is in: before that the cell's
  slope is an interim reading, shown but undecided (a verdict read off whichever runs have finished would be
  a sequence of looks the rule was not simulated for, and its slopes would mix seeds with different N); a rule
  is *excluded* when a decided cell contradicts it. The claim "trained growth follows
  q + 1 >= a_lo" is *reproduced* when every deciding cell is decided and agrees with it (so both alternatives
  are excluded), *not reproduced* when a cell contradicts it, *undecided* otherwise (with the seeds
  :func:`seeds_needed` says it would take);
- **seeds** (:data:`SEEDS`): 20 new ones per deciding cell, disjoint from the shipped map's 0-4;
  :func:`power` simulates the rule at the shipped map's spread.

Per-trial evaluation records (distance, floor, the trial's tail indices: heavytail.harness.evaluate's
``per_trial``, kept at the training N by heavytail.studies.run_summary.trial_records) are what the endpoint
reads; the per-trial strata of a (each trial draws its own index from the regime's range) are a secondary,
exploratory reading of the same records (:func:`stratum_of`, :func:`stratum_slopes`), with no verdict.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from heavytail.names import KERNEL_ROWS, TAIL_REGIMES, app_a_kernels
from heavytail.studies import claims as C
from heavytail.studies.run_summary import trial_records
from heavytail.studies.run_record import RunRecord

HEAVIER_AXIS = 1
PRIMARY = "q + 1 >= a_lo"
RULES: dict[str, Callable[[float, float, float], bool]] = {
    PRIMARY: lambda q, lo, hi: q + 1 >= lo,
    "q + 1 >= a_hi": lambda q, lo, hi: q + 1 >= hi,
    "q >= a_lo": lambda q, lo, hi: q >= lo,
}
SEEDS = tuple(range(100, 120))  # the shipped phase map used seeds 0-4
SHIPPED_SEEDS = tuple(range(5))
NS = (256, 1024, 4096)
LONG_N = 8192  # added on the moderate regime's cells, whose q + 1 sits at or just above a_lo: the smallest
LONG_REGIME = "moderate"  # predicted growth, so the longest lever arm


def registered_runs(cell: tuple[str, str]) -> set[tuple[int, int]]:
    """The (seed, training N) pairs the test registered for a deciding cell (params/grid_phase_confirm.yaml)."""
    ns = NS + ((LONG_N,) if cell[1] == LONG_REGIME else ())
    return {(seed, n) for seed in SEEDS for n in ns}
GROWS = math.log(1.5)  # the effect size power is computed at: x1.5 per doubling, as notebook 08's map power


def predictions(kernel: str, regime: str) -> dict[str, bool]:
    """Every candidate rule's prediction (True: grows) for one cell."""
    lo, hi = TAIL_REGIMES[regime][HEAVIER_AXIS]
    q = KERNEL_ROWS[kernel].order
    return {name: rule(q, lo, hi) for name, rule in RULES.items()}


def deciding_cells(kernels: Sequence[str] | None = None, regimes: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """The (kernel, regime) cells where the candidate rules disagree, every kernel of App. A's family and every regime
    by default."""
    return [(k, g) for k in (kernels or app_a_kernels()) for g in (regimes or TAIL_REGIMES)
            if len(set(predictions(k, g).values())) > 1]


def excess_endpoint(distances: Sequence[float], floors: Sequence[float]) -> float:
    """log median_t (D_t - F_t) over evaluation trials t: the energy distance of the model's output and its
    floor (an independent target ensemble's), both at the training N. NaN when the median excess is not
    positive (the model is at its floor: no growth can be read)."""
    excess = np.asarray(distances, dtype=float) - np.asarray(floors, dtype=float)
    med = float(np.median(excess))
    return math.log(med) if med > 0 else math.nan


def _excess(records: Sequence[Mapping[str, Any]]) -> float:
    return excess_endpoint([r["d"] for r in records], [r["floor"] for r in records])


def _records(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    records = trial_records(run)
    if not records:
        raise ValueError(f"run {run.get('name')!r} holds no per-trial records at its training N (evaluated before "
                         "evaluation kept them, or not scored at its training N): re-evaluate its folder with "
                         "python -m heavytail evaluate")
    return records


def run_endpoint(run: Mapping[str, Any]) -> float:
    """The endpoint of one run summary (heavytail.studies.run_summary.run_summary): :func:`excess_endpoint` of its
    T per-trial records at the training N. NaN when the median excess is <= 0 (at the floor); +inf when more
    than half the trials diverged (their d is +inf). ValueError when the run holds no records."""
    return _excess(_records(run))


def _cell(run: Mapping[str, Any]) -> tuple[str, str]:
    run = RunRecord.from_summary(run)
    return run.kernel, run.tail_regime


def endpoints(runs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[int, dict[int, float]]]:
    """{(kernel, regime): {seed: {training N: run_endpoint}}}, every run (NaN and inf kept: :func:`slopes`
    leaves their seeds out)."""
    out: dict[tuple[str, str], dict[int, dict[int, float]]] = {}
    for r in runs:
        out.setdefault(_cell(r), {}).setdefault(r.seed, {})[r.n_points] = run_endpoint(r)
    return out


def slopes(ends: Mapping[Any, Mapping[int, Mapping[int, float]]]) -> dict[Any, dict[int, float]]:
    """Per cell and seed, the least-squares slope of the endpoint on log2 N (log excess per doubling), from
    ``{cell: {seed: {N: endpoint}}}``; a seed with fewer than two N or a non-finite endpoint has none."""
    return {cell: C.per_seed_slopes(by_seed) for cell, by_seed in ends.items()}


def confirm(runs: Sequence[Mapping[str, Any]], seeds: Sequence[int] = SEEDS) -> dict[str, Any]:
    """The pre-registered decision on the runs of the deciding cells with the registered ``seeds`` (others are
    not part of the test and are ignored): :func:`confirm_verdict` of the per-seed :func:`slopes` over every
    deciding cell (one without runs is undecided, so the Bonferroni level stays that of all cells), with
    ``left_out``: per cell, the runs without a finite endpoint as (seed, N, endpoint) and the seeds without a
    slope. Not run when no run is of the test."""
    cells, registered = deciding_cells(), set(seeds)
    mine = [r for r in map(RunRecord.from_summary, runs) if _cell(r) in cells and r.seed in registered]
    if not mine:
        return {**confirm_verdict({}), "left_out": {}}
    ends = endpoints(mine)
    per_seed = slopes(ends)
    left_out = {}
    for cell in cells:
        by_seed = ends.get(cell, {})
        at_floor = [(s, n, v) for s, row in sorted(by_seed.items()) for n, v in sorted(row.items())
                    if not math.isfinite(v)]
        missing = sorted(set(by_seed) - set(per_seed.get(cell, {})))
        if at_floor or missing:
            left_out[cell] = {"runs": at_floor, "seeds": missing}
    shipped = {cell: {(s, n) for s, row in ends.get(cell, {}).items() for n in row} for cell in cells}
    missing = {cell: len(registered_runs(cell) - shipped[cell]) for cell in cells}
    verdict = confirm_verdict({cell: list(per_seed.get(cell, {}).values()) for cell in cells},
                              interim=[cell for cell in cells if missing[cell]])
    return {**verdict, "slopes": {cell: per_seed.get(cell, {}) for cell in cells}, "left_out": left_out,
            "missing": missing}


def stratum_slopes(runs: Sequence[Mapping[str, Any]], strata: int = 2) -> dict[tuple[str, str, int], dict[int, float]]:
    """Exploratory, not part of the registered decision: per (kernel, regime, stratum of the heavier-axis tail
    index, :func:`stratum_of`) and seed, the slope on log2 N of :func:`excess_endpoint` over the trials of that
    stratum only (about T / ``strata`` of each run's T). Trials whose a is near the range's low end violate App.
    A's condition first, so growth confined to them is what this reads. Mirrored Pareto runs only."""
    ends: dict[tuple[str, str, int], dict[int, dict[int, float]]] = {}
    for r in map(RunRecord.from_summary, runs):
        kernel, regime = _cell(r)
        records = _records(r)
        if "tail_index" not in records[0]:
            raise ValueError(f"run {r.get('name')!r} drew no tail index per trial (marginals "
                             f"{r.marginals!r}): strata of a need mirrored Pareto marginals")
        groups: dict[int, list[dict[str, Any]]] = {}
        for rec in records:
            groups.setdefault(stratum_of(rec["tail_index"][HEAVIER_AXIS], regime, strata), []).append(rec)
        for k, group in groups.items():
            ends.setdefault((kernel, regime, k), {}).setdefault(r.seed, {})[r.n_points] = (
                _excess(group))
    return slopes(dict(sorted(ends.items())))


def stratum_of(a: float, regime: str, strata: int = 2) -> int:
    """Which of ``strata`` equal bins of the regime's heavier-axis range a trial's index a falls in."""
    lo, hi = TAIL_REGIMES[regime][HEAVIER_AXIS]
    return min(strata - 1, max(0, int((a - lo) / (hi - lo) * strata)))


def confirm_verdict(slopes: Mapping[tuple[str, str], Sequence[float]], level: float = C.LEVEL,
                    interim: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """From per-cell per-seed slopes (log excess per doubling of N) on the deciding cells: each cell's growth
    decision at the Bonferroni level, each rule's standing (``excluded`` when a decided cell contradicts it,
    ``consistent`` when every cell is decided and agrees, else ``open``), and the primary claim's verdict. A cell
    in ``interim`` (registered runs still missing) keeps its estimate and interval but is undecided."""
    if not slopes:
        return {"verdict": C.NOT_RUN, "cells": {}, "rules": {}}
    strict = 1 - (1 - level) / len(slopes)
    cells, standing = {}, {name: "consistent" for name in RULES}
    for cell, values in slopes.items():
        d = C.growth_rule(list(values), level=strict)
        if cell in interim and d.verdict != C.NOT_RUN:
            d = C.Decision(C.UNDECIDED, d.estimate, "interim: registered runs not yet shipped")
        grows = {C.REPRODUCED: True, C.NOT_REPRODUCED: False}.get(d.verdict)
        cells[cell] = {"decision": d, "grows": grows, "interim": cell in interim}
        for name, predicted in predictions(*cell).items():
            if grows is None and standing[name] == "consistent":
                standing[name] = "open"
            elif grows is not None and grows != predicted:
                standing[name] = "excluded"
    verdict = {"excluded": C.NOT_REPRODUCED, "consistent": C.REPRODUCED}.get(standing[PRIMARY], C.UNDECIDED)
    return {"verdict": verdict, "cells": cells, "rules": standing, "level": strict}


def simulate(truth: str, sd: float, seeds: int, cells: Sequence[tuple[str, str]] | None = None,
             grows: float = GROWS, bounded: float = 0.0, m: int = 400, seed: int = 0) -> dict[str, float]:
    """Shares of ``m`` simulated designs whose primary verdict is each verdict, when rule ``truth`` holds:
    per-seed slopes normal with spread ``sd`` around ``grows`` where it predicts growth, ``bounded`` elsewhere."""
    cells = list(cells or deciding_cells())
    rng = np.random.default_rng(seed)
    counts: dict[str, int] = {}
    for _ in range(m):
        slopes = {c: rng.normal(grows if predictions(*c)[truth] else bounded, sd, seeds) for c in cells}
        v = confirm_verdict(slopes)["verdict"]
        counts[v] = counts.get(v, 0) + 1
    return {v: counts.get(v, 0) / m for v in C.VERDICTS}


def power(sd: float, seeds: int, **kw) -> float:
    """The chance the primary claim reads *reproduced* when it is true (:func:`simulate`)."""
    return simulate(PRIMARY, sd, seeds, **kw)[C.REPRODUCED]


def seeds_needed(sd: float, target: float = 0.8, most: int = 80, m: int = 200) -> int | None:
    """The fewest seeds per deciding cell (from 5, in steps of 5) with :func:`power` >= ``target``; None when
    even ``most`` do not reach it."""
    for n in range(5, most + 1, 5):
        if power(sd, n, m=m) >= target:
            return n
    return None


def findings(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The pre-registered claim as a :class:`heavytail.studies.claims.Claim` record: :func:`confirm`'s primary
    verdict, the count of deciding cells decided in agreement with the primary rule, each cell's decision and
    each rule's standing as the evidence, and the seeds a cell still needs when it is undecided."""
    from heavytail.studies.core import map_extent

    found = confirm(runs)
    mine = [r for r in map(RunRecord.from_summary, runs) if _cell(r) in deciding_cells() and r.seed in set(SEEDS)]
    cells = found.get("cells", {})
    agree = [c for c, v in cells.items() if v["grows"] is not None and v["grows"] == predictions(*c)[PRIMARY]]
    missing = found.get("missing", {})

    def status(cell, v) -> str:
        if not v["interim"]:
            return v["decision"].verdict
        total = len(registered_runs(cell))
        return f"no verdict yet (interim, {total - missing[cell]} of {total} registered runs in)"

    per_cell = "; ".join(f"{k} on {g}: {status((k, g), v)}" + (
        "" if v["decision"].estimate is None else f", slope {v['decision'].estimate.estimate:+.3f} per doubling "
        f"[{v['decision'].estimate.low:+.3f}, {v['decision'].estimate.high:+.3f}], {v['decision'].estimate.n} seeds")
        for (k, g), v in cells.items())
    rules = "; ".join(f"{name}: {state}" for name, state in found.get("rules", {}).items())
    seeds = [v["decision"].estimate.n for v in cells.values() if v["decision"].estimate is not None]
    left = ", ".join(f"{n} on {k}/{g}" for (k, g), n in missing.items() if n)
    needs = {C.UNDECIDED: "every deciding cell decided by the growth rule at the Bonferroni level on all its "
                          f"registered runs (20 seeds at N = {', '.join(map(str, NS))}, {LONG_N} on the "
                          f"{LONG_REGIME} cells)" + (f": {left} not yet shipped" if left else ""),
             C.NOT_RUN: "the confirmatory map (params/grid_phase_confirm.yaml)"}.get(found["verdict"], "")
    return [C.Claim(
        "phase-confirm", f"Trained growth with N follows this repository's boundary rule {PRIMARY} (derived from "
        "App. A's fixed-weight condition; pre-registered, floor-free excess)", "App. A (beyond the paper)",
        "not tested in the paper", found["verdict"], statistic=f"deciding cells agreeing (of {len(cells)})",
        estimate=float(len(agree)) if cells else None, seeds=min(seeds, default=0),
        scale=map_extent(mine) if mine else "",
        evidence=(f"{len(mine)} runs of the test; per cell, the growth rule at the level {found.get('level', 0):.4f}: "
                  f"{per_cell}. Rules: {rules}") if cells else "", needs=needs,
        decided_by={"notebook": "08_phase_diagram", "section": "The confirmatory trained test, pre-registered",
                    "figures": []}).to_dict()]


def status(shipped: Mapping[str, Any] | None) -> tuple[str, str]:
    """(one clause, one paragraph) on the confirmatory map: the verdict of the pre-registered test on the shipped runs,
    each rule's reading, and per deciding cell its verdict with the slope's interval or how many registered runs are in
    (an interim cell has no verdict yet)."""
    runs = shipped["runs"] if shipped else []
    confirmed = confirm(runs) if runs else None
    if confirmed is None:
        clause = "the confirmatory map is not shipped yet"
        return clause, f"**Confirmatory map:** {clause}."
    clause = (f"the confirmatory test reads {confirmed['verdict']} on {len(runs)} of "
              f"{shipped['provenance']['configurations']} runs (rules: "
              + "; ".join(f"{k}: {v}" for k, v in confirmed["rules"].items()) + ")")
    lines = []
    for k, v in confirmed["cells"].items():
        d = v["decision"]
        line = f"- {k[0]} on {k[1]}: {'no verdict yet' if v['interim'] else d.verdict}"
        if d.estimate:
            e = d.estimate
            line += f", slope {e.estimate:+.3f} per doubling [{e.low:+.3f}, {e.high:+.3f}], {e.n} seeds"
        if v["interim"]:
            registered = len(registered_runs(k))
            line += f" (interim: {registered - confirmed['missing'][k]} of {registered} registered runs in)"
        elif d.reason:
            line += f" ({d.reason})"
        lines.append(line)
    return clause, f"**Confirmatory map:** {clause}.\n" + "\n".join(lines)
