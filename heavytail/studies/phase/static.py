"""The shipped static reference of App. A's moment condition: every registered kernel on tail indices either side
of its boundary, at a scale whose Bonferroni intervals can decide the +-0.1 claim.

:mod:`heavytail.studies.phase.moment_condition` measures the growth exponent of one query's attention output on nested
ensembles; notebook 08 runs it small (a few tail indices, 24 repetitions). This module fixes, before the run,
the design that decides the static claim (:func:`heavytail.studies.phase.diagram.static_verdict`):

- :data:`TAIL_INDICES`: each kernel's boundary q + 1 (App. A) has a tail index on either side of it, 0.25
  away (log-ELU's, a = 1, too: below it the values have no mean), and q = 1, 2 have a in [2.5, 3] and in
  [3, 3.5] (the moderate regime's heavier axis, which q = 2's boundary splits);
- :data:`FIT_LOG2`: the exponent is the slope over N = 2^10 .. 2^20 by doublings (the smallest ensembles,
  where softmax still averages several keys, are left out of the fit before the run, not after);
- the repetitions: sized by :func:`reps_needed` from a pilot's bootstrap spread, capped by the budget.

``python -m heavytail.studies.phase.static --reps R --output outputs/reference/phase_static.json`` computes it
(float64, one thread) and writes the rows, the per-N medians the figure draws, and provenance.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from heavytail.names import KERNEL_ROWS, app_a_kernels

TAIL_INDICES = (0.75, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4.5, 6.0)
FIT_LOG2 = (10, 20)
D = 2  # token dimension, as notebook 08's static run (the paper's latent dimension, Section 3.2)
SEED_BASE = 1000  # tail index i draws from seed SEED_BASE + i; notebook 08's own run seeds from 0: disjoint
TARGET_HALF_WIDTH = 0.05  # the half of the +-0.1 tolerance left to noise; the other half to finite-N bias


def sizes(fit_log2: tuple[int, int] = FIT_LOG2) -> list[int]:
    return [2**k for k in range(fit_log2[0], fit_log2[1] + 1)]


def kernels() -> dict[str, float]:
    """Every kernel of App. A's family by growth order q (heavytail.names.app_a_kernels)."""
    family = set(app_a_kernels())
    return {k: row.order for k, row in sorted(KERNEL_ROWS.items(), key=lambda kv: kv[1].order) if k in family}


def boundaries_covered(tail_indices: Sequence[float] = TAIL_INDICES) -> dict[str, tuple[float, float] | None]:
    """Per kernel with a finite boundary q + 1, the nearest tail indices below and above it (None if a side is
    empty); softmax has none (q = inf: no polynomial tail satisfies App. A's condition)."""
    out = {}
    for name, q in kernels().items():
        if math.isinf(q):
            continue
        below = [a for a in tail_indices if a < q + 1]
        above = [a for a in tail_indices if a > q + 1]
        out[name] = (max(below), min(above)) if below and above else None
    return out


def joint_z(cells: int, level: float = 0.95) -> float:
    """The two-sided normal quantile at the Bonferroni level 1 - (1 - level) / cells."""
    return float(stats.norm.ppf(1 - (1 - level) / cells / 2))


def reps_needed(sd: float, reps: int, cells: int, half_width: float = TARGET_HALF_WIDTH) -> int:
    """Repetitions for a Bonferroni half-width of ``half_width``, from a pilot's bootstrap sd of the exponent
    at ``reps`` repetitions: the sd falls like 1/sqrt(reps), so reps * (z sd / half_width)^2."""
    return math.ceil(reps * (joint_z(cells) * sd / half_width) ** 2)


def allocate(pilot_rows: Sequence[Mapping[str, Any]], pilot_reps: int | Mapping[float, int], half_width: float = 0.1,
             safety: float = 1.1, least: int = 64, most: int = 800) -> dict[float, int]:
    """Repetitions per tail index from a pilot: every kernel at a tail index shares its draws, so a tail index
    gets what its widest cell needs for a Bonferroni half-width ``half_width`` (:func:`reps_needed`, times
    ``safety`` for the pilot's own error in the sd), clipped to [least, most]: ``most`` is what the budget
    allows where a cell (softmax near its crossover) would need thousands. ``pilot_reps``: the pilot's count,
    one for all or one per tail index (an earlier reference serves as the pilot of a larger one: its sds are
    the better estimates)."""
    cells = len(pilot_rows)
    out: dict[float, int] = {}
    for r in pilot_rows:
        had = pilot_reps if isinstance(pilot_reps, int) else pilot_reps[float(r["a"])]
        need = math.ceil(safety * reps_needed(r["sd"], had, cells, half_width))
        out[float(r["a"])] = max(out.get(float(r["a"]), least), min(most, need))
    return out


def joint_half_width(row: Mapping[str, Any]) -> float:
    """A cell's Bonferroni half-width as the +-0.1 claim reads it: the wider side of its (bootstrap percentile,
    so possibly skewed) joint interval about the measured exponent."""
    return max(row["measured"] - row["joint_low"], row["joint_high"] - row["measured"])


def widen(rows: Sequence[Mapping[str, Any]], reps: Mapping[float, int], half_width: float = 0.1,
          safety: float = 1.25) -> dict[float, int]:
    """Repetitions per tail index from a computed reference's own intervals: a tail index whose widest cell is
    wider than ``half_width`` gets reps * (width / half_width)^2 * ``safety`` (a half-width falls like
    1/sqrt(reps)); the others keep theirs, so their draws are reused. Sizing by the interval that was measured,
    where :func:`allocate`'s normal approximation from the sd under-sized the skewed cells; it reads widths
    only, never where an interval lies, so it cannot steer a verdict."""
    out = {float(a): int(n) for a, n in reps.items()}
    for r in rows:
        a, width = float(r["a"]), joint_half_width(r)
        if width > half_width:
            out[a] = max(out[a], math.ceil(reps[a] * (width / half_width) ** 2 * safety))
    return out


def compute(reps: int | Mapping[float, int], tail_indices: Sequence[float] = TAIL_INDICES, ns: Sequence[int] | None = None,
            seed_base: int = SEED_BASE, n_boot: int = 1000, work: Path | None = None, progress: bool = False
            ) -> dict[str, Any]:
    """The static reference: ``rows`` (moment_condition.exponent_table, each with ``n_max`` and ``reps``), the
    per-(a, kernel) median |o_N| over repetitions at each N (``medians``), ``ns`` and the design. ``reps``: one
    count for every tail index or one per tail index (:func:`allocate`); with ``work``, each tail index's norms
    are kept there (npz) and reused, so an interrupted run resumes."""
    import torch

    from heavytail.science.kernels import get_kernel
    import heavytail.studies.phase.moment_condition as M

    ns = list(ns or sizes())
    ks = kernels()
    log_gs = {k: get_kernel(k).log_g for k in ks}
    per = {float(a): reps for a in tail_indices} if isinstance(reps, int) else {float(a): reps[float(a)]
                                                                                 for a in tail_indices}
    norms = {}
    for i, a in enumerate(tail_indices):
        cached = Path(work) / f"a{a:g}-reps{per[a]}-seed{seed_base + i}.npz" if work else None
        if cached is not None and cached.is_file():
            norms[a] = dict(np.load(cached))
            continue
        with torch.no_grad():
            norms[a] = M.output_growth(log_gs, a, ns, reps=per[a], d=D, seed=seed_base + i,
                                       progress=f"a = {a:g} ({i + 1} of {len(tail_indices)})" if progress else None)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cached, **norms[a])
    rows = [dict(r, n_max=max(ns), n_min=min(ns), reps=per[float(r["a"])])
            for r in M.exponent_table(ks, tail_indices, norms, ns, n_boot=n_boot)]
    medians = {f"{a:g}": {k: np.median(norms[a][k], axis=0).tolist() for k in ks} for a in tail_indices}
    return {"design": {"tail_indices": list(tail_indices), "ns": ns, "reps": {f"{a:g}": r for a, r in per.items()}, "d": D, "seed_base": seed_base,
                       "kernels": ks, "n_boot": n_boot},
            "rows": rows, "medians": medians}


def cross_check(own: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Does a small static run agree with the reference? Per (kernel, a) cell in both, whether the small run's
    Bonferroni interval over the shared cells holds the reference's measured exponent (the reference is
    precise enough to treat as the value, and its draws are disjoint from the small run's). They agree when
    every shared cell's does: a family-wise test at 5 %. The small run fits its own range of N, so a cell's
    exponent may also differ by the crossover bias between the two ranges; that is what a disagreement would
    name."""
    ref = {(r["kernel"], float(r["a"])): r for r in reference}
    shared = [r for r in own if (r["kernel"], float(r["a"])) in ref]
    rows, misses = [], 0
    for r in shared:
        m = ref[(r["kernel"], float(r["a"]))]
        # the own run's joint interval was read at its own cell count; rescale its half-widths to the shared count
        z_own, z_shared = joint_z(round(0.05 / (1 - r["joint_level"]))), joint_z(len(shared))
        low = r["measured"] - (r["measured"] - r["joint_low"]) * z_shared / z_own
        high = r["measured"] + (r["joint_high"] - r["measured"]) * z_shared / z_own
        ok = low <= m["measured"] <= high
        misses += not ok
        rows.append({"kernel": r["kernel"], "a": f"{r['a']:g}", "this report": f"{r['measured']:.3f} "
                     f"({low:.3f} - {high:.3f})", "reference": f"{m['measured']:.3f} ({m['joint_low']:.3f} - "
                     f"{m['joint_high']:.3f})", "holds": {"text": "yes" if ok else "no", "bold": not ok,
                                                         "color": None if ok else "#cf222e"}})
    return {"title": "This report's static run against the shipped static reference",
            "columns": ["kernel", "a", "this report", "reference", "holds"], "rows": rows,
            "agree": None if not shared else misses == 0, "misses": misses, "shared": len(shared),
            "notes": f"this report's interval at the Bonferroni level over the {len(shared)} shared cells "
                     "(rescaled from its own level by the normal quantiles); the reference's at its own level"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m heavytail.studies.phase.static",
                                     description="Compute the static reference of App. A's moment condition.")
    parser.add_argument("--reps", type=int, default=None, help="repetitions at every tail index")
    parser.add_argument("--pilot", default=None, help="a pilot's JSON (this command at few --reps): allocate the "
                        "repetitions per tail index from its spread (allocate)")
    parser.add_argument("--widen", default=None, help="a computed reference's JSON: keep its repetitions, and "
                        "give a tail index whose widest cell is over +-0.1 enough more to narrow it (widen)")
    parser.add_argument("--most", type=int, default=800, help="the most repetitions allocate gives a tail index")
    parser.add_argument("--work", default=None, help="keep each tail index's norms here and reuse them")
    parser.add_argument("--output", required=True, help="the JSON to write, e.g. outputs/reference/phase_static.json")
    parser.add_argument("--tail-indices", type=float, nargs="*", default=None, help="default: TAIL_INDICES")
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args(argv)
    import torch

    from heavytail.harness.provenance import record
    from heavytail.io import save_json

    torch.set_num_threads(1)
    prov = record()
    start = time.time()
    from heavytail.io import load_json

    if sum(x is not None for x in (args.reps, args.pilot, args.widen)) != 1:
        parser.error("give one of --reps, --pilot or --widen")
    pilot = None
    if args.widen:
        w = load_json(args.widen)
        pilot = {"file": args.widen, "reps": w["design"]["reps"], "commit": w["provenance"].get("commit"),
                 "widened": "tail indices whose widest cell's joint half-width exceeded 0.1"}
        reps = widen(w["rows"], {float(a): int(n) for a, n in w["design"]["reps"].items()})
    elif args.pilot:
        p = load_json(args.pilot)
        pilot = {"file": args.pilot, "reps": p["design"]["reps"], "commit": p["provenance"].get("commit"),
                 "sd": {f"{r['kernel']} a={r['a']:g}": r["sd"] for r in p["rows"]}}
        had = p["design"]["reps"]
        reps = allocate(p["rows"], {float(a): int(n) for a, n in had.items()} if isinstance(had, dict) else int(had),
                        most=args.most)
    else:
        reps = args.reps
    out = compute(reps, tuple(args.tail_indices or TAIL_INDICES), n_boot=args.n_boot,
                  work=Path(args.work) if args.work else None, progress=True)
    if pilot:
        out["design"]["pilot"] = pilot
    prov |= {"command": "python -m heavytail.studies.phase.static " + " ".join(argv if argv is not None
                                                                              else sys.argv[1:]),
             "seconds": round(time.time() - start, 1), "threads": torch.get_num_threads()}
    path = save_json({"provenance": prov, **out}, Path(args.output))
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB) in {prov['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def cross_check_text(check: Mapping[str, Any], tail_indices: Sequence[float], reference_indices: Sequence[float]) -> str:
    """:func:`cross_check`'s outcome in one paragraph: how many shared cells agree, or why no cell could be compared."""
    if check["agree"] is None:  # a tail index the reference did not compute: nothing to compare, not a disagreement
        return (f"**Cross-check against the shipped reference: not made.** This run's tail indices "
                f"{[float(a) for a in tail_indices]} share no cell with the reference's {list(reference_indices)}; "
                "set `tail_indices` to some of those.")
    return (f"**Cross-check against the shipped reference:** {check['shared'] - check['misses']} of {check['shared']} "
            "shared cells hold the reference's exponent in this run's interval (at the Bonferroni level over the "
            "shared cells): the two " + ("agree." if check["agree"] else "disagree; the cells marked 'no' say where."))
