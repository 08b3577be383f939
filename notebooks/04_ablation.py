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
# # 04 — One configuration of the ablation grid
#
# This notebook covers one cell of the ablation of Section 4.2: a measure transformer with one attention
# kernel (Table 1), one normalization placement (post-norm in Figures 2-3, pre-norm in App. G), with or
# without symlog preprocessing (eq. 8), trained on one operator and marginal family (Section 3.2, App. D)
# with the recipe of Table 3 at the scale its parameters set. It trains the model, or resumes it from its
# last checkpoint, evaluates it on independent trials against the i.i.d. sampling floor (eq. 11, App. H.2),
# draws the transport the model realizes as in Figure 5 (App. D.2), and this configuration's distribution of
# per-trial energy distances against its floor as in Figures 10 and 11 (App. G), with the median and mean
# ratios of eq. 36, their bootstrap intervals (eq. 37) and the ensemble-collapse label (App. I).
# `python -m heavytail grid` executes it once per configuration; the summary notebook collects the grid.

# %% tags=["parameters"]
# The run configuration: a mapping of RunConfig keys (heavytail.harness.config); a key left out keeps RunConfig's
# default, which is the paper's Table 3 recipe. The grid passes the whole configuration of one grid cell;
# None runs the quick CPU configuration of the next cell (one line here, so papermill can read the cell).
config = None
# Where this configuration lives. run_dir None: <repo>/outputs/<report>/<configuration name>/.
run_dir = None
floor_cache = None  # None: <run_dir>/../_floors, shared by every configuration of a grid
progress = True  # progress bars (the grid turns them off)
report = "scratch"  # injected by the runner
output_root = None  # injected by the runner

# %%
import math
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from heavytail.studies.ablation.one_run import figure5_trial, findings, transport_sample
from heavytail.harness.config import RunConfig
from heavytail.harness.artifacts import artifacts, repo_root
from heavytail.harness.rundir import RunDir
from heavytail.harness.experiment import default_run_dir, run_configuration
from heavytail.names import KERNEL_COLORS
from heavytail.studies.curves import training_curve
from heavytail.harness.build import build_benchmark, resolve_device
from heavytail.harness.checkpoints import load_model

os.chdir(repo_root())  # papermill runs in the caller's folder; paths below are from the repository root
if config is None:  # interactive use: a quick CPU run (minutes)
    config = dict(benchmark="sheared_swap", marginals="mirrored_pareto", kernel="linear_elu", norm="post",
                  symlog=False, d_model=32, n_blocks=2, d_ff=64, warmup_steps=20, steps=200, n_points=256,
                  trials_per_step=8, eval_trials=32, eval_n_points=1024, bootstrap_resamples=500, seed=0,
                  checkpoint_every=50, log_every=5)
cfg = RunConfig.from_dict(config)
run_dir = Path(run_dir) if run_dir is not None else default_run_dir(cfg, report)
art = artifacts("04_ablation", report=report, output_root=output_root if output_root is not None else run_dir)
device_used = resolve_device(cfg)

paper = RunConfig()
print(f"configuration {cfg.name}")
print(f"run folder    {run_dir}")
print(f"device        {device_used}, {torch.get_num_threads()} CPU threads")
print("\nresolved configuration (every key; the run folder's config.yaml holds the same):")
print(cfg.to_yaml())
differ = {k: (getattr(paper, k), v) for k, v in cfg.to_dict().items() if getattr(paper, k) != v}
print("settings that differ from the paper's Table 3 recipe (paper -> this run):")
for key, (theirs, ours) in differ.items():
    print(f"  {key}: {theirs} -> {ours}")

# %% [markdown]
# ## Training (Section 3.4, Table 3) and evaluation
#
# Each step draws a fresh parameter instance per trial, an input ensemble and an independent target ensemble,
# and minimizes the energy distance (eq. 4, 10). A run folder that holds a checkpoint resumes from it. The
# configuration's unit of work (`heavytail.harness.experiment.run_configuration`) then evaluates the finished run
# against the sampling floor, or reuses the evaluation already in the folder when it belongs to this run.

# %%
run = RunDir(run_dir)  # the run folder's layout and states (heavytail.harness.rundir)
state_before = {"complete": "already complete", "new": "starting fresh"}.get(
    run.state(), run.state().replace("resumable from", "resuming from"))
print(f"training: {state_before}")
outcome = run_configuration(cfg, run_dir, floor_cache=floor_cache, quiet=not progress, device=str(device_used))
log = list(outcome.log)
n_skipped = outcome.n_skipped
print(f"trained {cfg.steps} steps; {n_skipped} skipped as non-finite; {len(log)} logged steps")

# %%
steps_logged = np.array([row["step"] for row in log])
loss = np.array([row["loss"] for row in log], dtype=float)
spread = np.array([row.get("spread_median", math.nan) for row in log], dtype=float)
fig, (ax_loss, ax_spread) = plt.subplots(1, 2, figsize=(12, 3.8))
ok = np.isfinite(loss) & (loss > 0)
window = max(5, int(ok.sum()) // 20)
training_curve(ax_loss, steps_logged, loss, color=KERNEL_COLORS[cfg.kernel], window=window,
               raw_label="loss on the step's batch", label=f"rolling median ({window} logged steps)")
bad = steps_logged[~np.isfinite(loss)]
if bad.size:
    ax_loss.plot(bad, np.full(bad.size, np.nanmin(loss[ok]) if ok.any() else 1.0), "r|", ms=12,
                 label="skipped (non-finite)")
ax_loss.set_xlabel("step")
ax_loss.set_ylabel("energy distance (eq. 10)")
ax_loss.set_title("training loss")
ax_loss.legend(fontsize=8)
ax_spread.plot(steps_logged, spread, color="C1")
ax_spread.axhline(cfg.collapse_spread, color="k", ls="--", lw=1, label=f"collapse threshold {cfg.collapse_spread:g}")
ax_spread.set_yscale("log")
ax_spread.set_xlabel("step")
ax_spread.set_ylabel("median output IQR / target IQR")
ax_spread.set_title("output spread during training (App. I)")
ax_spread.legend(fontsize=8)
fig.suptitle(cfg.name, fontsize=10)
fig.tight_layout()
art.save_figure(fig, "training_curve")

# %% [markdown]
# ## Evaluation against the sampling floor (App. H.2)
#
# Candidate distances d_i = E^2(model(X_i), Y1_i) over independent trials, and the floor d_hat_j = E^2(Y2_j, Y3_j)
# from two independent target ensembles of another pool of trials (computed above by the unit of work).

# %%
results = outcome.results
print("evaluated now" if outcome.evaluated_now else f"evaluation loaded from {run.results_path}")
energy, collapse = results["energy"], results["collapse"]
d = np.asarray(energy["d"], dtype=float)
d_hat = np.asarray(energy["d_hat"], dtype=float)
print(f"{d.size} candidate trials, {d_hat.size} floor trials, N = {cfg.eval_n_points}, "
      f"{cfg.bootstrap_resamples} bootstrap resamples")
print(f"{'statistic':<10}{'candidate':>12}{'floor':>12}{'ratio':>9}{'95% interval':>20}  bold")
for stat in ("median", "mean"):
    s = energy[stat]
    interval = f"[{s['low']:.3f}, {s['high']:.3f}]"
    print(f"{stat:<10}{s['candidate']:>12.4g}{s['floor']:>12.4g}{s['ratio']:>9.3f}{interval:>20}  {s['bold']}")
print(f"collapse label: {collapse['label']} ({collapse['fraction']:.0%} of trials with output spread below "
      f"{collapse['threshold']:g} of the target's)")

# %% [markdown]
# ## The transport the model realizes (Figure 5, App. D.2)
#
# Arrows run from input points to the model's outputs for one evaluation instance: for the sheared swap at
# j = k = 0, where the operator reduces to the coordinate exchange; for the matrix inverse, at the trial's own
# parameters. The right panel applies the exact linear map T_out T_in^-1 to the same inputs. The loss compares
# ensembles, not points, so the model need not reproduce that pointwise map: any transport of the input
# measure onto the target measure scores as well.

# %%
model, _ = load_model(run_dir, device_used)
bench = build_benchmark(cfg)
gen = torch.Generator().manual_seed(10_007 * (cfg.seed + 1))  # its own stream, apart from training and evaluation
trial = figure5_trial(bench, bench.sample_trials(1, generator=gen))
x = bench.sample_inputs(trial, cfg.eval_n_points, generator=gen)
with torch.no_grad():
    y_model = model(x.to(device_used)).float().cpu()[0]
x = x[0]
y_exact = (x.double() @ trial.input_to_output[0].transpose(-1, -2)).float()
sample = transport_sample(x, y_model, n_arrows=140, generator=gen)
exact = transport_sample(x, y_exact, n_arrows=140, generator=torch.Generator().manual_seed(0))
heavy = cfg.marginals == "mirrored_pareto"
params_name = "tail indices a" if heavy else "standard deviations sigma"
params_text = ", ".join(f"{v:.2f}" for v in trial.marginal_params[0].tolist())
omega_text = ", ".join(f"{v:.2f}" for v in trial.omega_T[0].tolist())

fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
for ax, chosen, title in ((axes[0], sample, "model"), (axes[1], exact, "exact map T_out T_in^-1")):
    for start, end in zip(chosen.x.tolist(), chosen.y.tolist()):
        ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", lw=0.6, color="C0", alpha=0.8))
    ax.scatter(*chosen.x.T, s=6, color="k", label="input")
    ax.scatter(*chosen.y.T, s=6, color="C3", label="output")
    (x0, x1), (y0, y1) = chosen.window
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    if heavy:  # symmetric-log axes, as Figures 5 and 12 draw heavy-tailed ensembles
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_yscale("symlog", linthresh=1.0)
    ax.set_title(f"{title}: {len(chosen.indices)} arrows from the {chosen.inside_fraction:.0%} of "
                 f"{chosen.n_points} points inside the window", fontsize=9)
    ax.set_xlabel("coordinate 0")
    ax.set_ylabel("coordinate 1")
    ax.legend(fontsize=8, loc="upper left")
fig.suptitle(f"{cfg.name}; omega_T = ({omega_text}), latent {params_name} = ({params_text})", fontsize=9)
fig.tight_layout()
art.save_figure(fig, "fig5_transport")

# %% [markdown]
# ## The distribution of energy distances against the floor (Figures 10, 11; Figure 2)
#
# Left: empirical CDFs of the per-trial distances d_i and of the floor d_hat_j on a log axis; a curve further
# left has lower distances. Right: the median and mean distances with their 95% bootstrap intervals carried to
# the distance scale (both ends multiplied by the floor summary), against the floor summary as a vertical line
# in the same color (App. H.2).

# %%
fig, (ax_cdf, ax_bar) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [3, 2]})
shown_d = d[np.isfinite(d) & (d > 0)]
ax_cdf.ecdf(shown_d, label=f"model d_i ({shown_d.size} of {d.size} trials)", color="C0")
ax_cdf.ecdf(d_hat[d_hat > 0], label=f"i.i.d. floor d_hat_j ({d_hat.size} trials)", color="k")
ax_cdf.set_xscale("log")
ax_cdf.set_xlabel("energy distance")
ax_cdf.set_ylabel("fraction of trials")
ax_cdf.set_title(f"{cfg.name} ({collapse['label']})", fontsize=9)
ax_cdf.legend(fontsize=8)
for row, (stat, color) in enumerate((("median", "C0"), ("mean", "C1"))):
    s = energy[stat]
    ax_bar.errorbar([s["candidate"]], [row], xerr=[[s["candidate"] - s["low"] * s["floor"]],
                                                   [s["high"] * s["floor"] - s["candidate"]]],
                    fmt="o", color=color, capsize=4, label=f"{stat}: ratio {s['ratio']:.3f}")
    ax_bar.axvline(s["floor"], color=color, ls="--", lw=1)
ax_bar.set_yticks([0, 1], ["median", "mean"])
ax_bar.set_ylim(-0.7, 1.7)
ax_bar.set_xscale("log")
ax_bar.set_xlabel("energy distance (dashed: floor)")
ax_bar.legend(fontsize=8)
fig.tight_layout()
art.save_figure(fig, "energy_distribution")

# %% [markdown]
# ## Findings

# %%
sentence = findings(results, skipped_steps=n_skipped)
_ = art.save_table("findings.json", {"name": cfg.name, "findings": sentence})
art.conclude(sentence, figure="energy_distribution")
