# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 — The paper's collapse, one factor at a time
#
# The paper's headline: post-norm softmax models collapse on both heavy-tailed benchmarks while the slower
# kernels do not (Tables 5-6), the loss diverging abruptly at step ~3,500 (~4,500 with symlog) of 50,000
# (App. I, Fig. 13), at N = 16384, D = 256, 6 blocks, lr 1e-3, softmax through FlashAttention under bf16
# autocast. Every other collapse verdict in this repository comes from D = 32, 2 blocks, float32. The ladder
# changes one factor per rung toward Table 3, on the sheared swap at N = 1024, one trial per step, on the first
# 6,000 steps of the paper's 50,000-step schedule; the rules (`heavytail.studies.collapse.ladder`) were committed
# before any ladder run, and the steps around any collapse are logged at full resolution with the attention and
# gradient statistics the paper names as future work ("tracking attention weights and gradients around the
# onset of collapse").

# %% tags=["parameters"]
ladder_dir = "outputs/grid-collapse-ladder"  # a local re-run of the ladder, used instead of the shipped map
small_dir = "outputs/grid-collapse-ladder-small"  # a local re-run of rung R1b (R1's model on the ladder's recipe)
screen_dir = "outputs/grid-mechanism-screen"  # a local re-run of the mechanism screen
followup_dir = "outputs/grid-mechanism-followup"  # a local re-run of the screen's follow-up
interventions_dir = "outputs/grid-mechanism-interventions"  # a local re-run of the interventions
report = "scratch"  # injected by the report runner
output_root = None  # injected by the report runner

# %%
from IPython.display import Markdown, display

from heavytail.harness.artifacts import artifacts, repo_root
from heavytail.harness.config import RunConfig
from heavytail.studies import claim_groups, claims, collapse, reference_maps
from heavytail.studies.tables import show

root = repo_root()
art = artifacts("09_collapse_ladder", report=report, output_root=output_root)
ladder = reference_maps.source("ladder", root / ladder_dir)
small = reference_maps.source("ladder-small", root / small_dir)  # rung R1b
long_grid = reference_maps.source("gap-long")  # rung R1: the shipped 3,000-step grid
runs = [*ladder.runs, *small.runs] + [r for r in long_grid.runs if collapse.ladder.rung_of(r["config"]) == "R1"]
for source in (ladder, small, long_grid):
    print(source.describe())
for rung in collapse.ladder.RUNGS:
    print(f"{rung.name}: {rung.about}")

# %% [markdown]
# ## The ladder's verdicts
#
# Per rung: does softmax collapse in most runs while log-ELU does not (the paper's claim, Clopper-Pearson
# intervals about 1/2), and, graded, do softmax's training batches and evaluation trials collapse more often
# than log-ELU's on the same seeds (sign-flip test)? A rung with fewer than six seeds per kernel is undecided. On
# the rung that decides, the same three rules compare softmax with squared ELU, the other slow kernel of Tables 5-6
# (claims ending "-squared-R2"; rule 6, added before any of its runs). R2 differs from R1 in the model and in
# the length and schedule, so rung R1b trains R1's model on R2's recipe exactly: R2 against R1b changes the model
# only (rule 7, `collapse-model-R2`, written after R2 was decided and before any R1b run).

# %%
found = claim_groups.decide_sources("ladder", {"ladder": ladder, "ladder-small": small, "gap-long": long_grid})
decided = [f for f in found if f["id"].startswith("paper-collapse-")]
headline = collapse.ladder.summary(found, runs)  # printed from the claims: where it appears, then rung by rung
art.save_figure(collapse.ladder_plots.loss_figure(runs), "ladder_loss")  # Fig. 13 beside ours, first
show(claims.compact_table(found, f"Collapse-ladder claims ({ladder.label})"), art, "claims_compact")
display(Markdown(collapse.ladder.summary(found, runs, markdown=True) + " The rungs, claims and what decided each "
                 "follow; each claim's evidence is at the end."))
_ = art.save_table("claims.json", found)  # the landing page lists these
show(collapse.ladder_tables.table(runs), art, "ladder_cells")
art.save_figure(collapse.ladder_plots.collapse_figure(runs), "ladder_collapse")

# %% [markdown]
# ## The onset, watched
#
# The paper's Fig. 13 shows the loss diverging at an onset; it asked for the attention weights and gradients
# around it. The first figure aligns every run that collapsed for good on its onset (the first logged step from
# which every logged batch is collapsed) and draws its regular log from the start of training: per block the
# largest attention weight, the share of rows whose largest weight is exactly 1 in the precision attention received
# (absorption: every other point's weight lost to rounding), the largest |S| of eq. 1, the attention entropy over
# log N and the gradient norm of the block's W_Q and W_K, with log-ELU's run of the same seed over the same training
# steps. Block 0 is the one that sees the raw heavy-tailed tokens.

# %%
art.save_figure(collapse.ladder_plots.onset_figure(runs, block=0), "onset_aligned")
before_onset = collapse.ladder_tables.precursors(runs, block=0)
if before_onset:
    show(collapse.ladder_tables.precursor_table(before_onset, block=0), art, "before_onset")
    display(Markdown(f"**{collapse.ladder_tables.precursor_sentence(before_onset, block=0)}**"))

# %% [markdown]
# Training also logs every step for a few steps before and after a batch that collapses after a healthy stretch.
# That trigger fires on the *first* such batch, which can come long before a run's onset (both printed below the
# figure): the windows show, one row per run, how intermittent collapse is at that stage.

# %%
art.save_figure(collapse.ladder_plots.window_figure(runs, block=0), "onset_windows")
absorbed = collapse.ladder_tables.absorption_before_onset(runs, block=0)
if absorbed["softmax"]:
    show(collapse.ladder_tables.absorption_table(absorbed, block=0), art, "absorbed_before_first_collapse")
    firsts = [centre for *_, centre, _ in absorbed["softmax"]]
    shares = [x for *_, x in absorbed["softmax"]]
    onsets = [x["onset"] for x in before_onset if x["variant"][0] == "softmax"]
    display(Markdown(
        f"**Before its first collapsed batch (steps {min(firsts)}-{max(firsts)}), softmax's block 0 was absorbed on "
        f"{min(shares):.0%}-{max(shares):.0%} of the logged steps"
        + (f"; log-ELU's on at most {absorbed['log_elu']:.0%} of theirs" if absorbed["log_elu"] is not None else "")
        + (f". Its onsets came later, at steps {min(onsets)}-{max(onsets)}.**" if onsets
           else ". No softmax run collapsed for good.**")))
recipe = RunConfig.from_dict({k: v for k, v in ladder.runs[0]["config"].items()}) if ladder.runs else None
if recipe is not None:
    display(Markdown(
        f"Recipe of the shipped rungs: N = {recipe.n_points}, {recipe.trials_per_step} trial per step, "
        f"{recipe.steps} steps of a {recipe.horizon}-step schedule (warmup {recipe.warmup_steps}), lr {recipe.lr:g}, "
        f"subnormals {'flushed' if recipe.flush_subnormals else 'kept'}; logged every {recipe.log_every} steps, and "
        f"every step for {recipe.dense_log_window} steps before and after a collapse that follows as many healthy "
        f"ones; the paper: N = {RunConfig().n_points}, "
        f"{RunConfig().trials_per_step} trials per step, {RunConfig().steps} steps."))

# %% [markdown]
# ## Where in the task family
#
# A run is scored on evaluation trials that each draw a task from the family (omega_T ~ Pi_T, App. D.1: the shear
# (j, k) of eq. 23 on the sheared swap), and the paper labels whole runs. The panels place each softmax trial at its
# task and mark the collapsed ones. One question per run: does a straight line in the task plane separate the
# collapsed trials from the healthy ones better than it separates the same labels shuffled? The statistic is the
# best line's agreement; its p-value shuffles the labels (a permutation test, calibrated by construction and
# checked under the null in `tests/test_collapse_by_task.py`). Runs shipped before the map kept each trial's
# spread ratio cannot be placed.

# %%
by_task = {r["name"]: collapse.by_task.half_plane_test(*t) for r in runs if r["config"]["kernel"] == "softmax"
           and (t := collapse.by_task.trials_of(r)) is not None}
art.save_figure(collapse.ladder_plots.task_figure(runs, by_task), "collapse_by_task")
unplaced = sum(r["config"]["kernel"] == "softmax" and r["name"] not in by_task for r in (*ladder.runs, *small.runs))
if by_task:
    show(collapse.ladder_tables.task_table(runs, by_task), art, "collapse_by_task")
    mixed = [t for t in by_task.values() if 0 < t["collapsed"] < t["n"]]
    display(Markdown(
        f"**{len(by_task)} softmax runs placed; {len(mixed)} had both collapsed and healthy trials, and for "
        f"{sum(t['p'] < 0.05 for t in mixed)} of them a line in the task plane separates the two better than it "
        f"separates shuffled labels (p < 0.05, uncorrected).**"
        + (f" {unplaced} softmax run(s) were shipped without per-trial spread ratios." if unplaced else "")))

# %% [markdown]
# ## Precision or kernel
#
# The paper ran softmax's attention in bf16 (FlashAttention under autocast) and the slower kernels' in float32
# (App. E.4), so its collapse may follow the precision rather than the kernel. Rung R3 therefore also runs
# softmax's attention in float32 under the same autocast; the rule compares, seed by seed, SDPA in bf16 against
# it on the share of logged steps with a collapsed batch.

# %%
precision = [f for f in found if f["id"].startswith("collapse-precision-")]
display(Markdown("\n\n".join(f"- {claims.render(f)}" for f in precision) or (
    "Not run yet: no rung has shipped softmax's attention in float32 under autocast (the `attention_backend=flash` "
    "cells of rung R3) next to SDPA in bf16 on the same seed.")))

# %% [markdown]
# ## Why softmax fails here: the screen and the interventions
#
# R2's softmax never learns, where the paper's learned first (Fig. 13). The screen (`heavytail.studies.collapse.
# mechanism`, its criterion written before the runs) trains the first steps of R2's recipe in settings closer to the
# paper's batch, softmax against log-ELU on the same seeds; the interventions change block 0 alone, or bound the
# score, at R2's recipe. The figures first: training loss per setting, the criterion's window shaded; then each
# intervention's loss and block 0's absorbed rows against plain softmax and log-ELU on the same seeds.

# %%
screen = reference_maps.source("mechanism-screen", root / screen_dir)
print(screen.describe())
if screen.runs:
    art.save_figure(collapse.mechanism_views.screen_figure(screen.runs), "mechanism_screen")
    show(collapse.mechanism_views.screen_table(screen.runs), art, "mechanism_screen")
interventions = reference_maps.source("mechanism", root / interventions_dir)
mechanism = claim_groups.decide_sources("mechanism", {"ladder": ladder, "mechanism": interventions})
if interventions.runs:
    print(interventions.describe())
    art.save_figure(collapse.mechanism_views.interventions_figure([*interventions.runs, *ladder.runs]),
                    "mechanism_interventions")
show(claims.compact_table(mechanism, "Interventions at R2's recipe") if mechanism else
     {"title": "Interventions at R2's recipe", "columns": ["state"], "rows": [{"state": "not run: "
      "python -m heavytail grid params/grid_mechanism_interventions.yaml"}], "notes": ""}, art, "mechanism_claims")
display(Markdown(collapse.mechanism_views.screen_summary(screen.runs)))
followup = claim_groups.decide_sources("mechanism-followup", {"mechanism-followup": reference_maps.source(
    "mechanism-followup", root / followup_dir)})
if followup:
    show(claims.compact_table(followup, "Where softmax learns first: the screen's follow-up (6,000 steps)"), art,
         "mechanism_followup")
else:
    display(Markdown(collapse.mechanism_views.followup_text(screen.runs)))

# %% [markdown]
# ## Every claim with its evidence

# %%
show(claims.claims_table(found, f"Collapse-ladder claims ({ladder.label}), in full"), art, "findings")

# %% [markdown]
# ## In plain words

# %%
model = [f for f in found if f["id"].startswith("collapse-model-")]  # rule 7: the model or the length?
display(Markdown("\n\n".join(claims.render(f) for f in decided + model)))
art.conclude(headline, figure="ladder_loss")
