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
# # 06 — The ablation grid, summarized: Tables 5-8, Figures 2, 3, 8-11 and the paper's findings
#
# Every finished configuration of one ablation grid (Section 4.2 and App. G: attention kernel x normalization
# placement x symlog x {sheared swap on mirrored Pareto, sheared swap on shifted Gaussian, matrix inverse on mirrored
# Pareto}) rebuilds the paper's summaries from the runs' `results.json`. On the CPU default this grid is breadth at
# smoke scale (one seed, a small model, a few hundred steps): its claims are listed here, not on the front page;
# Tables 5-6 at Table 3's model are notebook 10. The figure first (Figure 2: post-norm sheared swap, median and mean
# energy distance per kernel against the floor), then one line per claim; the tables, the remaining figures and the
# evidence of each claim follow. Every number is computed from the run folders; the paper's own values are labelled.

# %% tags=["parameters"]
grid_dir = "outputs/grid-cpu"  # the grid's output folder <output_root>/<grid name>/ (params/grid_cpu.yaml: name grid-cpu)
gap_grid_dir = None  # the kernel-gap grid's folder (params/grid_gap_cpu.yaml): with it, the kernel-gap claims join
report = "scratch"  # injected by the report runner
output_root = None  # injected by the report runner: where this notebook's figures and tables go
filters = {}  # optional {RunConfig key: value} to select runs when a grid varies more than the ablation axes
paper_grid_file = "params/grid_paper.yaml"  # the grid at the paper's scale (Table 3), to run on GPUs

# %%
from pathlib import Path

from IPython.display import Markdown, display

from heavytail.harness.artifacts import artifacts, repo_root
from heavytail.studies import ablation, claim_groups, claims, grid_folder, tables

root = repo_root()
grid_path = Path(grid_dir) if Path(grid_dir).is_absolute() else root / grid_dir
art = artifacts("06_summary", report=report, output_root=output_root)


def save(fig, name):
    """Save a figure as PNG + SVG under this notebook's artifacts and show it here."""
    art.save_figure(fig, name)


# %%
collected = grid_folder.finished_runs(grid_path) if grid_path.is_dir() else grid_folder.FinishedRuns(runs=())
runs = grid_folder.filter_runs(collected.runs, **filters) if filters else list(collected.runs)
aggs = ablation.summary.aggregate(runs)
found = claim_groups.decide_sources("ablation", runs=runs, label=f"the ablation grid ({grid_path.name})")
if gap_grid_dir is not None:
    found = claim_groups.decide_sources("gap-design") + found
headline = ablation.claims.figure_name("sheared_swap", "post")
if any(a["benchmark"] == "sheared_swap" and a["norm"] == "post" for a in aggs):
    save(ablation.summary_plots.energy_figure(aggs, "sheared_swap", "post"), headline)
else:
    display(Markdown("*No post-norm sheared-swap runs in this grid: Figure 2 is not drawn.*"))
tables.show(claims.compact_table(found, "Findings of Sections 4.2 and 5 at this scale, one line each"), art,
            "claims_compact")
counts = {v: sum(f["verdict"] == v for f in found) for v in claims.VERDICTS}
print(f"{len(found)} claims from {len(runs)} evaluated runs: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n))

# %% [markdown]
# ## What ran at this scale
#
# **Read this first.** The table below is printed from the configurations of the runs found in the grid
# folder (training ensemble size N, steps, trials per step, model width and depth, evaluation trials...),
# next to the paper's values (the defaults of `RunConfig`, which are Table 3). A finding that does not
# reproduce at a smaller scale is not evidence against the paper; the paper-scale grid file named below
# tests it on a GPU.

# %%
print(f"grid folder: {grid_path}")
print(f"evaluated runs found: {len(runs)}" + (f" (after filters {filters})" if filters else ""))
if not grid_path.is_dir():
    print("The grid folder does not exist: run the grid first (python -m heavytail grid <grid.yaml>).")
print(f"paper-scale grid file: {paper_grid_file}"
      + ("" if (root / paper_grid_file).is_file() else " (not present in this checkout)"))
tables.show(ablation.summary.scale_table(runs), art, "scale")
timed = sorted(r.log[-1]["seconds"] / r.log[-1]["step"] for r in runs
               if r.log and r.log[-1].get("seconds") and r.log[-1].get("step"))
if timed:
    print(f"measured: {timed[len(timed) // 2]:.3f} s per training step (median over {len(timed)} runs; "
          f"range {timed[0]:.3f}-{timed[-1]:.3f} s)")

# %%
record = collected.record
if record is None:
    print("No grid.json in the grid folder: the runs were not produced by the grid runner, "
          "so there is no list of configurations that failed or did not run.")
else:
    tables.show(ablation.summary.grid_status_table(record), art, "grid_status")
if collected.skipped:
    tables.show({"title": "Run folders not used", "columns": ["run", "reason"], "rows": list(collected.skipped),
                 "notes": ""}, art, "skipped_runs")
if runs:
    tables.show(ablation.summary.runs_table(runs), art, "runs")

# %% [markdown]
# ## Seeds, and what "collapse", "lower" and "similar" mean here
#
# Runs that differ only in their seed are one configuration. The paper used one seed; with several, each
# cell reports the median over seeds of the ratio and of each bootstrap endpoint, followed by the range of
# the per-seed ratios (the bootstrap interval covers evaluation trials at fixed weights, not training runs,
# App. H.2). The definitions used by the findings are printed from the code that applies them:

# %%
n_multi = sum(a["n_seeds"] > 1 for a in aggs)
print(f"{len(aggs)} configurations; {n_multi} with more than one seed")
for word, meaning in ablation.claims.DEFINITIONS.items():
    display(Markdown(f"- **{word}**: {meaning}"))

# %% [markdown]
# ## Tables 5 and 6: energy distance as a multiple of the sampling floor
#
# Cells: ratio S(d)/S(d_hat) (eq. 36) and its 95% two-pool bootstrap interval (eq. 37); **bold** when the
# interval contains or lies below 1 (App. H.2); "collapse" when most evaluation trials of the run have a
# degenerate output ensemble (App. I; the ratio is still shown in brackets); "not run" when the grid has no
# finished run for that cell.

# %%
for benchmark, number in (("sheared_swap", 5), ("matrix_inverse", 6)):
    for stat in ablation.summary.STATISTICS:
        tables.show(ablation.summary.ratio_table(aggs, benchmark, stat), art, f"table{number}_{stat}")

# %% [markdown]
# The same ratios next to the paper's Table 5 and 6 values (at the paper's scale, "What ran at this scale";
# bold in the paper shown as `**x**`):

# %%
if aggs:
    tables.show(ablation.summary.comparison_table(aggs, "median"), art, "paper_comparison_median")
else:
    print("No finished runs: nothing to compare.")

# %% [markdown]
# ## Figures 2 and 3 (post-norm) and 8 and 9 (pre-norm)
#
# Median (blue) and mean (orange) energy distance per kernel; bars are the bootstrap intervals on the
# energy-distance scale (both ratio endpoints multiplied by the floor summary, App. H.2), dashed lines the
# floor under the same statistic. Rows: marginals; columns: without / with symlog.

# %%
for norm, numbers in (("post", (2, 3)), ("pre", (8, 9))):
    present = [a for a in aggs if a["norm"] == norm]
    if not present:
        display(Markdown(f"*No {ablation.summary.NORM_LABELS[norm]} runs in this grid: Figures {numbers[0]} and {numbers[1]} "
                         f"are not drawn.*"))
        continue
    for benchmark, number in zip(ablation.summary.BENCHMARKS, numbers):
        if ablation.claims.figure_name(benchmark, norm) == headline:
            display(Markdown(f"*Figure {number} is at the top of this notebook.*"))
            continue
        if not any(a["benchmark"] == benchmark for a in present):
            display(Markdown(f"*No {ablation.summary.NORM_LABELS[norm]} {ablation.summary.BENCHMARK_LABELS[benchmark]} runs: Figure {number} not drawn.*"))
            continue
        save(ablation.summary_plots.energy_figure(aggs, benchmark, norm), ablation.claims.figure_name(benchmark, norm))

# %% [markdown]
# ## Figures 10 and 11: per-trial energy distances against the floor
#
# Empirical CDFs over evaluation trials (pooled over seeds); the black curve is the i.i.d. floor pool.
# A curve further left has lower energy distances. Collapsed runs are left out, as in the paper.

# %%
for benchmark, number in (("sheared_swap", 10), ("matrix_inverse", 11)):
    if not any(a["benchmark"] == benchmark and a["marginals"] == "mirrored_pareto" for a in aggs):
        display(Markdown(f"*No {ablation.summary.BENCHMARK_LABELS[benchmark]} runs on mirrored Pareto marginals: Figure {number} not drawn.*"))
        continue
    save(ablation.summary_plots.ecdf_figure(aggs, benchmark), f"figure{number}_{benchmark}_ecdf")

# %% [markdown]
# ## Tables 7 and 8: Hill-based tail diagnostics (App. J)
#
# E(e, e_hat) of eq. 41 compares the distribution of a model's Hill-estimate errors against the target with
# that of two independent targets, per latent axis (axis 0 lighter tail, axis 1 heavier). Its expectation is
# 0 when they agree; finite-trial values can be negative; its sign is not a significance test.

# %%
for benchmark, number in (("sheared_swap", 7), ("matrix_inverse", 8)):
    for axis in ("0", "1"):
        tables.show(ablation.summary.hill_table(aggs, benchmark, axis), art, f"table{number}_axis{axis}")

# %% [markdown]
# ## Hill error against the known tail index over thresholds (Section 5, future work)
#
# The paper suggests "evaluating errors against the known tail indices across a range of thresholds". Each
# curve is the median over evaluation trials of |a_hat - a| at tail fraction phi, for the model's output
# mapped back to latent coordinates and, in black, for an independent target ensemble: the target curve is
# the estimator's own error at that N, the floor a model can be judged against.

# %%
for benchmark in ablation.summary.BENCHMARKS:
    if not any(a["benchmark"] == benchmark and a.get("hill_curve") for a in aggs):
        display(Markdown(f"*No {ablation.summary.BENCHMARK_LABELS[benchmark]} Hill curves (no mirrored Pareto runs).*"))
        continue
    save(ablation.summary_plots.hill_curve_figure(aggs, benchmark), f"hill_curve_{benchmark}")

# %% [markdown]
# ## Findings of Sections 4.2 and 5 at this scale, with their evidence
#
# Each claim is checked on the configurations it speaks about, with the definitions above; a claim with any
# of its configurations missing is "not run", one with fewer seeds than its rule needs is "undecided at this
# power", and the evidence still shows what the present runs say. The kernel-gap claims (notebook 07) come
# first: they are decided on the shipped one-trial-per-step map, with eight seeds per cell.

# %%
tables.show(ablation.claims.findings_table(found), art, "findings")
_ = art.save_table("claims.json", found)  # the landing page lists these (heavytail.pipeline.landing)

# %% [markdown]
# ## In plain words

# %%
scale_rows = ablation.summary.scale_table(runs)["rows"]
scale = {r["setting"]: r["this grid"] for r in scale_rows}
paper = {r["setting"]: r["paper (Table 3)"] for r in scale_rows}
if not runs:
    lines = [f"No evaluated runs were found in {grid_path}, so none of the paper's {len(found)} claims is checked here."]
else:
    lines = [f"From {len(runs)} evaluated runs ({len(aggs)} configurations) at N = {scale['n_points']} training points, "
             f"{scale['steps']} steps and model width {scale['d_model']} "
             f"(the paper: N = {paper['n_points']}, {paper['steps']} steps, width {paper['d_model']}), "
             f"of the paper's {len(found)} claims checked, {counts[claims.REPRODUCED]} reproduced, "
             f"{counts[claims.NOT_REPRODUCED]} did not, {counts[claims.UNDECIDED]} are undecided at this power (too few "
             f"seeds to separate training runs), and {counts[claims.NOT_RUN]} could not be checked because "
             "configurations are missing."]
lines += ablation.claims.findings_text(found)
if counts[claims.NOT_RUN] or counts[claims.NOT_REPRODUCED] or counts[claims.UNDECIDED]:
    lines.append(f"Claims not run or not reproduced here are what the paper-scale grid ({paper_grid_file}) is for; "
                 "a result at a smaller scale neither confirms nor refutes the paper's.")
display(Markdown("\n\n".join(lines)))

# %%
key_figure = next((name for name in (ablation.claims.figure_name("sheared_swap", "post"), ablation.claims.figure_name("matrix_inverse", "post"),
                                     "figure10_sheared_swap_ecdf") if art.path(f"{name}.png").is_file()), None)
art.conclude(lines[0], figure=key_figure)
