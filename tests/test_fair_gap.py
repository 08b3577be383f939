"""The fair converged-gap study (heavytail.studies.kernel_gap.fair) on synthetic runs: the selection rule and its
exclusions, the flattened check, claims read from the best weights, and the rules' error rates under nulls."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from heavytail.__main__ import main as cli_main
from heavytail.harness.config import RunConfig
from heavytail.pipeline.grid_file import GridSpec
from heavytail.studies import claims as C
import heavytail.studies.kernel_gap.fair as F
from summaries import complete

M = 2000
TOL = 3 * math.sqrt(0.05 * 0.95 / M)  # three binomial standard errors of a 5 % rate over M simulated studies
SOFTMAX, EXACT, LOG_ELU = ("softmax", "sdpa"), ("softmax", "tiled"), ("log_elu", "auto")


def _run(seed, n, v=SOFTMAX, lr=1e-3, best=-3.0, first=-1.0, ratio=2.0, train_ratio=None, final_ratio=None,
         skipped=0, curve=None):
    cfg = RunConfig(d_model=32, n_blocks=2, d_ff=64, kernel=v[0], attention_backend=v[1], lr=lr, seed=seed,
                    n_points=n, trials_per_step=1, steps=F.BUDGET, warmup_steps=150, val_every=F.VAL_EVERY,
                    keep_best=True, eval_n_points=1024, eval_at_train_n=True, device="cpu").to_dict()
    steps = list(range(F.VAL_EVERY, F.BUDGET + 1, F.VAL_EVERY))
    values = curve or [first + (best - first) * min(1.0, s / (0.6 * F.BUDGET)) for s in steps]
    final = final_ratio if final_ratio is not None else ratio
    return complete({"name": f"{v}-{n}-{lr}-{seed}", "config": cfg, "median": {"ratio": final},
                     "at_train_n": {"n_points": n, "median": {"ratio": final}},
                     "best_weights": {"step": steps[int(np.argmin(values))], "value": float(min(values)),
                                      "median": {"ratio": ratio},
                                      "at_train_n": {"n_points": n, "median": {"ratio": train_ratio or ratio}}},
                     "trace": {"val_step": steps, "val_log_energy": values}, "skipped_steps": skipped,
                     "collapse": {"label": "ok", "fraction": 0.0}})


def _selection(best_lr=3e-3, ns=(256,), variants=(SOFTMAX, LOG_ELU)):
    """Every rate trained (its best validation score one unit below its first), the best median at ``best_lr``."""
    out = []
    for n in ns:
        for v in variants:
            for lr in F.LEARNING_RATES:
                for s in F.SELECT_SEEDS:
                    best = -3.0 + abs(math.log(lr / best_lr)) + 0.01 * s
                    out.append(_run(s, n, v, lr, best=best, first=best + 1.0))
    return out


# ------------------------------------------------------------------------------------ selection
def test_selection_picks_the_lowest_median_best_score_and_flags_edges():
    sel = F.select(_selection(best_lr=3e-3))
    assert {s.lr for s in sel} == {3e-3} and not any(s.edge for s in sel) and not any(s.excluded for s in sel)
    assert all(s.edge for s in F.select(_selection(best_lr=3e-2)))


def test_a_rate_where_any_selection_seed_diverged_or_never_trained_is_excluded():
    runs = _selection(best_lr=3e-3)
    for r in runs:  # 3e-3 is the best median, but seed 1 diverged there for softmax, seed 2 never trained for log-ELU
        c = r["config"]
        if c["lr"] == 3e-3 and (c["kernel"], c["attention_backend"]) == SOFTMAX and c["seed"] == 1:
            r["skipped_steps"] = int(0.2 * F.BUDGET)
        if c["lr"] == 3e-3 and c["kernel"] == "log_elu" and c["seed"] == 2:
            r["trace"]["val_log_energy"] = [-1.0] * len(r["trace"]["val_step"])
            r["trace"]["val_log_energy"][5] = -1.5  # x0.61 of the first: not halved
            r["best_weights"]["value"] = -1.5
    sel = {s.variant: s for s in F.select(runs)}
    assert sel[SOFTMAX].lr != 3e-3 and "seed 1: diverged" in sel[SOFTMAX].excluded[3e-3]
    assert sel[LOG_ELU].lr != 3e-3 and "seed 2: did not train" in sel[LOG_ELU].excluded[3e-3]
    table = F.selection_table(list(sel.values()))
    assert "(excluded)" in table["rows"][0]["lr 0.003"] and "did not train" in table["notes"]


def test_every_rate_excluded_leaves_the_cell_out_of_the_deciding_grid():
    runs = [dict(r, skipped_steps=F.BUDGET) for r in _selection(best_lr=3e-3, variants=(LOG_ELU,))]
    runs += _selection(best_lr=3e-3, variants=(SOFTMAX,))
    sel = {s.variant: s for s in F.select(runs)}
    assert sel[LOG_ELU].lr is None and len(sel[LOG_ELU].excluded) == len(F.LEARNING_RATES)
    template = yaml.safe_load(open(F.SELECT_GRID))
    grid = F.decision_grid(list(sel.values()), template)
    assert [c["kernel"] for c in grid["axes"]["cells"]] == ["softmax"]


def test_selection_never_reads_deciding_seeds_and_waits_for_every_rate():
    runs = _selection(best_lr=3e-3) + [_run(F.DECIDE_SEEDS[0], 256, SOFTMAX, 3e-4, best=-100.0)]
    assert all(s.lr == 3e-3 for s in F.select(runs))
    missing = [r for r in runs if not (r["config"]["lr"] == 1e-2 and r["config"]["seed"] == 2
                                       and r["config"]["kernel"] == "log_elu")]
    assert [s.variant for s in F.select(missing)] == [SOFTMAX]


def test_the_deciding_grid_is_valid_and_runs_the_cheap_sizes_first(tmp_path):
    sel = F.select(_selection(best_lr=3e-3, ns=(4096, 1024, 256)))
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(F.decision_grid(sel, yaml.safe_load(open(F.SELECT_GRID)))))
    configs = GridSpec.from_yaml(path).configs
    assert {c.seed for c in configs} == set(F.DECIDE_SEEDS) and len(configs) == 4 * len(F.DECIDE_SEEDS)
    assert [c.n_points for c in configs[:2 * len(F.DECIDE_SEEDS)]] == [256] * 2 * len(F.DECIDE_SEEDS)
    assert F.LONG_ONLY == (1024,) and 1024 not in {c.n_points for c in configs}  # its deciding runs are the long grid's


def test_the_selection_grid_is_the_recipe_the_module_states():
    configs = GridSpec.from_yaml(F.SELECT_GRID).configs
    base = [c for c in configs if c.lr in F.LEARNING_RATES]
    assert len(base) == len(F.SIZES) * len(F.LEARNING_RATES) * len(F.VARIANTS) * len(F.SELECT_SEEDS)
    extended: dict = {}  # the edge rule's extensions: one rate a factor ~3 beyond an end, on the selection seeds
    for c in configs:
        if c.lr not in F.LEARNING_RATES:
            beyond = max(c.lr / max(F.LEARNING_RATES), min(F.LEARNING_RATES) / c.lr)
            assert 3.0 <= beyond <= 3.5, c.lr
            extended.setdefault((c.kernel, c.attention_backend, c.n_points, c.lr), []).append(c.seed)
    assert all(sorted(seeds) == list(F.SELECT_SEEDS) for seeds in extended.values())
    for c in configs:
        assert (c.steps, c.val_every, c.val_trials, c.keep_best, c.stop_tolerance) == (F.BUDGET, F.VAL_EVERY,
                                                                                      F.VAL_TRIALS, True, 0.0)
        assert c.warmup_steps == round(F.WARMUP_SHARE * F.BUDGET) and c.schedule_steps in (0, F.BUDGET)
    assert min(c.lr for c in configs) <= 3e-4 and max(c.lr for c in configs) >= 3e-2


def test_select_lr_fair_refuses_a_folder_without_a_grid_in_one_line(tmp_path, capsys):
    assert cli_main(["select-lr-fair", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no grid.json" in err[0]


# ------------------------------------------------------------------------------------ flattened, best weights
def test_flattened_reads_the_last_quarter_against_its_start():
    steps = list(range(F.VAL_EVERY, F.BUDGET + 1, F.VAL_EVERY))
    falling = [-0.001 * s for s in steps]  # still improving by x1.5 over the last quarter
    flat = [max(-2.0, -0.002 * s) for s in steps]  # reaches its floor at step 1,000
    assert F.flattened(_run(3, 256, curve=falling)) is False
    assert F.flattened(_run(3, 256, curve=flat)) is True


def _deciding(log_gap, rng, sd=0.2, ns=(256, 1024, 4096), seeds=F.DECIDE_SEEDS, final_ratio=None, slope_sd=None):
    """Softmax at ``log_gap`` over log-ELU with noise ``sd`` per seed and N, or (``slope_sd``) a seed effect of sd
    ``sd`` plus a per-seed growth of sd ``slope_sd`` per doubling."""
    runs = []
    for s in seeds:
        seed_effect, growth = rng.normal(0, sd), rng.normal(0, slope_sd or 0.0)
        for n in ns:
            noise = seed_effect + growth * math.log2(n / ns[0]) if slope_sd is not None else rng.normal(0, sd)
            runs.append(_run(s, n, SOFTMAX, ratio=2.0 * math.exp(log_gap + noise), final_ratio=final_ratio))
            runs.append(_run(s, n, LOG_ELU, ratio=2.0, final_ratio=final_ratio))
    return runs


def test_the_claims_read_the_best_weights_not_the_final_ones():
    found = {f["id"]: f for f in F.findings(_deciding(math.log(1.6), np.random.default_rng(0), final_ratio=3.0))}
    assert found["fair-gap-n1024"]["verdict"] == C.REPRODUCED  # the final weights' ratios are equal: no gap there
    assert 1.4 < found["fair-gap-n1024"]["estimate"] < 1.8
    assert "flattened runs 20 of 20" in found["fair-gap-n1024"]["evidence"]
    assert "power of the equivalence test" in found["fair-gap-n1024"]["evidence"]


def test_no_gap_at_small_spread_is_called_equivalent_within_the_margin():
    found = {f["id"]: f for f in F.findings(_deciding(0.0, np.random.default_rng(1), sd=0.05, slope_sd=0.02))}
    assert found["fair-gap-n256"]["verdict"] == C.NOT_REPRODUCED
    assert "equivalent within x1.25" in found["fair-gap-n256"]["evidence"]
    assert found["fair-excess-grows"]["verdict"] == C.NOT_REPRODUCED  # no growth, within x1.10 per doubling


def test_seven_deciding_seeds_are_undecided():
    runs = _deciding(math.log(2.0), np.random.default_rng(2), seeds=F.DECIDE_SEEDS[:7])
    found = F.findings(runs)
    assert {f["verdict"] for f in found if not f["id"].endswith("-exact")} == {C.UNDECIDED}
    assert {f["verdict"] for f in found if f["id"].endswith("-exact")} == {C.NOT_RUN}  # no exact-softmax runs here


# ------------------------------------------------------------------------------------ the rules under nulls
def _rate(rule, truth, sd, n, verdict, reason=None, seed=0):
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(M):
        d = rule(list(rng.normal(truth, sd, n)))
        hits += d.verdict == verdict and (reason is None or reason in d.reason)
    return hits / M


@pytest.mark.parametrize("margin", [F.GAP_EQUIVALENCE, F.GROWTH_EQUIVALENCE])
@pytest.mark.parametrize("sd", [0.1, 0.4])
def test_no_difference_is_called_a_difference_at_most_five_percent_of_the_time(margin, sd):
    rule = lambda x: C.equivalence_rule(x, min_seeds=F.MIN_DECIDING_SEEDS, margin=margin)  # noqa: E731
    assert _rate(rule, 0.0, sd, F.MIN_DECIDING_SEEDS, C.REPRODUCED) <= 0.025 + TOL  # one tail of a 95 % interval


@pytest.mark.parametrize("margin", [F.GAP_EQUIVALENCE, F.GROWTH_EQUIVALENCE])
@pytest.mark.parametrize("sd", [0.05, 0.2])
def test_a_difference_at_the_margin_is_called_equivalent_at_most_five_percent_of_the_time(margin, sd):
    rule = lambda x: C.equivalence_rule(x, min_seeds=F.MIN_DECIDING_SEEDS, margin=margin)  # noqa: E731
    assert _rate(rule, margin, sd, len(F.DECIDE_SEEDS), C.NOT_REPRODUCED, "equivalent") <= 0.05 + TOL


def test_the_equivalence_rule_has_power_where_the_spread_allows_it():
    """Both ways: with ten seeds and a paired spread of 0.1 (x1.11), no true gap is called equivalent within x1.25
    nearly always, as :func:`claims.tost_power` predicts."""
    rule = lambda x: C.equivalence_rule(x, min_seeds=F.MIN_DECIDING_SEEDS, margin=F.GAP_EQUIVALENCE)  # noqa: E731
    rate = _rate(rule, 0.0, 0.1, len(F.DECIDE_SEEDS), C.NOT_REPRODUCED, "equivalent")
    predicted = C.tost_power(0.1, len(F.DECIDE_SEEDS), F.GAP_EQUIVALENCE)
    assert rate >= 0.9 and abs(rate - predicted) <= 4 * math.sqrt(predicted * (1 - predicted) / M) + 0.01


def test_the_first_sizes_deciding_runs_keep_their_folder_names_when_others_join(tmp_path):
    template = yaml.safe_load(open(F.SELECT_GRID))
    names = []
    for ns in ((256,), (256, 4096)):
        path = tmp_path / f"grid{len(ns)}.yaml"
        path.write_text(yaml.safe_dump(F.decision_grid(F.select(_selection(best_lr=3e-3, ns=ns)), template)))
        names.append(set(GridSpec.from_yaml(path).names))
    assert names[0] < names[1] and all("n_points=256" in n for n in names[0])


def test_name_keys_must_be_configuration_keys(tmp_path):
    grid = yaml.safe_load(open(F.SELECT_GRID))
    grid["name_keys"] = ["n_pointz"]
    with pytest.raises(ValueError, match="'name_keys' must be a list of configuration keys"):
        GridSpec.from_dict(grid)


# ------------------------------------------------------------------------------------ the long budget
def test_the_long_grid_is_the_registered_budget_at_stage_ones_rates():
    """The long grid reruns the deciding seeds at LONG_BUDGET with the recipe's warm-up share and validation, each
    variant at the rate stage 1 chose (the selection rule on the shipped selection map), seeds the outer axis; the
    stage-2 grid holds the same rates where it has the size, and no size of LONG_ONLY."""
    from heavytail.studies import reference_maps

    configs = GridSpec.from_yaml(F.LONG_GRID).configs
    chosen = {(*s.variant, s.n_points): s.lr for s in F.select(reference_maps.load("gap-fair-select")["runs"])
              if s.n_points in F.LONG_SIZES and s.lr is not None and not s.edge}
    assert {n for *_, n in chosen} == set(F.LONG_SIZES)
    for c in GridSpec.from_yaml(F.DECIDE_GRID).configs:
        assert c.n_points not in F.LONG_ONLY and chosen.get((c.kernel, c.attention_backend, c.n_points), c.lr) == c.lr
    assert len(configs) == len(chosen) * len(F.DECIDE_SEEDS) and {c.seed for c in configs} == set(F.DECIDE_SEEDS)
    for c in configs:
        assert (c.steps, c.val_every, c.val_trials, c.keep_best, c.stop_tolerance) == (F.LONG_BUDGET, F.VAL_EVERY,
                                                                                      F.VAL_TRIALS, True, 0.0)
        assert c.warmup_steps == round(F.WARMUP_SHARE * F.LONG_BUDGET) and c.schedule_steps in (0, F.LONG_BUDGET)
        assert c.lr == chosen[(c.kernel, c.attention_backend, c.n_points)]
    assert [c.seed for c in configs[:len(chosen)]] == [F.DECIDE_SEEDS[0]] * len(chosen)


def test_the_long_claims_are_named_apart_and_say_the_rates_were_not_reselected():
    found = {f["id"]: f for f in F.long_findings(_deciding(math.log(1.6), np.random.default_rng(0), ns=(256,)))}
    assert found["fair-long-gap-n256"]["verdict"] == C.REPRODUCED and "fair-gap-n256" not in found
    assert f"{F.LONG_BUDGET:,}-step" in found["fair-long-gap-n256"]["claim"]
    assert "not reselected" in found["fair-long-gap-n256"]["evidence"]


def test_the_notebook_says_per_budget_how_many_runs_flattened_and_draws_each_budget():
    import matplotlib

    matplotlib.use("Agg")
    from heavytail.studies.kernel_gap import converged_plots

    steps = list(range(F.VAL_EVERY, F.BUDGET + 1, F.VAL_EVERY))
    falling = [-0.001 * s for s in steps]
    flat = [max(-2.0, -0.002 * s) for s in steps]
    runs = [_run(3, 256, SOFTMAX, curve=falling), _run(3, 256, LOG_ELU, curve=flat), _run(0, 256, SOFTMAX, curve=flat)]
    long_run = _run(3, 256, SOFTMAX, curve=flat)
    long_run["config"] = {**long_run["config"], "steps": F.LONG_BUDGET}
    budgets = F.by_budget(runs, [long_run])
    assert list(budgets) == [F.BUDGET, F.LONG_BUDGET] and len(budgets[F.BUDGET]) == 2  # seed 0 selects, never decides
    text = F.flat_sentence(runs, [long_run])
    assert "at 3,000 steps (1 seeds), softmax (SDPA) 0 of 1" in text and "log-ELU 1 of 1" in text
    assert "at 12,000 steps" in text and "not at convergence" in text
    assert F.flat_sentence([]) .startswith("No deciding run")
    converged_plots.budget_figure(budgets)


def test_until_the_deciding_seeds_exist_the_figure_shows_the_selection_seeds_at_their_chosen_rates():
    select_runs = _selection(best_lr=3e-3)
    shown = F.shown_recipes([], [], select_runs, [])
    assert list(shown) == ["fair recipe, selection seeds 0-2"]
    assert {r["config"]["lr"] for r in shown["fair recipe, selection seeds 0-2"]} == {3e-3}
    deciding = _deciding(0.0, np.random.default_rng(3), ns=(256,))
    shown = F.shown_recipes([], [], select_runs, deciding, deciding)
    assert list(shown) == [f"fixed {F.BUDGET:,}-step budget, best weights", f"fixed {F.LONG_BUDGET:,}-step budget, best weights"]
