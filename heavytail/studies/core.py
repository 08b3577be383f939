"""The run vocabulary every study shares: a run's variant (kernel and attention path), its label and colour, the
ratios it is read by, its collapsed steps, the extent of a set of runs, and runs grouped per (variant, N) and paired by
seed. Studies (``ablation``, ``collapse``, ``kernel_gap``, ``phase``) import this core and never each other.

Why the kernel gap needs a variant, not only a kernel: App. A shows that softmax attention has no population limit
on mirrored Pareto tokens, and softmax trained through a flash-style backward (SDPA) recomputes S and subtracts a
stored log-sum-exp, which loses every digit once |S| ~ 1e8; so the studies tell softmax through SDPA from softmax
through exact float32 (tiled) attention on the same data streams. Runs are grouped by the attention path that ran
(:func:`variant`; a summary made before summaries kept the path, by the path its configuration asks for) and
aggregated per (variant, N) across seeds (:func:`cells`). Every ratio is eq. 36's median ratio to the sampling floor
with eq. 37's bootstrap interval, read either at the common evaluation N (``at="common"``) or, for runs scored there
too, at the run's own training N (``at="train"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from heavytail.names import variant_color as names_variant_color
from heavytail.studies.run_record import RunRecord
from heavytail.names import kernel_names, label_backends, variant_name, variant_of  # noqa: F401  (variant_name: re-exported)
# The variants the claims compare (heavytail.names): softmax through SDPA's flash-style backward, softmax through
# exact float32 attention, and the slowest-growing kernel of Table 1.
from heavytail.names import LOG_ELU, SOFTMAX_EXACT, SOFTMAX_SDPA  # noqa: F401  (re-exported)

AT = ("common", "train")  # where a ratio is read: the common evaluation N, or the run's own training N


class PathMismatch(ValueError):
    """A run whose training recorded an attention path of another variant than its configuration asks for (softmax
    under ``auto`` that fell back from SDPA to tiled, say): grouped by either, a claim would compare the wrong runs."""


def configured_variant(config: Mapping[str, Any]) -> tuple[str, str]:
    """The variant a configuration asks for (:func:`heavytail.names.variant_of`); softmax under ``auto`` is SDPA."""
    return variant_of(config["kernel"], config.get("attention_backend", "auto"))


def recorded_variant(run: Mapping[str, Any]) -> tuple[str, str] | None:
    """The variant of the attention path the run's training recorded (:attr:`heavytail.studies.grid_folder.FinishedRun.attention`), or None for a
    summary made before summaries kept it and a run whose training recorded none. PathMismatch when the record
    names paths of two variants (softmax through SDPA for some shapes and tiled for others)."""
    run = RunRecord.from_summary(run)
    label = (run.get("attention") or {}).get("train")
    if not label:
        return None
    kernel = run.kernel
    try:
        found = list(dict.fromkeys(variant_of(kernel, b) for b in label_backends(label)))
    except ValueError as err:
        raise PathMismatch(f"run {run.get('name', '?')}: {err}") from None
    if run.split_kernel and len(found) > 1:
        # A split model (one block computes eq. 7 with another kernel: an intervention) records the paths of both
        # kernels in one label, which does not say which block ran which; the run is its kernel's configured
        # variant when that is among the paths, the other paths being the split block's.
        configured = configured_variant(run.config)
        found = [configured] if configured in found else found
    if len(found) > 1:
        raise PathMismatch(f"run {run.get('name', '?')}: its training recorded the attention paths {label!r}, which "
                           f"are {len(found)} variants ({', '.join(map(variant_name, found))}): it belongs to none")
    return found[0]


def variant(run: Mapping[str, Any]) -> tuple[str, str]:
    """(kernel, attention path) of a run summary, what the claims group runs by: the path its training recorded
    (:func:`recorded_variant`), or for a summary that has none (made before summaries kept it) the path its
    configuration asks for (:func:`configured_variant`). A bare configuration is read as the latter. A recorded
    path of another variant than the configuration's is a :class:`PathMismatch`, never silently regrouped."""
    if "config" not in run:  # a configuration, not a run summary (no configuration key is called "config")
        return configured_variant(run)
    run = RunRecord.from_summary(run)
    configured, ran = configured_variant(run.config), recorded_variant(run)
    if ran is not None and ran != configured:
        asked = run.attention_backend
        raise PathMismatch(
            f"run {run.get('name', '?')}: its configuration asks for attention_backend={asked!r} "
            f"({variant_name(configured)}) but its training ran {run['attention']['train']!r} ({variant_name(ran)}); "
            "the claims compare runs by the path that ran: re-run it where that path runs, or leave it out")
    return ran or configured


def path_mismatches(runs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why each run whose recorded attention path is not its configuration's variant cannot be grouped (the
    :class:`PathMismatch` of :func:`variant`); [] when every run's record agrees or predates the record."""
    out = []
    for r in runs:
        if (r.get("attention") or {}).get("train"):
            try:
                variant(r)
            except PathMismatch as err:
                out.append(str(err))
    return out


def variant_color(v: tuple[str, str]) -> str:
    return names_variant_color(v)


def _order(v: tuple[str, str]) -> tuple[int, int]:
    return kernel_names().index(v[0]), 0 if v[1] == "sdpa" else 1


# ------------------------------------------------------------------------------------ aggregation
@dataclass(frozen=True)
class Cell:
    """One (variant, N) across seeds. ``runs`` are ordered by seed."""

    variant: tuple[str, str]
    n_points: int
    runs: tuple[RunRecord, ...]

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    @property
    def ratios(self) -> list[float]:
        return [r.ratio for r in self.runs]

    def ratios_at(self, at: str = "common") -> list[float]:
        return [ratio_at(r, at) for r in self.runs]

    @property
    def median_ratio(self) -> float:
        return _median(self.ratios)

    def collapsed_fraction(self, at: str = "train") -> list[float]:
        """Per seed, the fraction of evaluation trials whose output collapsed (graded, App. I)."""
        return [collapsed_fraction_at(r, at) for r in self.runs]

    def collapsed_steps(self) -> list[float]:
        """Per seed, the fraction of logged training steps whose batch had most trials collapsed."""
        return [collapsed_steps(r) for r in self.runs]

    @property
    def skipped(self) -> list[int]:
        return [r["skipped_steps"] for r in self.runs]

    @property
    def collapsed(self) -> list[bool]:
        return [r.collapsed for r in self.runs]

    def by_seed(self) -> dict[int, RunRecord]:
        return {r.seed: r for r in self.runs}


def ratio_at(run: Mapping[str, Any], at: str = "common", stat: str = "median") -> float:
    """The run's eq. 36 ratio at the common evaluation N, or at its training N (NaN when not scored there)."""
    if at not in AT:
        raise ValueError(f"at={at!r}; choose one of {AT}")
    run = RunRecord.from_summary(run)
    if at == "common" or run.n_points == run.eval_n_points:
        return run[stat]["ratio"]
    return (run.get("at_train_n") or {}).get(stat, {}).get("ratio", math.nan)


def interval_at(run: Mapping[str, Any], at: str = "common") -> tuple[float, float, float]:
    """(ratio, low, high) of eq. 36-37's median ratio at the common N or at the run's training N."""
    run = RunRecord.from_summary(run)
    if at == "common" or run.n_points == run.eval_n_points:
        block = run.median
    else:
        block = (run.get("at_train_n") or {}).get("median", {})
    return tuple(block.get(k, math.nan) for k in ("ratio", "low", "high"))


def collapsed_fraction_at(run: Mapping[str, Any], at: str = "train") -> float:
    run = RunRecord.from_summary(run)
    if at == "common" or run.n_points == run.eval_n_points:
        return run.collapse["fraction"]
    return (run.get("at_train_n") or {}).get("collapse", {}).get("fraction", math.nan)


def collapsed_steps(run: Mapping[str, Any], lo: float | None = None, hi: float | None = None) -> float:
    """Fraction of regularly logged training steps (those in [lo, hi) when given) whose batch had at least half its
    trials collapsed (NaN if none). Only the rows on the logging grid (steps that are multiples of ``log_every``)
    count: a skipped (non-finite) step is recorded where it happened, off that grid, and counting it would weigh
    the rare step that failed as one more logged step."""
    run = RunRecord.from_summary(run)
    trace = run.get("trace", {})
    every = int(run.config.get("log_every") or 1)
    lo, hi = -math.inf if lo is None else lo, math.inf if hi is None else hi
    fr = trace.get("collapsed_fraction", [])
    steps = trace.get("step") or [every * (i + 1) for i in range(len(fr))]  # a trace without steps: every row is logged
    fr = [f for s, f in zip(steps, fr) if lo <= s < hi and s % every == 0]
    fr = [f for f in fr if f is not None and math.isfinite(f)]
    return sum(f >= 0.5 for f in fr) / len(fr) if fr else math.nan


def _median(values: Sequence[float]) -> float:
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    if not xs:
        return math.nan
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def cells(runs: Iterable[Mapping[str, Any]]) -> dict[tuple[tuple[str, str], int], Cell]:
    """Runs grouped by (variant, training N), ordered by variant then N."""
    groups: dict[tuple[tuple[str, str], int], list[RunRecord]] = {}
    for r in map(RunRecord.from_summary, runs):
        groups.setdefault((variant(r), r.n_points), []).append(r)
    keys = sorted(groups, key=lambda k: (_order(k[0]), k[1]))
    return {k: Cell(k[0], k[1], tuple(sorted(groups[k], key=lambda r: r.seed))) for k in keys}


def paired_ratio(cs: Mapping[tuple, Cell], a: tuple[str, str], b: tuple[str, str], n: int,
                 at: str = "common") -> dict[int, float]:
    """Per seed, the median ratio of variant ``a`` over variant ``b`` at training N ``n``. Runs with the same
    seed saw the same data streams (train.draw_batch), so the pair isolates the attention."""
    if (a, n) not in cs or (b, n) not in cs:
        return {}
    ra, rb = cs[(a, n)].by_seed(), cs[(b, n)].by_seed()
    out = {}
    for s in sorted(set(ra) & set(rb)):
        x, y = ratio_at(ra[s], at), ratio_at(rb[s], at)
        if y > 0 and math.isfinite(x) and math.isfinite(y):
            out[s] = x / y
    return out


def paired_difference(cs: Mapping[tuple, Cell], a: tuple[str, str], b: tuple[str, str], n: int,
                      value) -> dict[int, float]:
    """Per seed, ``value(run of a) - value(run of b)`` at training N ``n`` (e.g. a collapsed fraction)."""
    if (a, n) not in cs or (b, n) not in cs:
        return {}
    return paired_by_seed(cs[(a, n)].runs, cs[(b, n)].runs, value)


def paired_by_seed(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], value) -> dict[int, float]:
    """Per seed that both lists of runs hold, ``value(run of a) - value(run of b)``; non-finite differences left out."""
    ra, rb = ({r.seed: r for r in map(RunRecord.from_summary, runs)} for runs in (a, b))
    out = {s: value(ra[s]) - value(rb[s]) for s in sorted(set(ra) & set(rb))}
    return {s: v for s, v in out.items() if math.isfinite(v)}


def sizes(cs: Mapping[tuple, Cell]) -> list[int]:
    return sorted({n for _, n in cs})


def variants(cs: Mapping[tuple, Cell]) -> list[tuple[str, str]]:
    return sorted({v for v, _ in cs}, key=_order)


def table(cs: Mapping[tuple, Cell]) -> dict[str, Any]:
    """Per variant and N: median ratio over seeds, the seed range, skipped steps, collapsed runs."""
    rows = []
    for (v, n), c in cs.items():
        rows.append({
            "variant": variant_name(v), "N": n, "seeds": ", ".join(map(str, c.seeds)),
            "median ratio (median over seeds)": f"{c.median_ratio:.3g}",
            "seed range": f"{min(c.ratios):.3g} - {max(c.ratios):.3g}",
            "skipped steps per seed": ", ".join(map(str, c.skipped)),
            "collapsed runs": f"{sum(c.collapsed)} of {len(c.runs)}",
        })
    return {"title": "Median ratio to the sampling floor per variant and training N",
            "columns": ["variant", "N", "seeds", "median ratio (median over seeds)", "seed range",
                        "skipped steps per seed", "collapsed runs"], "rows": rows,
            "notes": "ratio: eq. 36 median ratio at evaluation N = "
                     + ", ".join(sorted({str(c.runs[0].eval_n_points) for c in cs.values()}))
                     + "; trials per step "
                     + ", ".join(sorted({str(r['config']['trials_per_step']) for c in cs.values() for r in c.runs}))}


def span(runs: Sequence[Mapping[str, Any]], key: str) -> str:
    vals = sorted({r["config"][key] for r in runs})
    return str(vals[0]) if len(vals) == 1 else "{" + ", ".join(map(str, vals)) + "}"


def map_extent(runs: Sequence[Mapping[str, Any]]) -> str:
    """The region of settings the runs cover, in words: N, trials per step, evaluation N among them."""
    if not runs:
        return "no runs"
    seeds = sorted({RunRecord.from_summary(r).seed for r in runs})
    tps = span(runs, "trials_per_step")
    at_train = any(r.get("at_train_n") for r in runs)
    ns = span(runs, "n_points")
    return (f"training N {'in' if ns.startswith('{') else '='} {ns}, {tps} trial{'s' if tps != '1' else ''} per step, "
            f"{span(runs, 'steps')} steps, lr {span(runs, 'lr')}, D = {span(runs, 'd_model')}, "
            f"{span(runs, 'n_blocks')} {span(runs, 'norm')}-norm blocks, {span(runs, 'benchmark')} on "
            f"{span(runs, 'marginals')}, precision {span(runs, 'precision')}, evaluated at N = "
            f"{span(runs, 'eval_n_points')} ({span(runs, 'eval_trials')} trials)"
            + (" and at each run's training N" if at_train else "") + f", seeds {seeds}")


