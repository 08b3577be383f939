"""How a claim is decided: the verdict states, the decision rules, the claim record and how it is rendered.

Every rule here was written before the runs it decides, treats the training seed as the unit of
replication (the bootstrap interval of eq. 37 describes evaluation trials at fixed weights, not training
runs), and is calibrated: tests/test_claims.py runs each rule on synthetic seeds drawn under a null and asserts
a false-positive rate of at most 5 % and, under the effect sizes the shipped maps show, the power the
notebooks print. A rule answers one of four verdicts:

- ``reproduced``: the interval of the statistic excludes "no effect" in the paper's direction;
- ``not reproduced``: the interval excludes every effect of practical size (an equivalence statement: the
  data bound the effect below the stated margin), or shows the opposite direction;
- ``undecided at this power``: neither; the record says what it would take (more seeds, another N);
- ``not run``: the runs the rule needs are absent.

"Too few seeds" is always *undecided*, never *not reproduced*; no effect found is not "no effect". The
statistics are scipy's (t intervals, the TOST, the sign-flip test, Clopper-Pearson intervals, slopes); the
rules are what this module adds.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import special, stats

from heavytail.studies.signflip import signflip_interval, signflip_p, ties_note

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
UNDECIDED = "undecided at this power"
NOT_RUN = "not run"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, UNDECIDED, NOT_RUN)
VERDICT_COLORS = {REPRODUCED: "#1a7f37", NOT_REPRODUCED: "#cf222e", UNDECIDED: "#9a6700", NOT_RUN: "#6e7781"}

LEVEL = 0.95  # two-sided coverage of every interval a verdict reads
# The smallest effects of practical size, fixed before any result was read: a gap that grows by less than 10 % per
# doubling of N, a numerical difference within +-20 % of the median ratio (eq. 36).
GROWTH_MARGIN = math.log(1.10)
EQUIVALENCE_MARGIN = math.log(1.20)
# Seeds below which no rule decides (with fewer, a t interval is too wide to exclude anything useful and
# the rules' calibration was not shown).
MIN_SEEDS = 5


# ------------------------------------------------------------------------------------ estimates
@dataclass(frozen=True)
class Estimate:
    """A statistic over seeds with its two-sided interval at ``level``; ``p`` when a test gives one."""

    estimate: float
    low: float
    high: float
    n: int
    level: float = LEVEL
    p: float | None = None


def t_interval(values: Sequence[float], level: float = LEVEL) -> Estimate:
    """The mean of per-seed values with Student's t interval (seeds are the replicates), as
    ``scipy.stats.ttest_1samp`` gives it; its p is the two-sided test of mean 0. Computed from the t distribution's
    ufuncs: ttest_1samp's checks cost ~1 ms a call, and the rules' null simulations make ~10^5 calls."""
    x = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    n, mean = len(x), float(x.mean()) if len(x) else math.nan
    if n < 2:
        return Estimate(mean, -math.inf if n else math.nan, math.inf if n else math.nan, n, level)
    if (sd := float(x.std(ddof=1))) == 0:  # every seed the same: no spread, and the t statistic is undefined
        return Estimate(mean, mean, mean, n, level, 0.0 if mean != 0 else 1.0)
    se, df = sd / math.sqrt(n), n - 1
    half = float(special.stdtrit(df, 0.5 + level / 2)) * se
    return Estimate(mean, mean - half, mean + half, n, level, float(2 * special.stdtr(df, -abs(mean) / se)))


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys on xs: ``scipy.stats.linregress``'s, written out (~100x cheaper per seed)."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    dx = x - x.mean()
    return float((dx * (y - y.mean())).sum() / (dx * dx).sum())


def per_seed_slopes(by_seed: Mapping[int, Mapping[int, float]]) -> dict[int, float]:
    """Per seed, the slope of a log ratio against log2 N (so: log-change per doubling of N), from
    ``{seed: {N: log ratio}}``; seeds with fewer than two N, or a non-finite value, are left out."""
    out = {}
    for s, row in sorted(by_seed.items()):
        pts = sorted((n, v) for n, v in row.items() if math.isfinite(v))
        if len(pts) >= 2 and len(pts) == len(row):
            out[s] = slope([math.log2(n) for n, _ in pts], [v for _, v in pts])
    return out


# ------------------------------------------------------------------------------------ rules
@dataclass(frozen=True)
class Decision:
    """A rule's answer: the verdict, its estimate and interval (``None`` when not run), and, when it is
    undecided, what it would take."""

    verdict: str
    estimate: Estimate | None
    reason: str = ""


def growth_rule(slopes: Sequence[float], min_seeds: int = MIN_SEEDS, margin: float = GROWTH_MARGIN,
                level: float = LEVEL) -> Decision:
    """Does a log ratio grow with log2 N? The mean per-seed slope with its t interval at ``level``:
    *reproduced* when the interval lies above 0, *not reproduced* when it lies below ``margin`` (growth
    under x e^margin per doubling is excluded), otherwise undecided."""
    if not slopes:
        return Decision(NOT_RUN, None, "no seed has the ratio at two or more N")
    est = t_interval(slopes, level)
    if est.n < min_seeds:
        return Decision(UNDECIDED, est, f"{est.n} seeds; the rule needs >= {min_seeds}")
    if est.low > 0:
        return Decision(REPRODUCED, est)
    if est.high < margin:
        return Decision(NOT_REPRODUCED, est, f"growth above x{math.exp(margin):.2f} per doubling is excluded")
    return Decision(UNDECIDED, est, "the interval holds both no growth and growth of practical size; more seeds "
                                    "or a wider range of N")


def equivalence_rule(log_ratios: Sequence[float], min_seeds: int = MIN_SEEDS,
                     margin: float = EQUIVALENCE_MARGIN) -> Decision:
    """Paired log ratio A/B per seed, decided three ways: *differs* (the 95 % interval excludes 0), *equivalent
    within the margin* (two one-sided t tests at 5 %: the 90 % interval lies inside +-margin), or undecided.
    The verdict of "A is worse than B" is reproduced when it differs with A above B, not reproduced when it
    differs the other way or is equivalent."""
    if not log_ratios:
        return Decision(NOT_RUN, None, "no seed has both variants")
    est = t_interval(log_ratios)
    if est.n < min_seeds:
        return Decision(UNDECIDED, est, f"{est.n} seeds; the rule needs >= {min_seeds}")
    if est.low > 0:
        return Decision(REPRODUCED, est, "differs")
    if est.high < 0:
        return Decision(NOT_REPRODUCED, est, "differs, the other way")
    if tost_equivalent(log_ratios, margin):
        tost = t_interval(log_ratios, level=0.90)
        return Decision(NOT_REPRODUCED, est, f"equivalent within x{math.exp(margin):.2f} (TOST at 5 %, 90 % "
                                             f"interval x{math.exp(tost.low):.2f}-x{math.exp(tost.high):.2f})")
    return Decision(UNDECIDED, est, f"neither different nor equivalent within x{math.exp(margin):.2f}; more seeds")


def tost_equivalent(values: Sequence[float], margin: float, alpha: float = 0.05) -> bool:
    """Two one-sided t tests (``scipy.stats.ttest_1samp``'s against -margin and +margin): is the mean within
    +-margin at level ``alpha``? Both reject exactly when :func:`t_interval`'s 1 - 2 alpha interval lies inside it."""
    est = t_interval(values, 1 - 2 * alpha)
    return bool(est.n >= 2 and -margin < est.low and est.high < margin)


def graded_rule(diffs: Sequence[float], min_seeds: int = MIN_SEEDS, alpha: float = 1 - LEVEL) -> Decision:
    """Is a graded outcome (a fraction in [0, 1]) larger for A than for B? Paired per-seed differences A - B:
    the sign-flip test decides (*reproduced* when p < alpha and the mean is positive), and the interval reported
    is the test's own inversion (:func:`heavytail.studies.signflip.signflip_interval`), so it excludes 0 exactly
    when the test decides. *Not reproduced* when the mean is significantly negative; a difference that is not
    significant stays undecided (a fraction bounded near 0 on both sides is reported, not called absence)."""
    finite = [v for v in diffs if math.isfinite(v)]
    if not finite:
        return Decision(NOT_RUN, None, "no seed has both variants")
    low, high = signflip_interval(finite, alpha)
    est = Estimate(float(np.mean(finite)), low, high, len(finite), 1 - alpha, signflip_p(finite))
    if est.n < min_seeds:
        return Decision(UNDECIDED, est, f"{est.n} seeds; the rule needs >= {min_seeds}{ties_note(diffs, alpha)}")
    if est.p < alpha:
        return Decision(REPRODUCED if est.estimate > 0 else NOT_REPRODUCED, est, f"sign-flip p = {est.p:.3g}")
    return Decision(UNDECIDED, est,
                    f"sign-flip p = {est.p:.3g}; more seeds or longer training{ties_note(diffs, alpha)}")


def rate_rule(hits: int, n: int, threshold: float = 0.5, min_seeds: int = MIN_SEEDS) -> Decision:
    """Does the event happen in most runs? The Clopper-Pearson 95 % interval of its rate over ``n`` seeds:
    reproduced when it lies above ``threshold``, not reproduced when below, undecided otherwise."""
    if n == 0:
        return Decision(NOT_RUN, None, "no runs")
    low, high = clopper_pearson(hits, n)
    est = Estimate(hits / n, low, high, n)
    if n < min_seeds:
        return Decision(UNDECIDED, est, f"{n} seeds; the rule needs >= {min_seeds}")
    if low > threshold:
        return Decision(REPRODUCED, est)
    if high < threshold:
        return Decision(NOT_REPRODUCED, est)
    chances = " and ".join(f"{rate_decide_chance(hits / n, m, threshold):.2f} at {m} seeds" for m in (2 * n, 4 * n))
    # the chance of a decision at the observed rate says whether more seeds are worth their cost: a rate near the
    # threshold stays undecided at almost any affordable n
    return Decision(UNDECIDED, est, f"the rate's interval straddles {threshold:.0%}; more seeds: were the true rate "
                                    f"{hits / n:.2g}, the rule would decide with probability {chances}")


@functools.lru_cache(maxsize=None)  # a few (k, n) pairs, asked ~10^4 times by the null simulations
def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a rate, ``scipy.stats.binomtest(...).proportion_ci``."""
    return tuple(map(float, stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")))


# ------------------------------------------------------------------------------------ power
@functools.lru_cache(maxsize=None)
def _rate_decided_counts(n: int, threshold: float, level: float) -> tuple[int, ...]:
    """The counts k of n whose Clopper-Pearson interval lies wholly above or below ``threshold``."""
    return tuple(k for k in range(n + 1)
                 if (ci := clopper_pearson(k, n, level))[0] > threshold or ci[1] < threshold)


def rate_decide_chance(rate: float, n: int, threshold: float = 0.5, level: float = LEVEL) -> float:
    """The probability that :func:`rate_rule` decides, either way, from ``n`` seeds when the event's true rate is
    ``rate``: the binomial mass of the counts whose interval excludes ``threshold``."""
    return float(stats.binom.pmf(np.array(_rate_decided_counts(n, threshold, level), dtype=int), n, rate).sum())


def t_power(effect: float, sd: float, n: int, level: float = LEVEL) -> float:
    """Power of the two-sided one-sample t test at ``level`` to find a mean of ``effect`` with per-seed
    standard deviation ``sd`` from ``n`` seeds, in the effect's direction (scipy's noncentral t; statsmodels'
    ``TTestPower`` adds the opposite tail, a rejection in the wrong direction, which no rule here counts)."""
    if n < 2 or sd <= 0:
        return math.nan
    df, nc = n - 1, abs(effect) / sd * math.sqrt(n)
    crit = stats.t.ppf(0.5 + level / 2, df)
    return float(stats.nct.sf(crit, df, nc))


def seeds_needed(effect: float, sd: float, power: float = 0.8, level: float = LEVEL, most: int = 200) -> int:
    """The fewest seeds (>= 2) at which :func:`t_power` reaches ``power``; ``most + 1`` when none up to ``most``."""
    for n in range(2, most + 1):
        if t_power(effect, sd, n, level) >= power:
            return n
    return most + 1


def tost_power(sd: float, n: int, margin: float = EQUIVALENCE_MARGIN, truth: float = 0.0, draws: int = 20000,
               seed: int = 0) -> float:
    """Power of :func:`equivalence_rule` to call equivalence when the true paired log ratio is ``truth``
    (Monte Carlo over the sample mean and standard deviation of ``n`` normal seeds; fixed seed)."""
    if n < 2 or sd <= 0:
        return math.nan
    rng = np.random.default_rng(seed)
    mean = rng.normal(truth, sd / math.sqrt(n), draws)
    s = sd * np.sqrt(rng.chisquare(n - 1, draws) / (n - 1))
    half95 = stats.t.ppf(0.975, n - 1) * s / math.sqrt(n)
    half90 = stats.t.ppf(0.95, n - 1) * s / math.sqrt(n)
    equivalent = (np.abs(mean) + half90 < margin) & (np.abs(mean) <= half95)
    return float(equivalent.mean())


def seeds_needed_tost(sd: float, power: float = 0.8, margin: float = EQUIVALENCE_MARGIN, most: int = 200) -> int:
    """The fewest seeds at which :func:`tost_power` (no true difference) reaches ``power``."""
    for n in range(2, most + 1):
        if tost_power(sd, n, margin) >= power:
            return n
    return most + 1


# ------------------------------------------------------------------------------------ the record
@dataclass(frozen=True)
class Claim:
    """One decided claim as every report shows it: what is claimed and where, the verdict, the statistic
    with its interval (``None`` when not run), the scale that decided it, the evidence in words, and what
    would decide it when it is undecided."""

    id: str
    claim: str
    source: str
    paper: str
    verdict: str
    statistic: str = ""
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    seeds: int | None = 0  # None: a computed claim (no trained runs, so no seeds)
    scale: str = ""
    evidence: str = ""
    needs: str = ""
    decided_by: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def seeds_text(claim: Mapping[str, Any]) -> str:
    """The seeds column of a claim record: its seed count, or "n/a" for a computed claim."""
    return "n/a" if claim.get("seeds", 0) is None else str(claim.get("seeds", 0))


def make_claim(id: str, claim: str, source: str, paper: str, decision: Decision, statistic: str, scale: str,
               evidence: str, decided_by: Mapping[str, Any], transform: Callable[[float], float] = lambda v: v
               ) -> Claim:
    """A :class:`Claim` from a rule's :class:`Decision`; ``transform`` maps the estimate and interval to the
    scale they are shown on (e.g. ``math.exp`` for a log ratio)."""
    est = decision.estimate
    vals = (None, None, None) if est is None else tuple(transform(v) for v in (est.estimate, est.low, est.high))
    needs = decision.reason if decision.verdict in (UNDECIDED, NOT_RUN) else ""
    detail = decision.reason if decision.verdict in (REPRODUCED, NOT_REPRODUCED) and decision.reason else ""
    return Claim(id, claim, source, paper, decision.verdict, statistic, *vals, seeds=0 if est is None else est.n,
                 scale=scale, evidence=(f"Rule: {detail}. " if detail else "") + evidence, needs=needs,
                 decided_by=dict(decided_by))


def decided_on(found: Sequence[Mapping[str, Any]], source: str) -> list[dict[str, Any]]:
    """The claim records with the map (or grid) that decided them in ``decided_by["map"]``: the landing page's
    scale table states it per claim, since the claims of one report come from several maps. A claim that names its
    own map (one read from another source than its group's map) keeps it."""
    return [{**f, "decided_by": {"map": source, **(f.get("decided_by") or {})}} for f in found]


_SCALE_HEAD = re.compile(r"training N (?:in|=) (\{[^}]*\}|[^,]+), (\S+) trials? per step, (\S+) steps")


def scale_label(scale: str) -> str:
    """The deciding scale as a short label: the training N, trials per step and steps that lead every scale
    text (:func:`heavytail.studies.core.map_extent`, the ablation's); any other text is kept whole."""
    m = _SCALE_HEAD.match(scale or "")
    if not m:
        return scale or ""
    ns, tps, steps = m.groups()
    return f"N {ns.strip('{}').replace(', ', '/')} · {steps} steps" + ("" if tps == "1" else f" · {tps} trials/step")


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def statistic_text(c: Claim | Mapping[str, Any]) -> str:
    """'<statistic> <estimate> (95 % interval [low, high]), n seeds' (or 'n/a'); a computed claim has no seeds."""
    d = c.to_dict() if isinstance(c, Claim) else c
    if d.get("estimate") is None:
        return "n/a"
    if d.get("low") is None:  # a count, not an estimate
        return f"{d['statistic']}: {fmt(d['estimate'])}"
    seeds = f", {d['seeds']} seeds" if names_seeds(d) else ""
    if unbounded(d):
        return f"{d['statistic']} {fmt(d['estimate'])} (no interval from one seed){seeds}"
    # Brackets, not a dash: a dash between two signed numbers ("-0.9-1.9") misreads.
    return f"{d['statistic']} {fmt(d['estimate'])} (95 % interval{interval_text(d)}){seeds}"


def names_seeds(d: Mapping[str, Any]) -> bool:
    """Whether :func:`statistic_text` names the claim's seeds: an estimate with an interval does, a count does not."""
    return d.get("estimate") is not None and d.get("low") is not None and d.get("seeds") is not None


def unbounded(d: Mapping[str, Any]) -> bool:
    """A t interval from one seed: both ends infinite (:func:`t_interval`)."""
    return all(isinstance(d.get(k), float) and math.isinf(d[k]) for k in ("low", "high"))


def interval_text(d: Mapping[str, Any], one_seed: str = "no interval") -> str:
    """' [low, high]' of a claim's interval, or ' [<one_seed>]' where one seed leaves it unbounded."""
    return f" [{one_seed}]" if unbounded(d) else f" [{fmt(d['low'])}, {fmt(d['high'])}]"


def render(c: Claim | Mapping[str, Any]) -> str:
    """One sentence: verdict, claim, statistic with interval and seeds, the scale that decided it, and what
    it would take when undecided."""
    d = c.to_dict() if isinstance(c, Claim) else c
    text = f"{d['verdict'].capitalize()}: \"{d['claim']}\""
    if d.get("estimate") is not None:
        text += f". {statistic_text(d)}"
    if d.get("scale"):
        text += f"; at {d['scale']}"
    if d.get("evidence"):
        text += f". {d['evidence']}"
    if d.get("needs"):
        text += f". To decide: {d['needs']}"
    return text + "."


def claims_table(found: Sequence[Claim | Mapping[str, Any]], title: str) -> dict[str, Any]:
    """The claims as a table (heavytail.studies.tables): verdict badge, claim, statistic with interval and
    seeds, the scale that decided it, the evidence and what would decide it."""
    rows = []
    for c in found:
        d = c.to_dict() if isinstance(c, Claim) else c
        rows.append({"verdict": {"text": d["verdict"], "bold": True, "color": VERDICT_COLORS[d["verdict"]]},
                     "claim": d["claim"], "statistic (95 % interval)": statistic_text(d),
                     "decided at": d.get("scale", ""),
                     "evidence": d.get("evidence", "") + (f" To decide: {d['needs']}." if d.get("needs") else "")})
    counts = {v: sum((c.to_dict() if isinstance(c, Claim) else c)["verdict"] == v for c in found) for v in VERDICTS}
    return {"title": title, "columns": ["verdict", "claim", "statistic (95 % interval)", "decided at", "evidence"],
            "rows": rows, "notes": ", ".join(f"{n} {v}" for v, n in counts.items() if n)}


def compact_table(found: Sequence[Claim | Mapping[str, Any]], title: str) -> dict[str, Any]:
    """The claims one line each (id, verdict badge, effect with its interval and seeds): what a claims notebook
    opens with; :func:`claims_table` gives the evidence, at the notebook's end."""
    rows = []
    for c in found:
        d = c.to_dict() if isinstance(c, Claim) else c
        seeds = "" if seeds_text(d) in ("0", "n/a") or names_seeds(d) else f"; {seeds_text(d)} seeds"
        rows.append({"id": d["id"], "verdict": {"text": d["verdict"], "bold": True, "color": VERDICT_COLORS[d["verdict"]]},
                     "effect (95 % interval)": statistic_text(d) + seeds})
    return {"title": title, "columns": ["id", "verdict", "effect (95 % interval)"], "rows": rows,
            "notes": "Each claim's sentence, the scale that decided it and its evidence are in the table at the end."}
