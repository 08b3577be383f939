"""The collapse ladder's descriptive tables, read from its run summaries (rule 5 of
:mod:`heavytail.studies.collapse.ladder`: the onset and what the regular log shows before it, App. I).

The rules and their claims live in :mod:`heavytail.studies.collapse.ladder`; nothing here draws a verdict. Per run:
block 0's absorption (most rows' largest attention weight exactly 1 in the working precision, float absorption),
the step from which it stays absorbed, and the W_Q/W_K gradient before an onset against its early median. Per rung
and kernel: the table of every run, the precursors of each onset, and the collapse-by-task tests.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from heavytail.names import LOG_ELU
from heavytail.studies import claims as C
from heavytail.studies.collapse.ladder import (RUNGS, VARIANT_LABELS, bf16_path, ladder_cells, labelled, onsets,
                                               ordered_cells)
from heavytail.studies.core import collapsed_steps
from heavytail.studies.run_summary import diverged_count


def table(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per rung and variant: seeds, runs labelled collapsed, and per seed (in the order of ``seeds``) the onset,
    the share of logged steps with a collapsed batch, the median ratio to the floor and block 0's absorption."""
    rows = []
    for (rung, v), rs in ordered_cells(runs):
        rows.append({
            "rung": rung, "variant": VARIANT_LABELS.get(v, "/".join(v)),
            "seeds": ", ".join(str(r.seed) for r in rs),
            "steps": ", ".join(sorted({str(r.steps) for r in rs})),
            "runs collapsed": f"{sum(map(labelled, rs))} of {len(rs)}",
            "runs diverged": f"{diverged_count(rs)} of {len(rs)}",
            "collapsed batches (share of logged steps, per seed)": ", ".join(f"{collapsed_steps(r):.3f}" for r in rs),
            "onset (step), per seed": ", ".join("none" if t is None else str(t) for t in onsets(rs).values()),
            "median ratio (eq. 36), per seed": ", ".join(C.fmt(r["median"]["ratio"]) for r in rs),
            "block 0 absorbed (share of logged steps, per seed)": ", ".join(
                "n/a" if (x := absorbed_share(r)) is None else f"{x:.2f}" for r in rs),
            "bf16 matmuls, per seed": _per_seed_or_once([bf16_path(r) or "none: float32" for r in rs]),
        })
    return {"title": "The ladder, per rung and kernel", "columns": list(rows[0]) if rows else [], "rows": rows,
            "notes": "collapsed: most evaluation trials' output spread below 5 % of the target's (App. I); diverged: more "
                     "than 10 % of steps skipped or a non-finite ratio (neither healthy nor collapsed); onset: "
                     "the first logged step from which every logged batch is collapsed; ratio: the median of the "
                     "model's energy distances over the evaluation trials over the median of the sampling floor's; "
                     "absorbed: most rows of block 0's attention had one weight of exactly 1 in the working precision; "
                     "bf16 matmuls: torch's kernels, or their float32 emulation on a CPU without native bf16 "
                     "(heavytail/harness/cpu_bf16.py)"}


def _per_seed_or_once(values: Sequence[str]) -> str:
    """The values per seed, or one value for every seed where they are all the same."""
    if len(set(values)) == 1 and len(values) > 1:
        return f"{values[0]}, every seed"
    return ", ".join(values)


def absorbed_share(run: Mapping[str, Any], block: int = 0, before: int | None = None) -> float | None:
    """The share of a run's regularly logged steps (those before step ``before``, when given) at which most rows
    of ``block``'s attention were absorbed: their largest weight exactly 1 in the working precision, every other
    point's weight lost to rounding. None when the run logged no attention statistics there."""
    trace = run.get("trace") or {}
    pts = [y for s, y in zip(trace.get("step", []), trace.get(f"block{block}.attn_absorbed", []))
           if isinstance(y, (int, float)) and math.isfinite(y) and (before is None or s < before)]
    return sum(y > 0.5 for y in pts) / len(pts) if pts else None


def saturated_from(run: Mapping[str, Any], block: int = 0) -> int | None:
    """The first regularly logged step from which ``block`` stays absorbed (most rows' largest weight exactly 1)
    at every later logged step, as :func:`heavytail.science.collapse.collapse_onset` reads a collapse; None when the
    run ends unabsorbed or logged no attention statistics."""
    trace = run.get("trace") or {}
    pts = list(zip(trace.get("step", []), trace.get(f"block{block}.attn_absorbed", [])))
    first = None
    for step, y in pts:
        if not (isinstance(y, (int, float)) and math.isfinite(y) and y > 0.5):
            first = None
        elif first is None:
            first = step
    return first if pts else None


def _median_between(run: Mapping[str, Any], key: str, lo: float, hi: float) -> float | None:
    trace = run.get("trace") or {}
    ys = sorted(y for s, y in zip(trace.get("step", []), trace.get(key, []))
                if lo <= s < hi and isinstance(y, (int, float)) and math.isfinite(y))
    return ys[len(ys) // 2] if ys else None


def precursors(runs: Sequence[Mapping[str, Any]], block: int = 0, span: int = 1000) -> list[dict[str, Any]]:
    """Per run with a collapse onset, what its regular log shows before it (rule 5, descriptive): the onset, the
    step from which ``block`` stayed absorbed (:func:`saturated_from`), and the median gradient norm of the block's
    W_Q and W_K over the ``span`` steps before the onset against its median over the first ``span`` steps of
    training; ``collapsed_before``: the share of logged steps with a collapsed batch over the ``span`` steps before
    the onset (near 0: an abrupt onset, as in the paper's Fig. 13; near 1: batches collapsing long before every one
    did); ``partner``: the same two medians for the log-ELU run of the same rung and seed, over the same steps (None
    without one)."""
    cs = ladder_cells(runs)
    key = f"block{block}.qk_grad_norm"
    out = []
    for (rung, v), rs in cs.items():
        partners = {x.seed: x for x in cs.get((rung, LOG_ELU), [])} if v != LOG_ELU else {}
        for r in rs:
            if (onset := r["collapse"].get("onset")) is None:
                continue
            p = partners.get(r.seed)
            out.append({"rung": rung, "variant": v, "seed": r.seed, "onset": onset, "span": span,
                        "saturated_from": saturated_from(r, block),
                        "collapsed_before": None if math.isnan(c := collapsed_steps(r, onset - span, onset)) else c,
                        "qk_grad": (_median_between(r, key, 0, span + 1), _median_between(r, key, onset - span, onset)),
                        "partner": None if p is None else (_median_between(p, key, 0, span + 1),
                                                           _median_between(p, key, onset - span, onset))})
    order = {rung.name: i for i, rung in enumerate(RUNGS)}
    return sorted(out, key=lambda x: (order.get(x["rung"], 99), x["variant"], x["seed"]))


def precursor_table(found: Sequence[Mapping[str, Any]], block: int = 0) -> dict[str, Any]:
    """:func:`precursors` as a table: one row per run with an onset; the note states the span they used."""
    def ratio(pair):
        return "n/a" if pair is None or None in pair or not pair[0] else f"{pair[1] / pair[0]:.1e}"

    rows = [{"rung": x["rung"], "kernel": VARIANT_LABELS.get(x["variant"], "/".join(x["variant"])), "seed": x["seed"],
             "onset (step)": x["onset"],
             f"block {block} absorbed at every later logged step from": "never" if x["saturated_from"] is None
             else x["saturated_from"],
             "collapsed batches before the onset (share of logged steps)": "n/a" if x.get("collapsed_before") is None
             else f"{x['collapsed_before']:.2f}",
             "W_Q/W_K gradient, before the onset / first steps": ratio(x["qk_grad"]),
             "log-ELU, same seed and steps": ratio(x["partner"])} for x in found]
    spans = ", ".join(f"{s:,}" for s in sorted({x["span"] for x in found})) or "n/a"
    return {"title": f"Before each onset, block {block} (regular log)", "columns": list(rows[0]) if rows else [],
            "rows": rows, "notes": f"before the onset: the {spans} steps before it; gradient: the median norm of the "
                                   f"block's W_Q and W_K gradient over those steps over its median over the first "
                                   f"{spans} steps of training"}


def precursor_sentence(found: Sequence[Mapping[str, Any]], block: int = 0) -> str:
    """One sentence on :func:`precursors`' softmax runs: which had ``block`` absorbed for good before the onset (and
    how long before), how far their W_Q/W_K gradient fell (log-ELU's over the same steps beside it), which were
    absorbed for good only after it or never, and the range of collapsed batches before the onsets. Empty without
    a softmax run with an onset."""
    soft = [x for x in found if x["variant"][0] == "softmax"]
    if not soft:
        return ""

    def names(xs):
        by: dict[str, list[str]] = {}
        for x in xs:
            by.setdefault(f"{x['rung']} {VARIANT_LABELS.get(x['variant'], 'softmax')}", []).append(str(x["seed"]))
        return "; ".join(f"{k} seed{'s' * (len(v) > 1)} {', '.join(v)}" for k, v in by.items())

    def span_of(values, fmt):
        values = sorted(values)
        return fmt(values[0]) if values[0] == values[-1] else f"{fmt(values[0])} to {fmt(values[-1])}"

    span = f"{soft[0]['span']:,}"
    early = [x for x in soft if x["saturated_from"] is not None and x["saturated_from"] <= x["onset"]]
    late = [x for x in soft if x not in early]
    text = f"{len(soft)} softmax runs reached an onset ({names(soft)})."
    if early:
        drop = [x["qk_grad"][1] / x["qk_grad"][0] for x in early if None not in x["qk_grad"] and x["qk_grad"][0]]
        partner = [x["partner"][1] / x["partner"][0] for x in early
                   if x["partner"] and None not in x["partner"] and x["partner"][0]]
        text += (f" {len(early)} of them had block {block} absorbed for good "
                 f"{span_of([x['onset'] - x['saturated_from'] for x in early], lambda v: f'{v:,}')} steps before it")
        if drop:
            text += (f", their W_Q/W_K gradient over the {span} steps before it {span_of(drop, lambda v: f'x{v:.0e}')}"
                     f" of its median over the first {span}")
            if partner:
                text += f" (log-ELU over the same steps: {span_of(partner, lambda v: f'x{v:.0e}')})"
        text += "."
    if late:
        text += (f" Block {block} of {names(late)} was absorbed for good only after the onset or "
                 "never.")
    shares = [(x["collapsed_before"], x) for x in soft if x.get("collapsed_before") is not None]
    if shares:
        low = min(shares, key=lambda p: p[0])[1]
        text += (f" Batches collapsed on {span_of([v for v, _ in shares], lambda v: f'{v:.2f}')} of the logged "
                 f"steps in the {span} steps before an onset (the least: {names([low])}).")
    return text


def absorption_before_onset(runs: Sequence[Mapping[str, Any]], block: int = 0) -> dict[str, Any]:
    """Was ``block`` already absorbed before softmax's first collapsed batch? ``softmax``: per softmax run with an
    onset window, (rung, variant label, seed, the window's centre step, :func:`absorbed_share` before it), the label
    telling softmax's attention paths apart on one rung; ``log_elu``: the largest :func:`absorbed_share` over
    log-ELU's runs (None without one)."""
    soft, other = [], []
    for (rung, v), rs in ordered_cells(runs):
        for r in rs:
            centre = (r.get("onset_window") or {}).get("center")
            if v[0] == "softmax" and centre is not None and (x := absorbed_share(r, block, centre)) is not None:
                soft.append((rung, VARIANT_LABELS.get(v, "/".join(v)), r.seed, centre, x))
            elif v == LOG_ELU and (x := absorbed_share(r, block)) is not None:
                other.append(x)
    return {"softmax": soft, "log_elu": max(other) if other else None}


def absorption_table(absorbed: Mapping[str, Any], block: int = 0) -> dict[str, Any]:
    """:func:`absorption_before_onset` as a table: one row per softmax run with a first collapsed batch after a
    healthy stretch; the note gives log-ELU's largest share for comparison."""
    rows = [{"rung": rung, "kernel": label, "seed": seed, "first collapsed batch (step)": centre,
             f"block {block} absorbed before it (share of logged steps)": f"{x:.2f}"}
            for rung, label, seed, centre, x in absorbed["softmax"]]
    other = absorbed.get("log_elu")
    return {"title": f"Block {block} absorbed before softmax's first collapsed batch",
            "columns": list(rows[0]) if rows else [], "rows": rows,
            "notes": "first collapsed batch: the first logged batch that collapsed after a healthy stretch (the "
                     "centre of the run's every-step window); absorbed: most rows' largest weight exactly 1; "
                     + (f"log-ELU's runs: at most {other:.2f} of their logged steps" if other is not None
                        else "no log-ELU run logged its attention")}


def task_table(runs: Sequence[Mapping[str, Any]], tests: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per softmax run that kept its trials' task parameters, in rung, variant and seed order: trials collapsed
    and the best line's agreement with its permutation p-value (``tests`` by run name,
    :func:`heavytail.studies.collapse.by_task.half_plane_test`)."""
    rows = []
    for (rung, v), rs in ordered_cells(runs):
        for r in rs:
            if (t := tests.get(r["name"])) is not None:
                rows.append({"rung": rung, "kernel": VARIANT_LABELS.get(v, "/".join(v)), "seed": r.seed,
                             "trials collapsed": f"{t['collapsed']} of {t['n']}",
                             "best line agrees": f"{t['agreement']:.0%}", "p (label shuffles)": f"{t['p']:.3g}"})
    perms = sorted({t["permutations"] for t in tests.values()})
    return {"title": "Collapse by task: does a line in the task plane separate collapsed trials from healthy ones?",
            "columns": list(rows[0]) if rows else [], "rows": rows,
            "notes": f"{', '.join(map(str, perms)) or 'no'} label shuffles per run, one test per run, uncorrected; "
                     "p = 1 where a run's trials are all collapsed or all healthy (nothing to separate)"}
