"""The collapse ladder's rules (heavytail.studies.collapse.ladder) on synthetic runs: rungs are read off the
configuration, the combined rule is calibrated under a null, and too few seeds is never "not reproduced"."""

from __future__ import annotations

import math

import numpy as np
import pytest

from heavytail.harness.config import RunConfig
from heavytail.studies import claims as C
import heavytail.studies.collapse.ladder as L
import heavytail.studies.collapse.ladder_tables as T
from summaries import complete

M = 2000
TOL = 3 * math.sqrt(0.05 * 0.95 / M)
TABLE3 = dict(d_model=256, n_blocks=6, d_ff=512)


def _run(seed, kernel="softmax", backend="sdpa", precision="float32", symlog=False, collapsed=False, steps_share=0.0,
         **model):
    cfg = RunConfig(**(model or TABLE3), kernel=kernel, attention_backend=backend, precision=precision, symlog=symlog,
                    n_points=1024, trials_per_step=1, lr=1e-3, seed=seed, steps=6000, device="cpu").to_dict()
    flags = [1.0] * round(100 * steps_share) + [0.0] * (100 - round(100 * steps_share))
    return complete({"config": cfg, "collapse": {"label": "collapse" if collapsed else "ok",
                                                 "fraction": 0.9 if collapsed else 0.0, "onset": 3400 if collapsed else None},
                     "trace": {"collapsed_fraction": flags}, "median": {"ratio": 2.0}})


def test_rungs_are_read_off_the_configuration():
    assert L.rung_of(_run(0)["config"]) == "R2"
    assert L.rung_of(_run(0, precision="bf16")["config"]) == "R3"
    assert L.rung_of(_run(0, precision="bf16", symlog=True)["config"]) == "R4"
    assert L.rung_of(_run(0, d_model=32, n_blocks=2, d_ff=64)["config"]) == "R1"
    assert L.rung_of(_run(0, d_model=64, n_blocks=2, d_ff=64)["config"]) is None


def test_the_grid_file_holds_every_rung_with_both_kernels():
    from heavytail.pipeline.grid_file import GridSpec

    configs = GridSpec.from_yaml("params/grid_collapse_ladder.yaml").configs
    cells = {(L.rung_of(c.to_dict()), L.variant(c.to_dict())) for c in configs}
    for rung in ("R2", "R3", "R4"):
        assert (rung, L.SOFTMAX_SDPA) in cells and (rung, L.LOG_ELU) in cells
    assert ("R3", L.SOFTMAX_F32) in cells
    assert {c.seed for c in configs} >= set(range(L.MIN_SEEDS))
    # seeds are the outer axis: every rung is screened on seeds 0-1 before any rung gets seed 2
    seeds = [c.seed for c in configs]
    assert seeds == sorted(seeds)


def test_most_softmax_runs_collapsing_and_no_log_elu_reproduces():
    runs = [_run(s, collapsed=s != 0, steps_share=0.3) for s in range(8)]
    runs += [_run(s, kernel="log_elu", backend="auto") for s in range(8)]
    found = {f["id"]: f for f in L.findings(runs)}
    assert found["paper-collapse-R2"]["verdict"] == C.UNDECIDED  # 7/8: interval 0.47-1.0 straddles 1/2
    runs = [_run(s, collapsed=True, steps_share=0.3) for s in range(8)] + runs[8:]
    found = {f["id"]: f for f in L.findings(runs)}
    assert found["paper-collapse-R2"]["verdict"] == C.REPRODUCED
    assert found["collapse-steps-R2"]["verdict"] == C.REPRODUCED
    assert "step 3400" in found["paper-collapse-R2"]["evidence"]


def test_none_collapsing_at_six_seeds_is_not_reproduced_and_at_five_undecided():
    for n, verdict in ((6, C.NOT_REPRODUCED), (5, C.UNDECIDED)):
        runs = [_run(s) for s in range(n)] + [_run(s, kernel="log_elu", backend="auto") for s in range(n)]
        found = {f["id"]: f for f in L.findings(runs)}
        assert found["paper-collapse-R2"]["verdict"] == verdict
        assert found["collapse-steps-R2"]["verdict"] != C.NOT_REPRODUCED or n >= L.MIN_SEEDS


def test_squared_elu_gets_rules_1_to_3_where_it_ran_and_leaves_log_elus_claims_as_they_were():
    runs = [_run(s, collapsed=True, steps_share=0.4) for s in range(6)]
    runs += [_run(s, kernel="log_elu", backend="auto") for s in range(6)]
    alone = {f["id"]: f for f in L.findings(runs)}
    assert not any("squared" in i for i in alone)  # no squared ELU run: no rule-6 claim
    # squared ELU collapsing in half its runs: the paper's claim for it cannot read reproduced
    sq = [_run(s, kernel="squared_elu", backend="auto", collapsed=s % 2 == 0, steps_share=0.2 * (s % 2 == 0))
          for s in range(6)]
    found = {f["id"]: f for f in L.findings(runs + sq)}
    for cid in ("paper-collapse-R2", "collapse-steps-R2", "collapse-trials-R2"):
        assert found[cid] == alone[cid]
    assert found["paper-collapse-squared-R2"]["verdict"] == C.UNDECIDED
    assert "3 of 6 squared ELU runs" in found["paper-collapse-squared-R2"]["evidence"]
    assert "squared ELU's share" in found["paper-collapse-squared-R2"]["needs"]
    assert found["collapse-steps-squared-R2"]["verdict"] == C.REPRODUCED  # +0.4 or +0.2 on every seed
    sq = [_run(s, kernel="squared_elu", backend="auto") for s in range(6)]
    found = {f["id"]: f for f in L.findings(runs + sq)}
    assert found["paper-collapse-squared-R2"]["verdict"] == C.REPRODUCED
    assert L.in_table(found["paper-collapse-squared-R2"]) and not L.in_table(found["collapse-trials-squared-R2"])


def test_the_grid_runs_squared_elu_on_the_deciding_rung_only():
    from heavytail.pipeline.grid_file import GridSpec

    configs = GridSpec.from_yaml("params/grid_collapse_ladder.yaml").configs
    rungs = {L.rung_of(c.to_dict()) for c in configs if L.variant(c.to_dict()) == L.SQUARED_ELU}
    assert rungs == {"R2"}
    assert sorted(c.seed for c in configs if L.variant(c.to_dict()) == L.SQUARED_ELU) == list(range(L.MIN_SEEDS))


def test_precision_claim_appears_where_both_softmax_paths_ran():
    runs = [_run(s, precision="bf16", steps_share=0.2) for s in range(6)]
    runs += [_run(s, precision="bf16", backend="flash") for s in range(6)]
    found = {f["id"]: f for f in L.findings(runs)}
    assert found["collapse-precision-R3"]["verdict"] == C.REPRODUCED
    assert "collapse-precision-R2" not in found


def test_the_findings_table_keeps_one_verdict_per_rung_and_the_graded_comparisons_go_to_the_findings_page():
    from heavytail.studies import claim_groups

    runs = [_run(s, precision="bf16", steps_share=0.2) for s in range(6)]
    runs += [_run(s, precision="bf16", backend="flash") for s in range(6)]
    runs += [_run(s, kernel="log_elu", backend="auto", precision="bf16") for s in range(6)]
    found = L.findings(runs)
    shown = {f["id"] for f in found if L.in_table(f)}
    assert shown == {"paper-collapse-R3", "collapse-precision-R3"}
    assert {f["id"] for f in found} - shown == {"collapse-steps-R3", "collapse-trials-R3"}
    ladder = claim_groups.group("ladder")
    assert ladder.in_table is L.in_table and claim_groups.group("gap-design").in_table is None


@pytest.mark.parametrize("rate", [0.3, 0.5])
def test_combined_rule_false_positive_rate_under_a_null(rate):
    """Softmax's true collapse rate at or below 1/2: the rule says reproduced at most 5 % of the time."""
    rng = np.random.default_rng(0)
    hits = 0
    # Each seed's two possible softmax runs and its log-ELU run, built once (the rule only reads them).
    runs = {(s, c): _run(s, collapsed=c) for s in range(8) for c in (False, True)}
    other = [_run(s, kernel="log_elu", backend="auto") for s in range(8)]
    for _ in range(M):
        soft = [runs[s, bool(rng.random() < rate)] for s in range(8)]
        hits += L.paper_collapse(soft, other).verdict == C.REPRODUCED
    assert hits / M <= 0.05 + TOL


def test_ladder_table_lists_every_cell():
    runs = [_run(s) for s in range(2)] + [_run(s, precision="bf16", kernel="log_elu", backend="auto") for s in range(2)]
    table = T.table(runs)
    assert {(r["rung"], r["variant"]) for r in table["rows"]} == {("R2", "softmax (SDPA)"), ("R3", "log-ELU")}


def test_ladder_table_lists_each_seeds_values_in_the_order_of_its_seeds():
    """Per-seed columns line up with the seeds column, whatever order the runs come in."""
    runs = [_run(2, steps_share=0.1), _run(0, collapsed=True, steps_share=0.7), _run(1, steps_share=0.3)]
    runs[0]["median"]["ratio"], runs[1]["median"]["ratio"] = 5.0, 130.0
    (row,) = T.table(runs)["rows"]
    assert row["seeds"] == "0, 1, 2" and row["runs collapsed"] == "1 of 3"
    assert row["collapsed batches (share of logged steps, per seed)"] == "0.700, 0.300, 0.100"
    assert row["onset (step), per seed"] == "3400, none, none"
    assert row["median ratio (eq. 36), per seed"] == "130, 2, 5"
    assert row["bf16 matmuls, per seed"] == "none: float32, every seed"


def test_a_bf16_runs_path_is_read_from_every_call_that_trained_it():
    old, new, mixed = (_run(s, precision="bf16") for s in range(3))
    new["provenance"] = [{"bf16_matmuls": "emulated"}]
    mixed["provenance"] = [{}, {"bf16_matmuls": "emulated"}]  # begun before the emulation, resumed under it
    assert [L.bf16_path(r) for r in (old, new, mixed, _run(0))] == ["torch", "emulated", "torch+emulated", None]
    (row,) = T.table([new, old, mixed])["rows"]
    assert row["seeds"] == "0, 1, 2" and row["bf16 matmuls, per seed"] == "torch, emulated, torch+emulated"
    (row,) = T.table([old])["rows"]
    assert row["bf16 matmuls, per seed"] == "torch"


def test_the_ladder_runs_block_prints_both_tables_as_markdown():
    from heavytail.studies import claim_groups

    text = claim_groups.text_of(claim_groups.LADDER_RUNS)
    assert text.startswith("**The ladder, per rung and kernel**") and "**Before each onset, block 0" in text
    header = next(line for line in text.splitlines() if line.startswith("| rung | variant"))
    width = header.count("|")
    rows = [line for line in text.split("**Before each onset")[0].splitlines() if line.startswith("| R")]
    assert rows and all(line.count("|") == width for line in rows)


@pytest.mark.parametrize("change, message", [
    ({"precision": "fp8"}, "precision='fp8' is not allowed"),
    ({"kernel": "log_elu", "attention_backend": "sdpa"}, "computes softmax only"),
    ({"warmup_steps": 50000}, "warmup_steps=50000 must be smaller than the schedule's schedule_steps=50000"),
])
def test_a_bad_rung_is_one_line_and_exit_2_before_anything_trains(tmp_path, capsys, change, message):
    import yaml

    from heavytail.pipeline.grid import main as grid_main

    grid = yaml.safe_load(open("params/grid_collapse_ladder.yaml"))
    for key in change:
        grid["base"].pop(key, None)  # a key is set in one place: here, the rung
    grid["axes"]["cells"][0] = {**grid["axes"]["cells"][0], **change}
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump(grid))
    assert grid_main([str(path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "out" / grid["name"]).exists() or not any((tmp_path / "out" / grid["name"]).iterdir())


def test_the_onset_figure_aligns_each_run_that_collapsed_for_good_on_its_onset():
    """Every run with an onset is drawn on every panel with its regular log shifted so that its onset is step 0,
    from the start of training to its end; the log-ELU run of the same seed is drawn once, shifted by softmax's
    onset where softmax has one (squared ELU's otherwise)."""
    import matplotlib.pyplot as plt

    from heavytail.studies import reference_maps
    from heavytail.studies.collapse import ladder_plots

    runs = reference_maps.load("ladder")["runs"]
    onset = [r for r in runs if r["collapse"].get("onset") is not None]
    assert onset, "the shipped ladder holds a run that collapsed for good"
    fig = ladder_plots.onset_figure(runs)
    try:
        ax = fig.axes[0]  # the loss: logged by every run
        thin = [ln for ln in ax.lines if ln.get_linewidth() < 1 and ln.get_alpha() is not None]  # not the onset line
        spans = sorted((float(min(ln.get_xdata())), float(max(ln.get_xdata()))) for ln in thin)
        expected = []
        for r in onset:
            t0 = r["collapse"]["onset"]
            expected.append((r["trace"]["step"][0] - t0, r["trace"]["step"][-1] - t0))
        partners = {}  # a log-ELU run is aligned on softmax's onset of its seed where there is one
        for r in sorted(onset, key=lambda r: r["config"]["kernel"] != "softmax"):
            if L.variant(r) != L.LOG_ELU:
                partners.setdefault((L.rung_of(r["config"]), r["config"]["seed"]), r["collapse"]["onset"])
        for x in runs:
            t0 = partners.get((L.rung_of(x["config"]), x["config"]["seed"]))
            if L.variant(x) == L.LOG_ELU and t0 is not None:
                expected.append((x["trace"]["step"][0] - t0, x["trace"]["step"][-1] - t0))
        assert spans == sorted((float(a), float(b)) for a, b in expected)
    finally:
        plt.close(fig)


def test_the_window_figure_has_one_row_per_every_step_window():
    import matplotlib.pyplot as plt

    from heavytail.studies import reference_maps
    from heavytail.studies.collapse import ladder_plots

    runs = reference_maps.load("ladder")["runs"]
    windows = [r for r in runs if (r.get("onset_window") or {}).get("center") is not None]
    fig = ladder_plots.window_figure(runs)
    try:
        ax = fig.axes[0]
        assert len(ax.get_yticklabels()) == len(windows)
        image = ax.images[0].get_array()
        assert image.shape[0] == len(windows)
        # each row holds its run's window, every step, aligned on the centre
        assert int(image.count()) == sum(
            sum(v is not None for v in r["onset_window"]["block0.attn_absorbed"]) for r in windows)
    finally:
        plt.close(fig)


def test_saturated_from_is_the_first_step_from_which_every_later_step_is_absorbed():
    run = {"trace": {"step": [25, 50, 75, 100, 125], "block0.attn_absorbed": [0.9, 0.2, 0.8, None, 0.6]}}
    assert T.saturated_from(run) == 125  # a step not logged breaks the stretch, as a healthy one does
    run["trace"]["block0.attn_absorbed"][3] = 1.0
    assert T.saturated_from(run) == 75
    run["trace"]["block0.attn_absorbed"][4] = 0.5  # "most rows": one half is not absorbed
    assert T.saturated_from(run) is None
    assert T.saturated_from({"trace": {}}) is None


def test_precursors_compare_the_span_before_each_onset_with_the_first_span_and_pair_log_elu_by_seed():
    def traced(run, grads):
        run["trace"] = {"step": [0, 100, 200, 300, 400, 500], "block0.qk_grad_norm": grads,
                        "block0.attn_absorbed": [0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
                        "collapsed_fraction": [0.0, 1.0, 0.0, 0.0, 1.0, 1.0]}
        return run

    soft = traced(_run(0, collapsed=True), [8.0, 4.0, 2.0, 1e-3, 1e-4, 1e-5])
    soft["collapse"]["onset"] = 500
    elu = traced(_run(0, kernel="log_elu", backend="auto"), [2.0, 2.0, 1.0, 0.5, 0.5, 0.5])
    other = traced(_run(1, kernel="log_elu", backend="auto"), [1.0] * 6)  # no softmax run with an onset
    found = T.precursors([soft, elu, other], span=200)
    assert len(found) == 1 and found[0]["seed"] == 0 and found[0]["span"] == 200
    # the first span holds steps 0-200 (median 4); the span before the onset steps 300-400 (upper median 1e-3)
    assert found[0]["qk_grad"] == pytest.approx((4.0, 1e-3))
    assert found[0]["partner"] == pytest.approx((2.0, 0.5))
    assert found[0]["saturated_from"] == 200
    assert found[0]["collapsed_before"] == 0.5  # steps 300 and 400: one collapsed batch; the onset's own is after
    table = T.precursor_table(found)
    assert "the 200 steps before it" in table["notes"] and "1,000" not in table["notes"]
    assert table["rows"][0]["collapsed batches before the onset (share of logged steps)"] == "0.50"
    assert table["rows"][0]["W_Q/W_K gradient, before the onset / first steps"] == f"{1e-3 / 4.0:.1e}"
    assert table["rows"][0]["log-ELU, same seed and steps"] == f"{0.5 / 2.0:.1e}"


def test_the_precursor_sentence_never_counts_an_absorption_after_the_onset_as_before_it():
    def found(seed, onset, saturated, grads, collapsed_before, rung="R2"):
        return {"rung": rung, "variant": L.SOFTMAX_SDPA, "seed": seed, "onset": onset, "span": 1000,
                "saturated_from": saturated, "collapsed_before": collapsed_before, "qk_grad": grads,
                "partner": (1.0, 0.1)}

    text = T.precursor_sentence([found(1, 5000, 4000, (1.0, 1e-6), 0.6), found(2, 5500, 1500, (2.0, 2e-4), 0.9),
                                 found(1, 4700, 5500, (1.0, 5e-2), 0.2, rung="R4")])
    assert text.startswith("3 softmax runs reached an onset (R2 softmax (SDPA) seeds 1, 2; R4 softmax (SDPA) seed 1)")
    assert "2 of them had block 0 absorbed for good 1,000 to 4,000 steps before it" in text
    assert "x1e-06 to x1e-04" in text and "log-ELU over the same steps: x1e-01)" in text
    assert "Block 0 of R4 softmax (SDPA) seed 1 was absorbed for good only after the onset or never." in text
    assert "0.20 to 0.90" in text and "(the least: R4 softmax (SDPA) seed 1)" in text and "-800" not in text
    assert T.precursor_sentence([]) == ""


def test_the_task_figure_shows_runs_with_both_collapsed_and_healthy_trials_first():
    import matplotlib.pyplot as plt

    from heavytail.studies import reference_maps
    from heavytail.studies.collapse import ladder_plots
    from heavytail.studies.collapse.by_task import trials_of

    runs = reference_maps.load("ladder")["runs"]
    soft = [r for r in runs if r["config"]["kernel"] == "softmax" and L.rung_of(r["config"])
            and trials_of(r) is not None]
    mixed = sum(0 < trials_of(r)[1].sum() < trials_of(r)[1].size for r in soft)
    assert 0 < mixed < len(soft)  # the shipped map has both kinds, so the order matters
    fig = ladder_plots.task_figure(runs, limit=mixed + 1)
    try:
        counts = [ax.get_title().split(": ")[1].split("/") for ax in fig.axes if ax.get_title()]
        assert len(counts) == mixed + 1
        assert all(0 < int(a) < int(b) for a, b in counts[:mixed])
        assert not 0 < int(counts[mixed][0]) < int(counts[mixed][1])
    finally:
        plt.close(fig)


def test_the_onset_figures_legend_names_only_the_variants_it_draws():
    """Notebook 09 passes R1's runs too (exact float32 softmax among them); none has an onset, so the legend of
    the aligned figure must not name them."""
    import matplotlib.pyplot as plt

    from heavytail.studies import reference_maps
    from heavytail.studies.collapse import ladder_plots

    runs = list(reference_maps.load("ladder")["runs"]) + [
        r for r in reference_maps.load("gap-long")["runs"] if L.rung_of(r["config"]) == "R1"]
    assert any(L.variant(r) == L.SOFTMAX_EXACT for r in runs)
    fig = ladder_plots.onset_figure(runs)
    try:
        names = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
        drawn = {L.variant(r) for r in runs if r["collapse"].get("onset") is not None} | {L.LOG_ELU}
        assert L.SOFTMAX_EXACT not in drawn
        assert names == {L.VARIANT_LABELS[v] for v in drawn}
    finally:
        plt.close(fig)


def test_absorbed_share_counts_logged_steps_with_most_rows_absorbed_before_a_step():
    run = {"trace": {"step": [0, 25, 50, 75, 100], "block0.attn_absorbed": [0.0, 1.0, 0.75, None, 0.5],
                     "block1.attn_absorbed": [0.0] * 5}}
    assert T.absorbed_share(run) == pytest.approx(2 / 4)  # 0.5 is not "most"; None is not logged
    assert T.absorbed_share(run, before=50) == pytest.approx(1 / 2)
    assert T.absorbed_share(run, block=1) == 0.0
    assert T.absorbed_share(run, block=2) is None and T.absorbed_share({"trace": {}}) is None


def test_absorption_before_onset_reads_each_softmax_window_and_log_elus_runs():
    from heavytail.studies import reference_maps

    runs = reference_maps.load("ladder")["runs"]
    found = T.absorption_before_onset(runs)
    expected, logs = [], []
    for (rung, v), rs in L.ordered_cells(runs):
        for r in rs:
            centre = (r.get("onset_window") or {}).get("center")
            if v[0] == "softmax" and centre is not None:
                expected.append((rung, L.VARIANT_LABELS[v], r["config"]["seed"], centre,
                                 T.absorbed_share(r, before=centre)))
            elif v == L.LOG_ELU:
                logs.append(T.absorbed_share(r))
    assert expected and found["softmax"] == expected
    # one seed may have two softmax runs on a rung (R3: SDPA in bf16, attention in float32); each line says which
    assert len({x[:3] for x in found["softmax"]}) == len(found["softmax"])
    assert found["log_elu"] == max(x for x in logs if x is not None)
    # the table lists the same runs, one row each, and its note carries log-ELU's largest share
    table = T.absorption_table(found)
    assert [(r["rung"], r["kernel"], r["seed"], r["first collapsed batch (step)"]) for r in table["rows"]] == [
        x[:4] for x in expected]
    assert [r["block 0 absorbed before it (share of logged steps)"] for r in table["rows"]] == [
        f"{x[4]:.2f}" for x in expected]
    assert f"at most {found['log_elu']:.2f}" in table["notes"]
    assert "no log-ELU run" in T.absorption_table({"softmax": [], "log_elu": None})["notes"]


def test_task_table_lists_each_tested_softmax_run_in_rung_and_seed_order():
    from heavytail.studies import reference_maps

    runs = reference_maps.load("ladder")["runs"]
    soft = [r for r in runs if L.variant(r) == L.SOFTMAX_SDPA and L.rung_of(r["config"])]
    tests = {r["name"]: {"collapsed": i, "n": 64, "agreement": 0.5 + i / 100, "p": 1 / (i + 1), "permutations": 99}
             for i, r in enumerate(reversed(soft))}
    untested = soft[0]["name"]
    del tests[untested]
    table = T.task_table(runs, tests)
    keys = [(r["rung"], r["seed"]) for r in table["rows"]]
    assert keys == sorted(keys) and len(keys) == len(tests)  # every tested run once, in rung then seed order
    row = table["rows"][0]
    first = next(r for r in soft if r["name"] in tests and (L.rung_of(r["config"]), r["config"]["seed"]) == keys[0])
    t = tests[first["name"]]
    assert row["trials collapsed"] == f"{t['collapsed']} of 64" and row["p (label shuffles)"] == f"{t['p']:.3g}"
    assert "99 label shuffles" in table["notes"]


def test_an_onset_window_is_centred_on_a_collapse_after_a_healthy_stretch_never_on_a_collapsed_start():
    """Training opens a dense window at step 1 when the untrained model's batch collapses, and back-to-back windows
    log as one stretch of consecutive steps; the summary centres only on a collapse after `stretch` healthy steps
    (the condition training opens a window on), and shows it from that healthy stretch on."""
    from heavytail.studies.run_summary import onset_window

    def rows(steps, bad):
        return [{"step": s, "loss": 1.0, "collapsed_fraction": 1.0 if s in bad else 0.0, "dense": True,
                 "blocks": [{"attn_max_weight": 0.5}]} for s in steps]

    assert onset_window(rows(range(1, 8), {1, 2, 3}), stretch=3) == {"onset": None}  # collapsed at the start only
    merged = rows(range(1, 21), {1, 2, 12, 13, 15})  # 3-11 healthy: 12 opens a window; 14 alone is too short for 15
    out = onset_window(merged, stretch=3)
    assert out["center"] == 12 and out["step"] == list(range(9, 21))
    later = rows(range(100, 106), {103, 104, 105})
    out = onset_window(merged + later, stretch=3)  # without a lasting onset in the regular log: the last window
    assert out["center"] == 103 and out["step"] == list(range(100, 106))


def test_each_ring_of_the_rung_figure_circles_its_own_runs_dot():
    import matplotlib.pyplot as plt

    from heavytail.studies.collapse import ladder_plots

    runs = ([_run(s, collapsed=s != 1, steps_share=0.2 * (s + 1)) for s in range(3)]
            + [_run(s, kernel="log_elu", backend="auto", steps_share=0.0) for s in range(3)])
    fig = ladder_plots.collapse_figure(runs)
    try:
        ax = fig.axes[0]
        rings = [c for c in ax.collections if len(c.get_facecolors()) == 0]
        dots = [c for c in ax.collections if len(c.get_facecolors())]
        ringed = [tuple(p) for c in rings for p in c.get_offsets()]
        dotted = {tuple(p) for c in dots for p in c.get_offsets()}
        assert len(ringed) == 2 and all(p in dotted for p in ringed)
        assert sorted(round(y, 3) for _, y in ringed) == [0.2, 0.6]  # seeds 0 and 2, not seed 1's 0.4
    finally:
        plt.close(fig)


def test_the_ladder_map_keeps_block_0s_series_and_drops_the_other_blocks():
    """The map keeps what the figures read (block 0, which sees the raw tokens) and every other series."""
    from heavytail.studies import reference_maps as R, ship_map

    run = {"name": "r", "trace": {"step": [1], "loss": [2.0], "block0.attn_absorbed": [0.5], "block1.attn_absorbed": [0.1],
                                  "block12.max_abs_score": [3.0], "val_log_energy": [1.0]},
           "onset_window": {"center": 5, "step": [5], "block0.qk_grad_norm": [1.0], "block5.qk_grad_norm": [2.0]},
           "blocks": [{"max_abs_score": 1.0}, {"max_abs_score": 2.0}]}
    kept = ship_map.with_blocks(run, 1)
    assert set(kept["trace"]) == {"step", "loss", "block0.attn_absorbed", "val_log_energy"}
    assert set(kept["onset_window"]) == {"center", "step", "block0.qk_grad_norm"}
    assert kept["blocks"] == run["blocks"] and set(run["trace"]) >= set(kept["trace"])  # the summary per block stays
    assert R.MAPS["ladder"].blocks == 1
    shipped = R.load("ladder")["runs"]
    assert all(not k.startswith("block1.") for r in shipped for k in r["trace"])


LADDER_RECIPE = dict(schedule_steps=50000, warmup_steps=1000, flush_subnormals=True)


def _small(seed, kernel="softmax", backend="sdpa", **kw):
    """A run of rung R1b: R1's model on the ladder's recipe."""
    run = _run(seed, kernel, backend, d_model=32, n_blocks=2, d_ff=64, **kw)
    run["config"].update(LADDER_RECIPE)
    return run


def test_r1b_is_r1s_model_on_the_ladders_recipe_and_r1_keeps_its_own_schedule():
    assert L.rung_of(_small(0)["config"]) == "R1b"
    assert L.rung_of({**_small(0)["config"], "warmup_steps": 100}) == "R1"
    assert L.rung_of({**_small(0)["config"], "steps": 3000, "schedule_steps": 0, "warmup_steps": 100}) == "R1"
    assert L.rung_of({**_small(0)["config"], "precision": "bf16"}) is None


def test_the_r1b_grid_differs_from_the_ladders_r2_cells_in_the_model_only():
    from heavytail.pipeline.grid_file import GridSpec

    small = GridSpec.from_yaml("params/grid_collapse_ladder_small.yaml").configs
    ladder = {(c.seed, L.variant(c.to_dict())): c.to_dict() for c in GridSpec.from_yaml(
        "params/grid_collapse_ladder.yaml").configs if L.rung_of(c.to_dict()) == "R2"}
    assert {L.rung_of(c.to_dict()) for c in small} == {"R1b"}
    assert {(c.seed, L.variant(c.to_dict())) for c in small} == {
        (s, v) for s in range(L.MIN_SEEDS) for v in (L.SOFTMAX_SDPA, L.LOG_ELU)}
    for c in small:
        big = ladder[(c.seed, L.variant(c.to_dict()))]
        assert {k for k, v in c.to_dict().items() if big[k] != v} == {"d_model", "n_blocks", "d_ff"}


def test_rule_7_pairs_r2s_softmax_with_r1bs_by_seed():
    big = [_run(s, collapsed=True, steps_share=0.4) for s in range(6)]
    assert not any(f["id"].startswith("collapse-model") for f in L.findings(big))  # no R1b run: no claim
    found = {f["id"]: f for f in L.findings(big + [_small(s) for s in range(6)])}
    claim = found["collapse-model-R2"]
    assert claim["verdict"] == C.REPRODUCED and claim["estimate"] == pytest.approx(0.4)
    assert "0: +0.400" in claim["evidence"] and L.in_table(claim)
    assert found["paper-collapse-R1b"]["verdict"] == C.NOT_REPRODUCED  # 0 of 6 softmax runs: "most" excluded
    found = {f["id"]: f for f in L.findings(big + [_small(s, collapsed=True, steps_share=0.4) for s in range(6)])}
    assert found["collapse-model-R2"]["verdict"] != C.REPRODUCED  # no difference: not "model size matters"
    found = {f["id"]: f for f in L.findings(big[:5] + [_small(s) for s in range(5)])}
    assert found["collapse-model-R2"]["verdict"] == C.UNDECIDED  # 5 seeds cannot reach p < 0.05


def test_the_ladder_group_reads_the_r1b_map_with_its_own(tmp_path):
    from heavytail.io import save_json
    from heavytail.studies import claim_groups

    ref = tmp_path / "outputs" / "reference"
    ref.mkdir(parents=True)
    save_json({"provenance": {}, "runs": [{**_run(s, collapsed=True, steps_share=0.4), "name": f"r2-{s}", "mean": {}}
                                          for s in range(6)]}, ref / "collapse_ladder.json")
    g = claim_groups.group("ladder")
    assert "collapse-model-R2" not in {c["id"] for c in claim_groups.decide(g, tmp_path)}
    save_json({"provenance": {}, "runs": [{**_small(s), "name": f"r1b-{s}", "mean": {}} for s in range(6)]},
              ref / "collapse_ladder_small.json")
    found = {c["id"]: c for c in claim_groups.decide(g, tmp_path)}
    assert found["collapse-model-R2"]["verdict"] == C.REPRODUCED


def test_the_summary_says_where_the_collapse_appears_and_each_rungs_verdict_with_its_counts():
    runs = [_run(s, collapsed=True, steps_share=0.5) for s in range(6)]
    runs += [_run(s, kernel="log_elu", backend="auto") for s in range(6)]
    runs += [_run(s, precision="bf16", collapsed=s < 4, steps_share=0.3 + 0.05 * s) for s in range(6)]
    runs += [_run(s, kernel="log_elu", backend="auto", precision="bf16", collapsed=s == 5) for s in range(6)]
    runs += [_run(s, precision="bf16", symlog=True, collapsed=s == 1) for s in range(3)]
    runs += [_run(s, kernel="log_elu", backend="auto", precision="bf16", symlog=True) for s in range(3)]
    found = L.findings(runs)
    text = L.summary(found, runs, markdown=True)
    assert text.startswith("**Most softmax runs are labelled collapsed (Tables 5-6's criterion) at rung R2 of the collapse ladder**")
    r2, r3, r4 = (text.split(f"{r} (")[1].split(";")[0] for r in ("R2", "R3", "R4"))
    assert "reproduced, 6 of 6 softmax (SDPA) runs labelled collapsed [0.541, 1], log-ELU 0 of 6" in r2
    # R3: the rate rule cannot decide 4 of 6, but every seed's graded difference is positive
    assert r3.startswith("bf16 autocast): undecided at this power, 4 of 6") and "log-ELU 1 of 6" in r3
    assert "seed by seed (reproduced)" in r3
    assert "1 of 3 softmax" in r4 and "(3 seeds, where the rule needs 6)" in r4
    assert "emulated" not in text  # no run took the emulation
    for r in runs[-6:-3]:
        if r["config"]["seed"] == 2:
            r["provenance"] = [{"bf16_matmuls": "emulated"}]
    r4 = L.summary(found, runs).split("R4 (")[1]
    assert r4.endswith("(3 seeds, where the rule needs 6), bf16 emulated in 1 of 6 runs.")
    # nothing reproduced: the lead says so, and no bold without markdown
    healthy = [r for r in runs if not (r["config"]["precision"] == "float32" and r["config"]["kernel"] == "softmax")]
    healthy += [_run(s) for s in range(6)]
    plain = L.summary(L.findings(healthy), healthy)
    assert plain.startswith("Most softmax runs are labelled collapsed (Tables 5-6's criterion) at no rung of the collapse ladder run so far")
    assert "R2 (Table 3's model, float32): not reproduced, 0 of 6" in plain
    assert L.summary([], []) == "The collapse ladder has not been shipped yet."


def test_the_summary_states_the_precision_comparison_on_the_rung_that_has_it():
    runs = [_run(s, collapsed=True, steps_share=0.5) for s in range(6)]
    runs += [_run(s, kernel="log_elu", backend="auto") for s in range(6)]
    runs += [_run(s, precision="bf16", collapsed=True, steps_share=0.6) for s in range(6)]
    runs += [_run(s, kernel="log_elu", backend="auto", precision="bf16") for s in range(6)]
    assert "float32 under the same autocast" not in L.summary(L.findings(runs), runs)  # no float32-attention run
    runs += [_run(s, precision="bf16", backend="flash", collapsed=s == 0, steps_share=0.2) for s in range(6)]
    text = L.summary(L.findings(runs), runs)
    r3 = text.split("R3 (")[1].split(";")[0].split(". On the same recipe")[0].rstrip(".")  # R3 is the last rung here
    # every seed's bf16 path collapsed on 0.4 more of its logged steps: the sign flip decides at 6 seeds
    assert r3.endswith("and with softmax's attention in float32 under the same autocast 1 of 6 runs labelled "
                       "collapsed (bf16 SDPA minus float32 0.4 [0.4, 0.4] of logged steps collapsed, seed by seed, "
                       "reproduced, 6 seeds)")
    assert text.count("float32 under the same autocast") == 1  # R2 has no such runs


def test_collapsed_steps_reads_only_the_logging_grid():
    """A skipped step lands in the trace where it happened, off the every-log_every grid: it is not a logged step
    (R1b's softmax seed 0 had its only collapsed row at skipped step 2,271)."""
    from heavytail.studies.core import collapsed_steps

    run = complete({"config": {"log_every": 25},
                    "trace": {"step": [25, 50, 63, 75, 100], "collapsed_fraction": [0.0, 0.0, 1.0, 0.0, 1.0]}})
    assert collapsed_steps(run) == 0.25
    assert collapsed_steps(run, 50, 100) == 0.0
