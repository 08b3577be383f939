"""The paper's claims, one entry each, in its own words, with the repository's claims that decide it.

A reader arrives holding the paper and asks which of its claims hold. :data:`PAPER_CLAIMS` is that list: App. A's
integrability (T1), Fig. 1's tail sensitivity (T2), identifiability (T3), Section 4.2's P1-P5 (Tables 5-6, Fig. 13),
Table 4's compute and App. J's Hill diagnostic. Each names the claims of :mod:`heavytail.studies.claim_groups`
(group, claim id) that decide it; :func:`verdict` combines theirs:

- every deciding claim *reproduced*: **reproduced**;
- some reproduced and the others not: **partly reproduced**, naming the parts that were;
- none reproduced and some *not reproduced*: **not reproduced**, naming them;
- none decided: **undecided** (runs too few), or **not tested at this scale** when no deciding map is shipped;
- a claim with no deciding rule here: **shown, no rule**, with the notebook that shows it, or **not tested at this
  scale** where only the paper's hardware could test it.

The front pages (README, landing page) open with :func:`rows`; ``python -m heavytail claims paper`` prints it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from heavytail.studies import claims as C

REPRODUCED, PARTLY, NOT_REPRODUCED = "reproduced", "partly reproduced", "not reproduced"
UNDECIDED, NOT_TESTED, SHOWN = "undecided", "not tested at this scale", "shown, no rule"
PAPER_VERDICTS = (REPRODUCED, PARTLY, NOT_REPRODUCED, UNDECIDED, NOT_TESTED, SHOWN)


@dataclass(frozen=True)
class PaperClaim:
    """One claim of the paper: its id, its words, where it is stated, the scale the paper tested it at, the
    repository's claims that decide it ((group, claim id), in the order the verdict names them) and where it is
    shown (a notebook or a document)."""

    id: str
    words: str
    section: str
    paper_scale: str
    parts: tuple[tuple[str, str], ...]
    shown: str
    short: Mapping[str, str] | None = None  # part id -> a few words naming it in the verdict (default: its id)
    untested: str = ""  # why no rule decides it here, when ``parts`` is empty
    # Claims that give the row its number without entering its verdict (a verdict read off other claims' verdicts,
    # as M1's hypothesis row is, carries no number of its own).
    evidence: tuple[tuple[str, str], ...] = ()


PAPER_SCALE = "N 16384 · 50,000 steps · 64 trials/step · bf16"
PAPER_CLAIMS: tuple[PaperClaim, ...] = (
    PaperClaim("T1", "the kernels' normalisers are finite where the growth order q < a; softmax's is not",
               "App. A", "analysis", (("phase", "static-exponent-polynomial"),), "notebooks/08_phase_diagram.py",
               {"static-exponent-polynomial": "cells not outside +-0.1, of 54"}),
    PaperClaim("T2", "the energy distance grows more sensitive to the tail index as N grows", "Sec. 4.1, Fig. 1",
               "N 256-65536, 24 repetitions", (), "notebooks/02_splice_testbed.py",
               untested="Fig. 1 is redrawn at the paper's full scale; no rule reads it"),
    PaperClaim("T3", "M and B are identifiable from samples on Pareto marginals, the Gaussian matrix inverse is not",
               "App. D, Table 2, Props. 5-6", "analysis", (), "notebooks/03_identifiability.py",
               untested="recovered from samples and the counterexample shown; no rule reads it"),
    PaperClaim("P1", "no symlog: post-norm softmax collapses on both Pareto tasks; ELU kernels don't and fit "
               "better", "Sec. 4.2, Tables 5-6", PAPER_SCALE,
               tuple(("tables56", f"p1-collapse-{c}") for c in ("swap-pareto", "inverse-pareto"))
               + tuple(("tables56", f"p1-distance-{c}-{k}") for c in ("swap-pareto", "inverse-pareto")
                       for k in ("log_elu", "squared_elu", "linear_elu")),
               "notebooks/10_tables56.py",
               {"p1-collapse-swap-pareto": "collapse (sheared swap)", "p1-collapse-inverse-pareto":
                "collapse (matrix inverse)", **{f"p1-distance-{c}-{k}": f"softmax/{k.replace('_elu', '-ELU')}, {w}"
                                                for c, w in (("swap-pareto", "swap"), ("inverse-pareto", "inverse"))
                                                for k in ("squared_elu", "linear_elu", "log_elu")}}),
    PaperClaim("P2", "with symlog, softmax avoids collapse on the matrix inverse but still collapses on the sheared swap",
               "Sec. 4.2, Tables 5-6", PAPER_SCALE,
               (("tables56", "p2-symlog-inverse-pareto"), ("tables56", "p2-symlog-swap-pareto")),
               "notebooks/10_tables56.py",
               {"p2-symlog-inverse-pareto": "avoids (matrix inverse)", "p2-symlog-swap-pareto": "collapses (swap)"}),
    PaperClaim("P3", "on the Gaussian sheared swap all four kernels avoid collapse and perform similarly",
               "Sec. 4.2, Table 5", PAPER_SCALE,
               (("tables56", "p3-gaussian-collapse"), ("tables56", "p3-gaussian-similar")), "notebooks/10_tables56.py",
               {"p3-gaussian-collapse": "share of softmax runs collapsed", "p3-gaussian-similar": "similar (x1.5)"}),
    PaperClaim("P4", "pre-norm models do not collapse, for any kernel or transform", "Sec. 4.2, Tables 5-6",
               PAPER_SCALE, (("tables56", "p4-prenorm-inverse-pareto"), ("tables56", "p4-prenorm-swap-pareto")),
               "notebooks/10_tables56.py",
               {"p4-prenorm-inverse-pareto": "matrix inverse", "p4-prenorm-swap-pareto": "sheared swap"}),
    PaperClaim("P5", "softmax first descends with the others, then diverges abruptly (step ~3,500; symlog ~4,500) and "
               "stays there", "Sec. 4.2, App. I, Fig. 13", PAPER_SCALE,
               (("tables56", "p5-shape-swap-pareto"), ("tables56", "p5-shape-symlog-swap-pareto"),
                ("tables56", "p5-shape-inverse-pareto")),
               "notebooks/10_tables56.py",
               {"p5-shape-swap-pareto": "sheared swap", "p5-shape-symlog-swap-pareto": "sheared swap, symlog",
                "p5-shape-inverse-pareto": "matrix inverse"}),
    PaperClaim("M1", "exponential weighting amplifies extreme samples and contributes to the collapse (proposed)",
               "Sec. 4.2", PAPER_SCALE, (("mechanism", "hypothesis"),), "notebooks/09_collapse_ladder.py",
               {"hypothesis": "interventions", "prevents-block0-log-elu": "collapsed share, log-ELU in block 0",
                "prevents-stablemax": "collapsed share, StableMax"},
               evidence=(("mechanism", "prevents-block0-log-elu"), ("mechanism", "prevents-stablemax"))),
    PaperClaim("C1", "the sub-exponential kernels cost more per training step, lacking a fused kernel", "Table 4",
               "H200, the trained shapes", (), "docs/benchmarks.md",
               untested="needs the paper's GPU; this CPU's flash loop against SDPA is benchmarked instead"),
    PaperClaim("H1", "a Hill diagnostic of the upper-tail samples complements the energy distance", "App. J",
               "128 trials, N 16384", (), "notebooks/06_summary.py",
               untested="computed on the CPU ablation grid (one seed); no rule reads it"),
)


# The repository's own questions, beyond the paper: the front pages' second table (``claims own``).
OWN = "beyond the paper"
OWN_QUESTIONS: tuple[PaperClaim, ...] = (
    PaperClaim("Q1", "softmax falls further behind log-ELU as N grows (App. A's divergence)", "notebook 07", OWN,
               (("gap-design", "gap-grows-with-n"), ("gap-converged", "converged-excess-grows"),
                ("gap-fair", "fair-excess-grows")), "notebooks/07_kernel_gap.py",
               {"gap-grows-with-n": "design recipe", "converged-excess-grows": "stopping rule",
                "fair-excess-grows": "fixed annealed budget"}),
    PaperClaim("Q2", "a kernel's trained growth with N follows the boundary rule q + 1 >= a (pre-registered)",
               "notebook 08", OWN, (("phase-confirm", "phase-confirm"),), "notebooks/08_phase_diagram.py",
               {"phase-confirm": "deciding cells agreeing"}),
    PaperClaim("Q3", "softmax's static exponent follows App. A extrapolated to q = infinity (1/a)", "notebook 08", OWN,
               (("phase", "static-exponent-softmax"),), "notebooks/08_phase_diagram.py",
               {"static-exponent-softmax": "cells not outside +-0.1, of 9"}),
    PaperClaim("Q4", "softmax's collapse needs Table 3's model (R2 against R1's model on the same recipe)",
               "notebook 09", OWN, (("ladder", "collapse-model-R2"),), "notebooks/09_collapse_ladder.py",
               {"collapse-model-R2": "R2 - R1b collapsed steps"}),
    PaperClaim("Q5", "at R3, softmax through bf16 SDPA collapses more than through float32 attention", "notebook 09",
               OWN, (("ladder", "collapse-precision-R3"),), "notebooks/09_collapse_ladder.py",
               {"collapse-precision-R3": "bf16 - float32 collapsed steps"}),
    PaperClaim("Q6", "flushing subnormal floats changes a run's outcome (tested at D = 32, 300 steps only)",
               "notebook 07", OWN, (("subnormal-ab", "subnormals-change-softmax"),
                                    ("subnormal-ab", "subnormals-change-log_elu")), "docs/findings.md",
               {"subnormals-change-softmax": "softmax flushed/default ratio", "subnormals-change-log_elu": "log-ELU"}),
)


def verdict(pc: PaperClaim, decided: Mapping[tuple[str, str], Mapping[str, Any]]) -> tuple[str, str]:
    """(verdict, which parts): the paper claim's verdict from its parts' decided claims (absent: not run)."""
    if not pc.parts:
        return (NOT_TESTED if pc.id == "C1" else SHOWN), pc.untested
    got = {cid: decided.get((g, cid), {}).get("verdict", C.NOT_RUN) for g, cid in pc.parts}
    name = (pc.short or {}).get

    def which(v: str) -> str:
        return ", ".join(name(cid, cid) for cid, x in got.items() if x == v)

    counts = {v: sum(x == v for x in got.values()) for v in C.VERDICTS}
    if counts[C.REPRODUCED] == len(got):
        return REPRODUCED, ""
    if counts[C.REPRODUCED]:
        rest = "; not reproduced: " + which(C.NOT_REPRODUCED) if counts[C.NOT_REPRODUCED] else ""
        return PARTLY, f"reproduced: {which(C.REPRODUCED)}{rest}"
    if counts[C.NOT_REPRODUCED]:
        return NOT_REPRODUCED, f"not reproduced: {which(C.NOT_REPRODUCED)}"
    if counts[C.NOT_RUN] == len(got):
        return NOT_TESTED, "its grid has not run"
    return UNDECIDED, f"undecided: {counts[C.UNDECIDED]} of {len(got)} parts" + (
        f", {counts[C.NOT_RUN]} not run" if counts[C.NOT_RUN] else "")


def _number(pc: PaperClaim, decided: Mapping[tuple[str, str], Mapping[str, Any]]) -> tuple[str, str]:
    """The one number that decided it, short ("collapse (sheared swap): 1 [0.541, 1], 6 seeds": the first part with a
    verdict, else the first with an estimate), and its scale label."""
    parts = [(cid, decided[(g, cid)]) for g, cid in (*pc.parts, *pc.evidence)
             if decided.get((g, cid), {}).get("estimate") is not None]
    first = next(((cid, c) for cid, c in parts if c["verdict"] in (C.REPRODUCED, C.NOT_REPRODUCED)),
                 parts[0] if parts else None)
    if first is None:
        return "n/a", ""
    cid, c = first
    value = C.fmt(c["estimate"]) + (C.interval_text(c) if c.get("low") is not None else "")
    seeds = f", {c['seeds']} seeds" if c.get("seeds") else ""
    scale = re.sub(r", [\d-]+ repetitions per a$", "", C.scale_label(c.get("scale", "")))  # the row's width
    return f"{(pc.short or {}).get(cid, cid)}: {value}{seeds}", scale


def rows(decide: Callable[[str], Sequence[Mapping[str, Any]] | None],
         entries: Sequence[PaperClaim] = PAPER_CLAIMS) -> list[dict[str, str]]:
    """One row per entry: id, words, section, verdict, which parts, the deciding number, our scale, the paper's
    scale, where it is shown. ``decide(group)`` gives a group's decided claims (None: map not shipped)."""
    groups = {g for pc in entries for g, _ in pc.parts}
    decided = {(g, c["id"]): c for g in sorted(groups) for c in (decide(g) or ())}
    out = []
    for pc in entries:
        v, which = verdict(pc, decided)
        number, scale = _number(pc, decided)
        out.append({"id": pc.id, "words": pc.words, "section": pc.section, "verdict": v, "which": which,
                    "number": number, "scale": scale or "-", "paper_scale": pc.paper_scale, "where": pc.shown})
    return out


README_COLUMNS = ("", "the paper claims", "verdict", "the number that decided it", "our scale")


def markdown(decide: Callable[[str], Sequence[Mapping[str, Any]] | None],
             entries: Sequence[PaperClaim] = PAPER_CLAIMS) -> str:
    """The rows as the README's table, one line each under 200 characters: the id links where it is shown (its
    reference link is defined under the table), the claim in the paper's words, shortened."""
    from heavytail.studies import tables

    found = rows(decide, entries)
    head = README_COLUMNS if entries is PAPER_CLAIMS else ("", "the question", *README_COLUMNS[2:])
    body = [[f"[{r['id']}]", r["words"], r["verdict"], r["number"], r["scale"]] for r in found]
    links = "\n".join(f"[{r['id']}]: {r['where']}" for r in found)
    return tables.markdown_grid(head, body) + "\n\n" + links
