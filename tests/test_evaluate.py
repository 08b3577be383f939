"""Evaluation: ratios, bootstrap intervals, the shared floor pool, Hill diagnostics, collapse labels."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import heavytail.harness.evaluate as evaluate_mod
from heavytail.science.collapse import collapsed, spread_ratio
from heavytail.harness.evaluate import evaluate, load_results
from heavytail.io import load_json, save_json
from heavytail.harness.checkpoints import load_model
from heavytail.harness.train import train


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from heavytail.harness.config import RunConfig
    from tests.conftest import TINY

    root = tmp_path_factory.mktemp("runs")
    return train(RunConfig.from_dict(TINY, steps=4), root / "run", quiet=True)


def test_evaluation_reports_ratios_intervals_and_hill(tiny_run):
    res = evaluate(tiny_run, quiet=True)
    n = res["config"]["eval_trials"]
    assert len(res["energy"]["d"]) == n and len(res["energy"]["d_hat"]) == n
    for stat in ("median", "mean"):
        s = res["energy"][stat]
        summary = getattr(np, stat)
        assert math.isclose(s["ratio"], summary(res["energy"]["d"]) / summary(res["energy"]["d_hat"]), rel_tol=1e-9)
        assert s["low"] <= s["ratio"] <= s["high"]
        assert s["bold"] == (s["low"] <= 1.0)
    for axis in ("0", "1"):
        hill = res["hill"]["axes"][axis]
        assert len(hill["e"]) == n and len(hill["e_hat"]) == n and math.isfinite(hill["E"])
    assert len(res["hill"]["curve"]["output_abs_error"]["1"]) == len(res["hill"]["curve"]["phi"])
    assert load_results(tiny_run) == load_json(tiny_run / "results.json")


def test_the_floor_pool_is_computed_once_per_family(tiny_run, monkeypatch):
    evaluate(tiny_run, quiet=True, save=False)
    cached = list((tiny_run.parent / "_floors").glob("floor-*.json"))
    assert len(cached) == 1

    def boom(*a, **k):
        raise AssertionError("the floor pool was recomputed and written again")

    # with save=False the only write evaluate() could make is a fresh floor pool
    monkeypatch.setattr(evaluate_mod, "save_json", boom)
    before = cached[0].stat().st_mtime_ns
    evaluate(tiny_run, quiet=True, save=False)
    assert cached[0].stat().st_mtime_ns == before


class _Constant(torch.nn.Module):
    """A deliberately collapsed model: every output point at one location."""

    def forward(self, x):
        return torch.zeros_like(x) + 3.0


def test_a_collapsed_output_is_flagged(tiny_run, monkeypatch):
    _, cfg = load_model(tiny_run)
    monkeypatch.setattr(evaluate_mod, "load_model", lambda run_dir, device="cpu": (_Constant(), cfg))
    res = evaluate(tiny_run, quiet=True, save=False)
    assert res["collapse"]["label"] == "collapse" and res["collapse"]["fraction"] == 1.0
    assert res["energy"]["median"]["ratio"] > 1


def test_spread_ratio_separates_healthy_from_degenerate():
    g = torch.Generator().manual_seed(0)
    target = torch.randn(3, 2000, 2, generator=g)
    healthy = torch.randn(3, 2000, 2, generator=g)
    degenerate = healthy.clone()
    degenerate[1] = degenerate[1, :1]  # trial 1: all points equal
    r = spread_ratio(degenerate, target)
    assert r[1] == 0 and collapsed(r, 0.05).tolist() == [False, True, False]
    # IQR ratio of two standard normal samples of 2000: sd of the log-ratio is about 0.05
    assert torch.allclose(spread_ratio(healthy, target), torch.ones(3, dtype=torch.float64), atol=0.2)


def test_non_finite_results_round_trip(tmp_path):
    save_json({"x": [1.0, math.inf, -math.inf, math.nan]}, tmp_path / "r.json")
    text = (tmp_path / "r.json").read_text()
    assert "Infinity" in text and "NaN" in text
    x = load_json(tmp_path / "r.json")["x"]
    assert x[:3] == [1.0, math.inf, -math.inf] and math.isnan(x[3])


def test_collapse_onset_is_the_start_of_the_final_collapsed_stretch():
    from heavytail.science.collapse import collapse_onset

    log = [{"step": s, "collapsed_fraction": f} for s, f in [(10, 0.0), (20, 0.9), (30, 0.1), (40, 0.6), (50, 1.0)]]
    assert collapse_onset(log) == 40
    assert collapse_onset(log[:3]) is None
    assert collapse_onset([{"step": 1, "loss": 1.0}]) is None


def test_attention_gradient_error_replays_a_real_block():
    from heavytail.science.collapse import attention_gradient_error, attention_inputs
    from heavytail.harness.config import RunConfig
    from heavytail.science.model import MeasureTransformer, ModelConfig

    torch.manual_seed(0)
    run = RunConfig(d_model=16, n_blocks=2, d_ff=32, kernel="linear_elu", attention_backend="dense")
    model = MeasureTransformer(ModelConfig(**run.model_kwargs()))
    x = torch.randn(2, 64, 2)
    q, k, v = attention_inputs(model, x, block=1)
    assert q.shape == (2, 1, 64, 16)
    err = attention_gradient_error(q, k, v, "linear_elu", "tiled")
    # float32 vs float64 on O(1) scores: a few float32 ulps, far below 1e-4
    assert max(err["q"], err["k"], err["v"]) < 1e-4 and err["max_abs_score"] > 0


def test_results_do_not_depend_on_how_many_trials_share_a_forward_pass(tiny_run, tmp_path):
    """eval_batch_trials is memory, not results: every ensemble has its own stream."""
    import shutil

    from heavytail.harness.config import RunConfig

    copy = tmp_path / "run"
    shutil.copytree(tiny_run, copy, ignore=shutil.ignore_patterns("results.json"))
    cfg = RunConfig.from_yaml(copy / "config.yaml")
    (copy / "config.yaml").write_text(cfg.replace(eval_batch_trials=3).to_yaml())
    a = evaluate(tiny_run, quiet=True, save=False)
    b = evaluate(copy, quiet=True, save=False, floor_cache=tmp_path / "floors")
    assert a["energy"]["d"] == b["energy"]["d"] and a["energy"]["d_hat"] == b["energy"]["d_hat"]


class _DivergesOnFirstTrial(torch.nn.Module):
    def forward(self, x):
        out = x.clone()
        out[0, 0, 0] = float("nan")
        return out


def test_a_diverged_trial_scores_inf_without_stopping_the_hill_diagnostic(tiny_run, monkeypatch):
    _, cfg = load_model(tiny_run)
    monkeypatch.setattr(evaluate_mod, "load_model", lambda run_dir, device="cpu": (_DivergesOnFirstTrial(), cfg))
    res = evaluate(tiny_run, quiet=True, save=False)
    d, batch = res["energy"]["d"], cfg.eval_batch_trials  # the first trial of every forward pass diverges
    assert [math.isinf(v) for v in d] == [i % batch == 0 for i in range(len(d))]
    hill = res["hill"]["axes"]["1"]
    assert math.isnan(hill["hill_output"][0]) and math.isfinite(hill["hill_output"][1]) and hill["E"] == math.inf


def test_kernel_or_numerics_is_decided_from_configurations_not_labels():
    from types import SimpleNamespace

    from heavytail.science.collapse import concentrates, late_attention, numerics_pair, numerics_verdict

    def run(kernel, backend):
        return SimpleNamespace(config={"kernel": kernel, "attention_backend": backend})

    runs = [run("log_elu", "tiled"), run("softmax", "tiled"), run("softmax", "sdpa")]
    flash, exact = numerics_pair(runs)
    assert flash.config["attention_backend"] == "sdpa" and exact.config["attention_backend"] == "tiled"
    assert numerics_pair(runs[:2]) is None  # no flash-style softmax run: nothing to compare
    assert "follows the numerics" in numerics_verdict("collapse", "ok")
    assert "not only a numerical artefact" in numerics_verdict("collapse", "collapse")
    assert "cannot separate" in numerics_verdict("ok", "ok")
    assert "but not through the flash-style path" in numerics_verdict("ok", "collapse")
    log = [{"step": s, "blocks": [{"attn_max_weight": w}, {"attn_max_weight": 3 * w}]} for s, w in enumerate(range(10))]
    assert late_attention(log) == (2 * 8 + 2 * 9) / 2  # the last fifth: steps 8, 9; block mean 2w
    assert math.isnan(late_attention([{"step": 1}]))
    assert concentrates(0.6, 0.1) and not concentrates(0.4, 0.1)


def test_the_hill_band_summary_reads_every_threshold_of_its_stated_range(tiny_run):
    from heavytail.harness.evaluate import band_k_range

    res = evaluate(tiny_run, quiet=True, save=False)
    band = res["hill"]["band_miss"]
    n = res["config"]["eval_n_points"]
    assert band["k_range"] == list(band_k_range(n)) and band["k_range"][0] < band["k_range"][1] < n
    for axis in ("0", "1"):
        shares = band["axes"][axis]
        assert 0.0 <= shares["target"] <= 1.0 and 0.0 <= shares["output"] <= 1.0
    assert band["excess"] == max(v["output"] - v["target"] for v in band["axes"].values())


# ------------------------------------------------------------------------------------ per-trial records
@pytest.fixture(scope="module")
def at_train_n_run(tiny_run, tmp_path_factory):
    """tiny_run's model, evaluated also at its training N (64) besides the common N (256)."""
    import shutil

    from heavytail.harness.config import RunConfig

    copy = tmp_path_factory.mktemp("at-train-n") / "run"
    shutil.copytree(tiny_run, copy, ignore=shutil.ignore_patterns("results.json"))
    cfg = RunConfig.from_yaml(copy / "config.yaml")
    (copy / "config.yaml").write_text(cfg.replace(eval_at_train_n=True).to_yaml())
    return copy


def test_per_trial_records_hold_each_trials_distance_floor_and_tail_indices_at_both_ns(at_train_n_run):
    res = evaluate(at_train_n_run, quiet=True, save=False)
    cfg = res["config"]
    common, train_n = res["per_trial"], res["at_train_n"]["per_trial"]
    assert len(common) == len(train_n) == cfg["eval_trials"]
    assert {r["n_points"] for r in common} == {cfg["eval_n_points"]} and {r["n_points"] for r in train_n} == {64}
    assert [r["d"] for r in common] == res["energy"]["d"]
    axes = res["hill"]["axes"]
    assert [r["tail_index"] for r in common] == [list(a) for a in zip(axes["0"]["tail_index"], axes["1"]["tail_index"])]
    # the same trials (omega_i) at both N: the training-N pass draws its trials from the same stream
    assert [r["tail_index"] for r in train_n] == [r["tail_index"] for r in common]
    assert all(0 < r["floor"] < math.inf for r in common + train_n)
    # the training-N distances are the ones its eq. 36 median ratio divides
    assert np.median([r["d"] for r in train_n]) == res["at_train_n"]["median"]["candidate"]


def test_a_trials_floor_is_a_second_target_ensemble_of_that_trial_against_its_target(tiny_run):
    """The stream scheme spelled out with its constants, so that a change to any stream fails here: trial i's
    target Y1_i comes from the candidate stream (1_000_003), its floor's ensemble from its own (3_000_003)."""
    from heavytail.harness.build import build_benchmark
    from heavytail.science.metrics import energy_distance

    _, cfg = load_model(tiny_run)
    res = evaluate(tiny_run, quiet=True, save=False)
    bench, n, t = build_benchmark(cfg), cfg.eval_n_points, cfg.eval_trials
    gen = torch.Generator().manual_seed(1_000_003 * 1_000 + cfg.seed)
    trials = bench.sample_trials(t, generator=gen)
    seeds = torch.randint(0, 2**62, (t, 2), generator=gen)
    floor_seeds = torch.randint(0, 2**62, (t, 1), generator=torch.Generator().manual_seed(3_000_003 * 1_000 + cfg.seed))
    for i in (0, t - 1):
        y1 = bench.sample_targets(trials[i], n, generator=torch.Generator().manual_seed(int(seeds[i, 1])))
        y_f = bench.sample_targets(trials[i], n, generator=torch.Generator().manual_seed(int(floor_seeds[i, 0])))
        assert res["per_trial"][i]["floor"] == float(energy_distance(y_f, y1, p=cfg.loss_p).double())


def test_the_per_trial_floors_leave_every_earlier_number_as_it_was(tiny_run, monkeypatch):
    """Everything evaluation reported before per-trial floors existed is bit-identical: (1) it does not depend on
    the floors' stream at all, and (2) the model's distances and the floor pool are still the draws of the
    candidate (1_000_003) and pool (2_000_003) streams, recomputed here from those constants."""
    from heavytail.harness.build import build_benchmark
    from heavytail.science.metrics import energy_distance

    model, cfg = load_model(tiny_run)
    res = evaluate(tiny_run, quiet=True, save=False)
    monkeypatch.setattr(evaluate_mod, "_TRIAL_FLOOR_STREAM", 7_000_003)
    other = evaluate(tiny_run, quiet=True, save=False)
    assert [r["floor"] for r in other["per_trial"]] != [r["floor"] for r in res["per_trial"]]

    def before(r):
        return {k: v for k, v in r.items() if k not in ("per_trial", "provenance", "runtime")}

    assert before(other) == before(res)

    bench, n, t = build_benchmark(cfg), cfg.eval_n_points, cfg.eval_trials
    gen = torch.Generator().manual_seed(1_000_003 * 1_000 + cfg.seed)
    trials = bench.sample_trials(t, generator=gen)
    seeds = torch.randint(0, 2**62, (t, 2), generator=gen)
    d = []
    with torch.no_grad():
        for i in range(t):
            x = bench.sample_inputs(trials[i], n, generator=torch.Generator().manual_seed(int(seeds[i, 0])))
            y1 = bench.sample_targets(trials[i], n, generator=torch.Generator().manual_seed(int(seeds[i, 1])))
            d.append(float(energy_distance(model(x).float(), y1, p=cfg.loss_p).double()))
    assert d == res["energy"]["d"]
    pool_gen = torch.Generator().manual_seed(2_000_003 * 1_000 + cfg.seed)
    pool_trials = bench.sample_trials(t, generator=pool_gen)
    pool_seeds = torch.randint(0, 2**62, (t, 2), generator=pool_gen)
    y2, y3 = (bench.sample_targets(pool_trials[0], n, generator=torch.Generator().manual_seed(int(pool_seeds[0, j])))
              for j in (0, 1))
    assert res["energy"]["d_hat"][0] == float(energy_distance(y2, y3, p=cfg.loss_p).double())


def test_gaussian_trials_record_their_std(tiny_run, monkeypatch):
    _, cfg = load_model(tiny_run)
    gaussian = cfg.replace(marginals="gaussian")
    monkeypatch.setattr(evaluate_mod, "load_model", lambda run_dir, device="cpu": (_Constant(), gaussian))
    res = evaluate(tiny_run, quiet=True, save=False)
    from heavytail.science.operators import eta_ranges

    assert all("tail_index" not in r and len(r["std"]) == 2 for r in res["per_trial"])
    for axis, (lo, hi) in enumerate(eta_ranges("gaussian")):
        assert all(lo <= r["std"][axis] <= hi for r in res["per_trial"])
