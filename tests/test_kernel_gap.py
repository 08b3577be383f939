"""The kernel-gap study: claim decisions on constructed summaries, run summaries from a real tiny run, and
the shipped reference map against its grid file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from heavytail.studies import claims as C
import heavytail.studies.core as G
import heavytail.studies.kernel_gap.claims as K
from heavytail.studies import reference_maps as R
from heavytail.studies import ship_map
from heavytail.studies import run_summary
from heavytail.harness.config import RunConfig
from heavytail.pipeline.grid_file import GridSpec

ROOT = Path(__file__).resolve().parents[1]


def _run(kernel, backend, n, seed, ratio, skipped=0, label="ok"):
    cfg = RunConfig.from_dict(dict(kernel=kernel, attention_backend=backend, n_points=n, seed=seed, d_model=8,
                                   n_blocks=1, d_ff=8, steps=10, warmup_steps=1)).to_dict()
    return {"name": f"{kernel}-{backend}-{n}-{seed}", "config": cfg,
            "median": {"ratio": ratio, "low": ratio * 0.8, "high": ratio * 1.2, "bold": False},
            "mean": {"ratio": ratio, "low": ratio * 0.8, "high": ratio * 1.2, "bold": False},
            "collapse": {"label": label, "fraction": 1.0 if label == "collapse" else 0.0, "onset": None},
            "skipped_steps": skipped, "blocks": [], "trace": {"step": []}}


def _map(gap_per_doubling, exact_over_sdpa=1.0, seeds=range(8), ns=(256, 1024, 4096), noise=0.05):
    """log-ELU at ratio 2 everywhere; softmax-SDPA at 2 * gap(N) with gap(N) = 1.5 * g^(log2 N - 8), seed noise
    of a few percent; exact softmax at SDPA * exact_over_sdpa (same noise pattern shifted per seed)."""
    import math

    runs = []
    for n in ns:
        for s in seeds:
            wiggle = math.exp(noise * math.sin(3.1 * s + n))
            gap = 1.5 * gap_per_doubling ** (math.log2(n) - 8)
            runs.append(_run("log_elu", "auto", n, s, 2.0 * math.exp(noise * math.cos(1.7 * s + n))))
            runs.append(_run("softmax", "sdpa", n, s, 2.0 * gap * wiggle, skipped=1))
            runs.append(_run("softmax", "tiled", n, s, 2.0 * gap * exact_over_sdpa * math.exp(noise * math.cos(2.3 * s))))
    return runs


def _verdicts(runs):
    return {f["id"]: f["verdict"] for f in K.findings(runs)}


def test_a_gap_that_grows_is_reproduced_one_that_stays_is_not_and_three_seeds_are_undecided():
    assert _verdicts(_map(1.5))["gap-grows-with-n"] == C.REPRODUCED
    assert _verdicts(_map(1.0))["gap-grows-with-n"] == C.NOT_REPRODUCED  # flat within the margin, tight seeds
    assert _verdicts(_map(0.7))["gap-grows-with-n"] == C.NOT_REPRODUCED
    assert _verdicts(_map(1.5, seeds=range(3)))["gap-grows-with-n"] == C.UNDECIDED
    # runs that were never scored at their training N leave that claim not run, not "not reproduced"
    assert _verdicts(_map(1.5))["gap-grows-at-train-n"] == C.NOT_RUN


def test_the_numerical_claim_reads_the_paired_sdpa_over_exact_ratio_with_an_equivalence_margin():
    assert _verdicts(_map(1.5, exact_over_sdpa=0.6))["gap-is-numerical"] == C.REPRODUCED
    found = {f["id"]: f for f in K.findings(_map(1.5, exact_over_sdpa=1.0))}
    assert found["gap-is-numerical"]["verdict"] == C.NOT_REPRODUCED
    assert "equivalent" in found["gap-is-numerical"]["evidence"]
    noisy = _map(1.5, exact_over_sdpa=1.0, noise=0.6)
    assert _verdicts(noisy)["gap-is-numerical"] == C.UNDECIDED


def test_every_claim_states_its_statistic_interval_seeds_and_scale():
    for f in K.findings(_map(1.5)):
        if f["verdict"] == C.NOT_RUN:
            continue
        assert f["seeds"] >= 1 and f["statistic"] and f["low"] is not None and f["high"] is not None, f["id"]
        assert "trial" in f["scale"] and "per step" in f["scale"] and "evaluated at N =" in f["scale"], f["scale"]
        assert C.statistic_text(f) in C.render(f)


def test_softmax_collapse_is_a_rate_over_seeds_and_one_seed_is_undecided():
    runs = _map(1.5)
    assert _verdicts(runs)["softmax-collapses-cpu"] == C.NOT_REPRODUCED  # 0 of 8 collapsed: rate < 50 % shown
    hit = [dict(r, collapse={"label": "collapse", "fraction": 1.0, "onset": 5})
           if r["config"]["kernel"] == "softmax" and r["config"]["attention_backend"] == "sdpa"
           and r["config"]["n_points"] == 4096 else r for r in runs]
    assert _verdicts(hit)["softmax-collapses-cpu"] == C.REPRODUCED
    one = [r for r in runs if r["config"]["seed"] == 0]
    assert _verdicts(one)["softmax-collapses-cpu"] == C.UNDECIDED


def test_graded_collapse_compares_the_collapsed_share_at_the_training_n():
    runs = _map(1.5)
    for r in runs:
        frac = 0.1 + 0.01 * r["config"]["seed"] if r["config"]["kernel"] == "softmax" else 0.0
        r["at_train_n"] = {"n_points": r["config"]["n_points"], "collapse": {"label": "ok", "fraction": frac},
                           "median": dict(r["median"]), "mean": dict(r["mean"])}
    found = {f["id"]: f for f in K.findings(runs)}
    assert found["softmax-collapses-more"]["verdict"] == C.REPRODUCED
    assert found["softmax-collapses-more"]["estimate"] == pytest.approx(0.135)
    assert found["gap-grows-at-train-n"]["verdict"] == C.REPRODUCED


def _trained_and_evaluated(tmp_path, **settings):
    """A tiny run trained and evaluated in ``tmp_path``: (config, run folder, evaluation results)."""
    from heavytail.harness.evaluate import evaluate
    from heavytail.harness.train import train

    cfg = RunConfig.from_dict(dict(dict(d_model=8, d_ff=16, n_points=64, trials_per_step=2, warmup_steps=1,
                                        eval_n_points=128, bootstrap_resamples=50, log_every=2, device="cpu"),
                                   **settings))
    run_dir = train(cfg, tmp_path / "run", quiet=True)
    return cfg, run_dir, evaluate(run_dir, floor_cache=tmp_path / "floors", quiet=True)


def test_run_summary_reads_a_real_run(tmp_path):
    cfg, run_dir, _ = _trained_and_evaluated(tmp_path, kernel="softmax", attention_backend="sdpa", n_blocks=2,
                                             steps=6, eval_trials=4, eval_batch_trials=4, checkpoint_every=3,
                                             track_attention=True)
    summary = run_summary.run_summary(run_dir)
    log = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert summary["skipped_steps"] == log[-1]["n_skipped"]
    assert len(summary["blocks"]) == 2
    assert summary["trace"]["step"] == [row["step"] for row in log if row.get("blocks")]
    assert summary["blocks"][0]["max_abs_score"] == max(row["blocks"][0]["max_abs_score"] for row in log if row.get("blocks"))
    assert summary["blocks"][0]["max_abs_score"] > 0 and summary["blocks"][0]["max_qk_spectral_norm"] > 0
    assert RunConfig.from_dict(summary["config"]) == cfg
    # the record says which attention computed the run, as training and evaluation recorded it
    assert summary["attention"] == {"train": "sdpa", "eval": "sdpa"}
    assert G.recorded_variant(summary) == G.variant(summary) == G.SOFTMAX_SDPA


def test_training_seconds_adds_the_time_logged_before_a_resume_that_restarted_the_clock():
    """Runs trained before the clock was carried in the checkpoint restarted it at a resume: the log's seconds drop
    there, and the time before the drop still counts. A carried clock never drops, so its last value is the total."""
    resumed = [{"step": 25, "seconds": 10.0}, {"step": 50, "seconds": 20.0}, {"step": 75, "dense": True},
               {"step": 75, "seconds": 2.0}, {"step": 100, "seconds": 12.0}]
    assert run_summary.training_seconds(resumed) == pytest.approx(32.0)
    assert run_summary.training_seconds([{"step": 1, "seconds": 3.0}, {"step": 2, "seconds": 7.5}]) == 7.5
    assert math.isnan(run_summary.training_seconds([])) and math.isnan(run_summary.training_seconds([{"step": 1}]))


def _recorded(run, train, evaluated=None):
    return dict(run, attention={"train": train, "eval": evaluated or train})


def test_a_run_is_grouped_by_the_attention_path_it_recorded_and_a_disagreeing_record_is_an_error():
    soft_auto, soft_tiled, slow = _run("softmax", "auto", 64, 0, 2.0), _run("softmax", "tiled", 64, 0, 2.0), \
        _run("log_elu", "auto", 64, 0, 2.0)
    # older summaries have no record: the path the configuration asks for, as before
    assert [G.variant(r) for r in (soft_auto, soft_tiled, slow)] == [G.SOFTMAX_SDPA, G.SOFTMAX_EXACT, G.LOG_ELU]
    assert G.variant(soft_auto["config"]) == G.SOFTMAX_SDPA  # a bare configuration: the same rule
    # the labels training records map onto the same variants
    assert G.variant(_recorded(soft_auto, "sdpa")) == G.SOFTMAX_SDPA
    assert G.variant(_recorded(soft_tiled, "tiled")) == G.SOFTMAX_EXACT
    for label in ("flash:native", "flex", "flex:blocks64+flash", "tiled"):
        assert G.variant(_recorded(slow, label)) == G.LOG_ELU, label
    # softmax under auto that fell back from SDPA to tiled ran exact attention: not silently an SDPA run
    fell_back = _recorded(soft_auto, "tiled")
    with pytest.raises(G.PathMismatch, match=r"asks for attention_backend='auto' \(softmax \(SDPA\).*ran 'tiled'"):
        G.variant(fell_back)
    with pytest.raises(G.PathMismatch, match="2 variants"):
        G.variant(_recorded(soft_auto, "sdpa+tiled"))
    with pytest.raises(G.PathMismatch, match="names no backend"):
        G.variant(_recorded(slow, "cudnn"))
    with pytest.raises(G.PathMismatch):
        G.cells([soft_tiled, fell_back])  # every claim groups through variant()
    found = G.path_mismatches([soft_auto, _recorded(soft_tiled, "tiled"), fell_back])
    assert len(found) == 1 and "ran 'tiled'" in found[0]


def test_a_split_models_record_names_both_kernels_paths_and_the_run_keeps_its_kernels_variant():
    """Softmax (SDPA) with log-ELU in block 0 records log-ELU's native flash path beside SDPA: still a softmax (SDPA)
    run; without SDPA among its paths it is not one."""
    split = _run("softmax", "sdpa", 64, 0, 2.0)
    split = {**split, "config": {**split["config"], "split_kernel": "log_elu", "split_block": 0}}
    assert G.variant(_recorded(split, "flash:native+sdpa")) == G.SOFTMAX_SDPA
    with pytest.raises(G.PathMismatch, match="2 variants"):
        G.variant(_recorded(split, "flash:native+tiled"))
    mirror = _run("log_elu", "auto", 64, 0, 2.0)
    mirror = {**mirror, "config": {**mirror["config"], "split_kernel": "softmax", "split_block": 0}}
    assert G.variant(_recorded(mirror, "sdpa+flash:native")) == G.LOG_ELU


def test_shipping_refuses_a_run_whose_recorded_attention_path_is_not_its_configurations(tmp_path, monkeypatch):
    clean = {"commit": "a" * 40, "dirty": False}
    runs = [dict(_recorded(_run("softmax", "auto", 64, s, 2.0), "tiled" if s == 1 else "sdpa"),
                 name=f"c{s}", provenance=[clean]) for s in range(2)]
    with pytest.raises(ValueError, match=r"1 run\(s\) .* ran another attention path.*run c1"):
        _shipping(tmp_path, monkeypatch, "gap-design", runs)
    assert not (tmp_path / "gap-design.json").exists()


def _variant_before(config):
    """kernel_gap.variant as it was before runs recorded their path (a frozen copy: the shipped maps' groups)."""
    kernel, backend = config["kernel"], config.get("attention_backend", "auto")
    if kernel == "softmax" and backend == "auto":
        backend = "sdpa"
    if kernel != "softmax":
        backend = "auto"
    return kernel, backend


def _label_trained(config):
    """The label training records for a configuration: the backend it asks for, or auto's first choice."""
    import torch

    from heavytail.science.attention import auto_candidates

    backend = config.get("attention_backend", "auto")
    if backend != "auto":
        return [backend]
    return [auto_candidates(config["kernel"], device, torch.float32)[0].label for device in ("cpu", "cuda")]


def _spec_configs(grid_file):
    spec = GridSpec.from_yaml(ROOT / grid_file)
    return dict(zip(spec.names, spec.configs))


def test_the_report_grid_is_a_subset_of_the_design_map():
    report = _spec_configs("params/grid_gap_cpu.yaml")
    full = _spec_configs("params/grid_gap_design.yaml")
    assert set(report.values()) <= set(full.values())
    assert {c.trials_per_step for c in full.values()} == {1}, "the design holds trials per step fixed across N"


# Maps whose grids are still running are not shipped yet; those that decide the README's claims must be.
SHIPPED = sorted(name for name in R.MAPS if R.path_of(name, ROOT).is_file())
SHIPPED_RUNS = [name for name in SHIPPED if R.load(name, ROOT)["runs"]]


@pytest.mark.parametrize("name", SHIPPED_RUNS)
def test_every_shipped_run_keeps_its_variant_with_or_without_a_recorded_path(name):
    """No verdict printed from a shipped map moves: each run's variant is what it was before runs recorded their
    attention path, from its record where it has one, and from the label its configuration makes training record."""
    runs = R.load(name, ROOT)["runs"]
    assert runs
    for r in runs:
        assert G.variant(r) == _variant_before(r["config"]), r["name"]
        for label in _label_trained(r["config"]):
            assert G.variant(_recorded(r, label)) == _variant_before(r["config"]), (r["name"], label)
    assert G.path_mismatches(runs) == []


def test_the_maps_behind_the_readme_are_shipped_and_every_grid_file_exists():
    assert {"gap-design", "gap-long", "gap-points", "phase"} <= set(SHIPPED)
    # stage 2 of the converged gap is written by `python -m heavytail select-lr` from stage 1's runs, the
    # mechanism follow-up by `python -m heavytail mechanism-followup` once the screen has chosen its setting
    generated = {"gap-converged", "mechanism-followup"}
    for name, spec in R.MAPS.items():
        assert name in generated or (ROOT / spec.grid).is_file(), spec.grid


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_map_matches_its_grid_file_and_records_provenance(name):
    shipped = R.load(name, ROOT)
    assert R.path_of(name, ROOT).stat().st_size < 2 * 1024 * 1024
    full = _spec_configs(R.MAPS[name].grid)
    got = {r["name"]: RunConfig.from_dict(r["config"]) for r in shipped["runs"]}
    assert set(got) <= set(full), "the shipped runs are not the grid file's configurations"
    for run_name, cfg in got.items():
        assert cfg == full[run_name], run_name
    keep = R.MAPS[name].trace_keys
    assert keep is None or all(set(r["trace"]) <= set(keep) for r in shipped["runs"]), "traces not thinned"
    prov = shipped["provenance"]
    if name != "gap-points":  # the points-per-step map predates runs that record their own provenance
        assert prov["finished"] == len(got) and prov["configurations"] == len(full)
        assert prov["complete"] == (len(got) == len(full))
        for r in shipped["runs"]:
            assert r["provenance"] and all(p["commit"] in prov["commits"] and p["dirty"] is False
                                           for p in r["provenance"]), r["name"]


def test_shipping_refuses_runs_from_a_dirty_tree_or_mixed_commits():
    from heavytail.harness.provenance import check_shippable

    clean = {"commit": "a" * 40, "dirty": False}
    assert check_shippable([clean, clean]) == ["a" * 40]
    with pytest.raises(ValueError, match="dirty"):
        check_shippable([clean, {"commit": "a" * 40, "dirty": True}])
    with pytest.raises(ValueError, match="2 commits"):
        check_shippable([clean, {"commit": "b" * 40, "dirty": False}])
    assert len(check_shippable([clean, {"commit": "b" * 40, "dirty": False}], allow_mixed=True)) == 2
    with pytest.raises(ValueError, match="records no commit"):
        check_shippable([clean, {}])


def test_shipping_commands_are_shown_with_repository_relative_paths():
    assert (R.portable_command("python -m heavytail ship-map gap-design /work/wt-grid/outputs/grid-gap-design")
            == "python -m heavytail ship-map gap-design outputs/grid-gap-design")
    assert R.portable_command("ship-map phase ../wt-phase/outputs/grid-phase --output x") == (
        "ship-map phase outputs/grid-phase --output x")
    assert R.portable_command("ship-map gap-long outputs/grid-gap-long /tmp/elsewhere") == (
        "ship-map gap-long outputs/grid-gap-long /tmp/elsewhere")  # outside the repository's folders: kept
    for name in R.MAPS:
        shown = R.source(name, root=ROOT).describe()
        if R.load(name, ROOT) is not None:
            assert "/work/" not in shown and "../" not in shown, shown


def test_cross_check_tests_distributions_not_equality():
    design = _map(1.5)
    # the report's runs are seeds 0-2 of the same configurations: a sample of the map's own distribution
    own = [r for r in design if r["config"]["seed"] < 3 and r["config"]["n_points"] < 4096]
    check = K.cross_check(own, design)
    assert check["agree"] is True and len(check["rows"]) == 6 and check["p"] > 0.05
    # a consistent shift of 20 % (four times the seeds' spread here) is a different distribution
    far = [dict(r, median=dict(r["median"], ratio=r["median"]["ratio"] * 1.2)) for r in own]
    assert K.cross_check(far, design)["agree"] is False
    # a map trained before a setting existed (its configs lack the key) is compared at that setting's default
    # (the shipped design map predates tail_regime; the report's runs record it as "paper")
    older = [dict(r, config={k: v for k, v in r["config"].items() if k != "tail_regime"}) for r in design]
    assert all("tail_regime" in r["config"] for r in own)
    matched = K.cross_check(own, older)
    assert all(row["map"] != "not in the map" for row in matched["rows"]) and matched["agree"] is True
    elsewhere = [dict(r, config=dict(r["config"], tail_regime="light")) for r in own]
    assert all(row["map"] == "not in the map" for row in K.cross_check(elsewhere, older)["rows"])


def test_windowed_share_counts_collapsed_logged_steps_per_window():
    """Each window holds the logged steps in (lo, lo + window]; a batch counts as collapsed at >= half its
    trials (as collapsed_steps counts); a window with nothing logged is NaN, not 0."""
    import math

    from heavytail.studies.kernel_gap.plots import windowed_share

    xs, share = windowed_share([25, 50, 250, 275, 500, 1000], [0.0, 1.0, 0.5, 0.0, None, 0.2], 250)
    assert xs == [125.0, 375.0, 625.0, 875.0]
    assert share[0] == 2 / 3 and share[1] == 0.0 and math.isnan(share[2]) and share[3] == 0.0
    assert windowed_share([], [], 250) == ([], [])


# ------------------------------------------------------------------------------------ per-trial records
def test_a_run_summary_keeps_the_per_trial_records_at_the_training_n_and_old_results_still_load(tmp_path):
    import numpy as np

    from heavytail.io import load_json, save_json

    cfg, run_dir, results = _trained_and_evaluated(tmp_path, kernel="linear_elu", attention_backend="dense",
                                                   n_blocks=1, steps=4, eval_trials=6, eval_batch_trials=3,
                                                   checkpoint_every=2, eval_at_train_n=True)
    got = run_summary.trial_records(run_summary.run_summary(run_dir))
    want = results["at_train_n"]["per_trial"]
    assert len(got) == cfg.eval_trials and {r["n_points"] for r in got} == {64}
    # the summary rounds the float32 distances to 9 digits: exactly the float32 values again
    for key in ("d", "floor"):
        assert np.array_equal(np.float32([r[key] for r in got]), np.float32([r[key] for r in want]))
    # tail indices to 4 digits: within half a unit of the third decimal (they lie in [1, 10))
    assert np.allclose([r["tail_index"] for r in got], [r["tail_index"] for r in want], rtol=0, atol=5e-4)

    # results.json written before evaluation kept records: the summary has none and reads as before
    old = {k: v for k, v in load_json(run_dir / "results.json").items() if k != "per_trial"}
    old["at_train_n"] = {k: v for k, v in old["at_train_n"].items() if k != "per_trial"}
    save_json(old, run_dir / "results.json")
    summary = run_summary.run_summary(run_dir)
    assert "per_trial" not in summary and run_summary.trial_records(summary) == []
    assert summary["at_train_n"]["median"]["ratio"] == results["at_train_n"]["median"]["ratio"]


def test_the_training_n_records_are_the_common_ones_when_the_run_was_trained_at_the_common_n():
    rec = {"n_points": 256, "d": 0.5, "floor": 0.25, "std": [1.5, 2.5]}
    same = {"config": {"n_points": 256, "eval_n_points": 256}, "per_trial": [rec]}
    assert run_summary.train_n_records(same) == [rec]
    assert run_summary.trial_records({"per_trial": run_summary.trial_columns([rec])}) == [rec]
    other = {"config": {"n_points": 64, "eval_n_points": 256}, "per_trial": [rec]}  # not scored at N = 64
    assert run_summary.train_n_records(other) == []


def _shipping(tmp_path, monkeypatch, name, runs):
    spec = R.MAPS[name]
    grid_dir = tmp_path / name
    grid_dir.mkdir()
    (grid_dir / "grid.json").write_text(json.dumps({
        "grid": ship_map._grid_name(name), "source": spec.grid,
        "configurations": [{"name": r["name"], "status": "ok", "run_dir": r["name"]} for r in runs]}))
    monkeypatch.setattr(run_summary, "collect", lambda _: runs)
    out = ship_map.ship(name, grid_dir, command="test", output=tmp_path / f"{name}.json")
    return json.loads(out.read_text())["runs"]


def test_only_a_map_that_asks_for_per_trial_records_ships_them(tmp_path, monkeypatch):
    clean = {"commit": "a" * 40, "dirty": False}
    cols = run_summary.trial_columns([{"n_points": 256, "d": 0.5, "floor": 0.25, "tail_index": [3.0, 2.0]}])
    runs = [{"name": f"c{i}", "config": {}, "median": {}, "mean": {}, "collapse": {}, "provenance": [clean],
             "trace": {"step": [1], "loss": [0.5]}, "per_trial": cols} for i in range(2)]
    assert not R.MAPS["phase"].per_trial and R.MAPS["phase-confirm"].per_trial
    assert all("per_trial" not in r for r in _shipping(tmp_path, monkeypatch, "phase", runs))
    confirm = _shipping(tmp_path, monkeypatch, "phase-confirm", runs)
    assert all(r["per_trial"] == cols and r["trace"] == {} for r in confirm)


def test_a_shipped_map_is_one_line_per_run_and_reads_back_exactly(tmp_path, monkeypatch):
    from heavytail.io import load_json

    clean = {"commit": "a" * 40, "dirty": False}
    runs = [{"name": f"c{i}", "config": {}, "median": {"ratio": float("nan") if i else 1.5}, "mean": {},
             "collapse": {}, "provenance": [clean], "trace": {"step": list(range(50)), "loss": [0.5] * 50}}
            for i in range(3)]
    _shipping(tmp_path, monkeypatch, "phase", runs)
    path = tmp_path / "phase.json"
    lines = path.read_text().splitlines()
    assert sum(line.startswith(' {"name":') for line in lines) == 3 and len(lines) < 40
    back = load_json(path)["runs"]
    assert [r["name"] for r in back] == ["c0", "c1", "c2"] and back[0]["trace"]["step"] == list(range(50))
    assert back[0]["median"]["ratio"] == 1.5 and math.isnan(back[1]["median"]["ratio"])


def test_the_confirmatory_map_with_its_per_trial_records_fits_a_shipped_maps_size(tmp_path):
    """Every configuration of its grid as a summary like the phase map's (the same recipe), with 64 trials of
    float32 distances and tail indices: under the 2 MiB a shipped map may hold."""
    import numpy as np

    from heavytail.io import save_records_json

    configs = _spec_configs(R.MAPS["phase-confirm"].grid)
    like = R.load("phase", ROOT)["runs"][0]
    rng = np.random.default_rng(0)
    runs = []
    for name, cfg in configs.items():
        records = [{"n_points": cfg.n_points, "d": float(np.float32(rng.lognormal(-4, 2))),
                    "floor": float(np.float32(rng.lognormal(-5, 1))),
                    "tail_index": [float(rng.uniform(2, 4.5)), float(rng.uniform(1, 3.5))]}
                   for _ in range(cfg.eval_trials)]
        runs.append(ship_map.with_trace_keys(dict(like, name=name, config=cfg.to_dict(), per_trial=run_summary.trial_columns(records)),
                                      R.MAPS["phase-confirm"].trace_keys))
    # written as ship-map writes a map: one compact record per run (heavytail.io.save_records_json)
    path = save_records_json({"provenance": {"commits": ["a" * 40]}, "runs": runs}, "runs", tmp_path / "map.json")
    size = path.stat().st_size
    assert size < 2 * 1024 * 1024, size / 2**20
