"""The run record (heavytail.studies.run_record): made once from a summary and checked there, typed where the studies
read it, and the summary it came from, unchanged, where a map file needs it back."""

from __future__ import annotations

import json

import pytest

from heavytail.io import dumps_json
from heavytail.studies.run_record import CONFIG_KEYS, RunRecord
from summaries import complete


def _summary(**parts):
    return complete({"config": {"kernel": "log_elu", "seed": 3, "n_points": 256, "eval_n_points": 1024},
                     "median": {"ratio": 2.5, "low": 2.0, "high": 3.1}, "trace": {"step": [25, 50]}, **parts})


def test_a_record_reads_typed_and_gives_its_summary_back_unchanged():
    summary = _summary(collapse={"label": "collapse", "fraction": 0.9})
    run = RunRecord.from_summary(summary)
    assert (run.kernel, run.seed, run.n_points, run.eval_n_points, run.ratio) == ("log_elu", 3, 256, 1024, 2.5)
    assert run.label == "collapse" and run.collapsed
    assert run["trace"] == {"step": [25, 50]} and run["median"]["high"] == 3.1 and run.get("absent") is None
    assert run == summary and run.to_summary() == summary
    assert json.loads(dumps_json(run)) == summary  # a map file writes it as the summary
    assert RunRecord.from_summary(run) is run


def test_a_record_is_read_only_and_changes_only_by_a_derived_copy():
    run = RunRecord.from_summary(_summary())
    with pytest.raises(TypeError):
        run.config["seed"] = 4
    with pytest.raises(AttributeError):
        run.name = "other"
    best = run.with_parts(median={"ratio": 1.5}, trace={"step": []})
    assert (best.ratio, best["trace"], run.ratio, run["trace"]) == (1.5, {"step": []}, 2.5, {"step": [25, 50]})


@pytest.mark.parametrize("broken, says", [
    (lambda s: {k: v for k, v in s.items() if k != "collapse"}, "it has no collapse"),
    (lambda s: {**s, "config": {k: v for k, v in s["config"].items() if k != "seed"}}, "config.seed"),
    (lambda s: {**s, "median": {"ratio": "2.5"}}, "median.ratio (a number)"),
    (lambda s: {**s, "collapse": {"fraction": 0.0}}, "collapse.label"),
    (lambda s: {**s, "mean": [1.0]}, "not an object"),
])
def test_a_summary_that_is_not_a_run_is_one_line_naming_the_run_and_what_it_lacks(broken, says):
    with pytest.raises(ValueError) as err:
        RunRecord.from_summary(broken(_summary(name="softmax-7")))
    assert "softmax-7" in str(err.value) and says in str(err.value) and "\n" not in str(err.value)


def test_every_configuration_key_the_readers_take_is_required():
    for key in CONFIG_KEYS:
        s = _summary()
        del s["config"][key]
        with pytest.raises(ValueError, match=f"config.{key}"):
            RunRecord.from_summary(s)
