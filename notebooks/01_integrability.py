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
# # 01 — Attention kernels and integrability on heavy-tailed measures
#
# This notebook covers the attention-kernel suite of Section 3.3.1 (Table 1, drawn as Figure 6 of
# App. E.2), the integrability argument of App. A (Definition 1, eq. 12, Proposition 1: population softmax
# attention is undefined on mirrored Pareto measures for every nonzero score), and the tail of a Pareto
# variable after the symlog transform (App. C.3, eq. 22). Population normalizers cannot be computed when they
# are infinite, so we watch the empirical normalizer D_g(s; nu_N) = N^-1 sum_j g(<b, y_j>) as N grows: it
# settles when the population integral is finite and keeps jumping when it is not.

# %% tags=["parameters"]
n_max = 2**20  # largest ensemble for the running normalizers
n_paths = 3  # independent running-normalizer paths per measure
pareto_indices = (2.5, 1.5)  # mirrored Pareto tail index per latent axis (inside Pi_eta of Section 3.2.1)
gaussian_stds = (1.5, 2.5)  # shifted Gaussian std per latent axis (the light-tailed control)
score_direction = (0.5, 0.5)  # the fixed query's score vector b of App. A
n_symlog = 200_000  # Pareto draws for the symlog tail check
symlog_index = 1.5  # Pareto index a in eq. (22)
seed = 0
report = "scratch"  # injected by the report runner
output_root = None  # injected by the report runner

# %%
import math
import os

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import Markdown, display

from heavytail.science.distributions import MirroredPareto, ShiftedGaussian
from heavytail.science.operators import LOCATION
from heavytail.studies.integrability import (DRIFT_THRESHOLD_DECADES, symlog_tail, drift_findings, drift_rows, gaussian_softmax_log_normalizer,
                                     running_log_normalizer, symlog_tail_rejected)
from heavytail.science.kernels import KERNEL_NAMES, get_kernel
from heavytail.harness.artifacts import artifacts, repo_root

os.chdir(repo_root())  # papermill runs in the caller's folder; all paths below are from the repo root
art = artifacts("01_integrability", report=report, output_root=output_root)
gen = torch.Generator().manual_seed(seed)
LAMBDA = LOCATION  # latent location lambda = mu_N = 1 (Section 4.2)
print(f"artifacts -> {art.dir}")

# %% [markdown]
# ## The kernel suite (Table 1, Figure 6)

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 4))
ranges = {"linear axis": (-3.0, 3.0), "positive scores, log axis": (0.0, 20.0), "negative scores, log axis": (-20.0, 0.0)}
for ax, (title, (lo, hi)) in zip(axes, ranges.items()):
    s = torch.linspace(lo, hi, 801, dtype=torch.float64)
    for name in KERNEL_NAMES:
        k = get_kernel(name)
        ax.plot(s, k.g(s), label=f"{name} ({k.growth})")
    ax.plot([0], [1], "ko", ms=4)
    if "log" in title:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel("score s")
axes[0].set_ylabel("g(s)")
axes[0].set_ylim(0, 8)
axes[0].legend(fontsize=8)
fig.tight_layout()
art.save_figure(fig, "fig6_kernels")
g0 = {name: float(get_kernel(name).g(torch.zeros(()))) for name in KERNEL_NAMES}
gmin = {name: float(get_kernel(name).g(torch.tensor(-20.0, dtype=torch.float64))) for name in KERNEL_NAMES}
display(Markdown(
    "The four maps agree at the origin (g(0) = " + ", ".join(f"{v:g}" for v in g0.values()) + ") and are strictly "
    "positive even at s = -20 (smallest value " + f"{min(gmin.values()):.2e}" + "), so the row normalizer of "
    "eq. (7) cannot vanish; on the log axis the positive branches separate by growth rate as in Table 1's last column."
))

# %% [markdown]
# ## Empirical normalizers as N grows (App. A)
#
# Keys y_j are drawn from the latent product measure (any invertible mixing T gives the same conclusion, since
# T^T b != 0, App. A). Each curve is one running mean over a single growing ensemble, so a new extreme draw shows
# up as a jump.

# %%
b = torch.tensor(score_direction, dtype=torch.float64)
measures = {
    "mirrored Pareto": MirroredPareto(LAMBDA, torch.tensor(pareto_indices, dtype=torch.float64)),
    "shifted Gaussian": ShiftedGaussian(LAMBDA, torch.tensor(gaussian_stds, dtype=torch.float64)),
}
log_norm = {}  # (measure, kernel) -> (n_paths, n_max)
for mname, law in measures.items():
    y = law.sample((n_paths, n_max, 2), generator=gen, dtype=torch.float64)
    scores = y @ b
    for kname in KERNEL_NAMES:
        log_norm[mname, kname] = running_log_normalizer(scores, kname)
gauss_cov = torch.diag(torch.tensor(gaussian_stds, dtype=torch.float64) ** 2)
gauss_exact = float(gaussian_softmax_log_normalizer(b, torch.full((2,), LAMBDA, dtype=torch.float64), gauss_cov))
display(Markdown(f"Keys: {n_paths} paths of up to N = {n_max:,} draws; mirrored Pareto indices {pareto_indices}, "
                 f"Gaussian stds {gaussian_stds}, location {LAMBDA}, score direction b = {score_direction}."))

# %%
# Plot at ~3000 log-spaced N (every point of a path would make a 100 MB SVG); jumps remain visible.
idx = np.unique(np.geomspace(16, n_max, 3000).astype(int)) - 1
fig, axes = plt.subplots(1, len(KERNEL_NAMES), figsize=(16, 4), sharex=True)
colors = {"mirrored Pareto": "tab:red", "shifted Gaussian": "tab:blue"}
for ax, kname in zip(axes, KERNEL_NAMES):
    for mname in measures:
        for p in range(n_paths):
            ax.plot(idx + 1, log_norm[mname, kname][p, idx].numpy() / math.log(10), color=colors[mname], lw=0.8,
                    alpha=0.8, label=mname if p == 0 else None)
    if kname == "softmax":
        ax.axhline(gauss_exact / math.log(10), color="k", ls="--", lw=0.8, label="Gaussian population value")
        ax.set_yscale("symlog", linthresh=1.0)  # the Pareto curve climbs thousands of decades; keep the Gaussian visible
    ax.set_xscale("log")
    ax.set_title(kname)
    ax.set_xlabel("ensemble size N")
axes[0].set_ylabel("log10 D_g(s; nu_N)")
axes[0].legend(fontsize=8)
fig.tight_layout()
art.save_figure(fig, "normalizers_vs_N")
display(Markdown("Red (mirrored Pareto keys) against blue (Gaussian keys): a curve that flattens has found its population value; "
                 "steps are single extreme draws, and for softmax on Pareto keys each new record moves the mean by decades."))

# %% [markdown]
# The drift over the last six doublings of N measures whether a curve has settled. App. A predicts a finite
# population normalizer for a kernel growing like |s|^q exactly when the q-th absolute moment of the score is
# finite, i.e. q < min(a) on the Pareto measure (Prop. 3); softmax (q = infinity) never qualifies there, while
# every kernel is finite on the Gaussian.

# %%
a_min = min(pareto_indices)
rows = drift_rows(log_norm, a_min, heavy_measure="mirrored Pareto")  # kernel by kernel; drift over the last 6 doublings
_ = art.save_table("normalizer_drift.csv", rows)
for r in rows:
    print(f"{r['kernel']:>12} | {r['measure']:<16} | finite predicted: {str(r['predicted_finite']):<5} | "
          f"log10 D(N_max) = {r['log10_D_at_Nmax_median']:10.3f} | drift over last 6 doublings: {r['drift_decades_median']:+.3f} decades")

# %% [markdown]
# ## The symlog tail (App. C.3, eq. 22)

# %%
tail = symlog_tail(n_symlog, symlog_index, gen)
t_grid, emp_sf, theory_sf, ks, rate = tail.t, tail.empirical_sf, tail.theory_sf, tail.ks, tail.rate
fig, ax = plt.subplots(figsize=(6, 4))
ax.semilogy(t_grid, emp_sf.clamp(min=0.5 / n_symlog), label="empirical survival of symlog(X)")
ax.semilogy(t_grid, theory_sf, "k--", label="lambda^a (e^t - 1)^-a  (eq. 22)")
ax.semilogy(t_grid, LAMBDA**symlog_index * torch.exp(-symlog_index * t_grid), ":", color="gray", label="lambda^a e^{-a t}")
ax.set_xlabel("t")
ax.set_ylabel("P(symlog(X) > t)")
ax.legend(fontsize=8)
art.save_figure(fig, "symlog_tail")
_ = art.save_table("symlog_tail.json", {"n": n_symlog, "tail_index": symlog_index, "ks_statistic": ks.statistic,
                                    "ks_pvalue": ks.pvalue, "fitted_exponential_rate": rate})
display(Markdown(
    f"On {n_symlog:,} draws of Pareto({LAMBDA:g}, {symlog_index:g}) the survival of symlog(X) follows eq. (22) on a "
    f"log axis as a straight line: the Kolmogorov–Smirnov statistic against eq. (22) is {ks.statistic:.4f} "
    f"(p = {ks.pvalue:.3f}) and the fitted exponential rate is {rate:.3f} against a = {symlog_index:g}."
))

# %% [markdown]
# ## Findings

# %%
found = drift_findings(rows, heavy_measure="mirrored Pareto", light_measure="shifted Gaussian")
sm_p, sm_g = found.softmax_heavy, found.softmax_light
diverging, settled, predicted_div = found.diverging, found.settled, found.predicted_divergent
gauss_max_drift = found.light_max_drift
display(Markdown(f"""
- **Softmax on mirrored Pareto keys** (indices {pareto_indices}): the empirical normalizer reaches
  10^{sm_p['log10_D_at_Nmax_median']:.1f} at N = {n_max:,} and still gained {sm_p['drift_decades_median']:.1f} decades over the
  last six doublings of N — it does not settle, as Proposition 1 predicts (the population integral is infinite).
- **Softmax on Gaussian keys**: it settles at 10^{sm_g['log10_D_at_Nmax_median']:.3f} against the population value
  10^{gauss_exact / math.log(10):.3f} (drift {sm_g['drift_decades_median']:+.3f} decades).
- On the mirrored Pareto keys the kernels whose normalizer kept growing by more than {DRIFT_THRESHOLD_DECADES:g} decade are
  {', '.join(diverging) or 'none'}; those that settled are {', '.join(settled) or 'none'}. App. A's moment condition
  (growth order q below the smallest index {a_min:g}) predicts divergence for {', '.join(predicted_div) or 'none'}
  — {'in agreement' if found.agrees else 'NOT in agreement'} with what the run shows.
  (Squared-ELU needs a finite second moment, which indices at or below 2 lack; its divergence is polynomial, far
  slower than softmax's.)
- On the Gaussian keys every kernel settled: the largest drift is {gauss_max_drift:.3f} decades.
- The symlog transform turns the Pareto({symlog_index:g}) tail into an exponential tail with fitted rate {rate:.3f}
  (eq. 22 says {symlog_index:g}); the KS test against eq. (22) gives p = {ks.pvalue:.3f}
  ({'evidence against eq. 22 at the 1% level' if symlog_tail_rejected(ks.pvalue) else 'no evidence against eq. 22'}).
"""))

# %%
art.conclude(
    f"Up to N = {n_max:,} mirrored Pareto keys the empirical normalizer kept growing for "
    f"{', '.join(diverging) or 'no kernel'} (softmax: +{sm_p['drift_decades_median']:.1f} decades over the last six "
    f"doublings) and settled for {', '.join(settled) or 'no kernel'}, "
    + ("as App. A's moment condition predicts" if found.agrees else "NOT as App. A's moment condition predicts")
    + f"; on Gaussian keys the largest drift was {gauss_max_drift:.3f} decades.",
    figure="normalizers_vs_N")
