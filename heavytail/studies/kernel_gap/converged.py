"""The kernel gap at convergence: every variant at its own learning rate, trained until a stopping rule on validation fires.

The design map (``params/grid_gap_design.yaml``) trains every variant 300 steps at lr 1e-2, a rate chosen at
N = 256 from one seed; its gap may measure how fast each kernel learns at a rate tuned for neither, not where
each ends. This study trains in two stages, both at the design map's model and data (D = 32, 2 post-norm
blocks, one trial per step, the same task instances at every N for a seed), with the stopping rule of
:mod:`heavytail.harness.stopping` and a cap of 3,000 steps:

1. *Selection* (``params/grid_gap_converged_select.yaml``, seeds ``SELECT_SEEDS``): every variant at every N
   and learning rate of ``LEARNING_RATES``. :func:`select_lr` picks, per variant and N, the rate with the lowest
   median over those seeds of the final validation score (the validation set is fixed per seed and drawn at
   the training N, so scores compare rates, never N); ties go to the smaller rate. A choice at an end of the
   grid is an *edge* and the grid must be extended by one factor ~3 beyond it (on the selection seeds) before
   that cell is decided.
2. *Decision* (``params/grid_gap_converged.yaml``, written by ``python -m heavytail select-lr``): the chosen
   rate per variant and N on seeds ``DECIDE_SEEDS`` only, so the choice never sees the seeds that decide.

The claims, written before either stage ran (rules of :mod:`heavytail.studies.claims`, at least
``MIN_DECIDING_SEEDS`` deciding seeds):

(a) ``converged-excess-grows``: the floor-free gap. A model's excess over the sampling floor at its training N
    is ``S(d) - S(d_hat) = S(d_hat) (r - 1)`` with r the eq. 36 median ratio; at one N and seed both variants
    share the floor pool, so log(excess_softmax / excess_logELU) = log((r_s - 1) / (r_l - 1)). Per seed its
    least-squares slope on log2 N, then :func:`claims.growth_rule` (growth excluded below x1.10 per doubling).
    A seed whose excess is not positive at some N has no slope and is reported as left out. The ratio r itself
    grows with N for every model, because the floor falls as 1/N; the excess does not have that trend.
(b) ``converged-gap-n<N>``: the paired softmax / log-ELU ratio at the common evaluation N = 1024 at each training
    N, :func:`claims.equivalence_rule` (differs, or equivalent within x1.20).
(c) ``design-excess-grows``: (a)'s statistic and rule on the design map's runs (300 steps at lr 1e-2), so the
    two recipes' verdicts stand side by side.
The same three for softmax through exact float32 attention are reported next to SDPA's.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from heavytail.studies import claims as C
from heavytail.studies.paper_numbers import paper_gap
from heavytail.studies.core import (LOG_ELU, SOFTMAX_EXACT, SOFTMAX_SDPA, cells, interval_at, map_extent,
                                          paired_ratio, sizes, variant, variant_name)
from heavytail.studies.run_record import RunRecord, records

NOTEBOOK = "07_kernel_gap"
SELECT_SEEDS = (0, 1, 2)
DECIDE_SEEDS = tuple(range(3, 11))
MIN_DECIDING_SEEDS = 8
LEARNING_RATES = (3e-4, 1e-3, 3e-3, 1e-2)
SELECT_GRID = "params/grid_gap_converged_select.yaml"
DECIDE_GRID = "params/grid_gap_converged.yaml"


# ------------------------------------------------------------------------------------ stage 1
def final_validation(run: Mapping[str, Any]) -> float:
    """The run's last validation score (mean log energy distance on its fixed validation set); NaN if none."""
    values = (run.get("trace") or {}).get("val_log_energy") or []
    return float(values[-1]) if values and values[-1] is not None else math.nan


@dataclass(frozen=True)
class Selection:
    """The learning rate chosen for one (variant, N), the median scores it was chosen from, and whether it lies
    at an end of the rates tried (then the grid is extended before the cell is decided)."""

    variant: tuple[str, str]
    n_points: int
    lr: float
    scores: Mapping[float, float]
    seeds: tuple[int, ...]
    edge: bool


def _median(xs: Sequence[float]) -> float:
    xs = sorted(x for x in xs if math.isfinite(x))
    if not xs:
        return math.inf  # no finite score: never chosen over a rate that has one
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else 0.5 * (xs[m - 1] + xs[m])


def select_lr(runs: Sequence[Mapping[str, Any]], seeds: Sequence[int] = SELECT_SEEDS,
              rates: Sequence[float] = LEARNING_RATES) -> list[Selection]:
    """The selection rule (stage 1) on the selection seeds' runs; a (variant, N) is chosen only once each of
    ``rates`` (and any rate an extension added there) has a run on every selection seed."""
    groups: dict[tuple[tuple[str, str], int], dict[float, list[RunRecord]]] = {}
    for r in records(runs):
        if r.seed in seeds:
            key = (variant(r), r.n_points)
            groups.setdefault(key, {}).setdefault(r.lr, []).append(r)
    out = []
    for (v, n), by_lr in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if not set(rates) <= set(by_lr) or any(sorted(r.seed for r in rs) != sorted(seeds)
                                               for rs in by_lr.values()):
            continue
        scores = {lr: _median([final_validation(r) for r in rs]) for lr, rs in sorted(by_lr.items())}
        best = min(scores, key=lambda lr: (scores[lr], lr))
        tried = sorted(scores)  # the grid's rates and any extension at this cell
        out.append(Selection(v, n, best, scores, tuple(seeds), len(tried) > 1 and best in (tried[0], tried[-1])))
    return out


def decision_grid(selections: Sequence[Selection], template: Mapping[str, Any],
                  seeds: Sequence[int] = DECIDE_SEEDS) -> dict[str, Any]:
    """Stage 2's grid file (a mapping, written as YAML): the selection grid's base and settings, one cell per
    chosen (variant, N) with its rate, on the deciding seeds. Edge choices are left out."""
    chosen = [s for s in selections if not s.edge]
    cells_ = [{"n_points": s.n_points, "kernel": s.variant[0], "attention_backend": s.variant[1], "lr": s.lr}
              for s in chosen]
    return {"name": "grid-gap-converged", "base": dict(template["base"]),
            "axes": {"cells": cells_, "seed": list(seeds)},
            **{k: template[k] for k in ("local", "slurm") if k in template}}


def selection_table(selections: Sequence[Selection]) -> dict[str, Any]:
    rows = [{"variant": variant_name(s.variant), "N": s.n_points, "chosen lr": f"{s.lr:g}",
             **{f"lr {lr:g}": C.fmt(score) for lr, score in s.scores.items()},
             "at an edge": "yes" if s.edge else "no"} for s in selections]
    rates = sorted({lr for s in selections for lr in s.scores})
    return {"title": "Learning rate per variant and N (median final validation score over the selection seeds)",
            "columns": ["variant", "N", "chosen lr", *[f"lr {lr:g}" for lr in rates], "at an edge"], "rows": rows,
            "notes": f"score: mean log energy distance on a fixed validation set at the training N (lower is "
                     f"better), median over seeds {list(SELECT_SEEDS)}; the deciding seeds {list(DECIDE_SEEDS)} "
                     "never enter the choice"}


# ------------------------------------------------------------------------------------ stage 2
def excess_log_ratio(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """log(excess of a / excess of b) at the runs' training N, from their eq. 36 ratios: log((r_a - 1)/(r_b - 1));
    NaN when either excess is not positive (the model at or below its floor)."""
    ra, rb = interval_at(a, "train")[0], interval_at(b, "train")[0]
    if not (math.isfinite(ra) and math.isfinite(rb)) or ra <= 1 or rb <= 1:
        return math.nan
    return math.log((ra - 1) / (rb - 1))


def excess_by_seed(runs: Sequence[Mapping[str, Any]], a, b=LOG_ELU) -> dict[int, dict[int, float]]:
    """{seed: {N: log excess ratio of a over b}} wherever both ran."""
    cs = cells(runs)
    out: dict[int, dict[int, float]] = {}
    for n in sizes(cs):
        if (a, n) in cs and (b, n) in cs:
            ra, rb = cs[(a, n)].by_seed(), cs[(b, n)].by_seed()
            for s in sorted(set(ra) & set(rb)):
                out.setdefault(s, {})[n] = excess_log_ratio(ra[s], rb[s])
    return out


def excess_growth(by_seed: Mapping[int, Mapping[int, float]], min_seeds: int) -> tuple[C.Decision, dict[int, float], list]:
    """Claim (a)'s rule on ``excess_by_seed``'s table: the decision, the per-seed slopes, the seeds left out."""
    slopes = C.per_seed_slopes(by_seed)
    left_out = sorted(s for s, row in by_seed.items() if len(row) >= 2 and s not in slopes)
    return C.growth_rule(list(slopes.values()), min_seeds=min_seeds), slopes, left_out


def _decided_by(section: str, figures: Sequence[str]) -> dict[str, Any]:
    return {"notebook": NOTEBOOK, "section": section, "figures": list(figures)}


def findings(runs: Sequence[Mapping[str, Any]], design_runs: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """Claims (a)-(c) on the deciding runs (stage 2) and, for (c), the design map's runs."""
    deciding = [r for r in records(runs) if r.seed in DECIDE_SEEDS]
    out = []
    for label, rs, min_seeds, cid in (("(converged, own lr)", deciding, MIN_DECIDING_SEEDS, "converged"),
                                      ("(design recipe)", list(design_runs), C.MIN_SEEDS, "design")):
        if cid == "design" and not rs:
            continue
        for v, tag, short in ((SOFTMAX_SDPA, "", "softmax (SDPA)"), (SOFTMAX_EXACT, "-exact", "exact softmax")):
            pairs = excess_by_seed(rs, v)
            d, slopes, left_out = excess_growth(pairs, min_seeds)
            # the scale that decided it: only the (seed, N) pairs a slope used, not a run still waiting for its partner
            used = [r for r in rs if variant(r) in (v, LOG_ELU) and r.seed in slopes
                    and r.n_points in pairs[r.seed]]
            out.append(C.make_claim(
                f"{cid}-excess-grows{tag}",
                f"Floor-free gap grows with N {label}: {short}'s excess vs log-ELU's",
                "Sec. 4.2, App. A", paper_gap(), d,
                f"{short}/log-ELU excess per doubling", map_extent(used),
                "per-seed x per doubling: " + ", ".join(f"{s}: {math.exp(x):.2f}" for s, x in slopes.items())
                + (f"; left out (excess not positive at some N): seeds {left_out}" if left_out else ""),
                _decided_by("The gap at convergence", ["converged_gap_vs_n"]), transform=math.exp).to_dict())
    cs = cells(deciding)
    for n in sizes(cs):
        pair = paired_ratio(cs, SOFTMAX_SDPA, LOG_ELU, n)
        d = C.equivalence_rule([math.log(x) for x in pair.values()], min_seeds=MIN_DECIDING_SEEDS)
        used = [r for r in deciding if variant(r) in (SOFTMAX_SDPA, LOG_ELU) and r.n_points == n]
        lrs = ", ".join(f"{variant_name(v)} {cs[(v, n)].runs[0]['config']['lr']:g}"
                        for v in (SOFTMAX_SDPA, LOG_ELU) if (v, n) in cs)
        out.append(C.make_claim(
            f"converged-gap-n{n}", f"At training N = {n}, converged at its own best lr, softmax (SDPA) ends above "
            "log-ELU (ratios at the common evaluation N)",
            "Sec. 4.2, Table 5", "log-ELU beats softmax at N = 16384 (Table 5)", d, "softmax/log-ELU ratio",
            map_extent(used), f"learning rates: {lrs}", _decided_by("The gap at convergence", ["converged_gap_vs_n"]),
            transform=math.exp).to_dict())
    return out


def design_findings(design_runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Claim (c) alone: the floor-free gap's growth on the design map (decided on it whether or not the
    converged map exists)."""
    return [f for f in findings((), design_runs) if f["id"].startswith("design-")]


# ------------------------------------------------------------------------------------ the front page
def _listed(items: Sequence[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def summary(design: Sequence[Mapping[str, Any]], converged: Sequence[Mapping[str, Any]],
            design_runs: Sequence[Mapping[str, Any]], converged_runs: Sequence[Mapping[str, Any]]) -> str:
    """The kernel gap at both recipes as one paragraph (the README's first statement of it): the design map's
    gap and floor-free excess growth, then claims (a) and (b) at convergence, each with its verdict, interval
    and seeds. ``design`` and ``converged`` are decided claim records (the gap-design, gap-design-excess and
    gap-converged groups); the runs give each recipe's steps and learning rates."""
    by_id = {c["id"]: c for c in (*design, *converged)}
    design_runs, converged_runs = records(design_runs), records(converged_runs)

    def stated(cid: str, unit: str = "") -> str:
        c = by_id[cid]
        return f"x{C.fmt(c['estimate'])}{C.interval_text(c)}{unit} ({c['verdict']}, {c['seeds']} seeds)"

    steps = sorted({r.steps for r in design_runs})
    lrs = sorted({r.lr for r in design_runs})
    cap = max(r.steps for r in converged_runs)
    paired = [by_id[cid] for _, cid in sorted(
        (int(c["id"].rsplit("-n", 1)[1]), c["id"]) for c in converged if c["id"].startswith("converged-gap-n"))]
    at_n = [f"x{C.fmt(c['estimate'])}{C.interval_text(c)} at N = {c['id'].rsplit('-n', 1)[1]}" for c in paired]
    if len({c["verdict"] for c in paired}) == 1:  # one verdict for all: say it once, with each N's seeds
        ratios = _listed(at_n) + (
            f" ({paired[0]['verdict']}; {_listed([str(c['seeds']) for c in paired])} seeds)")
    else:
        ratios = "; ".join(f"{t} ({c['verdict']}, {c['seeds']} seeds)" for t, c in zip(at_n, paired))
    per_doubling = " per doubling of the training N"
    # what "converged" meant: how many runs the stopping rule ended at its first allowed check
    first = [r for r in converged_runs if (r.get("stop") or {}).get("stopped_at") == r.stop_min_steps]
    first_check = (f"; the rule ended {len(first)} of {len(converged_runs)} runs at its first allowed check, step "
                   f"{converged_runs[0].stop_min_steps:,}" if first else "")
    text = (f"**The kernel gap, at both recipes.** At the design recipe (every variant {'/'.join(map(str, steps))} "
            f"steps at lr {'/'.join(f'{lr:g}' for lr in lrs)}), softmax (SDPA) over log-ELU grows "
            f"{stated('gap-grows-with-n', per_doubling)}, and so does its floor-free excess over the sampling "
            f"floor, {stated('design-excess-grows')}. Trained until a stopping rule on validation fired (at most {cap} "
            f"steps{first_check}), each "
            f"variant at its own learning rate chosen on other seeds, the excess grows "
            f"{stated('converged-excess-grows', ' per doubling')}, and softmax (SDPA) over log-ELU, paired by seed, is "
            f"{ratios}.")
    return textwrap.fill(text, width=190, break_long_words=False, break_on_hyphens=False)


# ------------------------------------------------------------------------------------ command
def selection_runs(shipped_map: str, grid_dir: str | None, select_grid: str) -> list[Mapping[str, Any]]:
    """A selection stage's runs: the shipped map's (``shipped_map``), with ``grid_dir``'s finished runs added (a grid
    resumed in a fresh folder holds only what it ran). ValueError when ``grid_dir`` holds no grid."""
    from heavytail.studies import reference_maps, ship_map
    from heavytail.studies.grid_folder import GRID_JSON
    from heavytail.studies.run_summary import collect

    shipped = reference_maps.load(shipped_map)
    runs = list(shipped["runs"]) if shipped else []
    if grid_dir is not None:
        if not (Path(grid_dir) / GRID_JSON).is_file():
            raise ValueError(f"{grid_dir} holds no grid.json; run python -m heavytail grid {select_grid} first")
        fresh = collect(grid_dir)
        runs, _ = ship_map.merged_runs(fresh, runs, [r["name"] for r in [*runs, *fresh]])
    return runs


def load_selection(select, shipped_map: str, grid_dir: str | None, select_grid: str) -> tuple[list, dict[str, Any]]:
    """``select`` (a selection rule) on a selection stage's runs (:func:`selection_runs`), and the selection grid
    file as the template of the deciding one. ValueError when no variant and N has finished every rate yet."""
    from heavytail import cli
    from heavytail.harness.artifacts import repo_root

    selections = select(selection_runs(shipped_map, grid_dir, select_grid))
    if not selections:
        raise ValueError(f"{grid_dir or 'the shipped selection map'}: no variant and N has finished runs at every rate "
                         f"on seeds {list(SELECT_SEEDS)} yet")
    return selections, cli.read_yaml(repo_root() / select_grid)


def selection_parser(prog: str, doc: str, decide_grid: str, select_grid: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    parser.add_argument("grid_dir", nargs="?", default=None,
                        help=f"stage 1's grid folder, e.g. outputs/{Path(select_grid).stem.replace('_', '-')} "
                             "(default: the shipped map only)")
    parser.add_argument("--output", default=None, help=f"grid file to write (default: {decide_grid})")
    return parser


def write_decision_grid(out: Path, header: str, grid: Mapping[str, Any], left_out: int, map_name: str,
                        grid_file: str | None) -> None:
    """Write stage 2's grid file (``header`` first) and say what to do next."""
    import yaml

    from heavytail.io import atomic_write_text

    atomic_write_text(out, header + yaml.safe_dump(dict(grid), sort_keys=False))
    cells_ = len(grid["axes"]["cells"])
    print(f"wrote {out}: {cells_} cells" + (f", {left_out} left out (at an edge, or every rate excluded)"
                                            if left_out else ""))
    if grid_file:  # the shipped stage-2 map counts the grid's configurations: bring it to the new grid file
        print(f"then re-ship the stage-2 map: python -m heavytail grid {grid_file} --list --output DIR, and "
              f"python -m heavytail ship-map {map_name} DIR/{grid['name']}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heavytail select-lr [GRID_DIR]``: apply the selection rule to stage 1's finished runs and write
    stage 2's grid file (``--output``, default params/grid_gap_converged.yaml). The runs are the shipped selection
    map's, with GRID_DIR's finished runs added (a grid resumed in a fresh folder holds only what it ran)."""
    from heavytail import cli
    from heavytail.harness.artifacts import repo_root

    args = selection_parser("python -m heavytail select-lr", main.__doc__, DECIDE_GRID, SELECT_GRID).parse_args(argv)
    try:
        selections, template = load_selection(select_lr, "gap-converged-select", args.grid_dir, SELECT_GRID)
    except cli.BAD_INPUT as err:
        return cli.bad_input("select-lr", err)
    out = Path(args.output) if args.output else repo_root() / DECIDE_GRID
    header = ("# The kernel gap at convergence, stage 2: written by `python -m heavytail select-lr` from stage 1's\n"
              "# runs (heavytail.studies.kernel_gap.converged.select_lr); the chosen lr per variant and N, on the deciding\n"
              f"# seeds only. Median final validation scores per lr (seeds {list(SELECT_SEEDS)}):\n")
    for s in selections:
        header += (f"#   {variant_name(s.variant)}, N = {s.n_points}: " + ", ".join(
            f"{lr:g}: {score:.4g}" for lr, score in s.scores.items()) + f" -> {s.lr:g}"
            + (" (AT AN EDGE: extend the rates before deciding; left out)" if s.edge else "") + "\n")
    header += ("# A variant and N not listed has not finished its selection runs; select-lr adds it once they have\n"
               "# (the cells already here keep their folder names).\n")
    write_decision_grid(out, header, decision_grid(selections, template), sum(s.edge for s in selections),
                        "gap-converged", None if args.output else DECIDE_GRID)
    return 0
