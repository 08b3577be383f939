"""The ablation's claims (Sections 4.2 and 5) decided on a grid's aggregated configurations.

Comparisons (printed by notebook 06 from :data:`DEFINITIONS`): *collapsed* is the configuration's label;
*A lower than B* means A's bootstrap interval of the median ratio lies entirely below B's; *similar* means the
intervals of all compared configurations share a point. A claim with a configuration missing is "not run";
with fewer seeds per configuration than :data:`heavytail.studies.claims.MIN_SEEDS` it is "undecided at this
power", since the bootstrap intervals of eq. 37 describe evaluation trials at fixed weights, not training runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from heavytail.names import (BENCHMARK_LABELS, BENCHMARK_MARGINALS, BENCHMARKS, KERNELS, MARGINAL_LABELS, SLOWER_KERNELS,
                             TRANSFORM_LABELS)
from heavytail.studies import claims as C
from heavytail.studies.paper_numbers import paper_range, paper_text
from heavytail.studies.ablation.summary import index_cells
from heavytail.studies.tables import fmt_ratio

DEFINITIONS = {
    "collapsed": "the configuration is labelled 'collapse': at least half of its seeds have most evaluation "
                 "trials with an output interquartile range below collapse_spread times the target's (App. I)",
    "lower": "A is lower than B when A's 95% bootstrap interval of the median ratio lies entirely below B's "
             "(A.high < B.low); the ratio of ratios A/B is the effect size",
    "similar": "configurations are similar when the 95% bootstrap intervals of their median ratios share a "
               "common point (max of lower ends <= min of upper ends)",
    "not run": "a claim is 'not run' when any configuration it speaks about is missing from the grid",
    "undecided": f"a claim is 'undecided at this power' when some configuration it speaks about has fewer than "
                 f"{C.MIN_SEEDS} seeds: a bootstrap interval over evaluation trials says nothing about another "
                 "training run",
}


def is_collapsed(agg: Mapping[str, Any]) -> bool:
    return agg["collapse"]["label"] == "collapse"


def is_lower(a: Mapping[str, Any], b: Mapping[str, Any], statistic: str = "median") -> bool:
    """A lower than B: A's bootstrap interval lies entirely below B's (see :data:`DEFINITIONS`)."""
    return bool(a[statistic]["high"] < b[statistic]["low"])


def are_similar(aggs: Sequence[Mapping[str, Any]], statistic: str = "median") -> bool:
    """All bootstrap intervals share a common point (see :data:`DEFINITIONS`)."""
    return bool(max(a[statistic]["low"] for a in aggs) <= min(a[statistic]["high"] for a in aggs))


def _describe(agg: Mapping[str, Any], statistic: str = "median") -> str:
    s = agg[statistic]
    who = f"{agg['kernel']}{' +symlog' if agg['symlog'] else ''}"
    frac = np.mean(agg["collapse"]["fractions"])
    state = "collapse" if is_collapsed(agg) else "no collapse"
    return (f"{who}: {statistic} ratio {fmt_ratio(s['ratio'])} [{fmt_ratio(s['low'])}, {fmt_ratio(s['high'])}], "
            f"{state} ({frac:.0%} of trials collapsed)")


def _ratio_of_ratios(a, b, statistic="median") -> str:
    r = a[statistic]["ratio"] / b[statistic]["ratio"] if b[statistic]["ratio"] else math.inf
    return fmt_ratio(r)


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, the configurations it speaks about, and how to check it on them."""

    id: str
    claim: str
    source: str
    paper: str  # what the paper reports, quoted from its text or tables
    needs: tuple[tuple, ...]  # cell keys (benchmark, marginals, norm, kernel, symlog)
    check: Callable[[dict[tuple, Mapping[str, Any]]], tuple[bool, str]]  # all needs present -> (holds, evidence)


def _k(benchmark, norm, kernel, symlog, marginals="mirrored_pareto"):
    return (benchmark, marginals, norm, kernel, symlog)


def _claims() -> list[Claim]:
    claims: list[Claim] = []
    names = BENCHMARK_LABELS
    table = {"sheared_swap": "Table 5", "matrix_inverse": "Table 6"}
    paper_slow_range = {b: paper_range(b, SLOWER_KERNELS, False) for b in BENCHMARKS}
    paper_symlog_range = {b: f"{paper_range(b, SLOWER_KERNELS, True)} (from {paper_slow_range[b]})" for b in BENCHMARKS}

    for b in BENCHMARKS:
        soft = _k(b, "post", "softmax", False)
        claims.append(Claim(
            f"softmax-collapses-{b}", f"Post-norm softmax without symlog collapses on the {names[b]} (mirrored Pareto)",
            f"Sec. 4.2, Sec. 5, {table[b]}", "collapse", (soft,),
            lambda c, soft=soft: (is_collapsed(c[soft]), _describe(c[soft]))))
    for b in BENCHMARKS:
        slow = tuple(_k(b, "post", k, False) for k in SLOWER_KERNELS)
        claims.append(Claim(
            f"slower-avoid-collapse-{b}", f"The three slower-growing kernels avoid collapse (post-norm, no symlog, {names[b]})",
            f"Sec. 4.2, Sec. 5, {table[b]}", f"no collapse; median ratios {paper_slow_range[b]}", slow,
            lambda c, slow=slow, soft=_k(b, "post", "softmax", False): (
                not any(is_collapsed(c[k]) for k in slow),
                "; ".join(_describe(c[k]) for k in slow) + _softmax_contrast(c, soft))))
    for b in BENCHMARKS:
        soft = _k(b, "post", "softmax", False)
        slow = tuple(_k(b, "post", k, False) for k in SLOWER_KERNELS)

        def check(c, soft=soft, slow=slow):
            parts = [f"{k[3]}/softmax = {_ratio_of_ratios(c[k], c[soft])} "
                     f"({'lower' if is_lower(c[k], c[soft]) else 'not lower'})" for k in slow]
            return all(is_lower(c[k], c[soft]) for k in slow), f"{_describe(c[soft])}; " + "; ".join(parts)

        claims.append(Claim(
            f"slower-lower-than-softmax-{b}",
            f"The slower-growing kernels achieve lower energy distance than softmax (post-norm, no symlog, {names[b]})",
            f"Sec. 4.2, {table[b]}", f"softmax collapses; slower kernels {paper_slow_range[b]}", (soft, *slow), check))
    mi_soft = _k("matrix_inverse", "post", "softmax", True)
    claims.append(Claim(
        "symlog-softmax-matrix-inverse", "With symlog, post-norm softmax avoids collapse on the matrix inverse",
        "Sec. 4.2, Sec. 5, Table 6",
        f"no collapse, median ratio {paper_text(*mi_soft)}", (mi_soft,),
        lambda c: (not is_collapsed(c[mi_soft]), _describe(c[mi_soft]))))
    ss_soft = _k("sheared_swap", "post", "softmax", True)
    claims.append(Claim(
        "symlog-softmax-sheared-swap", "With symlog, post-norm softmax still collapses on the sheared swap",
        "Sec. 4.2, Table 5", "collapse", (ss_soft,),
        lambda c: (is_collapsed(c[ss_soft]), _describe(c[ss_soft]))))
    for b in BENCHMARKS:
        pairs = tuple((_k(b, "post", k, True), _k(b, "post", k, False)) for k in SLOWER_KERNELS)

        def check(c, pairs=pairs):
            parts = [f"{s[3]}: symlog/none = {_ratio_of_ratios(c[s], c[n])} "
                     f"({fmt_ratio(c[s]['median']['ratio'])} vs {fmt_ratio(c[n]['median']['ratio'])}, "
                     f"{'lower' if is_lower(c[s], c[n]) else 'not lower'})" for s, n in pairs]
            return all(is_lower(c[s], c[n]) for s, n in pairs), "; ".join(parts)

        claims.append(Claim(
            f"symlog-lowers-slower-{b}", f"Symlog lowers the median ratios of the slower-growing kernels (post-norm, {names[b]})",
            f"Sec. 4.2, {table[b]}", f"median ratios {paper_symlog_range[b]}", tuple(k for p in pairs for k in p), check))
    gauss = tuple(_k("sheared_swap", "post", k, s, "gaussian") for s in (False, True) for k in KERNELS)
    gauss_range = paper_range("sheared_swap", KERNELS, (False, True), "gaussian")
    claims.append(Claim(
        "gaussian-no-collapse", "On the Gaussian sheared swap no kernel collapses (post-norm, with and without symlog)",
        "Sec. 4.2, Table 5", f"no collapse; median ratios {gauss_range}", gauss,
        lambda c: (not any(is_collapsed(c[k]) for k in gauss),
                   "; ".join(f"{k[3]}{' +symlog' if k[4] else ''}: {c[k]['collapse']['label']}" for k in gauss))))

    def similar_check(c):
        parts, ok = [], True
        for s in (False, True):
            group = [c[_k("sheared_swap", "post", k, s, "gaussian")] for k in KERNELS]
            sim = are_similar(group)
            ok &= sim
            ratios = [g["median"]["ratio"] for g in group]
            spread = max(ratios) / min(ratios) if min(ratios) > 0 else math.inf
            parts.append(f"{TRANSFORM_LABELS[s]}: intervals " + ", ".join(
                f"{g['kernel']} [{fmt_ratio(g['median']['low'])}, {fmt_ratio(g['median']['high'])}]" for g in group)
                + f" -> {'common point' if sim else 'no common point'}, max/min ratio {fmt_ratio(spread)}")
        return ok, "; ".join(parts)

    claims.append(Claim(
        "gaussian-similar", "On the Gaussian sheared swap the four kernels achieve similar energy distances (post-norm)",
        "Sec. 4.2, Table 5", f"median ratios {gauss_range}, all bold", gauss, similar_check))
    pre = tuple(_k(b, "pre", k, s, m) for b, ms in BENCHMARK_MARGINALS.items() for m in ms
                for s in (False, True) for k in KERNELS)
    claims.append(Claim(
        "prenorm-no-collapse", "Pre-norm runs show no collapse across kernels, transforms and benchmarks",
        "Sec. 4.2, App. G, Figures 8, 9", "no collapse in any of the 24 pre-norm runs", pre,
        lambda c: (not any(is_collapsed(c[k]) for k in pre),
                   f"{sum(is_collapsed(c[k]) for k in pre)} of {len(pre)} pre-norm configurations collapsed")))
    return claims


CLAIMS = tuple(_claims())


def _softmax_contrast(cells: Mapping[tuple, Any], soft: tuple) -> str:
    """The paper's claim that the slower kernels avoid collapse is a contrast with softmax, which collapsed;
    when softmax did not collapse either, say so, so that 'reproduced' is not read as the contrast."""
    if soft not in cells or is_collapsed(cells[soft]):
        return ""
    return ". Softmax did not collapse here either, so the contrast the paper draws with softmax is not shown"


# The summary notebook's figure of each (benchmark, norm): Figures 2, 3 (post-norm), 8, 9 (pre-norm).
FIGURE_NUMBERS = {("sheared_swap", "post"): 2, ("matrix_inverse", "post"): 3,
                  ("sheared_swap", "pre"): 8, ("matrix_inverse", "pre"): 9}
# The notebook section whose tables hold every number a claim is checked on.
CLAIMS_SECTION = "Tables 5 and 6: energy distance as a multiple of the sampling floor"


def figure_name(benchmark: str, norm: str) -> str:
    """File name (no extension) of the summary notebook's energy figure for ``benchmark`` and ``norm``."""
    return f"figure{FIGURE_NUMBERS[benchmark, norm]}_{benchmark}_{norm}"


def decided_by(claim: Claim) -> dict[str, Any]:
    """Where a reader sees what decides ``claim``: the summary notebook's table section and the figures of
    every (benchmark, norm) the claim's configurations span, in figure order."""
    pairs = {(k[0], k[2]) for k in claim.needs}
    figures = [figure_name(b, n) for (b, n), _ in sorted(FIGURE_NUMBERS.items(), key=lambda kv: kv[1]) if (b, n) in pairs]
    return {"notebook": "06_summary", "section": CLAIMS_SECTION, "figures": figures}


def _scale(aggs: Sequence[Mapping[str, Any]]) -> str:
    """The scale a set of configurations ran at, in words (training N, trials per step, steps, seeds, eval N)."""
    def span(key):
        vals = sorted({a["config"][key] for a in aggs})
        return str(vals[0]) if len(vals) == 1 else "{" + ", ".join(map(str, vals)) + "}"
    seeds = sorted({a["n_seeds"] for a in aggs})
    return (f"training N = {span('n_points')}, {span('trials_per_step')} trials per step, {span('steps')} steps, "
            f"D = {span('d_model')}, {'/'.join(map(str, seeds))} seed(s) per configuration, evaluated at N = "
            f"{span('eval_n_points')} ({span('eval_trials')} trials)")


def findings(aggs: Sequence[Mapping[str, Any]], min_seeds: int = C.MIN_SEEDS) -> list[dict[str, Any]]:
    """Each claim of Sections 4.2 and 5 as a :class:`heavytail.studies.claims.Claim` record. A claim with a
    configuration missing is "not run"; with fewer than ``min_seeds`` seeds in some configuration it is
    "undecided at this power" (the bootstrap intervals of eq. 37 describe evaluation trials at fixed weights,
    so one training run cannot separate kernels); otherwise the comparison of :data:`DEFINITIONS` decides
    "reproduced" or "not reproduced". The evidence always shows what the present runs say."""
    cells = index_cells(aggs)
    out = []
    for claim in CLAIMS:
        missing = [k for k in claim.needs if k not in cells]
        present = [cells[k] for k in claim.needs if k in cells]
        needs = ""
        if missing:
            shown = "; ".join([_describe(cells[k]) + f" ({k[0]}, {k[1]}, {k[2]}-norm)"
                               for k in claim.needs if k in cells][:4])
            evidence = (f"missing {len(missing)} of {len(claim.needs)} configurations, e.g. "
                        f"{_key_text(missing[0])}" + (f". Present: {shown}" if shown else ""))
            verdict, needs = C.NOT_RUN, f"the {len(missing)} missing configurations"
        else:
            holds, evidence = claim.check(cells)
            seeds = min(a["n_seeds"] for a in present)
            if seeds < min_seeds:
                verdict = C.UNDECIDED
                needs = (f">= {min_seeds} seeds per configuration (here {seeds}); with one run per configuration the "
                         f"comparison {'holds' if holds else 'fails'} but seed-to-seed spread is unknown")
            else:
                verdict = C.REPRODUCED if holds else C.NOT_REPRODUCED
        out.append(C.Claim(claim.id, claim.claim, claim.source, claim.paper, verdict,
                           seeds=min((a["n_seeds"] for a in present), default=0),
                           scale=_scale(present) if present else "", evidence=evidence, needs=needs,
                           decided_by=decided_by(claim)).to_dict() | {"n_needed": len(claim.needs),
                                                                       "n_missing": len(missing)})
    return out


def _key_text(key: tuple) -> str:
    b, m, n, k, s = key
    return f"{BENCHMARK_LABELS[b]} / {MARGINAL_LABELS[m]} / {n}-norm / {k} / {TRANSFORM_LABELS[s]}"


def findings_table(found: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return C.claims_table(found, "Findings of Sections 4.2 and 5 at this scale")


def findings_text(found: Sequence[Mapping[str, Any]]) -> list[str]:
    """The findings as plain sentences, one per claim (heavytail.studies.claims.render)."""
    return [C.render(f) for f in found]
