"""The collapse ladder: from the CPU recipe to Table 3's, one factor at a time (Tables 5-6, App. I).

The paper's post-norm softmax models collapse on both heavy-tailed benchmarks while the slower kernels do not,
the loss diverging abruptly at step ~3,500 (~4,500 with symlog) of 50,000, at N = 16384, D = 256, 6 blocks,
under bf16 autocast with softmax through FlashAttention. The ladder (``params/grid_collapse_ladder.yaml``)
changes one factor per rung toward that recipe (:data:`RUNGS`), every rung at N = 1024, one trial per step,
lr 1e-3 on the first 6,000 steps of the paper's 50,000-step schedule.

The rules, written and committed before any ladder run, per rung (``MIN_SEEDS`` seeds at least, the training
seed the replicate, ``heavytail.studies.claims``):

1. *The paper's collapse* (``paper-collapse-<rung>``): the share of softmax (SDPA) runs labelled collapsed
   (most evaluation trials collapsed, :func:`heavytail.science.collapse.run_label`) with its Clopper-Pearson
   95 % interval. *Reproduced* where that interval lies above 1/2 and log-ELU's share's interval lies below
   1/2 (most softmax runs collapse and most log-ELU runs do not); *not reproduced* where softmax's interval
   lies below 1/2 (with 6 seeds and none collapsed, the interval is 0-0.46: "most runs collapse" is
   excluded); undecided otherwise.
2. *Graded, training* (``collapse-steps-<rung>``): per seed, softmax's share of regularly logged steps whose
   batch collapsed minus log-ELU's, the paired sign-flip test (:func:`claims.graded_rule`).
3. *Graded, evaluation* (``collapse-trials-<rung>``): the same on the share of evaluation trials collapsed.
4. *Precision or kernel* (``collapse-precision-<rung>``, where both ran): softmax through SDPA in bf16 against
   softmax's attention in float32 under the same autocast, the graded rule on collapsed steps.
5. *The onset step*: per collapsed softmax run, :func:`heavytail.science.collapse.collapse_onset` (the first
   logged step from which every logged batch is collapsed), reported with each claim 1, against the paper's
   ~3,500 (~4,500 with symlog); descriptive, no verdict. What the regular log shows before each onset is
   tabulated in :mod:`heavytail.studies.collapse.ladder_tables`.
6. *The other slow kernel* (``paper-collapse-squared-<rung>``, ``collapse-steps-squared-<rung>``,
   ``collapse-trials-squared-<rung>``): rules 1-3 with squared ELU in log-ELU's place (Tables 5-6 list it with
   the kernels that did not collapse), on the rung that decides only. Written after the screen had shown
   collapse at R2 (softmax 4 of 4 runs labelled collapsed, log-ELU 0 of 4, seeds 0-3) and before any squared
   ELU run; its runs are R2's grid cell ``squared_elu``, seeds 0-5, from the ladder's commit.
7. *Model size at the same length* (``collapse-model-R2``): R2 changes both the model and, against R1's shipped
   3,000-step grid, the length and schedule, so its collapse alone cannot say which matters. Rung R1b trains R1's
   model (D = 32, 2 blocks, d_ff = 64) on R2's recipe exactly (6,000 steps of the 50,000-step schedule, warmup
   1,000, subnormals flushed; ``params/grid_collapse_ladder_small.yaml``), with rules 1-3 as every rung; rule 7
   pairs softmax (SDPA) on R2 with softmax on R1b by seed (the same seed draws the same task stream) and applies
   the graded rule to R2's share of logged steps with a collapsed batch minus R1b's. Reading, fixed with the
   rule: R1b's rule 1 *reproduced* says length and schedule suffice, and Table 3's model is not needed for the
   collapse at N = 1024; R1b's rule 1 *not reproduced* with rule 7 *reproduced* says the collapse needs the
   larger model at this length. Written after R2 was decided and before any R1b run; its runs come from the
   ladder's commit, so R2 and R1b differ in the model only.

The sequential plan, also fixed before the runs: the grid's outer axis is the seed, so every rung is screened
on seeds 0-1 before any rung gets seed 2; the grid then continues seed by seed over every rung, and a later
session may run a rung that showed collapse in the screen (a softmax run labelled collapsed, or an onset) first
with ``--only``. A rung with fewer than ``MIN_SEEDS`` seeds per kernel reads *undecided*, never *not reproduced*.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from heavytail.harness.cpu_bf16 import PATHS as BF16_PATHS
from heavytail.names import LOG_ELU, SOFTMAX_EXACT, SOFTMAX_F32, SOFTMAX_SDPA, SQUARED_ELU, variant_name
from heavytail.studies import claims as C
from heavytail.studies.collapse import tables56, tables56_rules
from heavytail.studies.core import collapsed_steps, map_extent, paired_by_seed, variant  # noqa: F401  (variant: re-exported)
from heavytail.studies.paper_numbers import PAPER_ONSET
from heavytail.studies.run_record import RunRecord, records

NOTEBOOK = "09_collapse_ladder"
# A verdict at a rung needs this many seeds per kernel: a paired sign-flip test on 5 untied seeds cannot go
# below p = 0.0625, and the rate rule's interval with 6 seeds and no collapse (0-0.46) is the first to exclude 1/2.
MIN_SEEDS = 6
# The variants (heavytail.names): SOFTMAX_F32 is R3's softmax attention in float32 under bf16 autocast,
# SOFTMAX_EXACT R1's exact float32 softmax (the 3,000-step grid).
VARIANT_LABELS = {v: variant_name(v) for v in (SOFTMAX_SDPA, SOFTMAX_F32, SOFTMAX_EXACT, LOG_ELU, SQUARED_ELU)}
# The slower kernels softmax is compared with, in rule order: log-ELU on every rung (rules 1-3), squared ELU
# where it ran (rule 6); the claim-id suffix names the partner.
PARTNERS = ((LOG_ELU, ""), (SQUARED_ELU, "-squared"))


@dataclass(frozen=True)
class Rung:
    """One rung: its name, what it changes, and which runs belong to it."""

    name: str
    about: str
    test: Callable[[Mapping[str, Any]], bool]
    short: str = ""  # a few words for the one-paragraph summary
    map: str = "ladder"  # the shipped map its runs come from (heavytail.studies.reference_maps.MAPS)


def _table3_model(c: Mapping[str, Any]) -> bool:
    return (c["d_model"], c["n_blocks"], c["d_ff"]) == (256, 6, 512)


def _small_model(c: Mapping[str, Any]) -> bool:
    return (c["d_model"], c["n_blocks"]) == (32, 2)


def _base(c: Mapping[str, Any]) -> bool:
    return (c["benchmark"], c["marginals"], c["norm"], c["n_points"], c["trials_per_step"]) == (
        "sheared_swap", "mirrored_pareto", "post", 1024, 1) and c["lr"] == 1e-3


def _ladder_recipe(c: Mapping[str, Any]) -> bool:
    """R2's length and schedule: 6,000 steps of the paper's 50,000-step schedule, warmup 1,000, flushed."""
    return (c["steps"], c["schedule_steps"], c["warmup_steps"]) == (6000, 50000, 1000) and bool(c["flush_subnormals"])


def _float32(c: Mapping[str, Any]) -> bool:
    return c["precision"] == "float32" and not c["symlog"]


RUNGS: tuple[Rung, ...] = (
    Rung("R1", "D = 32, 2 blocks, float32, 3,000 steps (the shipped 3,000-step grid)",
         lambda c: _base(c) and _small_model(c) and _float32(c) and not _ladder_recipe(c), "D = 32, 2 blocks, 3,000 steps",
         "gap-long"),
    Rung("R1b", "R1's model (D = 32, 2 blocks) on R2's recipe: 6,000 steps of the 50,000-step schedule, float32",
         lambda c: _base(c) and _small_model(c) and _float32(c) and _ladder_recipe(c), "R1's model on R2's recipe",
         "ladder-small"),
    Rung("R2", "Table 3's model (D = 256, 6 blocks, d_ff = 512), float32",
         lambda c: _base(c) and _table3_model(c) and _float32(c), "Table 3's model, float32"),
    Rung("R3", "R2 under bf16 autocast (softmax's SDPA in bf16; log-ELU's attention in float32)",
         lambda c: _base(c) and _table3_model(c) and c["precision"] == "bf16" and not c["symlog"], "bf16 autocast"),
    Rung("R4", "R3 with symlog",
         lambda c: _base(c) and _table3_model(c) and c["precision"] == "bf16" and c["symlog"], "bf16 and symlog"),
)


def rung_of(config: Mapping[str, Any]) -> str | None:
    """The rung a run belongs to, or None."""
    from heavytail.harness.config import RunConfig

    full = {**RunConfig().to_dict(), **config}
    return next((r.name for r in RUNGS if r.test(full)), None)


def ladder_cells(runs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, tuple[str, str]], list[Mapping[str, Any]]]:
    """Runs grouped by (rung, variant), each list ordered by seed; runs of no rung are left out."""
    out: dict[tuple[str, tuple[str, str]], list[Mapping[str, Any]]] = {}
    for r in records(runs):
        rung = rung_of(r.config)
        if rung is not None:
            out.setdefault((rung, variant(r)), []).append(r)
    return {k: sorted(v, key=lambda r: r.seed) for k, v in out.items()}


def ordered_cells(runs: Sequence[Mapping[str, Any]]) -> list[tuple[tuple[str, tuple[str, str]], list[Mapping[str, Any]]]]:
    """:func:`ladder_cells` in the order every table lists them: by rung, then by the variant's label."""
    return sorted(ladder_cells(runs).items(), key=lambda kv: (kv[0][0], VARIANT_LABELS.get(kv[0][1], "")))


def labelled(run: Mapping[str, Any]) -> bool:
    """Whether the run is labelled collapsed (most evaluation trials collapsed, rule 1)."""
    return run["collapse"]["label"] == "collapse"


def _trials(run: Mapping[str, Any]) -> float:
    return float(run["collapse"]["fraction"])


def bf16_path(run: Mapping[str, Any]) -> str | None:
    """Which arithmetic computed a bf16 run's matmuls over every call that trained it
    (:func:`heavytail.harness.cpu_bf16.path`): ``"torch"``, ``"emulated"``, ``"torch+emulated"`` for a run resumed
    across machines; None for a float32 run. Runs trained before the emulation existed record nothing and took
    torch's kernels."""
    run = RunRecord.from_summary(run)
    if run.precision != "bf16":
        return None
    paths = {entry.get("bf16_matmuls") or "torch" for entry in run.get("provenance") or [{}]}
    return "+".join(p for p in BF16_PATHS if p in paths)


def _emulated_share(runs: Sequence[Mapping[str, Any]]) -> str:
    """", bf16 emulated in k of n runs" where any run of ``runs`` took the emulation, else ""."""
    k = sum("emulated" in (bf16_path(r) or "") for r in runs)
    return f", bf16 emulated in {k} of {len(runs)} runs" if k else ""


def onsets(runs: Sequence[Mapping[str, Any]]) -> dict[int, int | None]:
    """Per seed, the collapse onset step of the run (None when it ends healthy)."""
    return {r.seed: r["collapse"].get("onset") for r in records(runs)}


def paper_collapse(soft: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]],
                   other_label: str = "log-ELU") -> C.Decision:
    """Rule 1 (rule 6 with squared ELU as ``other``): most softmax runs collapse and most of ``other``'s runs do
    not (Clopper-Pearson intervals about 1/2)."""
    s = C.rate_rule(sum(map(labelled, soft)), len(soft), min_seeds=MIN_SEEDS)
    o = C.rate_rule(sum(map(labelled, other)), len(other), min_seeds=MIN_SEEDS)
    if s.verdict == C.NOT_RUN:
        return s
    if s.verdict == C.REPRODUCED and o.verdict == C.NOT_REPRODUCED:
        return C.Decision(C.REPRODUCED, s.estimate, f"most softmax runs collapsed and most {other_label} runs did not")
    if s.verdict == C.NOT_REPRODUCED:
        return C.Decision(C.NOT_REPRODUCED, s.estimate, "the interval excludes most softmax runs collapsing")
    if s.verdict == C.REPRODUCED:
        return C.Decision(C.UNDECIDED, s.estimate, f"most softmax runs collapsed, but {other_label}'s share of "
                                                   f"collapsed runs is not shown below 1/2 ({o.reason or o.verdict})")
    return C.Decision(C.UNDECIDED, s.estimate, s.reason)


def _decided_by(section: str, figures: Sequence[str], maps: Sequence[str] = ()) -> dict[str, Any]:
    """Where a claim is shown, and (``maps``) the shipped maps it was decided on when not the ladder's alone."""
    from heavytail.studies.reference_maps import MAPS

    out = {"notebook": NOTEBOOK, "section": section, "figures": list(figures)}
    if any(m != "ladder" for m in maps):
        out["map"] = " and ".join(MAPS[m].title for m in dict.fromkeys(maps))
    return out


GRADED = ("collapse-steps", "collapse-trials")  # the paired graded comparisons behind each rung's verdict


def in_table(claim: Mapping[str, Any]) -> bool:
    """Whether a ladder claim is a row of the README's findings table: each rung's verdict on the paper's collapse
    and the precision claim; the paired graded comparisons are listed with the ladder's claims (docs/findings.md)."""
    return not claim["id"].startswith(GRADED)


def findings(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every rung's claims (records of :class:`heavytail.studies.claims.Claim`), in rung order."""
    cs = ladder_cells(runs)
    out = []
    for rung in RUNGS:
        soft = cs.get((rung.name, SOFTMAX_SDPA), [])
        if not soft and not cs.get((rung.name, LOG_ELU)):
            continue
        symlog = bool(soft and soft[0].symlog)
        times = onsets(soft)
        onset_text = ", ".join(f"seed {s}: {'step ' + str(t) if t is not None else 'none'}" for s, t in times.items())
        for partner, suffix in PARTNERS:
            other = cs.get((rung.name, partner), [])
            if suffix and not other:
                continue  # squared ELU runs on the deciding rung only (rule 6)
            name = VARIANT_LABELS[partner]
            where = map_extent([*soft, *other]) + f"; rung {rung.name}: {rung.about}"
            d = paper_collapse(soft, other, name)
            out.append(C.make_claim(
                f"paper-collapse{suffix}-{rung.name}",
                f"Softmax (SDPA) runs collapse and {name}'s do not at rung {rung.name}",
                "Tables 5-6, App. I", f"softmax collapsed, {name} did not; the loss diverged at step "
                f"~{PAPER_ONSET[symlog]:,} of 50,000", d, "share of softmax runs labelled collapsed", where,
                f"{sum(map(labelled, soft))} of {len(soft)} softmax runs and {sum(map(labelled, other))} of "
                f"{len(other)} {name} runs labelled collapsed; collapse onset per softmax seed: {onset_text or 'n/a'}",
                _decided_by("The ladder's verdicts", ["ladder_collapse"], [rung.map])).to_dict())
            for cid, what, value, fig in (
                    ("collapse-steps", "share of logged steps with a collapsed batch", collapsed_steps,
                     "onset_aligned"),
                    ("collapse-trials", "share of evaluation trials collapsed", _trials, "ladder_collapse")):
                diffs = paired_by_seed(soft, other, value)
                d = C.graded_rule(list(diffs.values()), min_seeds=MIN_SEEDS) if diffs else C.Decision(
                    C.NOT_RUN, None, "no seed has both kernels")
                out.append(C.make_claim(
                    f"{cid}{suffix}-{rung.name}", f"Softmax's {what} exceeds {name}'s at rung {rung.name}",
                    "Sec. 4.2, App. I", f"softmax collapsed, {name} did not (Tables 5-6)", d,
                    f"softmax - {name} {what}", where,
                    "per seed: " + ", ".join(f"{s}: {v:+.3f}" for s, v in diffs.items()),
                    _decided_by("The ladder's verdicts", [fig], [rung.map])).to_dict())
        f32 = cs.get((rung.name, SOFTMAX_F32), [])
        if f32 and soft:
            diffs = paired_by_seed(soft, f32, collapsed_steps)
            d = C.graded_rule(list(diffs.values()), min_seeds=MIN_SEEDS) if diffs else C.Decision(
                C.NOT_RUN, None, "no seed has both softmax paths")
            out.append(C.make_claim(
                f"collapse-precision-{rung.name}",
                f"At {rung.name} softmax through SDPA in bf16 collapses more than through float32 attention",
                "App. E.4, Sec. 5", "not tested: the paper ran softmax only through FlashAttention in bf16", d,
                "bf16 SDPA - float32 softmax, share of logged steps collapsed",
                map_extent([*soft, *f32]) + f"; rung {rung.name}",
                "per seed: " + ", ".join(f"{s}: {v:+.3f}" for s, v in diffs.items()),
                _decided_by("Precision or kernel", ["onset_aligned"])).to_dict())
    return out + model_size(cs)


def _precision_clause(claim: Mapping[str, Any] | None, f32: Sequence[Mapping[str, Any]]) -> str:
    """", and with softmax's attention in float32 under the same autocast ..." for a rung with the precision claim
    (rule 4): the float32 path's count of runs labelled collapsed and the paired difference in logged steps collapsed
    with its verdict; "" without the claim or its estimate."""
    if claim is None or claim.get("estimate") is None:
        return ""
    # commas only: the summary separates its rungs with semicolons
    return (f", and with softmax's attention in float32 under the same autocast {sum(map(labelled, f32))} of "
            f"{len(f32)} runs labelled collapsed (bf16 SDPA minus float32 {C.fmt(claim['estimate'])}"
            f"{C.interval_text(claim)} of logged steps collapsed, seed by seed, {claim['verdict']}, {claim['seeds']} "
            "seeds)")


def summary(found: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]], markdown: bool = False) -> str:
    """The paper's collapse rung by rung in one paragraph, printed from the decided claims (``found``) and the runs
    they were decided on: where rule 1 reads *reproduced*, then per rung its verdict with softmax's and log-ELU's
    counts of runs labelled collapsed, the graded comparison of logged steps where it reads *reproduced* and rule 1
    does not, the precision comparison (rule 4) where the rung has it, and rule 7. The README's, notebook 09's and
    the landing page's first statement of the ladder; ``markdown`` sets the lead in bold."""
    by_id = {c["id"]: c for c in found}
    cs = ladder_cells(runs)
    # P5's shape of each rung's softmax runs (tables56.shape): whether it learned first, as the paper's did
    shapes = tables56_rules.shapes(cs, lambda g: (g[0], LOG_ELU) if g[1] == SOFTMAX_SDPA else None)
    parts, collapsed_at = [], []
    for rung in RUNGS:
        c = by_id.get(f"paper-collapse-{rung.name}")
        if c is None or c.get("estimate") is None:
            continue
        n = int(c["seeds"])
        other = cs.get((rung.name, LOG_ELU), [])
        text = (f"{rung.name} ({rung.short}): {c['verdict']}, {round(c['estimate'] * n)} of {n} softmax (SDPA) runs "
                f"labelled collapsed{C.interval_text(c)}, log-ELU {sum(map(labelled, other))} of {len(other)}")
        if n < MIN_SEEDS:
            text += f" ({n} seeds, where the rule needs {MIN_SEEDS})"
        text += _emulated_share([*cs.get((rung.name, SOFTMAX_SDPA), []), *other])
        shape = shapes.get((rung.name, SOFTMAX_SDPA), {})
        if shape:
            counts = [(k, sum(v["shape"] == k for v in shape.values())) for k in tables56.SHAPES]
            text += " (softmax's shape: " + ", ".join(f"{k} {n} of {len(shape)}" for k, n in counts if n) + ")"
        steps = by_id.get(f"collapse-steps-{rung.name}")
        if steps and steps["verdict"] == C.REPRODUCED and c["verdict"] != C.REPRODUCED:
            text += (f", though softmax's share of logged steps with a collapsed batch exceeds log-ELU's by "
                     f"{C.fmt(steps['estimate'])}{C.interval_text(steps)} seed by seed ({steps['verdict']})")
        text += _precision_clause(by_id.get(f"collapse-precision-{rung.name}"), cs.get((rung.name, SOFTMAX_F32), []))
        parts.append(text)
        if c["verdict"] == C.REPRODUCED:
            collapsed_at.append(rung.name)
    if not parts:
        return "The collapse ladder has not been shipped yet."
    recipe = next((r["config"] for r in runs if rung_of(r["config"]) not in (None, "R1")), None)
    setting = "" if recipe is None else (
        f" (N = {recipe['n_points']}, {recipe['trials_per_step']} trial per step, lr {recipe['lr']:g} on the first "
        f"{recipe['steps']:,} steps of the {recipe['schedule_steps']:,}-step schedule; seeds are the replicates)")
    lead = (f"Most softmax runs are labelled collapsed (Tables 5-6's criterion) at rung {', '.join(collapsed_at)} of the "
            "collapse ladder" if collapsed_at else
            "Most softmax runs are labelled collapsed (Tables 5-6's criterion) at no rung of the collapse ladder run so far")
    text = (f"**{lead}**" if markdown else lead) + f"{setting}. " + "; ".join(parts) + "."
    model = by_id.get("collapse-model-R2")
    if model is not None and model.get("estimate") is not None:
        text += (f" On the same recipe R2's softmax had {C.fmt(model['estimate'])}{C.interval_text(model)} more of its "
                 f"logged steps collapsed than R1b's, seed by seed ({model['verdict']}, {model['seeds']} seeds)")
        small = by_id.get("paper-collapse-R1b")
        needs_model = (model["verdict"] == C.REPRODUCED and small is not None
                       and small["verdict"] == C.NOT_REPRODUCED)
        text += ": at this length the collapse needs Table 3's model." if needs_model else "."
    return text


def model_size(cs: Mapping[tuple[str, tuple[str, str]], Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Rule 7: softmax's collapsed share of logged steps on R2 (Table 3's model) minus on R1b (R1's model on R2's
    recipe), paired by seed; no claim until both rungs have a softmax run."""
    big, small = cs.get(("R2", SOFTMAX_SDPA), []), cs.get(("R1b", SOFTMAX_SDPA), [])
    if not big or not small:
        return []
    diffs = paired_by_seed(big, small, collapsed_steps)
    d = C.graded_rule(list(diffs.values()), min_seeds=MIN_SEEDS) if diffs else C.Decision(
        C.NOT_RUN, None, "no seed has softmax on both rungs")
    return [C.make_claim(
        "collapse-model-R2", "Softmax collapses more with Table 3's model than with the D = 32 model on the same 6,000-step "
        "recipe (R2 against R1b)", "Table 3, App. I", "not tested: the paper trained only Table 3's model", d,
        "R2 - R1b softmax share of logged steps with a collapsed batch",
        map_extent([*big, *small]) + "; rungs R2 and R1b: the model only differs",
        "per seed: " + ", ".join(f"{s}: {v:+.3f}" for s, v in diffs.items()),
        _decided_by("The ladder's verdicts", ["ladder_collapse"], ["ladder", "ladder-small"])).to_dict()]
