"""The grid summary: collecting runs, aggregating seeds, Tables 5-8, the findings, and the notebook."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

import heavytail.studies.ablation.claims as AC
from heavytail.studies import paper_numbers as PN
import heavytail.studies.ablation.summary as S
from heavytail.studies.grid_folder import FinishedRun, filter_runs, finished_runs
from heavytail.harness.config import RunConfig
from heavytail.io import save_json

SMALL = dict(d_model=16, n_blocks=1, d_ff=32, n_points=64, trials_per_step=4, steps=4, warmup_steps=1,
             eval_trials=8, eval_n_points=256, eval_batch_trials=4, bootstrap_resamples=200, attention_backend="dense")


def fake_results(benchmark="sheared_swap", marginals="mirrored_pareto", norm="post", kernel="linear_elu",
                 symlog=False, seed=0, ratio=1.0, half_width=0.1, collapsed=False):
    """A results dict with the structure evaluate() writes and chosen ratio / interval / collapse label."""
    cfg = RunConfig.from_dict(SMALL, benchmark=benchmark, marginals=marginals, norm=norm, kernel=kernel,
                              symlog=symlog, seed=seed).to_dict()
    rng = np.random.default_rng(seed)
    d_hat = rng.lognormal(size=8)
    d = ratio * d_hat
    energy = {"d": d.tolist(), "d_hat": d_hat.tolist()}
    for stat in ("median", "mean"):
        low, high = ratio - half_width, ratio + half_width
        floor = float(getattr(np, stat)(d_hat))
        energy[stat] = {"ratio": ratio, "low": low, "high": high, "bold": low <= 1.0,
                        "candidate": ratio * floor, "floor": floor}
    res = {"name": RunConfig.from_dict(cfg).name, "config": cfg,
           "collapse": {"label": "collapse" if collapsed else "ok", "fraction": 1.0 if collapsed else 0.0,
                        "threshold": 0.05, "spread_ratio": [0.0 if collapsed else 1.0] * 8},
           "energy": energy}
    if marginals == "mirrored_pareto":
        E = 1e8 if collapsed else 1e-3 * ratio
        res["hill"] = {"k": 25, "axes": {a: {"E": E, "e": [0.1] * 8, "e_hat": [0.1] * 8, "hill_output": [2.0] * 8,
                                              "hill_target": [2.0] * 8, "tail_index": [2.0] * 8} for a in ("0", "1")},
                       "curve": {"phi": [0.01, 0.1], "output_abs_error": {"0": [0.5, 0.3], "1": [0.4, 0.2]},
                                 "target_abs_error": {"0": [0.3, 0.1], "1": [0.2, 0.1]}}}
    return res


def paper_like_grid(changes=None):
    """Post-norm results shaped like the paper's Tables 5 and 6; ``changes[key] = dict(...)`` overrides a cell."""
    out = []
    for bench, margs in S.BENCHMARK_MARGINALS.items():
        for marg in margs:
            for sym in (False, True):
                for kernel in S.KERNELS:
                    kw = dict(ratio=1.1)
                    if marg == "mirrored_pareto":
                        if kernel == "softmax":
                            # collapses without symlog on both; with symlog only on the sheared swap
                            kw = dict(ratio=40.0, collapsed=not (sym and bench == "matrix_inverse"))
                            if sym and bench == "matrix_inverse":
                                kw = dict(ratio=1.12)
                        else:
                            kw = dict(ratio=0.8 if sym else 1.5)
                    kw.update((changes or {}).get((bench, marg, kernel, sym), {}))
                    out.append(fake_results(bench, marg, "post", kernel, sym, **kw))
    return [FinishedRun.from_results(r) for r in out]


def verdicts(runs):
    # The comparison logic on one-seed grids: min_seeds=1 lifts the seed requirement that the default applies
    return {f["id"]: f["verdict"] for f in AC.findings(S.aggregate(runs), min_seeds=1)}


def test_one_seed_per_configuration_is_undecided_never_not_reproduced():
    found = {f["id"]: f for f in AC.findings(S.aggregate(paper_like_grid()))}
    decided = {k: f["verdict"] for k, f in found.items() if f["verdict"] != "not run"}
    assert decided and set(decided.values()) == {"undecided at this power"}
    f = found["softmax-collapses-sheared_swap"]
    assert "seeds per configuration (here 1)" in f["needs"] and "1 seed(s) per configuration" in f["scale"]
    # the same grid with five seeds per configuration is decided
    five = [FinishedRun.from_results(dict(r.results, config=dict(r.config, seed=s)))
            for r in paper_like_grid() for s in range(5)]
    assert {f["verdict"] for f in AC.findings(S.aggregate(five))} <= {"reproduced", "not reproduced", "not run"}


# ------------------------------------------------------------------------------------------ findings
def test_a_paper_like_grid_reproduces_every_post_norm_claim_and_prenorm_is_not_run():
    v = verdicts(paper_like_grid())
    assert v.pop("prenorm-no-collapse") == "not run"
    assert set(v.values()) == {"reproduced"}, v


def test_a_healthy_softmax_is_not_a_reproduced_collapse():
    v = verdicts(paper_like_grid({("sheared_swap", "mirrored_pareto", "softmax", False): dict(ratio=0.9, collapsed=False)}))
    assert v["softmax-collapses-sheared_swap"] == "not reproduced"
    # softmax at 0.9 [0.8, 1.0] is not worse than the slower kernels at 1.5 [1.4, 1.6]
    assert v["slower-lower-than-softmax-sheared_swap"] == "not reproduced"
    assert v["softmax-collapses-matrix_inverse"] == "reproduced"
    found = {f["id"]: f for f in AC.findings(S.aggregate(paper_like_grid(
        {("sheared_swap", "mirrored_pareto", "softmax", False): dict(ratio=0.9, collapsed=False)})), min_seeds=1)}
    # "the slower kernels avoid collapse" still holds, but the contrast with softmax must not be implied
    assert "Softmax did not collapse here either" in found["slower-avoid-collapse-sheared_swap"]["evidence"]
    assert "Softmax did not collapse" not in found["slower-avoid-collapse-matrix_inverse"]["evidence"]


def test_missing_configurations_are_not_run_and_the_rest_still_judged():
    runs = [r for r in paper_like_grid() if not (r.config["kernel"] == "log_elu" and r.config["benchmark"] == "matrix_inverse")]
    found = {f["id"]: f for f in AC.findings(S.aggregate(runs), min_seeds=1)}
    assert found["slower-avoid-collapse-matrix_inverse"]["verdict"] == "not run"
    assert found["symlog-lowers-slower-matrix_inverse"]["n_missing"] == 2
    assert found["slower-avoid-collapse-sheared_swap"]["verdict"] == "reproduced"
    assert "missing 1 of 3" in found["slower-avoid-collapse-matrix_inverse"]["evidence"]
    assert AC.findings([])[0]["verdict"] == "not run"


def test_overlapping_intervals_are_not_lower_and_intervals_are_similar_only_if_they_meet():
    v = verdicts(paper_like_grid({("matrix_inverse", "mirrored_pareto", "linear_elu", True): dict(ratio=1.4)}))
    # linear ELU with symlog 1.4 [1.3, 1.5] overlaps without symlog 1.5 [1.4, 1.6]: not lower
    assert v["symlog-lowers-slower-matrix_inverse"] == "not reproduced"
    v = verdicts(paper_like_grid({("sheared_swap", "gaussian", "log_elu", True): dict(ratio=1.35)}))
    assert v["gaussian-similar"] == "not reproduced"  # [1.25, 1.45] vs [1.0, 1.2]: no common point
    v = verdicts(paper_like_grid({("sheared_swap", "gaussian", "log_elu", True): dict(ratio=1.25)}))
    assert v["gaussian-similar"] == "reproduced"  # [1.15, 1.35] meets [1.0, 1.2]
    v = verdicts(paper_like_grid({("sheared_swap", "gaussian", "softmax", False): dict(collapsed=True)}))
    assert v["gaussian-no-collapse"] == "not reproduced"


# ------------------------------------------------------------------------------------------ seeds
def test_seeds_aggregate_to_the_median_with_their_range_and_a_majority_collapse_label():
    runs = [FinishedRun.from_results(fake_results(seed=s, ratio=r, collapsed=c))
            for s, r, c in ((0, 1.0, False), (1, 1.2, True), (2, 5.0, False))]
    (agg,) = S.aggregate(runs)
    assert agg["n_seeds"] == 3 and agg["seeds"] == [0, 1, 2]
    assert agg["median"]["ratio"] == pytest.approx(1.2)
    assert (agg["median"]["seed_min"], agg["median"]["seed_max"]) == (1.0, 5.0)
    assert agg["median"]["low"] == pytest.approx(1.1) and not agg["median"]["bold"]
    assert agg["collapse"]["label"] == "ok" and agg["collapse"]["n_collapsed"] == 1
    assert len(agg["d"]) == 24
    text = S.ratio_cell(agg, "median")["text"]
    assert "n=3" in text and "collapse in 1/3" in text
    runs[0] = FinishedRun.from_results(fake_results(seed=0, ratio=1.0, collapsed=True))
    (agg,) = S.aggregate(runs)
    assert agg["collapse"]["label"] == "collapse"


def test_a_run_recorded_before_a_setting_existed_is_a_seed_of_the_configuration_at_its_default():
    """A grid folder resumed after an update holds runs whose results lack a setting added since (they ran at its
    default): they aggregate with the runs that record the default, and apart from those that set another value."""
    old = fake_results(seed=0)
    old["config"] = {k: v for k, v in old["config"].items() if k != "energy_backend"}
    runs = [FinishedRun.from_results(r) for r in (old, fake_results(seed=1))]
    (agg,) = S.aggregate(runs)
    assert agg["n_seeds"] == 2
    other = fake_results(seed=2)
    other["config"]["energy_backend"] = "eager"
    assert len(S.aggregate([*runs, FinishedRun.from_results(other)])) == 2


def test_two_configurations_on_one_cell_are_an_error_naming_the_difference():
    runs = [FinishedRun.from_results(fake_results()), FinishedRun.from_results(fake_results())]
    cfg = dict(runs[1].results["config"], attention_backend="tiled")
    runs[1] = FinishedRun.from_results(dict(runs[1].results, config=cfg))
    with pytest.raises(ValueError, match="attention_backend"):
        S.ratio_table(S.aggregate(runs), "sheared_swap")
    assert len(filter_runs(runs, attention_backend="dense")) == 1
    with pytest.raises(ValueError, match="not a configuration key"):
        filter_runs(runs, widht=3)


# ------------------------------------------------------------------------------------------ tables
def test_tables_mark_bold_collapse_and_not_run():
    aggs = S.aggregate(paper_like_grid())
    t = S.ratio_table(aggs, "sheared_swap", "median")
    assert t["columns"][2:] == ["mirrored Pareto / none", "mirrored Pareto / signed-log",
                                "shifted Gaussian / none", "shifted Gaussian / signed-log"]
    assert [r["norm"] for r in t["rows"]] == [S.NORM_LABELS["post"]] * 4  # no pre-norm runs: no pre-norm rows
    soft, sq = t["rows"][0], t["rows"][1]
    assert soft["mirrored Pareto / none"]["text"].startswith("collapse")
    assert sq["mirrored Pareto / signed-log"]["bold"] and not sq["mirrored Pareto / none"]["bold"]
    html_ = S.to_html(t)
    assert "<b>0.800 [0.700, 0.900]</b>" in html_ and "1.50 [1.40, 1.60]</td>" in html_
    assert S.records(t)[1]["mirrored Pareto / none"] == "1.50 [1.40, 1.60]"

    aggs = S.aggregate([r for r in paper_like_grid() if r.config["kernel"] != "log_elu"])
    t6 = S.ratio_table(aggs, "matrix_inverse", "mean")
    assert t6["rows"][3]["mirrored Pareto / none"] is None and "2 of 8 cells not run" in t6["notes"]
    assert "not run" in S.to_html(t6)
    h = S.hill_table(aggs, "matrix_inverse", 1)
    assert h["rows"][0]["mirrored Pareto / none"]["text"] == "1.0e+08 (collapse)"
    with pytest.raises(ValueError, match="statistic"):
        S.ratio_table(aggs, "sheared_swap", "mode")


def test_the_paper_values_are_read_back_in_table_order():
    assert PN.paper_value("sheared_swap", "mirrored_pareto", "post", "squared_elu", False, "median") == {
        "text": "1.174", "bold": True}
    assert PN.paper_value("sheared_swap", "gaussian", "post", "softmax", True, "mean") == "1.185"
    assert PN.paper_value("matrix_inverse", "mirrored_pareto", "post", "softmax", False, "median") == "collapse"
    assert PN.paper_value("matrix_inverse", "mirrored_pareto", "post", "squared_elu", False, "median") == "3.423"


def test_the_claims_quote_the_papers_values_from_the_one_table_of_them():
    from heavytail.names import SLOWER_KERNELS
    import heavytail.studies.collapse.ladder as collapse_ladder
    import heavytail.studies.kernel_gap.claims as kernel_gap_claims
    import heavytail.studies.kernel_gap.converged as converged_gap

    assert PN.paper_range("sheared_swap", SLOWER_KERNELS, False) == "0.980-1.174"
    assert PN.paper_range("matrix_inverse", SLOWER_KERNELS, True) == "1.135-1.167"
    assert PN.paper_range("sheared_swap", S.KERNELS, (False, True), "gaussian") == "1.051-1.147"
    with pytest.raises(ValueError, match="collapse"):
        PN.paper_range("sheared_swap", S.KERNELS, False)
    assert PN.paper_gap() == "softmax collapses at N = 16384 while log-ELU reaches 1.006 (Table 5)"
    paper = {c.id: c.paper for c in AC._claims()}
    assert paper["slower-avoid-collapse-matrix_inverse"] == "no collapse; median ratios 1.295-3.423"
    assert paper["symlog-lowers-slower-sheared_swap"] == "median ratios 0.767-0.863 (from 0.980-1.174)"
    assert paper["symlog-softmax-matrix-inverse"] == "no collapse, median ratio 1.120"
    assert paper["gaussian-similar"] == "median ratios 1.051-1.147, all bold"
    for found in (kernel_gap_claims.findings([]), converged_gap.findings([], [])):
        assert {f["paper"] for f in found if "excess-grows" in f["id"] or "gap-grows" in f["id"]} == {PN.paper_gap()}
    assert collapse_ladder.PAPER_ONSET is PN.PAPER_ONSET == {False: 3500, True: 4500}


def test_the_comparison_table_renders_the_papers_bold_as_html_not_markdown():
    aggs = S.aggregate(paper_like_grid())
    html_ = S.to_html(S.comparison_table(aggs, "median"))
    assert "**" not in html_
    assert "<b>1.174</b>" in html_  # squared-ELU, post-norm, sheared swap, no symlog: bold in Table 5
    assert "<td style='padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top'>3.423</td>" in html_


def test_a_table_in_markdown_escapes_pipes_and_keeps_every_column():
    from heavytail.studies import tables

    text = tables.to_markdown({"title": "T", "columns": ["a", "b|c"], "rows": [{"a": "x|y", "b|c": None}],
                               "notes": "n"})
    assert text.splitlines() == ["**T**", "", "| a | b\\|c |", "|---|---|", "| x\\|y | not run |", "", "*n*"]


@pytest.mark.parametrize("x, text", [(0.8571, "0.857"), (1.5, "1.50"), (33.214, "33.2"), (9.996, "10.0"),
                                     (100.0, "100"), (0.052, "0.0520"), (1234.0, "1.23e+03"), (0.0, "0")])
def test_ratios_print_with_three_significant_digits(x, text):
    assert S.fmt_ratio(x) == text


def test_each_claim_names_the_figures_that_show_its_configurations():
    found = {f["id"]: f for f in AC.findings([])}
    assert found["softmax-collapses-matrix_inverse"]["decided_by"]["figures"] == ["figure3_matrix_inverse_post"]
    assert found["prenorm-no-collapse"]["decided_by"]["figures"] == ["figure8_sheared_swap_pre",
                                                                     "figure9_matrix_inverse_pre"]
    assert all(f["decided_by"]["notebook"] == "06_summary" for f in found.values())


# ------------------------------------------------------------------------------------------ collecting
def _write_run(folder, results, complete=True, evaluated=True):
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(results["config"]))
    if complete:
        (folder / "COMPLETE").write_text("")
    if evaluated:
        save_json(results, folder / "results.json")


def test_collect_uses_finished_evaluated_runs_and_says_why_it_skipped_the_others(tmp_path):
    _write_run(tmp_path / "a", fake_results(kernel="softmax"))
    _write_run(tmp_path / "b", fake_results(kernel="log_elu"), evaluated=False)
    _write_run(tmp_path / "c", fake_results(kernel="linear_elu"), complete=False)
    stale = fake_results(kernel="squared_elu")
    _write_run(tmp_path / "d", stale)
    (tmp_path / "d" / "config.yaml").write_text(yaml.safe_dump(dict(stale["config"], steps=99)))
    _write_run(tmp_path / "_floors" / "x", fake_results())
    inf_run = fake_results(kernel="squared_elu", symlog=True)
    inf_run["energy"]["mean"]["ratio"] = math.inf
    _write_run(tmp_path / "e", inf_run)
    got = finished_runs(tmp_path)
    assert sorted(r.name for r in got.runs) == ["a", "e"]  # a run is named by its folder in the grid
    reasons = {s["run"]: s["reason"] for s in got.skipped}
    assert set(reasons) == {"b", "c", "d"}
    assert "not evaluated" in reasons["b"] and "COMPLETE" in reasons["c"] and "steps" in reasons["d"]
    assert math.isinf(next(r for r in got.runs if r.config["symlog"]).results["energy"]["mean"]["ratio"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        finished_runs(tmp_path / "nope")


def _grid_folder(tmp_path):
    """A grid folder with grid.json listing, in an order that is not name order: a finished run, a finished run
    whose results are stale, one evaluated but recorded 'failed' (its notebook failed), a pending configuration
    with no folder; and a folder grid.json does not list."""
    import json

    grid = tmp_path / "grid"
    made = {}
    for folder, kernel in (("z-soft", "softmax"), ("b-stale", "squared_elu"), ("c-failed", "linear_elu"),
                           ("d-unlisted", "log_elu")):
        made[folder] = fake_results(kernel=kernel)
        _write_run(grid / folder, made[folder])
    (grid / "b-stale" / "config.yaml").write_text(yaml.safe_dump(dict(made["b-stale"]["config"], steps=99)))
    entries = [{"name": "z-soft", "run_dir": "z-soft", "status": "ok"},
               {"name": "b-stale", "run_dir": "b-stale", "status": "skipped"},
               {"name": "c-failed", "run_dir": "c-failed", "status": "failed", "error": "cell 3 raised"},
               {"name": "e-pending", "run_dir": "e-pending", "status": "pending"}]
    (grid / "grid.json").write_text(json.dumps({"grid": "g", "configurations": entries}))
    return grid, made


def test_the_one_reader_of_a_grid_folder_counts_the_runs_and_says_why_it_skipped_the_others(tmp_path):
    from heavytail.studies import run_summary
    from heavytail.studies import grid_folder

    grid, made = _grid_folder(tmp_path)
    found = grid_folder.finished_runs(grid)
    assert [r.name for r in found.runs] == ["z-soft"]
    reasons = {s["run"]: s["reason"] for s in found.skipped}
    assert set(reasons) == {"b-stale", "c-failed", "d-unlisted"}  # the pending one has no folder to skip
    assert "stale" in reasons["b-stale"] and "steps" in reasons["b-stale"]
    assert "'failed'" in reasons["c-failed"] and "cell 3 raised" in reasons["c-failed"]
    assert "does not list it" in reasons["d-unlisted"]
    # the shipped maps summarise the same runs
    assert [r["name"] for r in run_summary.collect(grid)] == ["z-soft"]
    # the grid's order, not the folders' names, orders the runs (a shipped map keeps its order)
    import json

    record = json.loads((grid / "grid.json").read_text())
    record["configurations"] = [dict(e, status="ok") for e in record["configurations"]]
    record["configurations"].insert(0, {"name": "d-unlisted", "run_dir": "d-unlisted", "status": "ok"})
    (grid / "grid.json").write_text(json.dumps(record))
    assert [r["name"] for r in run_summary.collect(grid)] == ["d-unlisted", "z-soft", "c-failed"]
    assert [r.name for r in finished_runs(grid).runs] == ["d-unlisted", "z-soft", "c-failed"]
    # without grid.json the summary reads every folder (a stale one still skipped); the maps' reader reads nothing
    (grid / "grid.json").unlink()
    assert {s["run"] for s in finished_runs(grid).skipped} == {"b-stale"}
    assert run_summary.collect(grid) == []


def test_a_damaged_grid_record_is_refused_not_read_around(tmp_path):
    grid, _ = _grid_folder(tmp_path)
    (grid / "grid.json").write_text('{"grid": "g"}')
    with pytest.raises(ValueError, match="not a grid record"):
        finished_runs(grid)


# ------------------------------------------------------------------------------------------ real runs
@pytest.fixture(scope="module")
def tiny_grid(tmp_path_factory):
    """Two tiny finished runs made by the real harness: softmax and linear ELU, post-norm, sheared swap."""
    from heavytail.harness.evaluate import evaluate
    from heavytail.harness.train import train

    grid = tmp_path_factory.mktemp("grid")
    for kernel in ("softmax", "linear_elu"):
        cfg = RunConfig.from_dict(SMALL, kernel=kernel)
        train(cfg, grid / cfg.name, quiet=True)
        evaluate(grid / cfg.name, quiet=True)
    return grid


def test_the_summary_builds_its_tables_from_two_tiny_finished_runs(tiny_grid):
    from heavytail.harness.evaluate import load_results

    got = finished_runs(tiny_grid)
    assert len(got.runs) == 2 and not got.skipped
    aggs = S.aggregate(got.runs)
    by_kernel = {a["kernel"]: a for a in aggs}
    t5 = S.ratio_table(aggs, "sheared_swap", "median")
    assert "14 of 16 cells not run" in t5["notes"]  # post-norm rows only: no pre-norm runs
    for row, kernel in zip(t5["rows"], S.KERNELS):
        cell = row["mirrored Pareto / none"]
        if kernel not in by_kernel:
            assert cell is None
            continue
        res = load_results(tiny_grid / by_kernel[kernel]["names"][0])
        med = res["energy"]["median"]
        assert cell["ratio"] == med["ratio"] and cell["low"] == med["low"] and cell["high"] == med["high"]
        assert cell["collapse"] == (res["collapse"]["label"] == "collapse")
        assert cell["bold"] == (med["bold"] and not cell["collapse"])
        hill = S.hill_table(aggs, "sheared_swap", 1)["rows"][S.KERNELS.index(kernel)]["mirrored Pareto / none"]
        assert hill["E"] == res["hill"]["axes"]["1"]["E"]
    found = {f["id"]: f for f in AC.findings(aggs, min_seeds=1)}
    softmax_collapsed = by_kernel["softmax"]["collapse"]["label"] == "collapse"
    assert found["softmax-collapses-sheared_swap"]["verdict"] == ("reproduced" if softmax_collapsed else "not reproduced")
    assert {f["id"]: f for f in AC.findings(aggs)}["softmax-collapses-sheared_swap"]["verdict"] == \
        "undecided at this power"
    assert found["slower-avoid-collapse-sheared_swap"]["verdict"] == "not run"
    assert {f["verdict"] for k, f in found.items() if k != "softmax-collapses-sheared_swap"} == {"not run"}
    scale = {r["setting"]: r["this grid"] for r in S.scale_table(got.runs)["rows"]}
    assert scale["n_points"] == "64" and scale["d_model"] == "16" and scale["steps"] == "4"


def test_the_summary_notebook_runs_on_two_tiny_runs(tiny_grid, tmp_path):
    import csv

    from heavytail.harness.artifacts import repo_root
    from heavytail.pipeline.notebook import run_notebook

    root = repo_root()
    result = run_notebook(root / "notebooks" / "06_summary.py", tmp_path, {"grid_dir": str(tiny_grid)},
                          cwd=root, report="test", progress=False)
    assert result.status == "ok", (result.failed_cell, result.error)
    art = tmp_path / "06_summary"
    aggs = S.aggregate(finished_runs(tiny_grid).runs)
    with open(art / "table5_median.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["mirrored Pareto / none"] for r in rows] == [c["mirrored Pareto / none"]
                                                           for c in S.records(S.ratio_table(aggs, "sheared_swap"))]
    assert {r["verdict"] for r in map(dict, S.records(AC.findings_table(AC.findings(aggs))))} >= {"not run"}
    with open(art / "findings.csv", newline="") as fh:
        assert [r["verdict"] for r in csv.DictReader(fh)] == [f["verdict"] for f in AC.findings(aggs)]
    assert (art / "figure2_sheared_swap_post.png").is_file() and (art / "figure10_sheared_swap_ecdf.png").is_file()
    assert not (art / "figure3_matrix_inverse_post.png").exists()  # no matrix inverse runs: not drawn
    text = (tmp_path / "06_summary.html").read_text()
    assert "What ran at this scale" in text and "not run" in text
