"""The kernel-growth x tail-index phase diagram: where does a kernel's ratio to the floor grow with N?

App. A's condition says attention's population integrals are finite when the key/value measure has a finite
(q+1)-st moment, q the kernel's growth order (heavytail.names.KernelRow.order). With mirrored Pareto tokens
whose heavier latent axis has tail index a, that is a > q + 1. A trained model meets finitely many tokens,
but the largest of them grows with N like N^(1/a); where the condition fails, the attention output it must
learn through grows with N (heavytail.studies.phase.moment_condition), and the ratio to the sampling floor should
grow too. The trained map (params/grid_phase.yaml) runs kernels of several q on tail regimes of several a
(heavytail.names.TAIL_REGIMES) at several N; per (kernel, regime) the growth rule of
heavytail.studies.claims decides whether the ratio grows, and the prediction is

- *grows* when q + 1 >= a_lo, the smallest tail index the regime draws on its heavier axis (some trials
  then violate the condition), *bounded* otherwise.

The map's claim, "the ratio grows exactly where the condition fails", joins many cells, so its verdict is
read two ways (:func:`map_verdict`, simulated in tests/test_phase_diagram.py): *reproduced* only when every
cell is decided at 95 % and agrees (an intersection-union test: each wrong cell passes with at most 5 %), *not
reproduced* only when some cell contradicts the prediction at the Bonferroni level 1 - 0.05 / (number of cells)
(a union of cells, each tested once, would contradict by chance in most maps otherwise), undecided between.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from heavytail.names import KERNEL_ROWS, TAIL_REGIMES
from heavytail.studies import claims as C
from heavytail.studies.core import map_extent, ratio_at
from heavytail.studies.run_record import records

HEAVIER_AXIS = 1  # axis 1 of a regime carries the heavier tail (heavytail.names.TAIL_REGIMES)


def heavier_range(regime: str) -> tuple[float, float]:
    return TAIL_REGIMES[regime][HEAVIER_AXIS]


def predicted_growth(kernel: str, regime: str) -> bool:
    """Does App. A's condition fail on some trial of ``regime`` for ``kernel`` (q + 1 >= a_lo)?"""
    return KERNEL_ROWS[kernel].order + 1 >= heavier_range(regime)[0]


def _regime(run: Mapping[str, Any]) -> str:
    return run.tail_regime


REFERENCE = "log_elu"  # q -> 0: App. A's condition holds on every regime (a > 1), so its gap is the baseline
REFERENCE_LABEL = {"log_elu": "log-ELU"}


def cells(runs: Sequence[Mapping[str, Any]], reference: str | None = None
          ) -> dict[tuple[str, str], dict[int, dict[int, float]]]:
    """{(kernel, regime): {seed: {N: log ratio to the floor at the run's training N}}}; with ``reference``, the
    log ratio over the reference kernel's of the same seed, regime and N (the reference's own cell left out)."""
    out: dict[tuple[str, str], dict[int, dict[int, float]]] = {}
    for r in records(runs):
        v = ratio_at(r, "train")
        if math.isfinite(v) and v > 0:
            key = (r.kernel, _regime(r))
            out.setdefault(key, {}).setdefault(r.seed, {})[r.n_points] = math.log(v)
    if reference is None:
        return out
    rel: dict[tuple[str, str], dict[int, dict[int, float]]] = {}
    for (kernel, regime), by_seed in out.items():
        base = out.get((reference, regime), {})
        if kernel == reference:
            continue
        for seed, row in by_seed.items():
            paired = {n: v - base[seed][n] for n, v in row.items() if n in base.get(seed, {})}
            if paired:
                rel.setdefault((kernel, regime), {})[seed] = paired
    return rel


def agreement(decision: C.Decision, predicted: bool) -> bool | None:
    """Does a cell's growth decision agree with the prediction (None while undecided)?"""
    if decision.verdict == C.REPRODUCED:
        return predicted
    if decision.verdict == C.NOT_REPRODUCED:
        return not predicted
    return None


def map_verdict(slopes: Mapping[Any, Sequence[float]], predicted: Mapping[Any, bool],
                level: float = C.LEVEL) -> tuple[str, list, list]:
    """The map's verdict from per-cell per-seed slopes and predictions: (verdict, cells contradicting at the
    Bonferroni level, cells contradicting at ``level`` only). See the module docstring."""
    if not slopes:
        return C.NOT_RUN, [], []
    strict = 1 - (1 - level) / len(slopes)
    per_cell = {c: agreement(C.growth_rule(list(v), level=level), predicted[c]) for c, v in slopes.items()}
    against = [c for c, v in slopes.items() if agreement(C.growth_rule(list(v), level=strict), predicted[c]) is False]
    weak = [c for c, a in per_cell.items() if a is False and c not in against]
    if against:
        return C.NOT_REPRODUCED, against, weak
    if all(a is True for a in per_cell.values()):
        return C.REPRODUCED, [], []
    return C.UNDECIDED, [], weak


def map_power(predicted: Mapping[Any, bool], sd: float, seeds: int, grows: float = math.log(1.5),
              m: int = 400, seed: int = 0) -> float:
    """The chance that :func:`map_verdict` says *reproduced* when every cell behaves as predicted (slope
    ``grows`` in log per doubling where predicted, 0 elsewhere), with per-seed slopes spread by ``sd``:
    simulated ``m`` times."""
    rng = np.random.default_rng(seed)
    hits = sum(map_verdict({c: rng.normal(grows if p else 0.0, sd, seeds) for c, p in predicted.items()},
                           predicted)[0] == C.REPRODUCED for _ in range(m))
    return hits / m


def decide(runs: Sequence[Mapping[str, Any]], reference: str | None = None) -> list[dict[str, Any]]:
    """Per (kernel, regime): q, the regime's heavier-axis range, the prediction, the growth rule's decision on
    the per-seed slope of the log ratio on log2 N (its estimate as a factor per doubling), whether the
    decision agrees with the prediction (None while undecided) and the per-seed slopes."""
    rows = []
    for (kernel, regime), by_seed in sorted(cells(runs, reference).items(),
                                            key=lambda kv: (KERNEL_ROWS[kv[0][0]].order, kv[0][1])):
        slopes = C.per_seed_slopes(by_seed)
        d = C.growth_rule(list(slopes.values()))
        pred = predicted_growth(kernel, regime)
        agree = agreement(d, pred)
        e = d.estimate
        rows.append({"kernel": kernel, "q": KERNEL_ROWS[kernel].order, "regime": regime,
                     "a_lo": heavier_range(regime)[0], "a_hi": heavier_range(regime)[1],
                     "predicted": "grows" if pred else "bounded", "verdict": d.verdict,
                     "per doubling": math.exp(e.estimate) if e else math.nan,
                     "low": math.exp(e.low) if e and e.n > 1 else math.nan,
                     "high": math.exp(e.high) if e and e.n > 1 else math.nan,
                     "seeds": len(slopes), "agree": agree, "reason": d.reason, "slopes": list(slopes.values())})
    return rows


def findings(runs: Sequence[Mapping[str, Any]], static_rows: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The phase diagram's claims (heavytail.studies.claims records): the joint claim on the ratio to the floor
    (the statistic fixed before the runs), the same on the gap to log-ELU (added after the first runs: the floor
    shrinks with N, so a model with an N-independent error has a ratio to the floor that grows too, as log-ELU's
    did on the one-trial-per-step kernel-gap map), softmax's gap on every regime, and the static test."""
    out = [_joint_claim(runs, None), _joint_claim(runs, REFERENCE)]
    out.append(_softmax_everywhere(runs))
    if static_rows:
        out.extend(static_claims(static_rows))
    return out


STATIC_MARGIN = 0.1  # an exponent within +-0.1 of the prediction counts as matching it


def static_verdict(rows: Sequence[Mapping[str, Any]], margin: float = STATIC_MARGIN) -> tuple[str, list, list]:
    """The static claim, "the exponent matches App. A's prediction within +-``margin``", from
    :func:`heavytail.studies.phase.moment_condition.exponent_table`'s rows, reading the Bonferroni-level intervals
    (dozens of cells read at 95 % each would miss one by chance in most tests) as an equivalence test:
    *reproduced* when every cell's interval lies within ``margin`` of its prediction; *not reproduced* when
    some cell's interval lies wholly outside that band (its exponent differs by more than the margin);
    undecided otherwise. An interval that excludes the exact prediction but stays within the band is a match:
    the prediction is asymptotic, and a slope fitted over finite N carries a crossover bias the claim's
    tolerance allows for (such cells are reported, see :func:`static_off`). Returns (verdict, cells outside the
    band, cells straddling its edge)."""
    def inside(r):
        return r["predicted"] - margin <= r["joint_low"] and r["joint_high"] <= r["predicted"] + margin

    def outside(r):
        return r["joint_high"] < r["predicted"] - margin or r["joint_low"] > r["predicted"] + margin

    miss = [r for r in rows if outside(r)]
    wide = [r for r in rows if not inside(r) and not outside(r)]
    if miss:
        return C.NOT_REPRODUCED, miss, wide
    return (C.UNDECIDED if wide else C.REPRODUCED), miss, wide


def static_off(rows: Sequence[Mapping[str, Any]]) -> list:
    """Cells whose Bonferroni interval excludes the exact asymptotic prediction (within the band or not)."""
    return [r for r in rows if not r["joint_holds"]]


# The static claim read twice: App. A states the exponent for kernels of finite growth order q; for softmax
# (q = infinity) the prediction is this repository's extrapolation (the q -> infinity limit, 1/a), not the paper's.
STATIC_IDS = ("static-exponent-polynomial", "static-exponent-softmax")
STATIC_SOURCE = "the shipped static reference"  # what decides the static claims, whatever map the others read


def static_claims(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The static test split by what it tests: the kernels of finite order against App. A's exponent, and softmax
    against the extrapolation (a claim each, for the kernels that have cells)."""
    poly = [r for r in rows if r["kernel"] != "softmax"]
    soft = [r for r in rows if r["kernel"] == "softmax"]
    out = []
    if poly:
        out.append(_static_claim(poly, STATIC_IDS[0], "The static growth exponent of attention's output matches App. "
                                 f"A's prediction for the kernels of finite order q (within +-{STATIC_MARGIN:g})",
                                 "App. A"))
    if soft:
        out.append(_static_claim(soft, STATIC_IDS[1], "Softmax's static growth exponent matches this repository's "
                                 f"extrapolation of App. A to q = infinity, 1/a (within +-{STATIC_MARGIN:g})",
                                 "App. A, extrapolated (beyond the paper)"))
    return out


def _static_claim(rows: Sequence[Mapping[str, Any]], id: str = "static-exponent-matches",
                  claim: str = f"The static growth exponent of attention's output matches App. A's prediction (within "
                               f"+-{STATIC_MARGIN:g})", source: str = "App. A (beyond the paper)") -> dict[str, Any]:
    verdict, miss, wide = static_verdict(rows)
    level = rows[0]["joint_level"]

    def cell(r):
        return (f"{r['kernel']} at a = {r['a']:g}: predicted {r['predicted']:.2f}, measured {r['measured']:.2f} "
                f"[{r['joint_low']:.2f}, {r['joint_high']:.2f}]")

    off = [r for r in static_off(rows) if r not in miss]
    evidence = (f"Intervals at the Bonferroni level {level:.4f} over {len(rows)} cells. "
                + (f"Outside +-{STATIC_MARGIN:g}: {'; '.join(cell(r) for r in miss)}. " if miss else
                   f"No interval lies outside +-{STATIC_MARGIN:g} of its prediction. ")
                + (f"Straddling +-{STATIC_MARGIN:g}: {'; '.join(cell(r) for r in wide)}. " if wide else "")
                + (f"Within the band but excluding the exact asymptotic value (finite-N crossover): "
                   f"{'; '.join(cell(r) for r in off)}." if off else ""))
    return C.Claim(
        id, claim, source, "not tested in the paper", verdict,
        statistic=f"cells not outside +-{STATIC_MARGIN:g} (of {len(rows)})",
        estimate=float(len(rows) - len(miss)),
        seeds=None, scale=f"{len(rows)} (kernel, a) cells, N to 2^{_log2_max(rows)}"
        + (f", {_reps_text(rows)} repetitions per a" if rows[0].get("reps") else ""),
        evidence=evidence.strip(), needs="more repetitions or larger N, so that every interval lies within "
        f"+-{STATIC_MARGIN:g} of its prediction" if verdict == C.UNDECIDED else "",
        decided_by={"notebook": "08_phase_diagram", "section": "The static test", "map": STATIC_SOURCE,
                    "figures": ["static_exponents"]}).to_dict()


def _joint_claim(runs: Sequence[Mapping[str, Any]], reference: str | None) -> dict[str, Any]:
    rows = decide(runs, reference)
    decided = [r for r in rows if r["agree"] is not None]
    disagree = [r for r in decided if not r["agree"]]
    verdict, against, weak = map_verdict({(r["kernel"], r["regime"]): r["slopes"] for r in rows},
                                         {(r["kernel"], r["regime"]): r["predicted"] == "grows" for r in rows})
    needs = {C.NOT_RUN: "the phase map (params/grid_phase.yaml) has not run",
             C.UNDECIDED: f"every cell decided at 95 % ({len(decided)} of {len(rows)} are); more seeds or N"
                          + (f"; against the prediction at 95 % but not after correcting for {len(rows)} cells: "
                             + ", ".join(f"{k} on {g}" for k, g in weak) if weak else "")}.get(verdict, "")
    # Cells grouped by outcome, each named once; the slopes with their intervals are phase_table's rows.
    groups = (("against", disagree), ("agreeing", [r for r in decided if r["agree"]]),
              ("undecided", [r for r in rows if r["agree"] is None]))
    cells_text = ". ".join(f"{name.capitalize()}: " + ", ".join(f"{r['kernel']} on {r['regime']} (predicted "
                                                                  f"{r['predicted']})" for r in group)
                           for name, group in groups if group) + ". Each cell's slope: notebook 08's per-cell tables"
    if reference is None:
        cid, what, source = ("phase-growth-where-condition-fails", "ratio to the floor", "App. A (beyond the paper)")
    else:
        cid, what, source = ("phase-gap-where-condition-fails", f"gap to {REFERENCE_LABEL.get(reference, reference)}",
                             "App. A (beyond the paper); statistic chosen after the first 64 runs")
    return C.Claim(cid, f"A kernel's {what} grows with N exactly where App. A's condition fails (q + 1 >= a)",
                   source, "not tested in the paper", verdict, statistic="decided cells agreeing with the prediction",
                   estimate=float(len(decided) - len(disagree)) if decided else None,
                   seeds=min((r["seeds"] for r in rows), default=0), scale=map_extent(runs) if runs else "",
                   evidence=(f"{len(decided)} of {len(rows)} cells decided at 95 %, {len(disagree)} against the "
                             f"prediction" + (f" ({', '.join(f'{k} on {g}' for k, g in against)} at the Bonferroni "
                                              f"level 1 - 0.05/{len(rows)})" if against else "")
                             + ". " + cells_text) if rows else "", needs=needs,
                   decided_by={"notebook": "08_phase_diagram", "section": "The trained phase diagram",
                               "figures": ["phase_diagram" if reference is None else "phase_diagram_gap"]}).to_dict()


def _softmax_everywhere(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """'Softmax's gap to log-ELU grows with N at every tail regime': per regime, the growth rule on the per-seed
    slope of log(softmax ratio / log-ELU ratio) on log2 N; reproduced when every regime's is, not reproduced when
    one is shown not to grow, undecided otherwise."""
    gaps = cells(runs, REFERENCE)
    decisions = {reg: C.growth_rule(list(C.per_seed_slopes(gaps.get(("softmax", reg), {})).values()))
                 for reg in sorted({reg for _, reg in cells(runs)})}
    verdicts = [d.verdict for d in decisions.values()]
    if not decisions or all(v == C.NOT_RUN for v in verdicts):
        verdict = C.NOT_RUN
    elif any(v == C.NOT_REPRODUCED for v in verdicts):
        verdict = C.NOT_REPRODUCED
    elif all(v == C.REPRODUCED for v in verdicts):
        verdict = C.REPRODUCED
    else:
        verdict = C.UNDECIDED
    evidence = "; ".join(f"{reg}: {d.verdict}" + (f", x{C.fmt(math.exp(d.estimate.estimate))} per doubling "
                                                  f"({C.fmt(math.exp(d.estimate.low))}-{C.fmt(math.exp(d.estimate.high))})"
                                                  if d.estimate and d.estimate.n > 1 else "")
                         for reg, d in decisions.items())
    return C.Claim("softmax-gap-every-regime", "Softmax's gap to log-ELU grows with N at every tail regime",
                   "App. A (beyond the paper)", "not tested in the paper", verdict,
                   seeds=min((d.estimate.n for d in decisions.values() if d.estimate), default=0),
                   scale=map_extent(runs) if runs else "", evidence=evidence,
                   needs="" if verdict in (C.REPRODUCED, C.NOT_REPRODUCED) else
                   "; ".join(f"{reg}: {d.reason}" for reg, d in decisions.items()
                             if d.verdict in (C.UNDECIDED, C.NOT_RUN) and d.reason),
                   decided_by={"notebook": "08_phase_diagram", "section": "The trained phase diagram",
                               "figures": ["phase_curves"]}).to_dict()


def _reps_text(rows: Sequence[Mapping[str, Any]]) -> str:
    reps = sorted({r["reps"] for r in rows if r.get("reps")})
    return f"{reps[0]}" if len(reps) == 1 else f"{reps[0]}-{reps[-1]}"


def _log2_max(rows: Sequence[Mapping[str, Any]]) -> str:
    n = max((r.get("n_max", 0) for r in rows), default=0)
    return str(int(math.log2(n))) if n else "?"


def phase_table(rows: Sequence[Mapping[str, Any]], what: str = "ratio to the floor") -> dict[str, Any]:
    """:func:`decide`'s rows as a table (heavytail.studies.tables)."""
    return {"title": f"Per (kernel, tail regime): the {what}, change per doubling of N",
            "columns": ["kernel", "q", "regime", "heavier-axis a", "predicted", "per doubling (95 %)", "seeds",
                        "verdict", "agrees"],
            "rows": [{"kernel": r["kernel"], "q": f"{r['q']:g}", "regime": r["regime"],
                      "heavier-axis a": f"{r['a_lo']:.3g}-{r['a_hi']:.3g}", "predicted": r["predicted"],
                      "per doubling (95 %)": f"x{C.fmt(r['per doubling'])} ({C.fmt(r['low'])}-{C.fmt(r['high'])})",
                      "seeds": r["seeds"], "verdict": {"text": r["verdict"], "color": C.VERDICT_COLORS[r["verdict"]]},
                      "agrees": {None: "undecided", True: "yes", False: "no"}[r["agree"]]} for r in rows],
            "notes": f"per seed: slope of the log {what} (at the training N) on log2 N; t interval over seeds"}


def band_table(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per run, the Hill-band miss share (heavytail.harness.evaluate) of the output and of the target."""
    rows = [{"run": r["name"], "axis 1: output": f"{r['hill_band']['axes']['1']['output']:.2f}",
             "axis 1: i.i.d. target": f"{r['hill_band']['axes']['1']['target']:.2f}",
             "excess (largest axis)": f"{r['hill_band']['excess']:+.2f}"} for r in runs if r.get("hill_band")]
    return {"title": "Share of Hill thresholds whose band excludes the known index (mean over evaluation trials)",
            "columns": ["run", "axis 1: output", "axis 1: i.i.d. target", "excess (largest axis)"], "rows": rows,
            "notes": "k from 1 % to 20 % of the evaluation N (heavytail.harness.evaluate.band_k_range)"}


def static_verdict_text(rows: Sequence[Mapping[str, Any]], margin: float = STATIC_MARGIN) -> str:
    """:func:`static_verdict` on the shipped reference's cells as one paragraph: the verdict, how many cells lie within,
    straddle or lie outside +-``margin``, the Bonferroni half-widths, and each cell outside or straddling."""
    verdict, outside, straddle = static_verdict(rows, margin)
    half = [(r["joint_high"] - r["joint_low"]) / 2 for r in rows]
    out = "; ".join(f"{r['kernel']} at a = {r['a']:g} (predicted {r['predicted']:.2f}, measured {r['measured']:.2f} "
                    f"[{r['joint_low']:.2f}, {r['joint_high']:.2f}])" for r in outside) or "none"
    edge = "; ".join(f"{r['kernel']} at a = {r['a']:g} ({r['measured']:.2f} [{r['joint_low']:.2f}, {r['joint_high']:.2f}] "
                     f"against {r['predicted']:.2f})" for r in straddle) or "none"
    return (f"**The static verdict: {verdict}.** Of {len(rows)} cells, {len(rows) - len(outside) - len(straddle)} have "
            f"intervals within +-{margin:g} of the prediction, {len(straddle)} straddle its edge and {len(outside)} lie "
            f"wholly outside it; Bonferroni half-widths {min(half):.3f} to {max(half):.3f} (median "
            f"{float(np.median(half)):.3f}). Outside: {out}. Straddling: {edge}.")


def slope_spread(rows: Sequence[Mapping[str, Any]]) -> float:
    """The map's median per-seed slope spread (standard deviation over seeds, per cell): what the power of a rule
    on slopes is computed at; NaN when no cell has two seeds."""
    sds = [float(np.std(r["slopes"], ddof=1)) for r in rows if len(r["slopes"]) > 1]
    return float(np.median(sds)) if sds else math.nan


def power_text(rows: Sequence[Mapping[str, Any]], seeds: Sequence[int] = (5, 10, 20), m: int = 200) -> str:
    """The joint claim's power at the map's own slope spread, every cell as predicted, in one paragraph ('' when the
    spread is unknown)."""
    spread = slope_spread(rows)
    if not math.isfinite(spread):
        return ""
    predicted = {(r["kernel"], r["regime"]): r["predicted"] == "grows" for r in rows}
    power = {k: map_power(predicted, spread, k, m=m) for k in seeds}
    return (f"**Power of the joint claim.** With the map's median per-seed slope spread ({spread:.3f} in log per "
            "doubling of N) and every cell as predicted (x1.5 per doubling where it grows), the rule reads "
            "*reproduced* in " + ", ".join(f"{v:.0%} of maps at {k} seeds" for k, v in power.items())
            + f" ({m} simulated maps each): a cell predicted bounded is decided only when its interval excludes growth "
            "of x1.10 per doubling.")


def scope_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the trained map can and cannot test, from its cells: the candidate boundary rules disagree on few of them."""
    from heavytail.studies.phase import confirm

    deciding = confirm.deciding_cells(sorted({r["kernel"] for r in rows}), sorted({r["regime"] for r in rows}))
    return (f"- **Can:** say, per (kernel, regime) cell, whether the ratio to the floor (or the gap to log-ELU) grows "
            f"with the training N, at {min(r['seeds'] for r in rows)} seeds per cell.\n"
            "- **Cannot:** tell App. A's boundary from its neighbours. The candidate rules "
            + ", ".join(f"'{k}'" for k in confirm.RULES) + f" disagree on only {len(deciding)} of the map's cells ("
            + ", ".join(f"{k} on {g}" for k, g in deciding) + "); and the ratio to the floor grows wherever the floor "
            "falls, so its growth is not the population divergence. The confirmatory test below is designed for that.")
