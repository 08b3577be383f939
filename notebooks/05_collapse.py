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
# # 05 — Ensemble collapse
#
# This notebook covers App. I of the paper: what a collapsed output ensemble looks like next to a healthy
# one (Figure 12), when collapse happens during training for each kernel with and without symlog
# (Figure 13), and two things the paper leaves open. Its future work asks for attention weights and
# gradients tracked around the onset of collapse; we log them at every logged step. And its Section 5
# notes that softmax was trained through FlashAttention under bf16 autocast while the other kernels used
# float32 attention: is collapse a property of the exponential kernel, or of the numerics it was trained
# with? Flash-style backwards recompute the scores S and subtract a stored log-sum-exp, which loses every
# digit when |S| is huge (see `heavytail.science.attention`). So we train softmax through that path and through
# float32 log-space attention with exact autograd gradients, on the same data, and compare.
#
# Figures 12 and 13 are drawn from the runs of the ablation grid (notebook 04, `python -m heavytail grid`);
# the numerics study reads a grid of attention-path variants, each one resumable notebook-04 run like every
# grid configuration: a grid of its own (params/grid_collapse_*.yaml), or the runs of another grid that
# share one configuration but the attention path (`variants_where` picks them).

# %% tags=["parameters"]
# Grid folders; the report injects both from its params file (grids: ...).
grid_dir = "outputs/grid-cpu"  # the ablation grid whose post-norm sheared-swap runs give Figures 12 and 13
variants_dir = "outputs/grid-gap-cpu"  # the attention-path variants: the kernel-gap grid's runs (params/grid_gap_cpu.yaml)
variants_where = {}  # only variants_dir's runs with these configuration values ({}: all of them)
gradient_check_trials = 2  # evaluation trials replayed through each block for the gradient-accuracy check
report = "scratch"  # injected by the report runner
output_root = None  # injected by the report runner

# %%
import os

from IPython.display import Markdown, display

from heavytail.harness.artifacts import artifacts, repo_root
from heavytail.harness.config import RunConfig
from heavytail.science.collapse import numerics_pair
from heavytail.studies import collapse
from heavytail.studies.ablation.summary_plots import diagnostics_figure
from heavytail.studies.tables import show

os.chdir(repo_root())  # papermill runs in the caller's folder; paths below are from the repo root
art = artifacts("05_collapse", report=report, output_root=output_root)
print(f"artifacts -> {art.dir}")

# %% [markdown]
# ## The collapse criterion, calibrated
#
# App. I shows collapsed outputs "concentrated near the single location marked by the arrow" but gives no
# threshold. A trial counts as collapsed when on some axis the interquartile range of its output is below
# `collapse_spread` times the target's (quantiles, because the targets have infinite variance). Here is what
# that criterion labels on outputs built to be healthy, shrunk, partly collapsed onto a point, or collapsed
# onto a few clusters.

# %%
threshold = RunConfig().collapse_spread
calibration = collapse.calibration.table(threshold)
show(calibration, art, "collapse_criterion_calibration")
by_case = {(r["case"], r["setting"]): r["collapsed share"] for r in calibration["rows"]}
missed = [r["setting"] for r in calibration["rows"] if r["case"] == "few clusters" and r["collapsed share"] == 0]
shrunk = [r["setting"] for r in calibration["rows"] if r["case"] == "uniform shrinkage" and r["collapsed share"] == 1]
display(Markdown(
    f"**At threshold {threshold:g}** the criterion labels uniform shrinkage by {', '.join(shrunk)} collapsed and "
    "no healthy output of any tail index; an output with half or more of its points at one location is "
    f"collapsed in {by_case[('point mass + healthy rest', '50% at one point')]:.0%} (50 %) and "
    f"{by_case[('point mass + healthy rest', '60% at one point')]:.0%} (60 %) of trials. Its blind spot: "
    f"outputs collapsed onto {', '.join(missed)} well-separated points are not labelled, because their "
    "quartiles lie as far apart as the target's. The graded share of collapsed trials (notebook 07) inherits "
    "both the threshold and this blind spot."))

# %% [markdown]
# ## Training curves of the grid (Figure 13)
#
# The paper's Figure 13: per-step loss (faint) and its rolling median (heavy) for the four kernels on the
# sheared swap with mirrored Pareto marginals, post-norm, with and without symlog. The dot marks the onset of
# collapse read off the outputs (the first logged step from which most trials of the batch stay collapsed,
# `heavytail.science.collapse.collapse_onset`).

# %%
curve_runs = collapse.numerics.grid_runs(grid_dir, **collapse.numerics.FIGURE_CELL)
if not curve_runs:
    display(Markdown(f"No finished grid runs under `{grid_dir}`: run `python -m heavytail grid params/grid_cpu.yaml` "
                     "(or `make report`) to draw Figures 12 and 13."))
else:
    curves = collapse.numerics.training_curves(curve_runs)
    art.save_figure(collapse.numerics_plots.figure13(curves), "fig13_training_curves")
    print(collapse.numerics.onsets_text(curves))

# %% [markdown]
# Where a curve jumps up and stays, the run collapsed; a curve that keeps descending did not.
#
# ## A collapsed output next to a healthy one (Figure 12)
#
# One evaluation instance of the sheared swap on mirrored Pareto marginals: the target, the softmax model's
# output and the log-ELU model's output (post-norm, no transform), on symmetric-log axes as in the paper.
# We pick the softmax run of the grid with the largest collapsed fraction at evaluation.

# %%
soft = collapse.numerics.most_collapsed(curve_runs, "softmax")
healthy = collapse.numerics.most_collapsed(curve_runs, "log_elu")
if soft is not None and healthy is not None:
    panels = collapse.numerics.figure12_panels(soft, healthy)
    art.save_figure(collapse.numerics_plots.figure12(panels), "fig12_collapsed_vs_healthy")
fig12_note = collapse.numerics.figure12_note(soft, healthy)
print(fig12_note)

# %% [markdown]
# ## Kernel or numerics? Softmax trained through two attention paths
#
# Every variant of the grid below shares its configuration, the seed and therefore the data stream; only the
# attention path (and, where stated, the precision) differs. Each run logs, at every logged step, the largest
# attention weight and the attention entropy (relative to uniform) of a few query rows per block, the
# residual-stream norm and each block's gradient norm.

# %%
variant_runs = collapse.numerics.grid_runs(variants_dir, **variants_where)
runs = collapse.numerics.variants(variant_runs)
pair = numerics_pair(variant_runs)
if pair is None:
    raise RuntimeError(f"the variants grid {variants_dir} has no finished softmax run through a flash-style and an exact "
                       "attention path: run python -m heavytail grid params/grid_gap_cpu.yaml")
where = f" with {', '.join(f'{k}={v}' for k, v in variants_where.items())}" if variants_where else ""
print(f"variants grid {variants_dir}: {len(variant_runs)} runs{where}; settings they share:")
print(", ".join(f"{k}={v}" for k, v in collapse.numerics.shared_settings(variant_runs).items()))
for label, run in runs.items():
    print(collapse.numerics.describe(label, run))

# %%
fig = diagnostics_figure({label: run.log for label, run in runs.items()})
art.save_figure(fig, "collapse_onset_diagnostics")

# %% [markdown]
# Crosses on the loss panel mark steps skipped because the loss or the gradient was not finite.
#
# ## How accurate are the gradients on the model's own scores?
#
# We replay each block's attention of the trained softmax model on evaluation inputs and compare the
# gradients of each backend with a float64 dense reference (`heavytail.science.collapse.attention_gradient_error`).

# %%
rows = collapse.numerics.gradient_accuracy(pair[0], gradient_check_trials)  # the softmax model trained flash-style
_ = art.save_table("gradient_accuracy.csv", rows)
header = "| block | backend | max abs score | rel. error dq | rel. error dk | rel. error dv |\n|---|---|---|---|---|---|\n"
display(Markdown(header + "\n".join(
    f"| {r['block']} | {r['backend']} | {r['max_abs_score']:.3g} | {r['q']:.2e} | {r['k']:.2e} | {r['v']:.2e} |" for r in rows
)))

# %% [markdown]
# ## What this run shows

# %%
found = collapse.numerics.findings(runs, pair, rows, fig12_note)
display(Markdown("\n".join(found.lines)))

# %%
art.conclude(found.conclusion, figure="collapse_onset_diagnostics")
