"""The claims P1-P5 of Tables 5-6 at Table 3's model, decided by the rules of
:mod:`heavytail.studies.collapse.tables56` (registered there before any of the grid's runs was read).

Runs are map records (:func:`heavytail.studies.run_summary.run_summary`) of the Tables 5-6 grid and of the collapse
ladder (rung R2 is three of the cells); :func:`findings` decides every claim, :func:`shapes` classifies every softmax
run's training trace (P5), and each rate verdict carries its re-reading at the shares of :data:`tables56.SWEEP`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

from heavytail.names import SLOWER_KERNELS, kernel_label
from heavytail.studies import claims as C
from heavytail.studies.collapse import tables56 as T
from heavytail.studies.core import map_extent, paired_by_seed
from heavytail.studies.run_record import records

NOTEBOOK = "10_tables56"
Run = Mapping[str, Any]


def by_cell(runs: Sequence[Run]) -> dict[T.Cell, list[Run]]:
    """Runs grouped by their Tables 5-6 cell, each list ordered by seed (one run per seed: a later duplicate is
    refused, since two runs of one seed would weigh a seed twice)."""
    out: dict[T.Cell, dict[int, Run]] = {}
    for r in records(runs):
        cell = T.cell_of(r.config)
        if cell is None:
            continue
        seeds = out.setdefault(cell, {})
        seed = r.seed
        if seed in seeds:
            raise ValueError(f"two runs of {cell.label}, seed {seed} ({seeds[seed].get('name')} and {r.get('name')}): "
                             "ship one")
        seeds[seed] = r
    return {c: [s[k] for k in sorted(s)] for c, s in out.items()}


def labelled(run: Run, share: float = T.SHARE) -> bool:
    """Whether at least ``share`` of the run's evaluation trials collapsed (the run label at ``share``)."""
    return float(run["collapse"]["fraction"]) >= share


def ratio(run: Run) -> float:
    return float(run["median"]["ratio"])


def rate(runs: Sequence[Run], share: float = T.SHARE) -> C.Decision:
    return C.rate_rule(sum(labelled(r, share) for r in runs), len(runs), min_seeds=T.MIN_SEEDS)


def count(runs: Sequence[Run], share: float = T.SHARE) -> str:
    return f"{sum(labelled(r, share) for r in runs)} of {len(runs)}"


def _below(d: C.Decision) -> bool:
    return d.verdict == C.NOT_REPRODUCED  # the interval lies below 1/2


def _above(d: C.Decision) -> bool:
    return d.verdict == C.REPRODUCED  # the interval lies above 1/2


def _sweep(decide: Callable[[float], C.Decision]) -> str:
    """Whether a rate verdict survives the shares of SWEEP: "; survives shares 0.4 and 0.6" or what each reads."""
    base = decide(T.SHARE).verdict
    if base == C.NOT_RUN:
        return ""
    at = {s: decide(s).verdict for s in T.SWEEP}
    if all(v == base for v in at.values()):
        return f"; the verdict survives labelling at shares {' and '.join(f'{s:g}' for s in T.SWEEP)}"
    return "; at other shares: " + ", ".join(f"{s:g}: {v}" for s, v in at.items())


def _log_ratio(run: Run) -> float:
    r = ratio(run)
    return math.log(r) if r > 0 and math.isfinite(r) else math.nan


def _decided_by(section: str) -> dict[str, Any]:
    return {"notebook": NOTEBOOK, "section": section, "figures": ["tables56"]}


def _claim(id: str, claim: str, paper: str, d: C.Decision, statistic: str, runs: Sequence[Run], evidence: str,
           section: str, transform=lambda v: v) -> dict[str, Any]:
    return C.make_claim(id, claim, "Sec. 4.2, Tables 5-6, App. I", paper, d, statistic, map_extent(runs), evidence,
                        _decided_by(section), transform).to_dict()


# ------------------------------------------------------------------------------------------------ P1
def p1_collapse(soft: Sequence[Run], slower: Mapping[str, Sequence[Run]], share: float = T.SHARE) -> C.Decision:
    """Softmax's rate above 1/2 and every slower kernel's below: reproduced; softmax's below: not reproduced."""
    s = rate(soft, share)
    if s.verdict == C.NOT_RUN:
        return s
    others = {k: rate(v, share) for k, v in slower.items()}
    if _above(s) and others and all(_below(o) for o in others.values()):
        return C.Decision(C.REPRODUCED, s.estimate, "most softmax runs collapsed and most runs of each slower kernel did not")
    if _below(s):
        return C.Decision(C.NOT_REPRODUCED, s.estimate, "the interval excludes most softmax runs collapsing")
    missing = [kernel_label(k) for k in SLOWER_KERNELS if k not in slower or not _below(others[k])]
    why = f"not shown below 1/2 for {', '.join(missing)}" if _above(s) else s.reason
    return C.Decision(C.UNDECIDED, s.estimate, why)


def p1(cs: Mapping[T.Cell, Sequence[Run]]) -> list[dict[str, Any]]:
    out = []
    for col in T.HEAVY:
        soft = cs.get(T.Cell("post", "softmax", False, col), [])
        slower = {k: cs[T.Cell("post", k, False, col)] for k in SLOWER_KERNELS if T.Cell("post", k, False, col) in cs}
        every = [*soft, *(r for v in slower.values() for r in v)]
        d = p1_collapse(soft, slower)
        counts = ", ".join(f"{kernel_label(k)} {count(v)}" for k, v in slower.items())
        out.append(_claim(
            f"p1-collapse-{col}", f"Post-norm softmax collapses without symlog on the {T.COLUMN_LABELS[col]}, and the "
            "slower kernels do not", "softmax collapses; squared, linear and log ELU do not (Tables 5-6)", d,
            "share of softmax runs labelled collapsed", every,
            f"runs labelled collapsed: softmax {count(soft)}, {counts or 'no slower kernel run'}"
            + _sweep(lambda s, soft=soft, slower=slower: p1_collapse(soft, slower, s)), "P1"))
        for k in SLOWER_KERNELS:
            other = slower.get(k, [])
            diffs = paired_by_seed(soft, other, _log_ratio)
            d = C.graded_rule(list(diffs.values()), min_seeds=T.MIN_SEEDS) if diffs else C.Decision(
                C.NOT_RUN, None, "no seed has both kernels")
            out.append(_claim(
                f"p1-distance-{col}-{k}", f"{kernel_label(k)} reaches a lower energy distance than softmax on the "
                f"{T.COLUMN_LABELS[col]} (post-norm, none)", "the slower kernels reach lower energy distances",
                d, f"softmax / {kernel_label(k)} ratio to the floor, paired by seed", [*soft, *other],
                "per seed: " + ", ".join(f"{s}: x{math.exp(v):.3g}" for s, v in diffs.items()), "P1", math.exp))
    return out


# ------------------------------------------------------------------------------------------------ P2, P4
def p2_decision(soft: Sequence[Run], col: str, share: float = T.SHARE) -> C.Decision:
    """With symlog: on the matrix inverse softmax avoids collapse (rate below 1/2), on the sheared swap it still
    collapses (rate above 1/2)."""
    d = rate(soft, share)
    if d.verdict in (C.NOT_RUN, C.UNDECIDED):
        return d
    expect_collapse = col == "swap-pareto"
    holds = _above(d) if expect_collapse else _below(d)
    return C.Decision(C.REPRODUCED if holds else C.NOT_REPRODUCED, d.estimate, d.reason)


def p2(cs: Mapping[T.Cell, Sequence[Run]]) -> list[dict[str, Any]]:
    out = []
    for col in T.HEAVY:
        soft = cs.get(T.Cell("post", "softmax", True, col), [])
        log = cs.get(T.Cell("post", "log_elu", True, col), [])
        what = "still collapses" if col == "swap-pareto" else "avoids collapse"
        out.append(_claim(
            f"p2-symlog-{col}", f"With symlog, post-norm softmax {what} on the {T.COLUMN_LABELS[col]}",
            f"with symlog softmax {what} here (Tables 5-6)", p2_decision(soft, col),
            "share of softmax runs labelled collapsed", [*soft, *log],
            f"runs labelled collapsed with symlog: softmax {count(soft)}, log-ELU {count(log)}"
            + _sweep(lambda s, soft=soft, col=col: p2_decision(soft, col, s)), "P2"))
    return out


def avoids(runs: Sequence[Run], share: float = T.SHARE) -> C.Decision:
    """Most runs do not collapse: the rate's interval below 1/2 is reproduced, above 1/2 not reproduced."""
    d = rate(runs, share)
    if d.verdict in (C.NOT_RUN, C.UNDECIDED):
        return d
    return C.Decision(C.REPRODUCED if _below(d) else C.NOT_REPRODUCED, d.estimate, d.reason)


def p4(cs: Mapping[T.Cell, Sequence[Run]]) -> list[dict[str, Any]]:
    out = []
    others = [r for c, v in cs.items() if c.norm == "pre" and c not in T.CLAIM_BEARING for r in v]
    for col in T.HEAVY:
        soft = cs.get(T.Cell("pre", "softmax", False, col), [])
        out.append(_claim(
            f"p4-prenorm-{col}", f"Pre-norm softmax does not collapse on the {T.COLUMN_LABELS[col]} (none)",
            "pre-norm models do not collapse, for any kernel or transform", avoids(soft),
            "share of pre-norm softmax runs labelled collapsed", soft,
            f"pre-norm softmax runs labelled collapsed: {count(soft)}; the other pre-norm cells (one seed each, "
            f"descriptive): {count(others)}" + _sweep(lambda s, soft=soft: avoids(soft, s)), "P4"))
    return out


# ------------------------------------------------------------------------------------------------ P3
def p3_avoid(soft: Sequence[Run], log: Sequence[Run], share: float = T.SHARE) -> C.Decision:
    s, lg = avoids(soft, share), avoids(log, share)
    if s.verdict == C.NOT_RUN:
        return s
    if s.verdict == C.REPRODUCED and lg.verdict == C.REPRODUCED:
        return C.Decision(C.REPRODUCED, s.estimate, "neither kernel's runs mostly collapse")
    if C.NOT_REPRODUCED in (s.verdict, lg.verdict):
        return C.Decision(C.NOT_REPRODUCED, s.estimate, "most runs of one kernel collapse on Gaussian data")
    return C.Decision(C.UNDECIDED, s.estimate, s.reason or lg.reason)


def similar(log_ratios: Sequence[float]) -> C.Decision:
    """Within x SIMILAR_MARGIN either way by TOST (reproduced); the 95 % interval outside it (not reproduced)."""
    if not log_ratios:
        return C.Decision(C.NOT_RUN, None, "no seed has both kernels")
    est = C.t_interval(log_ratios)
    m = math.log(T.SIMILAR_MARGIN)
    if est.n < T.MIN_SEEDS:
        return C.Decision(C.UNDECIDED, est, f"{est.n} seeds; the rule needs >= {T.MIN_SEEDS}")
    if C.tost_equivalent(log_ratios, m):
        return C.Decision(C.REPRODUCED, est, f"equivalent within x{T.SIMILAR_MARGIN:g} (TOST at 5 %)")
    if est.low > m or est.high < -m:
        return C.Decision(C.NOT_REPRODUCED, est, f"the interval lies outside x{T.SIMILAR_MARGIN:g}")
    return C.Decision(C.UNDECIDED, est, f"neither within nor outside x{T.SIMILAR_MARGIN:g}; more seeds")


def p3(cs: Mapping[T.Cell, Sequence[Run]]) -> list[dict[str, Any]]:
    col = "swap-gaussian"
    soft = cs.get(T.Cell("post", "softmax", False, col), [])
    log = cs.get(T.Cell("post", "log_elu", False, col), [])
    rest = {k: cs.get(T.Cell("post", k, False, col), []) for k in ("squared_elu", "linear_elu")}
    diffs = paired_by_seed(soft, log, _log_ratio)
    return [
        _claim("p3-gaussian-collapse", "On the Gaussian sheared swap post-norm softmax and log-ELU avoid collapse",
               "all four kernels avoid collapse on Gaussian data (Table 5)", p3_avoid(soft, log),
               "share of softmax runs labelled collapsed", [*soft, *log],
               f"runs labelled collapsed: softmax {count(soft)}, log-ELU {count(log)}; one seed each (descriptive): "
               + ", ".join(f"{kernel_label(k)} {count(v)}" for k, v in rest.items())
               + _sweep(lambda s: p3_avoid(soft, log, s)), "P3"),
        _claim("p3-gaussian-similar", "On the Gaussian sheared swap softmax and log-ELU perform similarly (within "
               f"x{T.SIMILAR_MARGIN:g})", "the kernels perform similarly on Gaussian data (Table 5: 1.05-1.12)",
               similar(list(diffs.values())), "softmax / log-ELU ratio to the floor, paired by seed", [*soft, *log],
               "per seed: " + ", ".join(f"{s}: x{math.exp(v):.3g}" for s, v in diffs.items()), "P3", math.exp),
    ]


# ------------------------------------------------------------------------------------------------ P5
def trace_shape(run: Run, partner: Run) -> dict[str, Any]:
    """:func:`tables56.shape` of a softmax run against its log-ELU partner, on each trace's regular rows."""
    every = run.log_every
    a = T.regular_rows(run["trace"], every)
    b = T.regular_rows(partner["trace"], partner.log_every)
    return T.shape(*a, *b)


def _has_loss(run: Run) -> bool:
    trace = run.get("trace") or {}
    return bool(trace.get("step")) and bool(trace.get("loss"))


def shapes(cs: Mapping[Any, Sequence[Run]], partner_of: Callable[[Any], Any]) -> dict[Any, dict[int, dict[str, Any]]]:
    """Per group of softmax runs (a cell, or a ladder rung), per seed, the P5 shape against the run of the partner
    group (``partner_of(group)``) with the same seed; seeds without a partner run are left out."""
    out: dict[Any, dict[int, dict[str, Any]]] = {}
    for group, runs in cs.items():
        if partner_of(group) is None:
            continue
        partner = {r.seed: r for r in cs.get(partner_of(group), [])}
        out[group] = {r.seed: trace_shape(r, partner[r.seed])
                      for r in runs if r.seed in partner
                      and _has_loss(r) and _has_loss(partner[r.seed])}
    return out


def cell_partner(cell: T.Cell) -> T.Cell | None:
    """The log-ELU cell a softmax cell's shape is read against (None for a non-softmax cell)."""
    return T.Cell(cell.norm, "log_elu", cell.symlog, cell.column) if cell.kernel == "softmax" else None


# Fig. 13's divergence step, without and with symlog (App. I).
_FIG13_STEP = {False: "~3,500", True: "~4,500"}


def p5(cs: Mapping[T.Cell, Sequence[Run]]) -> list[dict[str, Any]]:
    found = shapes(cs, cell_partner)
    out = []
    # Fig. 13 draws the sheared swap with and without symlog; with symlog the matrix inverse does not collapse (P2).
    for symlog, col in (*((False, c) for c in T.HEAVY), (True, "swap-pareto")):
        cell = T.Cell("post", "softmax", symlog, col)
        per_seed = found.get(cell, {})
        hits = sum(v["shape"] == T.SHAPES[0] for v in per_seed.values())
        d = C.rate_rule(hits, len(per_seed), min_seeds=T.MIN_SEEDS)
        counts = {s: sum(v["shape"] == s for v in per_seed.values()) for s in T.SHAPES}
        out.append(_claim(
            f"p5-shape-{'symlog-' if symlog else ''}{col}", f"{'With symlog, p' if symlog else 'P'}ost-norm softmax "
            f"first learns, then diverges abruptly and stays (Fig. 13), on the {T.COLUMN_LABELS[col]}",
            "softmax first descends with the other kernels (1.8e-2 at step 733), then diverges abruptly at step "
            f"{_FIG13_STEP[symlog]}{' with symlog' if symlog else ''} to a value it keeps (Fig. 13)", d,
            "share of softmax runs learned, then diverged", [*cs.get(cell, []), *cs.get(cell_partner(cell), [])],
            "shapes: " + ", ".join(f"{s} {n}" for s, n in counts.items() if n) + "; per seed: "
            + ", ".join(f"{s}: {v['shape']}" + (f" at step {v['diverged_at']:,}" if v["diverged_at"] else "")
                        for s, v in per_seed.items()), "P5"))
    return out


def findings(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Every claim P1-P5 (records of :class:`heavytail.studies.claims.Claim`), from the grid's and the ladder's
    runs together (R2's cells come from the ladder)."""
    cs = by_cell(runs)
    return [*p1(cs), *p2(cs), *p3(cs), *p4(cs), *p5(cs)]
