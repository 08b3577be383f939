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
# # 03 — Identifiability of the two operators (App. D)
#
# This notebook covers App. C.1's densities (Figure 4) and App. D.3: the input law determines the mixing matrix
# — M of the sheared swap (Prop. 4, eq. 27, including the shear edge c_y = 0) and B of the matrix inverse on
# mirrored Pareto marginals (Prop. 5) — and, on Gaussian marginals, the matrix inverse is unidentifiable
# (Prop. 6, built with H of eq. 29). The propositions are about laws; here the same arguments become sample
# estimators (in `heavytail.studies.identifiability`) whose error we watch shrink as the ensemble size N grows, and the
# counterexample is checked with the energy distance against its i.i.d. sampling floor (eq. 11).

# %% tags=["parameters"]
fig4_indices = (1.5, 2.5)  # two Pareto tail indices drawn in Figure 4
fig4_gaussian_std = 1.5  # the shifted Gaussian of Figure 4's right panel
budgets = (1024, 4096, 16384, 65536)  # ensemble sizes N for the recovery curves (at least 2 each)
n_trials = 12  # parameter instances omega ~ Pi per budget and benchmark (at least 1)
n_edge = 6  # shear-edge instances (k at -1, so c_y is 0) per budget and family (at least 1)
prop6_b = (0.8, 1.4)  # the diagonal (b_x, b_y) of B in Prop. 6
prop6_sigma = (1.9, 2.1)  # latent stds (sigma_l, sigma_h) of Prop. 6
prop6_h = -0.1  # the perturbation h of eq. (29)
prop6_n = 2048  # ensemble size for the counterexample's energy distances (at least 2)
prop6_reps = 8  # repetitions of each energy distance (at least 2)
seed = 0
report = "scratch"  # injected by the report runner
output_root = None  # injected by the report runner

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import Markdown, display

from heavytail.studies import identifiability
from heavytail.science.distributions import A_MIN, MirroredPareto, Pareto, ShiftedGaussian
from heavytail.science.metrics import energy_distance
from heavytail.science.operators import LOCATION, Benchmark
from heavytail.harness.artifacts import artifacts, repo_root

os.chdir(repo_root())  # papermill runs in the caller's folder
art = artifacts("03_identifiability", report=report, output_root=output_root)
gen = torch.Generator().manual_seed(seed)
LAMBDA = LOCATION
print(f"artifacts -> {art.dir}")

# %% [markdown]
# ## The marginal densities (Figure 4)

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
x_pos = torch.logspace(0, 2, 400, dtype=torch.float64)
z = torch.linspace(-9, 11, 2001, dtype=torch.float64)
for a in fig4_indices:
    axes[0].loglog(x_pos, Pareto(LAMBDA, a).pdf(x_pos), label=f"Pareto, a = {a:g}")
    axes[1].semilogy(z, MirroredPareto(LAMBDA, a).pdf(z), label=f"mirrored Pareto, a = {a:g}")
axes[1].axvline(LAMBDA, ls=":", color="k", label="seam z = lambda")
a_show = min(fig4_indices)
axes[2].semilogy(z, MirroredPareto(LAMBDA, a_show).pdf(z), label=f"mirrored Pareto, a = {a_show:g}")
axes[2].semilogy(z, ShiftedGaussian(LAMBDA, fig4_gaussian_std).pdf(z), label=f"Gaussian, mean 1, std {fig4_gaussian_std:g}")
axes[2].set_ylim(1e-8, 1)
for ax, t in zip(axes, ("Pareto (eq. 5), log-log", "mirrored Pareto (eq. 6)", "heavy vs light tail")):
    ax.set_title(t)
    ax.legend(fontsize=8)
fig.tight_layout()
art.save_figure(fig, "fig4_densities")
ratio_far = float(MirroredPareto(LAMBDA, a_show).pdf(torch.tensor(11.0)) / ShiftedGaussian(LAMBDA, fig4_gaussian_std).pdf(torch.tensor(11.0)))
display(Markdown(f"Both families are centered at {LAMBDA:g}; ten units out, the mirrored Pareto density (a = {a_show:g}) "
                 f"is {ratio_far:.1e} times the Gaussian's — the polynomial tail the identifiability arguments lean on."))

# %% [markdown]
# ## Why the center is a coordinate-wise median
#
# Every input law is centrally symmetric about c = T (lambda, lambda) (App. D.3). At the heavy end of Pi_eta the
# index is 1 + eps: the mean barely exists and the variance does not, so the sample mean converges like
# N^(1/a - 1), hopelessly slowly, while each coordinate's median equals c_i and converges like N^(-1/2).

# %%
n_big = max(budgets)
zc = MirroredPareto(LAMBDA, torch.tensor([A_MIN, 2.0], dtype=torch.float64)).sample((n_trials, n_big, 2), generator=gen, dtype=torch.float64)
err_mean = (zc.mean(dim=1) - LAMBDA).abs().median(dim=0).values
err_median = (identifiability.center(zc) - LAMBDA).abs().median(dim=0).values
center_rows = [{"tail_index": a, "N": n_big, "median_abs_error_mean": float(em), "median_abs_error_median": float(ed)}
               for a, em, ed in zip((A_MIN, 2.0), err_mean, err_median)]
_ = art.save_table("center_mean_vs_median.csv", center_rows)
for r in center_rows:
    print(f"a = {r['tail_index']:.7f}, N = {n_big}: |sample mean - c| ~ {r['median_abs_error_mean']:.3g}, "
          f"|coordinate median - c| ~ {r['median_abs_error_median']:.3g}  (median over {n_trials} sets)")

# %% [markdown]
# ## Recovering M and B as N grows (Props. 4 and 5)
#
# Each case draws its instances omega ~ Pi once (Section 3.2.1, App. D.1); at every N each instance gets a fresh input
# ensemble of size N, from which the matrix is estimated:
# M by eq. (27) (switching to the edge estimator when |c_y| is within 0.05 lambda of zero), B by Prop. 5's
# tail directions plus the center and det B > 0. Edge instances put k = -1 (c_y = 0) on purpose with j spread over
# [-0.9, 0.9] and indices at their interval midpoints, where eq. (27) alone would divide by zero.

# %%
# The same instances at every N, so the curves show the estimators converging rather than instance-to-instance spread.
case_trials = {case: Benchmark(*case).sample_trials(n_trials, generator=gen) for case in identifiability.RECOVERY_CASES}


recovery_runs = {n: identifiability.recovery_errors(case_trials, n, n_edge, gen) for n in budgets}
errors = {n: r.errors for n, r in recovery_runs.items()}
c_y = {(n, fam): cy for n, r in recovery_runs.items() for fam, cy in r.c_y.items()}
cases = list(errors[budgets[0]])
recovery = identifiability.recovery_findings(errors)  # quantile(0.5) medians per (case, N), log-log slopes, falling cases
rec_rows, slopes = recovery.rows, recovery.slopes
_ = art.save_table("recovery_errors.csv", rec_rows)

fig, ax = plt.subplots(figsize=(7, 4.5))
for c in cases:
    med = np.array([float(errors[n][c].quantile(0.5)) for n in budgets])
    lo = np.array([float(errors[n][c].quantile(0.25)) for n in budgets])
    hi = np.array([float(errors[n][c].quantile(0.75)) for n in budgets])
    ax.errorbar(budgets, med, yerr=[med - lo, hi - med], marker="o", capsize=3, label=f"{c} (slope {slopes[c]:.2f})")
ref = np.array(budgets, dtype=float)
ax.loglog(ref, rec_rows[0]["median_rel_error"] * (ref / ref[0]) ** -0.5, "k:", label="N^-1/2")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("ensemble size N")
ax.set_ylabel("relative Frobenius error of the matrix")
ax.legend(fontsize=7)
art.save_figure(fig, "recovery_vs_N")
display(Markdown("The median relative error (bars: interquartile range over instances) falls with N for every case; the "
                 "legend gives the fitted log-log slope against the N^-1/2 reference."))

# %% [markdown]
# ## The Gaussian counterexample (Prop. 6, eq. 29)

# %%
p6 = identifiability.prop6_instances(prop6_b, prop6_sigma, prop6_h)
print("H =", p6.H.numpy().round(4).tolist())
print("B' = B H^-1 =", p6.b_prime.numpy().round(4).tolist(), "with eq. (24) parameters",
      {k: round(v, 4) for k, v in p6.omega_T_prime.items()})
print("sigma' =", p6.sigma_prime.numpy().round(4).tolist(), "| admissible:", p6.admissible)
cov_in = p6.b @ torch.diag(p6.sigma**2) @ p6.b.T
cov_in_p = p6.b_prime @ torch.diag(p6.sigma_prime**2) @ p6.b_prime.T
one = torch.ones(2, dtype=torch.float64) * LAMBDA
print("input means:", (p6.b @ one).numpy().round(6).tolist(), (p6.b_prime @ one).numpy().round(6).tolist(),
      "| max |covariance difference|:", f"{float((cov_in - cov_in_p).abs().max()):.2e}")

# %%
def gaussian_ensemble(mat, sigma, n):
    zz = ShiftedGaussian(LAMBDA, sigma).sample((prop6_reps, n, 2), generator=gen, dtype=torch.float64)
    return zz @ mat.T


binv, bpinv = torch.linalg.inv(p6.b), torch.linalg.inv(p6.b_prime)
ed = {}
for side, (m1, m2) in {"input": (p6.b, p6.b_prime), "output": (binv, bpinv)}.items():
    a1 = gaussian_ensemble(m1, p6.sigma, prop6_n)
    a2 = gaussian_ensemble(m1, p6.sigma, prop6_n)  # a second i.i.d. draw of instance 1: the floor (eq. 11)
    b2 = gaussian_ensemble(m2, p6.sigma_prime, prop6_n)
    ed[side] = {"between": energy_distance(a1, b2).double(), "floor": energy_distance(a1, a2).double()}
p6_rows = [{"side": s, "N": prop6_n, "reps": prop6_reps, "mean_between": float(v["between"].mean()),
            "mean_floor": float(v["floor"].mean()), "ratio": float(v["between"].mean() / v["floor"].mean())}
           for s, v in ed.items()]
_ = art.save_table("prop6_energy.csv", p6_rows)
fig, ax = plt.subplots(figsize=(6, 4))
for i, s in enumerate(ed):
    ax.scatter(np.full(prop6_reps, 2 * i) + 0.1 * np.random.default_rng(0).standard_normal(prop6_reps), ed[s]["floor"], color="gray", label="i.i.d. floor" if i == 0 else None)
    ax.scatter(np.full(prop6_reps, 2 * i + 1) + 0.1 * np.random.default_rng(1).standard_normal(prop6_reps), ed[s]["between"], color="tab:red", label="instance 1 vs instance 2" if i == 0 else None)
ax.set_xticks([0, 1, 2, 3], ["inputs: floor", "inputs: 1 vs 2", "outputs: floor", "outputs: 1 vs 2"])
ax.set_yscale("log")
ax.set_ylabel("energy distance (eq. 10)")
ax.legend(fontsize=8)
art.save_figure(fig, "prop6_energy")
display(Markdown(f"Each dot is one energy distance at N = {prop6_n}: the two instances' inputs are as close as two i.i.d. draws, "
                 f"their outputs are not."))

# %% [markdown]
# ## Findings

# %%
rows_at = {(r["case"], r["N"]): r for r in rec_rows}
# Where eq. (27) is ill-conditioned: split the sheared-swap instances at the largest N by c_y.
splits = {fam: identifiability.conditioning_split(errors[budgets[-1]][f"sheared_swap / {fam}"], c_y[budgets[-1], fam], LAMBDA)
          for fam in ("mirrored_pareto", "gaussian")}
splits = {fam: s for fam, s in splits.items() if s is not None}
cond_lines = [f"{fam}: median error {s.median_near:.3g} for the {s.n_near} instances with "
              f"|c_y| < {identifiability.NEAR_EDGE:g} vs {s.median_far:.3g} for the other {s.n_far}" for fam, s in splits.items()]
if not cond_lines:
    cond_text = f"no instance fell within {identifiability.NEAR_EDGE:g} of the shear edge in this run."
else:
    verdict = ("instances near the shear edge carry most of the error, as eq. (27)'s division by c_y predicts"
               if identifiability.edge_dominates(splits.values()) else "eq. (27)'s division by c_y explains only part of the error: "
               "the center itself is noisier for the wider laws (the Gaussian's std reaches 3)")
    cond_text = "; ".join(cond_lines) + f" — {verdict}."
lines = [f"  - {c}: median relative error {rows_at[c, budgets[0]]['median_rel_error']:.3g} at N = {budgets[0]} → "
         f"{rows_at[c, budgets[-1]]['median_rel_error']:.3g} at N = {budgets[-1]} (log-log slope {slopes[c]:.2f})" for c in cases]
pin, pout = p6_rows
display(Markdown(f"""
- Center: at index {A_MIN:.7f} and N = {n_big}, the sample mean misses the center by about
  {center_rows[0]['median_abs_error_mean']:.3g}, the coordinate-wise median by {center_rows[0]['median_abs_error_median']:.3g}
  (at index 2: {center_rows[1]['median_abs_error_mean']:.3g} vs {center_rows[1]['median_abs_error_median']:.3g}).
- Recovery of the mixing matrix from input samples ({n_trials} instances per case, {n_edge} on the shear edge):
{chr(10).join(lines)}
- Conditioning of eq. (27) at N = {budgets[-1]}: {cond_text}
- Prop. 6 with b = {prop6_b}, sigma = {prop6_sigma}, h = {prop6_h}: the perturbed instance is
  {'admissible' if p6.admissible else 'NOT admissible'} (theta = {p6.omega_T_prime['theta']:.3f}, s = {p6.omega_T_prime['s']:.3f},
  lambda = ({p6.omega_T_prime['lambda1']:.3f}, {p6.omega_T_prime['lambda2']:.3f}), sigma' = ({p6.sigma_prime[0]:.3f}, {p6.sigma_prime[1]:.3f})).
  Between the two instances' inputs the mean energy distance is {pin['mean_between']:.3g} against an i.i.d. floor of
  {pin['mean_floor']:.3g} (ratio {pin['ratio']:.2f}); between their outputs it is {pout['mean_between']:.3g} against
  {pout['mean_floor']:.3g} (ratio {pout['ratio']:.1f}). Same input law, different outputs: no model can learn this
  operator on Gaussian marginals.
"""))

# %%
falling = recovery.falling
art.conclude(
    f"The median relative error of the mixing matrix recovered from input samples falls from N = {budgets[0]} to "
    f"N = {budgets[-1]} in {len(falling)} of {len(cases)} cases (log-log slopes {min(slopes.values()):.2f} to "
    f"{max(slopes.values()):.2f}); Prop. 6's two Gaussian instances are {pin['ratio']:.2f}x the i.i.d. floor apart "
    f"on their inputs and {pout['ratio']:.1f}x on their outputs.",
    figure="recovery_vs_N")
