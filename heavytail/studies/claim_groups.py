"""The claim groups: which shipped map decides which claims, in one list, and the findings table made from them.

A group is a name (``python -m heavytail claims NAME``), the shipped map it reads
(:data:`heavytail.studies.reference_maps.MAPS`) and the function that decides its claims from the map's runs.
Adding a group is one entry in :data:`GROUPS`. A group whose map is not shipped still has its row in the
findings table, saying *not run*, so the README's table can list a group before its grid has run.

``python -m heavytail claims table`` prints the findings table of every headline group (what the README
embeds between its ``<!-- claims table -->`` markers); ``python -m heavytail claims NAME`` the claims of one
group in full, as a list.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import heavytail.studies.ablation.claims as ablation_claims
import heavytail.studies.ablation.summary as ablation_summary
import heavytail.studies.collapse.ladder as collapse_ladder
import heavytail.studies.collapse.ladder_tables as ladder_tables
import heavytail.studies.collapse.mechanism as mechanism
import heavytail.studies.collapse.mechanism_followup as mechanism_followup
import heavytail.studies.collapse.tables56_rules as tables56_rules
import heavytail.studies.kernel_gap.claims as kernel_gap_claims
import heavytail.studies.kernel_gap.converged as converged_gap
import heavytail.studies.kernel_gap.fair as fair_gap
import heavytail.studies.kernel_gap.subnormal_ab as subnormal_ab
import heavytail.studies.phase.confirm as phase_confirm
import heavytail.studies.phase.diagram as phase_diagram
from heavytail.studies import claims, paper_claims, reference_maps, tables

TABLE = "table"  # the name under which `claims` prints every headline group as one table
GAP_SUMMARY = "gap-summary"  # the kernel gap at both recipes in one paragraph: the README's first statement of it
LADDER_SUMMARY = "ladder-summary"  # the paper's collapse rung by rung in one paragraph: the README's first statement
LADDER_RUNS = "ladder-runs"  # the collapse ladder's runs per rung and seed, and what preceded each onset: two tables
PAPER = "paper"  # the paper's claims, one row each (heavytail.studies.paper_claims): the front pages' first table
OWN = "own"  # the repository's own questions, one row each: the front pages' second table
FAIR_LR = "gap-fair-lr"  # the fair recipe's learning-rate choice per variant and N, with every exclusion


@dataclass(frozen=True)
class ClaimGroup:
    """Claims decided on one shipped map: ``findings(runs)`` returns :class:`heavytail.studies.claims.Claim`
    records. ``headline`` groups are the README's findings table; the others are printed on request."""

    name: str
    map: str
    findings: Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]]
    headline: bool = True
    # which of a headline group's claims are rows of the findings table (the others: `claims NAME` and
    # docs/findings.md print them); None: all of them
    in_table: Callable[[Mapping[str, Any]], bool] | None = None
    # further maps whose runs the group's claims read with its own (each when shipped): a study whose cells could
    # not share one grid file without renaming its shipped runs
    also: tuple[str, ...] = ()


GROUPS: tuple[ClaimGroup, ...] = (
    ClaimGroup("gap-design", "gap-design", kernel_gap_claims.findings),
    # the same map read floor-free: each model's excess over the sampling floor (the ratio's trend is the floor's)
    ClaimGroup("gap-design-excess", "gap-design", converged_gap.design_findings),
    # every variant at its own lr to convergence: its rows follow the design recipe's floor-free ones, so the
    # two recipes' verdicts stand side by side (notebook 07 shows them in one table)
    ClaimGroup("gap-converged", "gap-converged", converged_gap.findings),
    # the same at a fixed budget annealed to zero, the best validated weights and an equivalence margin (notebook 07)
    ClaimGroup("gap-fair", "gap-fair", fair_gap.findings),
    # the same deciding seeds at 4x the budget, printed on request until it has more than one N
    ClaimGroup("gap-fair-long", "gap-fair-long", fair_gap.long_findings, headline=False),
    ClaimGroup("gap-long", "gap-long", kernel_gap_claims.long_findings),
    # the trained claims, and the static test read from the shipped static reference
    ClaimGroup("phase", "phase", lambda runs: phase_diagram.findings(runs, _static_rows())),
    # App. A's boundary tested as registered before its runs, on new seeds (notebook 08)
    ClaimGroup("phase-confirm", "phase-confirm", phase_confirm.findings),
    # the earlier map, a second arm of the same claims (notebook 07)
    ClaimGroup("gap-points", "gap-points", kernel_gap_claims.findings, headline=False),
    # the paper's collapse, rung by rung toward Table 3 (notebook 09)
    # (rung R1b's runs are their own grid; rung R1's are the 3,000-step grid's R1 runs)
    ClaimGroup("ladder", "ladder", collapse_ladder.findings, in_table=collapse_ladder.in_table,
               also=("ladder-small", "gap-long")),
    ClaimGroup("subnormal-ab", "subnormal-ab", subnormal_ab.findings, headline=False),
    # Tables 5-6 at Table 3's model, P1-P5 (notebook 10); rung R2's three cells are the ladder's runs
    ClaimGroup("tables56", "tables56", tables56_rules.findings, also=("ladder",)),
    # why softmax fails there: interventions against R2's plain softmax (the ladder's runs)
    ClaimGroup("mechanism", "mechanism", mechanism.findings, also=("ladder",)),
    # where the screen says softmax learns, does it then diverge as Fig. 13's did (P5's rule; notebook 09)
    ClaimGroup("mechanism-followup", "mechanism-followup", mechanism_followup.findings, headline=False),
    # Figure 2 and Tables 5-6's columns on the report's own CPU ablation grid (notebook 06): no shipped map, so
    # only a notebook or caller that passes its runs decides them
    ClaimGroup("ablation", "ablation", lambda runs: ablation_claims.findings(ablation_summary.aggregate(runs)),
               headline=False),
)


def _static_rows() -> tuple:
    """The shipped static reference's cells (reference_maps.COMPUTED["phase-static"]); none before it is shipped."""
    return tuple((reference_maps.load_computed("phase-static") or {}).get("rows", ()))


def group(name: str, groups: Sequence[ClaimGroup] = GROUPS) -> ClaimGroup:
    for g in groups:
        if g.name == name:
            return g
    raise ValueError(f"unknown claim group {name!r}; the groups are: {', '.join(g.name for g in groups)}, "
                     f"and {TABLE} for all of them as one table")


def title(g: ClaimGroup) -> str:
    spec = reference_maps.MAPS.get(g.map)
    return spec.title if spec else g.map


def decide(g: ClaimGroup, root: Path | None = None) -> list[dict[str, Any]] | None:
    """The group's claims decided on its shipped map, each with the map in ``decided_by``; None when the map
    is not shipped (or not yet registered in :data:`heavytail.studies.reference_maps.MAPS`)."""
    if g.map not in reference_maps.MAPS:
        return None
    shipped = reference_maps.load(g.map, root)
    if shipped is None:
        return None
    more = [r for m in g.also if (extra := reference_maps.load(m, root)) for r in extra["runs"]]
    return _decided(g, shipped["runs"], more, title(g))


def decide_sources(name: str, sources: Mapping[str, Any] | None = None, root: Path | None = None,
                   runs: Sequence[Mapping[str, Any]] | None = None, label: str | None = None) -> list[dict[str, Any]]:
    """Group ``name``'s claims on what a notebook holds, by the same rule as :func:`decide`: the runs of its map and
    of the maps it also reads, each from ``sources`` (map name -> :class:`heavytail.studies.reference_maps.Source`,
    a local re-run in place of the shipped map) or else shipped. ``runs`` and ``label`` replace the group's own map
    (a report's own runs where the map is absent). [] when there are no runs."""
    g = group(name)

    def source(m: str):
        return (sources or {}).get(m) or reference_maps.source(m, None, root)

    if runs is None:
        main = source(g.map)
        runs, label = main.runs, label or main.label
    if not runs:
        return []
    more = [r for m in g.also for r in source(m).runs]
    return _decided(g, runs, more, label or title(g))


def _decided(g: ClaimGroup, runs: Sequence[Mapping[str, Any]], more: Sequence[Mapping[str, Any]], label: str
             ) -> list[dict[str, Any]]:
    found = claims.decided_on(g.findings([*runs, *more]), label)
    bad = unreadable(runs)
    if bad:  # said on every claim of the map: a rule reads only finite values, so these runs were left out
        note = f" Left out: {len(bad)} run(s) of the map with no finite ratio ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})."
        found = [{**c, "evidence": (c.get("evidence") or "") + note, "left_out": bad} for c in found]
    return found


def unreadable(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of runs whose median ratio is missing or not finite (NaN, inf): every rule leaves them out."""
    import math

    out = []
    for r in runs:
        if not isinstance(r, Mapping):  # a grid folder's FinishedRun (the ablation group): its rules read the folder
            continue
        value = (r.get("median") or {}).get("ratio")
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            out.append(str(r.get("name", "?")))
    return out


# ------------------------------------------------------------------------------------ the findings table
COLUMNS = ("claim", "verdict", "effect [95 % interval]", "seeds", "decided at", "figure")


def effect_text(c: Mapping[str, Any]) -> str:
    """'<statistic>: <estimate> [<low>, <high>]' (the 95 % interval), or the count a claim states."""
    if c.get("estimate") is None:
        return "n/a"
    value = claims.fmt(c["estimate"])
    if c.get("low") is not None:
        value += claims.interval_text(c)
    return f"{c['statistic']}: {value}" if c.get("statistic") else value


def _shown_in(c: Mapping[str, Any]) -> str:
    """The notebook that decides the claim, with the first figure it names."""
    decided = c.get("decided_by") or {}
    notebook = decided.get("notebook")
    if not notebook:
        return ""
    figure = next(iter(decided.get("figures", ())), None)
    return f"[{notebook[:2]}" + (f" {figure}" if figure else "") + f"](notebooks/{notebook}.py)"


def table_rows(groups: Sequence[ClaimGroup] = GROUPS, root: Path | None = None) -> list[tuple[str, ...]]:
    """One row per claim of every headline group (``COLUMNS``) that the group puts in the table; a group whose map
    is absent is one row, *not run*, naming the grid that would make it."""
    rows = []
    for g in groups:
        if not g.headline:
            continue
        found = decide(g, root)
        if found is None:
            spec = reference_maps.MAPS.get(g.map)
            grid = f"`python -m heavytail grid {spec.grid}`" if spec else f"the {g.map} map is not registered"
            rows.append((f"*{title(g)}* (`{g.name}`)", claims.NOT_RUN, "n/a", "0", "map not shipped", grid))
            continue
        for c in found:
            if g.in_table is not None and not g.in_table(c):
                continue
            label = claims.scale_label(c.get("scale", ""))
            rows.append((c["claim"], c["verdict"], effect_text(c), claims.seeds_text(c),
                         f"{label} · {g.name}" if label else g.name, _shown_in(c)))
    return rows


def table_markdown(groups: Sequence[ClaimGroup] = GROUPS, root: Path | None = None) -> str:
    return tables.markdown_grid(COLUMNS, table_rows(groups, root))


def list_markdown(found: Sequence[Mapping[str, Any]]) -> str:
    """The claims as a markdown list, one sentence each (:func:`heavytail.studies.claims.render`)."""
    return "\n".join(f"- {claims.render(f)}" for f in found)


def gap_summary(root: Path | None = None, groups: Sequence[ClaimGroup] = GROUPS) -> str:
    """:func:`heavytail.studies.kernel_gap.converged.summary` on the shipped design and converged maps."""
    found = {n: decide(group(n, groups), root) for n in ("gap-design", "gap-design-excess", "gap-converged")}
    missing = sorted(n for n, f in found.items() if f is None)
    if missing:
        raise ValueError(f"{GAP_SUMMARY} needs the shipped maps of {', '.join(missing)}; run their grids and "
                         "python -m heavytail ship-map")
    runs = {m: reference_maps.load(m, root)["runs"] for m in ("gap-design", "gap-converged")}
    return converged_gap.summary(found["gap-design"] + found["gap-design-excess"], found["gap-converged"],
                                 runs["gap-design"], runs["gap-converged"])


def fair_lr(root: Path | None = None) -> str:
    """The fair recipe's selection (:func:`heavytail.studies.kernel_gap.fair.select`) on the shipped selection map:
    the rate chosen per variant and N, every rate's score and every exclusion with its reason."""
    shipped = reference_maps.load("gap-fair-select", root)
    if shipped is None:
        raise ValueError(f"{FAIR_LR} needs the shipped map gap-fair-select; run python -m heavytail grid "
                         f"{fair_gap.SELECT_GRID} and python -m heavytail ship-map gap-fair-select")
    table = fair_gap.selection_table(fair_gap.select(shipped["runs"]))
    return tables.to_markdown(table)


def _ladder_runs_of(g: ClaimGroup, name: str, root: Path | None) -> list[Mapping[str, Any]]:
    shipped = [reference_maps.load(m, root) for m in (g.map, *g.also)]
    if shipped[0] is None:
        raise ValueError(f"{name} needs the shipped map {g.map}; run its grid and python -m heavytail ship-map")
    return [r for m in shipped if m for r in m["runs"]]


def ladder_summary(root: Path | None = None, groups: Sequence[ClaimGroup] = GROUPS) -> str:
    """:func:`heavytail.studies.collapse.ladder.summary` on the shipped ladder maps, wrapped as the README is."""
    g = group("ladder", groups)
    runs = _ladder_runs_of(g, LADDER_SUMMARY, root)
    text = collapse_ladder.summary(decide(g, root), runs, markdown=True)
    return textwrap.fill(text, width=190, break_long_words=False, break_on_hyphens=False)


def ladder_runs(root: Path | None = None, groups: Sequence[ClaimGroup] = GROUPS) -> str:
    """The ladder's shipped runs as the two tables of notebook 09 in markdown: per rung and kernel with a value
    per seed (:func:`heavytail.studies.collapse.ladder_tables.table`), and the precursors of each onset."""
    runs = _ladder_runs_of(group("ladder", groups), LADDER_RUNS, root)
    return (tables.to_markdown(ladder_tables.table(runs)) + "\n\n"
            + tables.to_markdown(ladder_tables.precursor_table(ladder_tables.precursors(runs))))


def text_of(name: str, root: Path | None = None, groups: Sequence[ClaimGroup] = GROUPS) -> str:
    """What ``python -m heavytail claims NAME`` prints: the table of every group, the kernel gap's summary, the
    ladder's summary or runs, or one group's claims."""
    if name == TABLE:
        return table_markdown(groups, root)
    if name in (PAPER, OWN):
        entries = paper_claims.PAPER_CLAIMS if name == PAPER else paper_claims.OWN_QUESTIONS
        return paper_claims.markdown(lambda g: decide(group(g, groups), root), entries)
    if name == GAP_SUMMARY:
        return gap_summary(root, groups)
    if name == FAIR_LR:
        return fair_lr(root)
    if name == LADDER_SUMMARY:
        return ladder_summary(root, groups)
    if name == LADDER_RUNS:
        return ladder_runs(root, groups)
    g = group(name, groups)
    found = decide(g, root)
    if found is None:
        if g.map not in reference_maps.MAPS:
            raise ValueError(f"the group {g.name!r} has no shipped map: it is decided on the runs a notebook passes "
                             "(claim_groups.decide_sources), not here")
        raise ValueError(f"{reference_maps.path_of(g.map, root)} is not shipped; run its grid and "
                         "python -m heavytail ship-map")
    return list_markdown(found)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heavytail claims [NAME] [--update FILE]``."""
    import argparse

    from heavytail import cli
    from heavytail.io import replace_block

    parser = argparse.ArgumentParser(prog="python -m heavytail claims",
                                     description="Print the claims decided on the shipped reference maps.")
    parser.add_argument("name", nargs="?", default=GROUPS[0].name,
                        help=f"a claim group ({', '.join(g.name for g in GROUPS)}; default %(default)s), "
                             f"{TABLE}: every headline group as one findings table, {PAPER}: the paper's claims, one row each, {OWN}: the repository's own questions, {GAP_SUMMARY}: the kernel "
                             f"gap at both recipes in one paragraph, {FAIR_LR}: the fair recipe's learning rates and "
                             f"exclusions, {LADDER_SUMMARY}: the paper's collapse rung by "
                             f"rung in one paragraph, or {LADDER_RUNS}: the collapse ladder's runs per rung and seed")
    parser.add_argument("--update", metavar="FILE", default=None,
                        help="rewrite the block between '<!-- claims NAME -->' and '<!-- /claims -->' in FILE")
    args = parser.parse_args(argv)
    try:
        text = text_of(args.name)
    except cli.BAD_INPUT as err:
        return cli.bad_input("claims", err)
    if args.update is None:
        print(text)
        return 0
    if args.name not in (TABLE, PAPER, OWN, GAP_SUMMARY, FAIR_LR, LADDER_SUMMARY, LADDER_RUNS):
        found = decide(group(args.name)) or []
        hidden = sorted({n for c in found if c["verdict"] == claims.NOT_RUN for n in c.get("left_out", ())})
        if hidden:  # a verdict must not turn into "not run" because its runs could not be read
            return cli.bad_input("claims", ValueError(
                f"map {group(args.name).map!r} holds runs with no finite ratio ({', '.join(hidden[:3])}); a claim "
                f"would read 'not run' without them; nothing was rewritten: fix or re-ship those runs"))
    elif args.name == TABLE:
        hidden = sorted({n for g in GROUPS if g.headline for c in (decide(g) or []) if c["verdict"] == claims.NOT_RUN
                         for n in c.get("left_out", ())})
        if hidden:
            return cli.bad_input("claims", ValueError(
                f"the maps hold runs with no finite ratio ({', '.join(hidden[:3])}); a claim would read 'not run' "
                "without them; nothing was rewritten: fix or re-ship those runs"))
    path = Path(args.update)
    try:
        replace_block(path, f"<!-- claims {args.name} -->", "<!-- /claims -->", text)
    except cli.BAD_INPUT + (OSError,) as err:
        return cli.bad_input("claims", err)
    print(f"updated the {args.name} claims in {path}")
    return 0
