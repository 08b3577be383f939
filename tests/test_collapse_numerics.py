"""Notebook 05's computations (heavytail.studies.collapse.numerics) on run folders made by hand: the curves and
onsets of Figure 13, Figure 12's pick, the variants' labels, and the one record they read."""

from __future__ import annotations

import json

import pytest

from heavytail.studies.collapse import numerics
from heavytail.studies.grid_folder import FinishedRun, finished_runs
from tests.test_summary import _write_run, fake_results


def _log(folder, collapsed_from=None, steps=40):
    rows = [{"step": s, "loss": 1.0 / s, "n_skipped": 0, "seconds": 0.1 * s,
             "collapsed_fraction": 1.0 if collapsed_from is not None and s >= collapsed_from else 0.0}
            for s in range(1, steps + 1)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _grid(tmp_path):
    made = {}
    for name, kernel, symlog, collapsed_from, collapsed in (("soft", "softmax", False, 20, True),
                                                             ("soft-sym", "softmax", True, None, False),
                                                             ("logelu", "log_elu", False, None, False)):
        res = fake_results(kernel=kernel, symlog=symlog, collapsed=collapsed)
        _write_run(tmp_path / name, res)
        _log(tmp_path / name, collapsed_from)
        made[name] = res
    other = fake_results(kernel="softmax", norm="pre", collapsed=True)  # not a cell of Figures 12-13
    _write_run(tmp_path / "pre", other)
    _log(tmp_path / "pre", 5)
    return made


def test_figure13_curves_carry_each_runs_onset_and_only_the_figures_cell(tmp_path):
    _grid(tmp_path)
    runs = numerics.grid_runs(tmp_path, **numerics.FIGURE_CELL)
    assert sorted(r.name for r in runs) == ["logelu", "soft", "soft-sym"]
    curves = numerics.training_curves(runs)
    assert [(c.kernel, c.symlog) for c in curves] == [("log_elu", False), ("softmax", False), ("softmax", True)]
    onset = {(c.kernel, c.symlog): c.onset for c in curves}
    assert onset[("softmax", False)] == 20 and onset[("softmax", True)] is None and onset[("log_elu", False)] is None
    assert len(curves[1].steps) == len(curves[1].loss) == 40
    assert numerics.onsets_text(curves) == "collapse onsets: softmax (none) at step 20"
    assert numerics.onsets_text([c for c in curves if c.onset is None]).endswith("none: no grid run collapsed")
    assert numerics.grid_runs(tmp_path / "absent") == []


def test_figure12_picks_the_most_collapsed_run_without_symlog_and_says_what_it_lacks(tmp_path):
    _grid(tmp_path)
    runs = numerics.grid_runs(tmp_path, **numerics.FIGURE_CELL)
    soft, healthy = numerics.most_collapsed(runs, "softmax"), numerics.most_collapsed(runs, "log_elu")
    assert soft.name == "soft" and healthy.name == "logelu"
    assert numerics.most_collapsed(runs, "squared_elu") is None
    note = numerics.figure12_note(soft, healthy)
    assert "'collapse' (100% of trials collapsed)" in note and "'ok' (0%)" in note
    assert numerics.figure12_note(soft, None) == "Figure 12 needs the grid's softmax and log-ELU runs."


def test_variants_are_labelled_softmax_first_and_share_their_other_settings(tmp_path):
    _grid(tmp_path)
    runs = [r for r in finished_runs(tmp_path).runs if not r.config["symlog"] and r.config["norm"] == "post"]
    by_label = numerics.variants(runs)
    (soft_label, soft), (other_label, other) = by_label.items()
    assert soft_label.startswith("softmax") and other.config["kernel"] == "log_elu"
    shared = numerics.shared_settings(runs)
    assert shared["benchmark"] == "sheared_swap" and "kernel" not in shared
    assert "collapsed from step 20" in numerics.describe(soft_label, soft)
    assert "did not collapse in training" in numerics.describe(other_label, other)


def test_the_record_reads_config_log_and_attention_path_and_refuses_what_is_not_results(tmp_path):
    made = _grid(tmp_path)
    run = next(r for r in finished_runs(tmp_path).runs if r.name == "soft")
    assert run.config == made["soft"]["config"] and len(run.log) == 40
    assert run.attention == {"train": None, "eval": None}  # these results recorded no path
    recorded = dict(made["soft"], runtime={"training": {"attention_backend": "sdpa"},
                                           "evaluation": {"attention_backend": "tiled"}})
    assert FinishedRun.from_results(recorded).attention == {"train": "sdpa", "eval": "tiled"}
    assert FinishedRun.from_results(recorded).log == ()  # made by hand: no folder, no log
    with pytest.raises(ValueError, match="lack"):
        FinishedRun.from_results({"config": {}})
