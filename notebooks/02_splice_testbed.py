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
# # 02 — Tail sensitivity of the energy distance: the splice testbed
#
# This notebook reproduces Section 4.1 and App. F: measure pairs that coincide below a seam quantile q0 and differ
# only in the Pareto tail above it (the splice of eq. 31, Figure 7), and Figure 1 — how the energy distance
# (eq. 10, exact 1D path), the empirical 2-Wasserstein distance and the Hill gap (eq. 38) respond to the candidate
# tail index a* at each sample budget N, in the noise units of eq. 32. The paper reports that at the largest budget
# the energy distance is smallest at the reference index a* = 1.5 for every seam; the last section checks that on
# this run. The defaults are the paper's full recipe (App. F.1); the sweep prints the time it took.

# %% tags=["parameters"]
budgets = [256, 1024, 4096, 16384, 65536]  # sample budgets N
repetitions = [24, 24, 24, 12, 6]  # repetitions per budget (App. F.1)
seams = [0.5, 0.9, 0.99]  # seam quantiles q0
a_grid = [0.6, 0.8, 1.0, 1.2, 1.5, 1.8, 2.2, 2.8, 3.5]  # candidate tail indices a*
a_ref = 1.5  # reference index
seed = 0
fig7_seam = 0.9  # the seam drawn in Figure 7
use_cache = True  # resume a killed sweep from its finished (N, q0) cells
report = "scratch"  # injected by the report runner
output_root = None  # injected by the report runner

# %%
import os
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

from heavytail.science.distributions import SplicedPareto
from heavytail.harness.artifacts import artifacts, repo_root
from heavytail.studies.testbed import (SWEEP_STATISTICS, SweepConfig, curves_table, sweep_findings, sweep_hill_k, noise_unit_curves,
                               run_sweep)

os.chdir(repo_root())  # papermill runs in the caller's folder
art = artifacts("02_splice_testbed", report=report, output_root=output_root)
cfg = SweepConfig(budgets=budgets, repetitions=repetitions, seams=seams, a_grid=a_grid, a_ref=a_ref, seed=seed)
cache_dir = (art.dir.parent / ".cache" / "02_splice_testbed") if use_cache else None
print(f"artifacts -> {art.dir}; sweep cache -> {cache_dir}")

# %% [markdown]
# ## The splice (eq. 31, Figure 7)

# %%
x = torch.logspace(0, 3, 800, dtype=torch.float64)
fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
cmap = plt.get_cmap("viridis")
seam_u0 = float(SplicedPareto(a_ref, a_ref, fig7_seam).seam)
for i, a in enumerate(cfg.a_grid):
    law = SplicedPareto(a_ref, a, fig7_seam)
    style = dict(color="k", lw=2) if a == a_ref else dict(color=cmap(i / (len(cfg.a_grid) - 1)), lw=1)
    axes[0].loglog(x, law.pdf(x), label=f"a* = {a:g}", **style)
    axes[1].loglog(x, law.sf(x), **style)
for ax in axes:
    ax.axvspan(1.0, seam_u0, color="0.9", zorder=0)
    ax.axvline(seam_u0, ls=":", color="k")
    ax.text(seam_u0, ax.get_ylim()[0] * 3, " knot", fontsize=8)
    ax.set_xlabel("x")
axes[0].set_ylabel("density")
axes[1].set_ylabel("survival function")
axes[0].legend(fontsize=7, ncol=2)
fig.suptitle(f"splice at q0 = {fig7_seam}, a_ref = {a_ref}, lambda = 1")
fig.tight_layout()
art.save_figure(fig, "fig7_splice")
mass_above = float(SplicedPareto(a_ref, cfg.a_grid[0], fig7_seam).sf(torch.tensor(seam_u0, dtype=torch.float64)))
display(Markdown(f"Below the knot u0 = {seam_u0:.3f} (shaded) every candidate coincides with the reference; above it each "
                 f"carries mass {mass_above:.3f} = 1 - q0 with its own tail index."))

# %% [markdown]
# ## The sweep (Figure 1)

# %%
display(Markdown(
    f"Budgets N = {list(cfg.budgets)} with {list(cfg.repetitions)} repetitions, seams q0 = {list(cfg.seams)}, "
    f"a* grid {list(cfg.a_grid)}, a_ref = {cfg.a_ref}, seed {cfg.seed}; each repetition draws two independent sets of "
    f"size N (reference and candidate). Hill gap thresholds k = max(2, round(N (1 - q0))): "
    + ", ".join(f"N={n}, q0={q}: k={sweep_hill_k(n, q)}" for n in (cfg.budgets[0], cfg.budgets[-1]) for q in cfg.seams) + "."))
t0 = time.perf_counter()
table = run_sweep(cfg, cache_dir=cache_dir, progress=True)
sweep_seconds = time.perf_counter() - t0
curves = noise_unit_curves(table, a_ref=cfg.a_ref)
_ = art.save_table("sweep_raw.csv", table)
_ = art.save_table("figure1_noise_units.csv", curves_table(curves))
print(f"sweep: {len(table['budget'])} rows in {sweep_seconds:.1f} s")

# %%
titles = {"energy": "energy distance", "w2": "2-Wasserstein", "hill_gap": "Hill gap"}
seam_colors = {q: c for q, c in zip(cfg.seams, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"))}
fig, axes = plt.subplots(3, len(cfg.budgets), figsize=(3.2 * len(cfg.budgets), 8.5), sharex=True, squeeze=False)
for r, stat in enumerate(SWEEP_STATISTICS):
    for c, n in enumerate(cfg.budgets):
        ax = axes[r, c]
        for cv in curves:
            if cv.statistic == stat and cv.budget == n:
                ax.plot(cv.a_star, cv.z, "o-", ms=3, color=seam_colors[cv.seam], label=f"q0 = {cv.seam:g}")
        ax.axvline(cfg.a_ref, color="0.6", ls=":")
        ax.axhline(0, color="0.6", lw=0.5)
        ax.set_yscale("symlog", linthresh=1.0)
        if r == 0:
            ax.set_title(f"N = {n}")
        if c == 0:
            ax.set_ylabel(f"{titles[stat]}\n(noise units, eq. 32)")
        if r == 2:
            ax.set_xlabel("a*")
axes[0, 0].legend(fontsize=7)
fig.tight_layout()
art.save_figure(fig, "fig1_tail_sensitivity")
display(Markdown("Each point is the mean over repetitions, shifted so that a* = a_ref sits at 0 and divided by the median "
                 "between-repetition standard deviation (eq. 32); the vertical axis is symmetric-log beyond ±1 noise unit."))

# %% [markdown]
# ## Findings

# %%
found = sweep_findings(curves, cfg)
n_small, n_large = found.n_small, found.n_large
argmins, hill_argmins, all_at_ref, flat = found.argmins, found.hill_argmins, found.all_at_ref, found.flat
min_varsigma = found.min_varsigma
findings = found.to_json(sweep_seconds)
_ = art.save_table("findings.json", findings)
display(Markdown(f"""
- At the largest budget N = {n_large}, the energy distance is smallest at a* = """
    + ", ".join(f"{a:g} (q0 = {q:g})" for q, a in argmins.items())
    + f""". {'So its minimum sits at the reference index a* = ' + format(cfg.a_ref, 'g') + ' for every seam, as the paper reports.' if all_at_ref else 'So the paper’s finding — minimum at a* = ' + format(cfg.a_ref, 'g') + ' for every seam — does NOT reproduce on this run.'}
- Sensitivity grows with N: for a* > {cfg.a_ref:g} the energy distance moves at most {flat['energy', n_small]:.2f} noise units from its
  reference value at N = {n_small} and up to {flat['energy', n_large]:.2f} at N = {n_large}.
- The Hill gap at N = {n_large} is smallest at a* = """ + ", ".join(f"{a:g} (q0 = {q:g})" for q, a in hill_argmins.items()) + f"""; for
  a* > {cfg.a_ref:g} it moves up to {flat['hill_gap', n_large]:.2f} noise units.
- The empirical 2-Wasserstein distance for a* > {cfg.a_ref:g} moves at most {flat['w2', n_large]:.2f} noise units at N = {n_large}
  ({'comparatively flat, as in the paper' if found.w2_flatter else 'not flatter than the energy distance here, unlike the paper'}).
- The smallest noise unit varsigma over all panels is {min_varsigma:.2e} (the paper: about 1e-5), so no floor was needed in eq. 32.
"""))

# %%
art.conclude(
    f"At the largest budget N = {n_large} the energy distance is smallest at a* = "
    + ", ".join(f"{a:g} (q0 = {q:g})" for q, a in argmins.items())
    + (", the reference index for every seam, as the paper reports" if all_at_ref
       else f": not at the reference index {cfg.a_ref:g} for every seam, unlike the paper")
    + f"; for a* > {cfg.a_ref:g} it moves up to {flat['energy', n_large]:.2f} noise units there against "
    f"{flat['energy', n_small]:.2f} at N = {n_small}.",
    figure="fig1_tail_sensitivity")
