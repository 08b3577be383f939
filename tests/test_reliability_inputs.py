"""Answers the inputs do not support are refused, never silently replaced: environment switches parsed strictly,
a thread count that is not a positive integer, a results file cut short counted as unfinished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from heavytail import cli
from heavytail.harness.config import RunConfig
from heavytail.harness.rundir import RunDir
from heavytail.io import dumps_json, load_json

ROOT = Path(__file__).resolve().parents[1]


def _run(args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "heavytail", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("ON", True), ("0", False), ("false", False),
                                       ("off", False), ("no", False), ("", False)])
def test_the_native_switch_reads_every_usual_spelling(monkeypatch, value, on):
    from heavytail.science import flash_native

    monkeypatch.setenv("HEAVYTAIL_NATIVE_FLASH", value)
    assert flash_native.enabled() is on


@pytest.mark.parametrize("env", [{"HEAVYTAIL_NATIVE_FLASH": "maybe"}, {"HEAVYTAIL_NATIVE_BUILD_WAIT_S": "abc"},
                                 {"HEAVYTAIL_NATIVE_BUILD_WAIT_S": "-5"}])
def test_a_bad_environment_value_is_one_line_and_exit_2(tmp_path, env):
    run = _run(["grid", "params/grid_smoke.yaml", "--list", "--output-root", str(tmp_path)], env)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and next(iter(env)) in lines[0] and "allowed" in lines[0]
    assert not any(tmp_path.iterdir())


def test_unset_variables_take_their_defaults(monkeypatch):
    monkeypatch.delenv("HEAVYTAIL_NATIVE_BUILD_WAIT_S", raising=False)
    assert cli.env_seconds("HEAVYTAIL_NATIVE_BUILD_WAIT_S", 900.0) == 900.0
    monkeypatch.setenv("HEAVYTAIL_NATIVE_BUILD_WAIT_S", "12.5")
    assert cli.env_seconds("HEAVYTAIL_NATIVE_BUILD_WAIT_S", 900.0) == 12.5
    assert cli.check_environment() is None


@pytest.mark.parametrize("threads", ["0", "-4"])
def test_a_thread_count_below_one_is_refused(tmp_path, threads):
    run = _run(["grid", "params/grid_smoke.yaml", "--list", "--threads", threads, "--output-root", str(tmp_path)])
    assert run.returncode == 2 and "--threads" in run.stderr and "Traceback" not in run.stderr


def _finished_run(tmp_path) -> tuple[RunDir, RunConfig]:
    cfg = RunConfig(steps=2, warmup_steps=1, n_points=16, trials_per_step=1, d_model=8, n_blocks=1, d_ff=8,
                    eval_trials=2, eval_n_points=16, device="cpu")
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.config_path.write_text(cfg.to_yaml() if hasattr(cfg, "to_yaml") else json.dumps(cfg.to_dict()))
    (run.path / "COMPLETE").write_text("")
    run.results_path.write_text(json.dumps({"config": cfg.to_dict(), "median": {"ratio": 1.0}}))
    run.execution_path.write_text(json.dumps({"status": "ok", "config": cfg.to_dict()}))
    return run, cfg


@pytest.mark.parametrize("cut", [0, 1, 40, -3])
def test_a_results_file_cut_short_is_not_a_finished_run(tmp_path, cut):
    run, cfg = _finished_run(tmp_path)
    if not run.is_complete():
        pytest.skip("the completion marker is written differently here")
    assert run.is_finished(cfg)
    text = run.results_path.read_text()
    run.results_path.write_text(text[:cut] if cut >= 0 else text[:cut])
    assert not run.is_finished(cfg)


def test_claims_say_which_runs_they_left_out_and_update_refuses_to_blank_a_verdict(tmp_path, monkeypatch, capsys):
    """A map whose softmax runs have NaN ratios: every claim names the runs it left out, and `claims --update` will
    not rewrite the block to 'not run' (one line, exit 2, the file untouched)."""
    from heavytail.studies import claim_groups as CG
    from heavytail.studies import reference_maps as R

    shipped = R.load("gap-design")
    runs = [dict(r, median={**r["median"], "ratio": float("nan")}) if r["config"]["kernel"] == "softmax" else r
            for r in shipped["runs"]]
    monkeypatch.setattr(R, "load", lambda name, root=None: {**shipped, "runs": runs} if name == "gap-design"
                        else None)
    found = CG.decide(CG.group("gap-design"))
    assert found and all("Left out:" in c["evidence"] for c in found)
    page = tmp_path / "page.md"
    page.write_text("<!-- claims gap-design -->\nold\n<!-- /claims -->\n")
    code = CG.main(["gap-design", "--update", str(page)])
    err = capsys.readouterr().err
    assert code == 2 and "no finite ratio" in err and len(err.strip().splitlines()) == 1
    assert page.read_text() == "<!-- claims gap-design -->\nold\n<!-- /claims -->\n"


def test_a_shipped_run_is_never_replaced_by_different_numbers_without_a_flag(tmp_path, monkeypatch, capsys):
    """A one-configuration rerun of the design grid under another --set, shipped with --allow-mixed: refused (one
    line naming the run and what differs, the map untouched) unless --replace, which prints each replacement."""
    from heavytail.studies import reference_maps as R
    from heavytail.studies import ship_map
    from heavytail.studies import run_summary

    shipped = R.load("gap-design")
    one = shipped["runs"][0]
    rerun = {**one, "config": {**one["config"], "steps": 6}, "median": {**one["median"], "ratio": 2.5}}
    assert ship_map.replacements([rerun], shipped["runs"]) == [f"{one['name']}: configuration, median ratio"]
    assert ship_map.replacements([one], shipped["runs"]) == []
    out = tmp_path / "map.json"
    out.write_text(dumps_json(shipped))
    grid = tmp_path / "grid"
    grid.mkdir()
    (grid / "grid.json").write_text(json.dumps({"grid": "grid-gap-design", "source": "params/grid_gap_design.yaml",
                                                "configurations": [{"name": r["name"]} for r in shipped["runs"]]}))
    monkeypatch.setattr(run_summary, "collect", lambda d: [rerun])
    with pytest.raises(ValueError, match="would be replaced by different numbers"):
        ship_map.ship("gap-design", grid, command="test", output=out, allow_mixed=True)
    assert load_json(out) == shipped


def test_a_run_that_skipped_most_of_its_steps_is_labelled_diverged(tmp_path, tiny_cfg):
    """--set lr=1e30: nearly every step is skipped; the run is 'diverged' with the reason, never 'ok'."""
    from heavytail.harness.evaluate import evaluate
    from heavytail.harness.train import train
    from heavytail.science.collapse import diverged

    assert diverged(11, 12, 3.0) and diverged(0, 12, float("inf")) and diverged(1, 12, 3.0) is None
    run = train(tiny_cfg.replace(lr=1e30), tmp_path / "run", quiet=True)
    res = evaluate(run, quiet=True)
    assert res["collapse"]["label"] == "diverged" and "skipped" in res["collapse"]["diverged"]


# ------------------------------------------------------------------------------------ the run's binding
@pytest.fixture
def bound_run(tmp_path):
    from heavytail.harness.train import train
    from tests.conftest import TINY

    return RunDir(train(RunConfig.from_dict(TINY, steps=4), tmp_path / "run", quiet=True))


def test_an_edited_config_is_refused_by_evaluate_in_one_line(bound_run):
    from heavytail.studies.grid_folder import folder_refusal

    text = bound_run.config_path.read_text()
    bound_run.config_path.write_text(text.replace("kernel: linear_elu", "kernel: log_elu"))
    run = _run(["evaluate", str(bound_run.path), "--quiet"])
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert "edited after training" in run.stderr and "trained 'linear_elu', now 'log_elu'" in run.stderr
    assert not bound_run.has_results()
    bound_run.config_path.write_text(text)  # restored: evaluated, and counted by the readers of a grid
    assert _run(["evaluate", str(bound_run.path), "--quiet"]).returncode == 0
    assert folder_refusal(bound_run)[0] is None
    bound_run.config_path.write_text(text.replace("kernel: linear_elu", "kernel: log_elu"))
    assert "edited after training" in folder_refusal(bound_run)[0]


def test_replaced_weights_are_refused_and_an_unbound_run_still_evaluates(bound_run):
    import torch

    state = torch.load(bound_run.model_path, weights_only=True)
    torch.save({k: v + 1 for k, v in state.items()}, bound_run.model_path)  # readable, of this model, not trained
    run = _run(["evaluate", str(bound_run.path), "--quiet"])
    assert run.returncode == 2 and "model.pt is not the file training wrote" in run.stderr and "Traceback" not in run.stderr
    summary = bound_run.train_summary()
    del summary["binding"]  # a run trained before bindings were recorded: nothing to check it against
    bound_run.train_summary_path.write_text(json.dumps(summary))
    assert bound_run.binding_refusal() is None
    assert _run(["evaluate", str(bound_run.path), "--quiet"]).returncode == 0


@pytest.mark.parametrize("share", [0.02, 0.25, 0.5, 0.75, 0.98])
def test_a_checkpoint_cut_anywhere_is_set_aside_and_the_run_resumes(tmp_path, capfd, share):
    """torch.load raises OSError (EINVAL) at most cut points of a checkpoint, RuntimeError at others: both are a
    damaged file, named once, set aside, and the one before it resumes."""
    from heavytail.harness.train import train
    from tests.conftest import TINY

    cfg = RunConfig.from_dict(TINY, steps=8)
    run = RunDir(tmp_path / "run")
    train(cfg, run.path, quiet=True, stop_after=6)
    latest = run.checkpoints()[-1]
    data = latest.read_bytes()
    latest.write_bytes(data[: int(share * len(data))])
    capfd.readouterr()
    train(cfg, run.path, quiet=True)
    err = capfd.readouterr().err
    assert run.is_complete() and (latest.parent / (latest.name + ".corrupt")).is_file()
    assert sum("is unreadable" in line for line in err.splitlines()) == 1 and "Traceback" not in err


def test_a_seed_numpy_cannot_take_is_one_line_and_leaves_no_folder(tmp_path):
    run = _run(["train", "--set", "seed=99999999999999999999", "--output", str(tmp_path / "run")])
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == ["[train] error: seed=99999999999999999999 is not allowed; it must lie in "
                                               "0-4294967295"]
    assert not (tmp_path / "run").exists()  # so the corrected retry is not blocked by a half-made folder


def test_evaluate_on_a_folder_without_a_config_is_one_line(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "COMPLETE").write_text("x\n")
    run = _run(["evaluate", str(tmp_path / "run")])
    assert run.returncode == 2 and "has no config.yaml" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("drop", [("config", "n_points"), ("median", "ratio")])
def test_a_shipped_run_missing_a_key_its_readers_need_names_the_file_and_key(tmp_path, drop):
    from heavytail.studies import claim_groups, reference_maps

    src = reference_maps.path_of("gap-design")
    data = json.loads(src.read_text())
    del data["runs"][2][drop[0]][drop[1]]
    dst = tmp_path / reference_maps.REFERENCE_DIR / src.name
    dst.parent.mkdir(parents=True)
    dst.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"run 2 \(.*\) has no {drop[0]}\.{drop[1]}"):
        claim_groups.text_of("gap-design", tmp_path)


@pytest.mark.parametrize("value", ["-1", "1", "[4, -3]"])
def test_a_notebook_parameter_below_its_stated_range_is_one_line_before_anything_runs(tmp_path, value):
    name = "prop6_reps" if not value.startswith("[") else "budgets"
    params = tmp_path / "params.yaml"
    params.write_text(f"report: t\nnotebooks:\n  03_identifiability: {{{name}: {value}}}\n")
    run = _run(["report", str(params), "--output-dir", str(tmp_path / "out")])
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [run.stderr.strip()] and f"{name} must be at least 2" in run.stderr
    assert not (tmp_path / "out").exists()


def test_a_full_disk_during_train_is_one_line_that_says_what_resumes(tmp_path, monkeypatch, capsys):
    import errno

    from heavytail.__main__ import main
    from heavytail.harness import train as train_module
    from tests.conftest import TINY

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "model.pt"))

    monkeypatch.setattr(train_module, "atomic_torch_save", full)
    sets = [f"{k}={v}" for k, v in TINY.items()]
    assert main(["train", "--set", *sets, "--output", str(tmp_path / "run"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the disk is full writing" in err[0] and "rerun the same command" in err[0]
    assert not RunDir(tmp_path / "run").is_complete()


@pytest.mark.parametrize("damage", ["{\"grid\": \"grid-smoke\", \"configurations\": [", "[]", ""])
def test_a_damaged_grid_record_is_one_line_for_the_grid_and_the_shipper(tmp_path, damage):
    """One reader of grid.json: a damaged record is never read as empty (the grid would forget its runs' states and
    the shipper its configurations); every command says which file and how to get it back."""
    from heavytail.studies.grid_folder import grid_status

    folder = tmp_path / "grid-smoke"
    folder.mkdir()
    (folder / "grid.json").write_text(damage)
    for args in (["grid", "params/grid_smoke.yaml", "--list", "--output-root", str(tmp_path)],
                 ["ship-map", "gap-design", str(folder), "--output", str(tmp_path / "map.json")]):
        run = _run(args)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "grid.json" in lines[0] and "delete it" in lines[0], lines
    with pytest.raises(ValueError, match="not a .*grid record"):
        grid_status(folder)


@pytest.mark.parametrize("args, what", [(["grid", "no_such_grid.yaml", "--list"], "grid file no_such_grid.yaml"),
                                        (["report", "no_such_params.yaml"], "params file no_such_params.yaml")])
def test_a_missing_grid_or_params_file_is_one_line_naming_it(args, what):
    run = _run(args)
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert run.returncode == 2 and len(lines) == 1 and what in lines[0] and "does not exist" in lines[0]
