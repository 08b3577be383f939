"""The kernel-gap claims, decided by the calibrated rules of :mod:`heavytail.studies.claims`.

Each claim names its rule, committed before any of the one-trial-per-step map's results were read:

- *the gap grows with N*: per seed, the slope of log(softmax ratio / log-ELU ratio) on log2 N (runs of one
  seed saw the same task instances at every N), then the t interval over seeds (:func:`claims.growth_rule`);
  decided once on ratios at the common evaluation N and once on ratios at each run's training N;
- *softmax's gap is (partly) numerical*: the paired SDPA / exact float32 ratio at the largest N with enough
  seeds, with a +-20 % equivalence margin (:func:`claims.equivalence_rule`);
- *softmax collapses more than log-ELU* (graded): the paired difference of the collapsed fraction of
  evaluation trials at the training N, at the largest N (:func:`claims.graded_rule`);
- *softmax collapses at CPU scale* (the paper's label): the Clopper-Pearson interval of the share of
  softmax runs labelled collapsed, at the largest N (:func:`claims.rate_rule`).

Every record carries its statistic with interval, the seeds, and the scale that decided it.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from scipy import stats

from heavytail.harness.config import RunConfig
from heavytail.studies import claims as C
from heavytail.studies.paper_numbers import paper_gap
from heavytail.studies.core import (LOG_ELU, SOFTMAX_EXACT, SOFTMAX_SDPA, Cell, cells, collapsed_fraction_at,
                                          collapsed_steps,
                                          map_extent, paired_difference, paired_ratio, ratio_at, sizes,
                                          variant, variant_name, variants)
from heavytail.studies.run_record import records

NOTEBOOK = "07_kernel_gap"
SECTIONS = {
    "growth": ("The gap against N", ["gap_vs_n", "growth_slopes"]),
    "numerics": ("The numerics behind it", ["numerics_vs_n", "gap_vs_n"]),
    "collapse": ("Collapse as a graded outcome", ["collapse_graded"]),
}


def _decided_by(key: str) -> dict[str, Any]:
    section, figures = SECTIONS[key]
    return {"notebook": NOTEBOOK, "section": section, "figures": figures}


def _runs_of(cs: Mapping[tuple, Cell], keys) -> list[Mapping[str, Any]]:
    return [r for k in keys if k in cs for r in cs[k].runs]


def log_ratios_by_seed(cs: Mapping[tuple, Cell], a, b=LOG_ELU, at: str = "common") -> dict[int, dict[int, float]]:
    """{seed: {N: log(ratio of a / ratio of b)}} over every N where both ran."""
    out: dict[int, dict[int, float]] = {}
    for n in sizes(cs):
        for s, v in paired_ratio(cs, a, b, n, at).items():
            out.setdefault(s, {})[n] = math.log(v)
    return out


def growth(cs: Mapping[tuple, Cell], a, b=LOG_ELU, at: str = "common") -> tuple[C.Decision, dict[int, float]]:
    """The growth rule on ``a`` over ``b``: its decision and the per-seed slopes (log-change per doubling)."""
    slopes = C.per_seed_slopes(log_ratios_by_seed(cs, a, b, at))
    return C.growth_rule(list(slopes.values())), slopes


def growth_table(runs: Sequence[Mapping[str, Any]], at: str = "common") -> dict[str, Any]:
    """Every variant against log-ELU: the gap's change per doubling of N with its 95 % interval and verdict."""
    cs = cells(runs)
    rows = []
    for v in variants(cs):
        if v == LOG_ELU:
            continue
        d, slopes = growth(cs, v, LOG_ELU, at)
        ns = sorted({n for n in sizes(cs) if paired_ratio(cs, v, LOG_ELU, n, at)})
        e = d.estimate
        rows.append({
            "variant / log-ELU": variant_name(v), "N": ", ".join(map(str, ns)), "seeds": len(slopes),
            "x per doubling of N": C.fmt(math.exp(e.estimate)) if e else "n/a",
            "95 % interval": f"{C.fmt(math.exp(e.low))}-{C.fmt(math.exp(e.high))}" if e and e.n > 1 else "n/a",
            "verdict": {"text": d.verdict, "bold": True, "color": C.VERDICT_COLORS[d.verdict]},
        })
    where = "the common evaluation N" if at == "common" else "each run's training N"
    return {"title": f"How each kernel's gap to log-ELU changes per doubling of N (ratios at {where})",
            "columns": ["variant / log-ELU", "N", "seeds", "x per doubling of N", "95 % interval", "verdict"],
            "rows": rows,
            "notes": "per seed: least-squares slope of log(variant ratio / log-ELU ratio) on log2 N; then the mean "
                     "over seeds with its t interval (heavytail.studies.claims.growth_rule)"}


def _numerics_n(cs: Mapping[tuple, Cell]) -> int | None:
    """The largest N where both softmax paths have the most paired seeds (the N that decides)."""
    best = None
    for n in sizes(cs):
        k = len(paired_ratio(cs, SOFTMAX_SDPA, SOFTMAX_EXACT, n))
        if k and (best is None or k >= best[1]):
            best = (n, k)
    return None if best is None else best[0]


def findings(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The kernel-gap claims decided on ``runs`` (records of :class:`heavytail.studies.claims.Claim`)."""
    cs = cells(runs)
    out = []
    for at, cid, where in (("common", "gap-grows-with-n", "ratios at the common evaluation N"),
                           ("train", "gap-grows-at-train-n", "ratios at each run's training N")):
        d, slopes = growth(cs, SOFTMAX_SDPA, LOG_ELU, at)
        used = _runs_of(cs, [(v, n) for v in (SOFTMAX_SDPA, LOG_ELU) for n in sizes(cs)])
        used = [r for r in used if r.seed in slopes]
        per_n = "; ".join(f"N = {n}: median over seeds x{C.fmt(_median(list(p.values())))}"
                          for n in sizes(cs) if (p := paired_ratio(cs, SOFTMAX_SDPA, LOG_ELU, n, at)))
        out.append(C.make_claim(
            cid, f"The kernel gap grows with N: softmax (SDPA) over log-ELU rises with the training N ({where})",
            "Sec. 4.2, App. A", paper_gap(), d,
            "softmax/log-ELU ratio, change per doubling of N", map_extent(used) if used else "",
            f"softmax (SDPA) / log-ELU per N: {per_n}" if per_n else "no paired runs", _decided_by("growth"),
            transform=math.exp).to_dict())

    n = _numerics_n(cs)
    pair = paired_ratio(cs, SOFTMAX_SDPA, SOFTMAX_EXACT, n) if n else {}
    d = C.equivalence_rule([math.log(v) for v in pair.values()])
    others = "; ".join(f"N = {m}: x{C.fmt(_median(list(p.values())))} over {len(p)} seeds"
                       for m in sizes(cs) if m != n and (p := paired_ratio(cs, SOFTMAX_SDPA, SOFTMAX_EXACT, m)))
    skipped = ", ".join(f"{variant_name(v)} {sum(cs[(v, n)].skipped)}" for v in (SOFTMAX_SDPA, SOFTMAX_EXACT)
                        if (v, n) in cs)
    used = _runs_of(cs, [(SOFTMAX_SDPA, n), (SOFTMAX_EXACT, n)]) if n else []
    out.append(C.make_claim(
        "gap-is-numerical",
        "Softmax's gap is (partly) numerical: softmax through SDPA ends above softmax through exact float32 attention",
        "Sec. 5, App. E.4", "not tested: the paper trained softmax only through FlashAttention (bf16)", d,
        "SDPA/exact ratio", map_extent(used) if used else "",
        f"Steps skipped (non-finite gradient), all seeds: {skipped}" + (f"; at other N: {others}" if others else ""),
        _decided_by("numerics"),
        transform=math.exp).to_dict())

    n_big = max((m for m in sizes(cs) if (SOFTMAX_SDPA, m) in cs and (LOG_ELU, m) in cs), default=None)
    diffs = paired_difference(cs, SOFTMAX_SDPA, LOG_ELU, n_big, collapsed_fraction_at) if n_big else {}
    d = C.graded_rule(list(diffs.values())) if diffs else C.Decision(
        C.NOT_RUN, None, "no seed has softmax and log-ELU scored at the training N")
    used = _runs_of(cs, [(SOFTMAX_SDPA, n_big), (LOG_ELU, n_big)]) if n_big else []
    steps = "; ".join(f"{variant_name(v)}: " + ", ".join(f"{x:.2f}" for x in cs[(v, n_big)].collapsed_steps())
                      for v in (SOFTMAX_SDPA, LOG_ELU) if n_big and (v, n_big) in cs)
    out.append(C.make_claim(
        "softmax-collapses-more",
        "Softmax's outputs collapse more often than log-ELU's (graded: share of evaluation trials collapsed)",
        "Sec. 4.2, App. I", "softmax collapsed, log-ELU did not (Table 5)", d,
        "softmax - log-ELU collapsed share of trials", map_extent(used) if used else "", f"share of logged training steps with a collapsed batch, per seed: {steps}",
        _decided_by("collapse")).to_dict())

    soft = cs.get((SOFTMAX_SDPA, n_big)) if n_big else None
    hits = sum(soft.collapsed) if soft else 0
    d = C.rate_rule(hits, len(soft.runs) if soft else 0)
    out.append(C.make_claim(
        "softmax-collapses-cpu", "Softmax (SDPA) runs collapse at CPU scale (most runs labelled collapsed, App. I)",
        "Sec. 4.2, App. I", "collapse after ~3,500 of 50,000 steps at N = 16384, D = 256, 6 blocks", d,
        "share of runs labelled collapsed", map_extent(soft.runs) if soft else "", f"{hits} of {len(soft.runs) if soft else 0} runs labelled collapsed",
        _decided_by("collapse")).to_dict())
    return out


def long_findings(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Softmax for longer, per learning rate: does softmax (SDPA) collapse in most runs within the steps trained
    (rate rule), and do its training batches collapse more often than log-ELU's (graded, paired by seed)?"""
    out = []
    runs = records(runs)
    for lr in sorted({r.lr for r in runs}):
        sub = [r for r in runs if r.lr == lr]
        cs = cells(sub)
        n = max(sizes(cs))
        soft = cs.get((SOFTMAX_SDPA, n))
        d = C.rate_rule(sum(soft.collapsed), len(soft.runs)) if soft else C.Decision(C.NOT_RUN, None, "no runs")
        out.append(C.make_claim(
            f"softmax-collapses-long-lr{lr:g}", f"Softmax (SDPA) runs collapse within {_steps(sub)} steps at lr {lr:g}",
            "Sec. 4.2, App. I", "collapse after ~3,500 of 50,000 steps at N = 16384", d,
            "share of runs labelled collapsed", map_extent(soft.runs) if soft else "",
            f"{sum(soft.collapsed) if soft else 0} of {len(soft.runs) if soft else 0} runs labelled collapsed",
            _decided_by("collapse")).to_dict())
        diffs = paired_difference(cs, SOFTMAX_SDPA, LOG_ELU, n, collapsed_steps)
        d = C.graded_rule(list(diffs.values())) if diffs else C.Decision(C.NOT_RUN, None, "no paired seeds")
        out.append(C.make_claim(
            f"softmax-collapses-more-long-lr{lr:g}",
            f"Softmax's training batches collapse more often than log-ELU's over {_steps(sub)} steps at lr {lr:g}",
            "Sec. 4.2, App. I", "softmax collapsed, log-ELU did not (Table 5)", d,
            "softmax - log-ELU share of logged steps with a collapsed batch",
            map_extent(_runs_of(cs, [(SOFTMAX_SDPA, n), (LOG_ELU, n)])), "", _decided_by("collapse")).to_dict())
    return out


def _steps(runs: Sequence[Mapping[str, Any]]) -> str:
    return "/".join(str(s) for s in sorted({r.steps for r in records(runs)}))


def _median(xs: Sequence[float]) -> float:
    xs = sorted(xs)
    if not xs:
        return math.nan
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else 0.5 * (xs[m - 1] + xs[m])


def power_from(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The seeds each rule needs, from an earlier map's seed spread: the growth slope's mean and spread over
    seeds, and the numerics ratio's spread (for a 20 % difference), at 80 % power."""
    cs = cells(runs)
    _, slopes = growth(cs, SOFTMAX_SDPA, LOG_ELU)
    vals = list(slopes.values())
    out: dict[str, Any] = {"growth_seeds": len(vals)}
    if len(vals) >= 2:
        mean, sd = sum(vals) / len(vals), float(stats.tstd(vals))
        out |= {"growth_effect": mean, "growth_sd": sd, "growth_needed": C.seeds_needed(mean, sd)}
    logs = [math.log(v) for n in sizes(cs) for v in paired_ratio(cs, SOFTMAX_SDPA, SOFTMAX_EXACT, n).values()]
    if len(logs) >= 2:
        sd = float(stats.tstd(logs))
        out |= {"numerics_sd": sd, "numerics_needed": C.seeds_needed(C.EQUIVALENCE_MARGIN, sd),
                "equivalence_needed": C.seeds_needed_tost(sd)}
    return out


def cross_check(own: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Do this report's runs come from the same distribution over seeds as the map's runs of the same
    configurations (up to the seed)? Per (variant, N) cell, the Mann-Whitney U of this report's median ratios
    against the map's; the cells are combined as a stratified rank-sum test (van Elteren's, equal weights: the
    sum of the cells' U against its null mean and variance), two-sided. The runs agree when p >= 0.05.
    Rounding differs between machines and training amplifies it, so seed-by-seed equality is not expected;
    the distribution over seeds is."""
    def key(r):
        config = RunConfig.with_defaults(r["config"])  # a map trained before a setting existed took its default
        return tuple(sorted((k, repr(v)) for k, v in config.items()
                            if k not in ("seed", "device", "eval_batch_trials", "checkpoint_every", "log_every")))
    ref: dict[tuple, list[float]] = {}
    for r in reference:
        ref.setdefault(key(r), []).append(ratio_at(r))
    rows, u_sum, mean_sum, var_sum = [], 0.0, 0.0, 0.0
    for k in dict.fromkeys(key(r) for r in own):
        mine = [ratio_at(r) for r in own if key(r) == k]
        theirs = ref.get(k, [])
        example = next(r for r in own if key(r) == k)
        row = {"cell": f"{variant_name(variant(example))}, N = {example['config']['n_points']}",
               "this report": _list(mine), "map": _list(theirs) if theirs else "not in the map"}
        if theirs:
            m, n = len(mine), len(theirs)
            u = float(stats.mannwhitneyu(mine, theirs, alternative="two-sided").statistic)
            u_sum, mean_sum, var_sum = u_sum + u, mean_sum + m * n / 2, var_sum + m * n * (m + n + 1) / 12
            below = sum(t < x for x in mine for t in theirs) / (m * n)
            row["share of map runs below"] = C.fmt(below, 2)
        else:
            row["share of map runs below"] = "n/a"
        rows.append(row)
    z = (u_sum - mean_sum) / math.sqrt(var_sum) if var_sum > 0 else math.nan
    p = float(2 * stats.norm.sf(abs(z))) if math.isfinite(z) else math.nan
    return {"title": "This report's runs against the map's runs of the same configurations",
            "columns": ["cell", "this report", "map", "share of map runs below"], "rows": rows,
            "agree": None if not math.isfinite(p) else p >= 0.05, "z": z, "p": p,
            "notes": f"median ratios (eq. 36) per seed; stratified rank-sum test over the cells: z = {C.fmt(z, 2)}, "
                     f"two-sided p = {C.fmt(p, 2)} (0.5 in the last column: this report's runs sit in the middle "
                     "of the map's)"}


def _list(xs: Sequence[float]) -> str:
    return ", ".join(C.fmt(x) for x in sorted(xs))
