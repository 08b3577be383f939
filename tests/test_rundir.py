"""The run folder's one owner: paths, states, and one staleness rule for train, grid and summary."""

import yaml

from heavytail.harness.config import RunConfig
from heavytail.io import save_json
from heavytail.harness.rundir import RunDir, find_run_dirs, same_run

CFG = RunConfig(d_model=8, n_blocks=1, d_ff=8, steps=4, warmup_steps=0, n_points=16, trials_per_step=2,
                eval_trials=2, eval_n_points=16, bootstrap_resamples=10)


def test_states_follow_the_files_training_and_evaluation_write(tmp_path):
    run = RunDir(tmp_path / "r")
    assert run.state() == "new" and run.latest_checkpoint() is None and run.training_log() == []
    run.checkpoints_dir.mkdir(parents=True)
    for step in (2, 10, 4):
        run.checkpoint_path(step).write_bytes(b"")
    assert [p.name for p in run.checkpoints()] == ["step_00000002.pt", "step_00000004.pt", "step_00000010.pt"]
    assert run.state() == "resumable from step_00000010"
    run.metrics_path.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "lo')  # a line cut by a kill
    assert run.training_log() == [{"step": 1, "loss": 0.5}]
    run.complete_path.write_text("")
    assert run.is_complete() and run.state() == "complete" and not run.has_results()


def test_one_staleness_rule_through_runconfig(tmp_path):
    # a key added to RunConfig since a run was recorded (missing from the old record) changes nothing ...
    old = {k: v for k, v in CFG.to_dict().items() if k != "track_attention"}
    assert same_run(old, CFG)
    # ... nor does a pacing key; any other key does, and so does a record RunConfig no longer accepts
    assert same_run(CFG.replace(log_every=1, device="cpu"), CFG)
    assert not same_run(CFG.replace(lr=0.5), CFG)
    assert not same_run({**CFG.to_dict(), "removed_key": 1}, CFG) and not same_run(None, CFG)

    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.config_path.write_text(CFG.to_yaml())
    save_json({"config": old}, run.results_path)
    assert run.stale_results() is None  # summary and grid now agree on such a run
    save_json({"config": CFG.replace(steps=5).to_dict()}, run.results_path)
    assert "steps" in run.stale_results()


def test_finished_means_complete_evaluated_and_executed_for_the_same_run(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.complete_path.write_text("")
    save_json({"config": CFG.to_dict()}, run.results_path)
    assert not run.is_finished(CFG)  # no execution record yet
    save_json({"status": "ok", "config": CFG.replace(checkpoint_every=2).to_dict()}, run.execution_path)
    assert run.is_finished(CFG) and not run.is_finished(CFG.replace(seed=1))
    save_json({"status": "failed", "config": CFG.to_dict()}, run.execution_path)
    assert not run.is_finished(CFG)


def test_run_folders_are_found_below_a_grid_but_not_in_private_folders(tmp_path):
    for rel in ("a", "b/c", "_floors/x", ".hidden/y"):
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / "config.yaml").write_text(yaml.safe_dump({}))
    assert [str(r.path.relative_to(tmp_path)) for r in find_run_dirs(tmp_path)] == ["a", "b/c"]
