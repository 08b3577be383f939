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
# projections, exact float64 attention, N up to 2^20), then in training (the phase map), then at the trained
# weights (does App. A's quantity survive into a trained model?).

# %% tags=["parameters"]
n_max_log2 = 20  # this report's static run nests ensembles from 2^10 keys up to 2 to this power
reps = 24  # independent repetitions (projections, query, tokens) per tail index
tail_indices = [1.75, 2.75, 4.5]  # a of this report's static run: tail indices of the shipped reference
seed = 0
phase_dir = "outputs/grid-phase"  # a local re-run of the phase map, used instead of the shipped one
hill_runs_dir = "outputs/grid-gap-cpu"  # finished runs whose outputs the Hill plots show (the report's gap grid)
report = "scratch"  # injected by the report runner
output_root = None  # injected by the report runner

# %%
import numpy as np
from IPython.display import Markdown, display

from heavytail.harness.artifacts import artifacts, repo_root
from heavytail.names import KERNEL_ROWS, app_a_kernels
from heavytail.science.kernels import get_kernel
from heavytail.studies import claim_groups, claims, core, phase, reference_maps
from heavytail.studies.tables import show

root = repo_root()
art = artifacts("08_phase_diagram", report=report, output_root=output_root)
kernels = {k: KERNEL_ROWS[k].order for k in sorted(app_a_kernels(), key=lambda k: KERNEL_ROWS[k].order)}
print("kernels by growth order q:", ", ".join(f"{k} (q = {q:g})" for k, q in kernels.items()))

# %% [markdown]
# ## Findings
#
# Each claim with its verdict, the statistic that decided it and the scale it was decided at. The static claim
# is decided on the shipped static reference (`outputs/reference/phase_static.json`, computed by the command
# its provenance names); this report's own small static run is cross-checked against it below. The trained map
# is the shipped one unless `phase_dir` holds a local re-run. The sections below show how each verdict comes
# about.

# %%
ns = [2**k for k in range(phase.static.FIT_LOG2[0], n_max_log2 + 1, 2)]
log_gs = {k: get_kernel(k).log_g for k in kernels}
norms = {a: phase.moment_condition.output_growth(log_gs, a, ns, reps=reps, seed=seed + i) for i, a in enumerate(tail_indices)}
static_rows = [dict(r, n_max=max(ns), reps=reps) for r in phase.moment_condition.exponent_table(kernels, tail_indices, norms, ns)]
static_ref = reference_maps.load_computed("phase-static", root)
fixed = reference_maps.load_computed("phase-fixed-weight", root)
ref_rows = static_ref["rows"] if static_ref else []
if static_ref:
    prov = static_ref["provenance"]
    print(f"static reference: {len(ref_rows)} cells, computed at commit {prov['commit'][:9]}"
          f"{' (dirty tree)' if prov.get('dirty') else ''} on {prov['machine']}, {prov['date']}, torch "
          f"{prov['torch']}, {prov['seconds'] / 60:.0f} min, by `{prov['command']}`")
else:
    print("static reference: not shipped; the static claim is read on this report's small run")
phase_map = reference_maps.source("phase", root / phase_dir)
print(phase_map.describe())
# the static claims are decided from the shipped static reference, the others by the trained map; the
# pre-registered test has its own map and new seeds
found = claim_groups.decide_sources("phase", {"phase": phase_map}) + claim_groups.decide_sources("phase-confirm")
if ref_rows:  # the headline: App. A's static exponents, predicted against measured (explained below)
    art.save_figure(phase.plots.reference_figure(ref_rows), "static_reference")
show(claims.compact_table(found, "Phase-diagram claims"), art, "claims_compact")
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
    print(f"  {q_name:>12} (q = {q:g}): " + ", ".join(f"a = {a:g}: {phase.moment_condition.predicted_exponent(q, a):.3f}"
                                                   for a in tail_indices))

# %% [markdown]
# ## The static test
#
# This report's own run: for each tail index, `reps` independent draws of projections, query and 2^n_max_log2
# tokens; every kernel sees the same draws. |o_N| is computed on the nested ensembles (the first N tokens) in float64 with
# log-space sums, and the exponent is the slope of log median |o_N| on log N, with a bootstrap interval over
# the repetitions.

# %%
art.save_figure(phase.plots.static_figure(static_rows, ns, norms), "static_exponents")
show(phase.moment_condition.static_table(static_rows, max(ns), reps), art, "static_exponents")
miss = [r for r in static_rows if not r["holds"]]
display(Markdown(
    f"**What it shows:** {len(static_rows) - len(miss)} of {len(static_rows)} (kernel, a) cells hold the predicted "
    "exponent in their 95 % interval" + (". Where they do not: " + "; ".join(
        f"{r['kernel']} at a = {r['a']:g} (predicted {r['predicted']:.2f}, measured {r['measured']:.2f}, off by "
        f"{r['measured'] - r['predicted']:+.2f})" for r in miss)
        + ". The prediction is asymptotic; within N <= 2^" + str(n_max_log2) + " softmax on lighter tails is still "
        "crossing over from averaging many keys to following the largest score." if miss else ".")))
if ref_rows:
    check = phase.static.cross_check(static_rows, ref_rows)
    show(check, art, "static_cross_check")
    display(Markdown(phase.static.cross_check_text(check, tail_indices, static_ref["design"]["tail_indices"])))

# %% [markdown]
# ## The shipped static reference: the static claim decided
#
# The design was fixed in `heavytail/studies/phase/static.py` before the run, and the reading rule in
# `heavytail.studies.phase.diagram.static_verdict`: every registered kernel on tail indices either side of its
# boundary q + 1, the exponent fitted over nested ensembles (the range printed below), repetitions per tail
# index sized from a pilot's spread (`phase.static.allocate`, the pilot shipped as `phase_static_pilot.json`). The claim
# is an equivalence statement: *reproduced* when every cell's Bonferroni interval lies within the tolerance of
# its prediction, *not reproduced* when some cell's lies wholly outside it, *undecided* otherwise.

# %%
if ref_rows:
    design = static_ref["design"]
    pilot = design.get("pilot", {})
    print(f"pilot: {pilot.get('reps')} repetitions per tail index, at commit {str(pilot.get('commit'))[:9]}")
    print(f"tail indices {design['tail_indices']}; N = {design['ns'][0]} .. {design['ns'][-1]} by doublings; "
          f"repetitions per tail index {design['reps']}; token dimension {design['d']}; seeds from "
          f"{design['seed_base']}; tolerance +-{phase.diagram.STATIC_MARGIN:g}; Bonferroni level {ref_rows[0]['joint_level']:.5f}")
    print("each kernel's boundary q + 1 and the nearest tail indices either side:",
          "; ".join(f"{k}: {v}" for k, v in phase.static.boundaries_covered(design["tail_indices"]).items()))
    show(phase.moment_condition.static_table(ref_rows, ref_rows[0]["n_max"], max(r["reps"] for r in ref_rows)), art, "static_reference")
    display(Markdown(phase.diagram.static_verdict_text(ref_rows)))

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
phase_rows = phase.diagram.decide(phase_map.runs)
gap_rows = phase.diagram.decide(phase_map.runs, phase.diagram.REFERENCE)
if phase_rows:
    art.save_figure(phase.plots.phase_figure(phase_rows), "phase_diagram")
    show(phase.diagram.phase_table(phase_rows), art, "phase_table")
    art.save_figure(phase.plots.phase_figure(gap_rows, "gap to log-ELU"), "phase_diagram_gap")
    show(phase.diagram.phase_table(gap_rows, "gap to log-ELU"), art, "phase_table_gap")
    art.save_figure(phase.plots.curves_figure(phase_map.runs), "phase_curves")
    # The joint claim needs every cell decided; its power at the map's own spread of per-seed slopes.
    display(Markdown(phase.diagram.power_text(phase_rows)))
else:
    display(Markdown("**The phase map has not run yet.** It is `params/grid_phase.yaml` (about 3 hours of two "
                     "workers): `python -m heavytail grid params/grid_phase.yaml --executor local`, then "
                     "`python -m heavytail ship-map phase outputs/grid-phase`. Until then its claim reads *not run*."))

# %% [markdown]
# ## What the trained map can and cannot test
#
# App. A's condition concerns attention at fixed weights on heavy-tailed tokens. The trained map changes the
# training N, so what it measures is how training at larger N changes a model, not the divergence of a
# population integral; and only block 0 sees the raw tokens (Remark 1 of App. A). The section below measures
# App. A's quantity inside trained models directly.

# %%
if phase_rows:
    display(Markdown(phase.diagram.scope_text(phase_rows)))

# %% [markdown]
# ## Fixed-weight exponents of trained models
#
# Retrained cells of the phase map (`heavytail.studies.phase.fixed_weight`, shipped as `phase_fixed_weight.json`):
# at the trained weights, block 0's attention output for one query over nested input ensembles, at the lower
# and upper end of the regime's heavier-axis range, against App. A's prediction at that a; and the Hill
# estimate of the token norms entering each block.

# %%
if fixed:
    fp = fixed["provenance"]
    print(f"fixed-weight measurements at commit {fp['commit'][:9]}, {fp['date']}, by `{fp['command']}`; runs "
          "trained at " + ", ".join(sorted({t['commit'][:9] for r in fixed['runs'] for t in r['trained']})))
    art.save_figure(phase.plots.fixed_weight_figure(fixed["runs"]), "fixed_weight")
    show(phase.fixed_weight.table(fixed), art, "fixed_weight")
    within, total = phase.fixed_weight.within(fixed, phase.diagram.STATIC_MARGIN)
    display(Markdown(phase.fixed_weight.summary(fixed, phase.diagram.STATIC_MARGIN)))
else:
    display(Markdown("The fixed-weight measurements are not shipped (`python -m heavytail.studies.phase.fixed_weight`)."))

# %% [markdown]
# ## The confirmatory trained test, pre-registered
#
# Fixed in `heavytail/studies/phase/confirm.py` and `params/grid_phase_confirm.yaml` before any of its runs.
# Evaluation now keeps the per-trial records its floor-free endpoint reads (each trial's energy distance, that
# trial's own floor and its tail indices, at the training N), and `phase.confirm.confirm` decides from them on the
# `phase-confirm` map (`params/grid_phase_confirm.yaml`), shipped as its runs finish: the state printed below. A cell
# is decided only once every run registered for it is in; until then its slope is printed as an interim reading,
# not a verdict. Its power uses the shipped phase map's per-seed slope spread as a stand-in for the excess
# endpoint's.

# %%
confirm_cells = phase.confirm.deciding_cells()
print("candidate rules:", "; ".join(phase.confirm.RULES), f"(primary: {phase.confirm.PRIMARY})")
print("deciding cells and each rule's prediction (True: grows):")
for c in confirm_cells:
    print(f"  {c[0]} on {c[1]}: {phase.confirm.predictions(*c)}")
print(f"seeds {phase.confirm.SEEDS[0]}-{phase.confirm.SEEDS[-1]} ({len(phase.confirm.SEEDS)} per cell; the shipped map used {phase.confirm.SHIPPED_SEEDS[0]}-"
      f"{phase.confirm.SHIPPED_SEEDS[-1]}), N = {', '.join(map(str, phase.confirm.NS))} and {phase.confirm.LONG_N} on the moderate-regime cells")
spread = phase.diagram.slope_spread(phase_rows) if phase_rows else float("nan")
if np.isfinite(spread):
    pw = {k: phase.confirm.power(spread, k, m=200) for k in (5, 10, 20, 40)}
    need = phase.confirm.seeds_needed(spread)
    display(Markdown(f"**Power at the map's spread ({spread:.3f}):** the primary rule, true, reads *reproduced* in "
                     + ", ".join(f"{v:.0%} at {k} seeds" for k, v in pw.items())
                     + f" (200 simulated designs each); 80 % needs {need if need else 'more than 80'} seeds per "
                       "deciding cell."))

# %%
confirm_text, confirm_paragraph = phase.confirm.status(reference_maps.load("phase-confirm", root))
display(Markdown(confirm_paragraph))

# %% [markdown]
# ## Tail errors across thresholds (App. J's open item)
#
# The paper scores tails with one Hill threshold (k = 0.1 N, eq. 38) and asks, as future work, for errors
# "across a range of thresholds". Below: Hill plots of one evaluation trial of trained models, per latent
# axis, against k with the asymptotic band a_hat (1 +- 1.96/sqrt k), next to an i.i.d. target ensemble of the
# same size and the trial's known index. Every evaluation also records the share of k (1 % to 20 % of N) where
# the band excludes the known index, for the output and for the target (`results.json`: `hill.band_miss`).

# %%
from heavytail.studies.run_summary import collect

shown = collect(root / hill_runs_dir) if (root / hill_runs_dir).is_dir() else []
n_top = max((r["config"]["n_points"] for r in shown), default=None)
hill_runs = {f"{core.variant_name(core.variant(r))}, N = {n_top}": root / hill_runs_dir / r["name"]
             for r in shown if r["config"]["seed"] == 0 and r["config"]["n_points"] == n_top}
if hill_runs:
    art.save_figure(phase.plots.hill_plot_figure(hill_runs), "hill_plots")
    if any(r.get("hill_band") for r in shown):
        show(phase.diagram.band_table(shown), art, "hill_band_miss")
    display(Markdown("**What it shows:** where a model's band leaves the dashed line its tail index is off at that "
                     "threshold; the grey band shows how often a faithful i.i.d. sample of the same size does so."))
else:
    display(Markdown(f"No finished runs under `{hill_runs_dir}` to draw Hill plots from."))

# %% [markdown]
# ## Every claim with its evidence

# %%
show(claims.claims_table(found, "Phase-diagram claims, in full"), art, "findings")

# %% [markdown]
# ## Conclusion

# %%
display(Markdown("\n\n".join(f"- {claims.render(f)}" for f in found)))
static, static_soft = (next(f for f in found if f["id"] == i) for i in phase.diagram.STATIC_IDS)
trained = next(f for f in found if f["id"] == "phase-growth-where-condition-fails")
gap = next(f for f in found if f["id"] == "phase-gap-where-condition-fails")
fixed_text = (f" At trained weights, block 0's exponent is within +-{phase.diagram.STATIC_MARGIN:g} of App. A's prediction in "
              f"{within} of {total} cases, and LayerNorm leaves block 1 tokens without a heavy tail." if fixed else "")
art.conclude(f"Static test of App. A's moment condition (shipped reference), kernels of finite order: {static['verdict']} "
             f"({claims.statistic_text(static)}; {static['scale']}); softmax against the q = infinity extrapolation: "
             f"{static_soft['verdict']} ({claims.statistic_text(static_soft)}); trained phase diagram, ratio to the floor: "
             f"{trained['verdict']}; gap to log-ELU (chosen after the first runs, exploratory): {gap['verdict']}; "
             f"{confirm_text}." + fixed_text,
             figure="static_reference" if ref_rows else "static_exponents")
