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
# # 08 — When does a kernel's growth outrun the tails? App. A's moment condition as a phase diagram
#
# App. A: for a strictly positive kernel with g(t) <= C(1 + |t|^q), a finite (q+1)-st absolute moment of the
# key/value measure makes attention's population integrals finite; softmax (q = infinity) has none for any
# polynomial tail. The paper's mirrored Pareto marginals draw tail indices a in [2, 3] and [1 + eps, 2]
# (Section 3.2.1), so by that condition only log-ELU (q -> 0) is covered on the heavier axis. The paper
# varies the kernel at one tail regime; this notebook varies both: first statically (fixed random
# projections, exact float64 attention, N up to 2^20), then in training (the phase map).

# %% tags=["parameters"]
n_max_log2 = 20  # the static test nests ensembles from 256 keys up to 2 to this power
reps = 24  # independent repetitions (projections, query, tokens) per tail index
tail_indices = [1.5, 2.5, 4.0]  # a of the static test
seed = 0
phase_dir = "outputs/grid-phase"  # a local re-run of the phase map, used instead of the shipped one
hill_runs_dir = "outputs/grid-gap-cpu"  # finished runs whose outputs the Hill plots show (the report's gap grid)
report = "scratch"  # injected by the report runner
output_root = None  # injected by the report runner

# %%
import numpy as np
from IPython.display import Markdown, display

from heavytail.harness.artifacts import artifacts, repo_root
from heavytail.names import KERNEL_ROWS, kernel_names
from heavytail.science.kernels import get_kernel
from heavytail.studies import claims as C
from heavytail.studies import kernel_gap as G
from heavytail.studies import moment_condition as M
from heavytail.studies import phase_diagram as P
from heavytail.studies import phase_plots as PP
from heavytail.studies import reference_maps as R
from heavytail.studies.tables import show

root = repo_root()
art = artifacts("08_phase_diagram", report=report, output_root=output_root)
kernels = {k: KERNEL_ROWS[k].order for k in sorted(kernel_names(), key=lambda k: KERNEL_ROWS[k].order)}
print("kernels by growth order q:", ", ".join(f"{k} (q = {q:g})" for k, q in kernels.items()))

# %% [markdown]
# ## Findings
#
# Each claim with its verdict, the statistic that decided it and the scale it was decided at. The static test
# is computed here (float64, fixed seeds); the trained map is the shipped one unless `phase_dir` holds a local
# re-run. The sections below show how each verdict comes about.

# %%
ns = [2**k for k in range(8, n_max_log2 + 1, 2)]
log_gs = {k: get_kernel(k).log_g for k in kernels}
norms = {a: M.output_growth(log_gs, a, ns, reps=reps, seed=seed + i) for i, a in enumerate(tail_indices)}
static_rows = [dict(r, n_max=max(ns)) for r in M.exponent_table(kernels, tail_indices, norms, ns)]
phase = R.source("phase", root / phase_dir)
print(phase.describe())
# the static claim is decided here, from order statistics; the others by the trained map
found = P.findings(phase.runs, static_rows)
static = [f for f in found if f["id"] == "static-exponent-matches"]
found = C.decided_on([f for f in found if f not in static], phase.label) + C.decided_on(static, "this notebook's static test")
show(C.claims_table(found, "Phase-diagram claims"), art, "findings")
_ = art.save_table("claims.json", found)

# %% [markdown]
# ## The prediction, from order statistics
#
# Tokens x_j have i.i.d. symmetric Pareto(a) coordinates; the query's score s_j = <W_Q x_q, W_K x_j>/sqrt(d)
# and the value v_j = W_V x_j are both of the size of |x_j|, tail index a. So g(s_j) has tail index a/q and
# g(s_j) v_j has tail index a/(q+1). A sum of N i.i.d. terms of tail index alpha grows like N when alpha > 1
# and like its largest term, N^(1/alpha), when alpha < 1. The output o_N = sum g v / sum g therefore grows
# like N^beta with
#
# - beta = 0 when a > q + 1 (numerator and denominator both ~ N: the output converges);
# - beta = (q+1)/a - 1 when q < a <= q + 1 (numerator ~ N^((q+1)/a), denominator ~ N);
# - beta = 1/a when a <= q, softmax included: both sums are their largest term and o_N is the value at
#   the largest score, which grows like the largest of N draws.

# %%
print("predicted exponent beta(q, a):")
for q_name, q in kernels.items():
    print(f"  {q_name:>12} (q = {q:g}): " + ", ".join(f"a = {a:g}: {M.predicted_exponent(q, a):.3f}"
                                                   for a in tail_indices))

# %% [markdown]
# ## The static test
#
# For each tail index, `reps` independent draws of projections, query and 2^n_max_log2 tokens; every kernel
# sees the same draws. |o_N| is computed on the nested ensembles (the first N tokens) in float64 with
# log-space sums, and the exponent is the slope of log median |o_N| on log N, with a bootstrap interval over
# the repetitions.

# %%
art.save_figure(PP.static_figure(static_rows, ns, norms), "static_exponents")
show(M.static_table(static_rows, max(ns), reps), art, "static_exponents")
miss = [r for r in static_rows if not r["holds"]]
display(Markdown(
    f"**What it shows:** {len(static_rows) - len(miss)} of {len(static_rows)} (kernel, a) cells hold the predicted "
    "exponent in their 95 % interval" + (". Where they do not: " + "; ".join(
        f"{r['kernel']} at a = {r['a']:g} (predicted {r['predicted']:.2f}, measured {r['measured']:.2f}, off by "
        f"{r['measured'] - r['predicted']:+.2f})" for r in miss)
        + ". The prediction is asymptotic; within N <= 2^" + str(n_max_log2) + " softmax on lighter tails is still "
        "crossing over from averaging many keys to following the largest score." if miss else ".")))

# %% [markdown]
# ## The trained phase diagram
#
# Kernels of growth order q = 0 .. 3 and softmax, on three tail regimes (the paper's; a moderate one; a light
# one), at several N with one trial per step: per (kernel, regime), the per-seed slope of the log ratio to
# the sampling floor (eq. 36, at the training N) on log2 N, decided by the growth rule of
# `heavytail.studies.claims`. Growth is predicted where q + 1 >= a for the smallest tail index the regime
# draws on its heavier axis.
#
# That statistic was fixed before the runs; the first 64 runs showed its flaw. The floor itself shrinks with N,
# so a model whose error does not depend on N has a ratio to the floor that grows anyway: log-ELU's did, on the
# kernel-gap map as here. The second statistic, chosen after those runs and labelled so in its claim, is each
# kernel's gap to log-ELU (q -> 0, inside App. A's condition on every regime) of the same seed, regime and N:
# growth both kernels share cancels, and growth is predicted where q + 1 >= a as before.

# %%
phase_rows = P.decide(phase.runs)
gap_rows = P.decide(phase.runs, P.REFERENCE)
if phase_rows:
    art.save_figure(PP.phase_figure(phase_rows), "phase_diagram")
    show(P.phase_table(phase_rows), art, "phase_table")
    art.save_figure(PP.phase_figure(gap_rows, "gap to log-ELU"), "phase_diagram_gap")
    show(P.phase_table(gap_rows, "gap to log-ELU"), art, "phase_table_gap")
    art.save_figure(PP.curves_figure(phase.runs), "phase_curves")
    # The joint claim needs every cell decided; its power at the map's own spread of per-seed slopes.
    spread = float(np.median([np.std(r["slopes"], ddof=1) for r in phase_rows if len(r["slopes"]) > 1] or [np.nan]))
    predicted = {(r["kernel"], r["regime"]): r["predicted"] == "grows" for r in phase_rows}
    if np.isfinite(spread):
        power = {k: P.map_power(predicted, spread, k, m=200) for k in (5, 10, 20)}
        display(Markdown(f"**Power of the joint claim.** With the map's median per-seed slope spread "
                         f"({spread:.3f} in log per doubling of N) and every cell as predicted (x1.5 per doubling "
                         f"where it grows), the rule reads *reproduced* in "
                         + ", ".join(f"{v:.0%} of maps at {k} seeds" for k, v in power.items())
                         + " (200 simulated maps each): a cell predicted bounded is decided only when its interval "
                           "excludes growth of x1.10 per doubling."))
else:
    display(Markdown("**The phase map has not run yet.** It is `params/grid_phase.yaml` (about 3 hours of two "
                     "workers): `python -m heavytail grid params/grid_phase.yaml --executor local`, then "
                     "`python -m heavytail ship-map phase outputs/grid-phase`. Until then its claim reads *not run*."))

# %% [markdown]
# ## Tail errors across thresholds (App. J's open item)
#
# The paper scores tails with one Hill threshold (k = 0.1 N, eq. 38) and asks, as future work, for errors
# "across a range of thresholds". Below: Hill plots of one evaluation trial of trained models, per latent
# axis, against k with the asymptotic band a_hat (1 +- 1.96/sqrt k), next to an i.i.d. target ensemble of the
# same size and the trial's known index. Every evaluation also records the share of k (1 % to 20 % of N) where
# the band excludes the known index, for the output and for the target (`results.json`: `hill.band_miss`).

# %%
from heavytail.studies.kernel_gap import collect

shown = collect(root / hill_runs_dir) if (root / hill_runs_dir).is_dir() else []
n_top = max((r["config"]["n_points"] for r in shown), default=None)
hill_runs = {f"{G.variant_name(G.variant(r['config']))}, N = {n_top}": root / hill_runs_dir / r["name"]
             for r in shown if r["config"]["seed"] == 0 and r["config"]["n_points"] == n_top}
if hill_runs:
    art.save_figure(PP.hill_plot_figure(hill_runs), "hill_plots")
    if any(r.get("hill_band") for r in shown):
        show(P.band_table(shown), art, "hill_band_miss")
    display(Markdown("**What it shows:** where a model's band leaves the dashed line its tail index is off at that "
                     "threshold; the grey band shows how often a faithful i.i.d. sample of the same size does so."))
else:
    display(Markdown(f"No finished runs under `{hill_runs_dir}` to draw Hill plots from."))

# %% [markdown]
# ## Conclusion

# %%
display(Markdown("\n\n".join(f"- {C.render(f)}" for f in found)))
static = next(f for f in found if f["id"] == "static-exponent-matches")
trained = next(f for f in found if f["id"] == "phase-growth-where-condition-fails")
gap = next(f for f in found if f["id"] == "phase-gap-where-condition-fails")
art.conclude(f"Static test of App. A's moment condition: {static['verdict']} ({C.statistic_text(static)}; "
             f"{static['scale']}); trained phase diagram, ratio to the floor: {trained['verdict']}; gap to log-ELU "
             f"(chosen after the first runs): {gap['verdict']}.", figure="static_exponents")
