"""A configuration's unit of work: train (or resume) and evaluate into its run folder, in one call."""

from heavytail.harness.experiment import run_configuration
from heavytail.io import save_json
from heavytail.harness.train import train


def test_one_call_trains_resumes_and_evaluates_and_reuses_a_current_evaluation(tmp_path, tiny_cfg):
    run_dir = tmp_path / "run"
    train(tiny_cfg, run_dir, quiet=True, stop_after=2)  # an interrupted run: the unit of work resumes it
    first = run_configuration(tiny_cfg.to_dict(), run_dir, floor_cache=tmp_path / "_floors")
    assert first.state_before == "resumable from step_00000002" and first.evaluated_now
    assert first.run.is_complete() and first.run.has_results() and first.config == tiny_cfg
    assert first.results["config"] == tiny_cfg.to_dict() and first.log[-1]["step"] == tiny_cfg.steps
    assert first.n_skipped == first.log[-1]["n_skipped"]

    again = run_configuration(tiny_cfg.replace(log_every=1), run_dir, floor_cache=tmp_path / "_floors")
    assert again.state_before == "complete" and not again.evaluated_now  # a pacing key: the same run
    assert again.results == first.results

    # results.json of another configuration (stale) is not reused: the run is evaluated again
    save_json({**first.results, "config": tiny_cfg.replace(eval_trials=tiny_cfg.eval_trials + 1).to_dict()},
              first.run.results_path)
    third = run_configuration(tiny_cfg, run_dir, floor_cache=tmp_path / "_floors")
    assert third.evaluated_now and third.results["config"] == tiny_cfg.to_dict()
