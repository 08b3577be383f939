"""The run record (heavytail.studies.run_record): made once from a summary and checked there, typed where the studies
read it, and the summary it came from, unchanged, where a map file needs it back."""

from __future__ import annotations

import json

import pytest

from heavytail.harness.config import RunConfig
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


def test_every_setting_a_study_reads_is_typed_and_one_the_run_did_not_record_reads_the_default_it_took():
    s = _summary()
    s["config"].update(lr="3e-4", symlog=True, steps=6000, log_every=25)
    for added_later in ("qk_norm", "split_kernel"):  # settings added to RunConfig after such a run
        s["config"].pop(added_later, None)
    run = RunRecord.from_summary(s)
    assert (run.lr, run.symlog, run.steps, run.log_every) == (3e-4, True, 6000, 25)
    assert isinstance(run.lr, float) and isinstance(run.steps, int)
    assert (run.qk_norm, run.split_kernel) == (RunConfig().qk_norm, RunConfig().split_kernel) == (False, "")
    assert "qk_norm" not in run.config and run.to_summary() == s  # the default is read, never written back
    typed = [k for k, v in vars(RunRecord).items() if type(v).__name__ == "_Configured"]
    assert set(CONFIG_KEYS) <= set(typed) <= set(RunConfig().to_dict())


def test_a_study_takes_plain_summaries_and_records_alike():
    from heavytail.studies.run_record import records

    plain = [_summary(), _summary(name="other")]
    made = records(plain)
    assert [r.seed for r in made] == [3, 3] and records(made)[0] is made[0]
