"""Training's switches for long runs: the stopping rule ends a run and says why, subnormals are flushed
only when asked and recorded, the dense window around a collapse logs every step, and a resumed run with
validation and dense logging ends with the same weights as an uninterrupted one."""

from __future__ import annotations

import torch

from heavytail.harness.config import RunConfig
from heavytail.harness.rundir import RunDir
from heavytail.harness.train import collapse_after_healthy_stretch, train
from heavytail.harness.precision import subnormals, subnormals_flushed

TINY = dict(d_model=8, n_blocks=1, d_ff=8, n_points=64, trials_per_step=1, steps=40, warmup_steps=4,
            eval_trials=4, eval_n_points=64, bootstrap_resamples=20, device="cpu", checkpoint_every=10, log_every=5,
            track_attention=True, lr=1e-2)


def test_stopping_rule_ends_the_run_and_records_why(tmp_path):
    cfg = RunConfig(**TINY, val_every=5, val_trials=2, stop_tolerance=0.99, stop_min_steps=10)
    train(cfg, tmp_path / "r", quiet=True)
    summary = RunDir(tmp_path / "r").train_summary()
    # a 99 % tolerance: the rule fires at the first validation step past stop_min_steps with two scores in its
    # last fifth, well before the cap
    assert summary["stop_reason"] == "converged"
    assert summary["stopped_at"] < cfg.steps
    assert [s for s, _ in summary["validation"]][-1] == summary["stopped_at"]
    assert RunDir(tmp_path / "r").is_complete()
    capped = RunConfig(**TINY, val_every=5, val_trials=2)
    train(capped, tmp_path / "c", quiet=True)
    assert RunDir(tmp_path / "c").train_summary()["stop_reason"] == "cap"


def test_subnormals_are_flushed_only_inside_and_recorded(tmp_path):
    assert not subnormals_flushed()
    with subnormals(RunConfig(flush_subnormals=True)):
        assert subnormals_flushed()
    assert not subnormals_flushed()
    with subnormals(RunConfig()):
        assert not subnormals_flushed()
    train(RunConfig(**{**TINY, "steps": 10}, flush_subnormals=True), tmp_path / "f", quiet=True)
    assert RunDir(tmp_path / "f").train_summary()["runtime"]["subnormals_flushed"] is True
    assert not subnormals_flushed()


def test_dense_window_logs_every_step_around_a_collapse_after_a_healthy_stretch(tmp_path):
    # a collapse threshold of 0.3 leaves this tiny run's batches collapsing on and off: windows open only where
    # two healthy steps come first, and each shows them at every step
    cfg = RunConfig(**TINY, dense_log_window=2, collapse_spread=0.3)
    train(cfg, tmp_path / "d", quiet=True)
    log = RunDir(tmp_path / "d").training_log()
    assert all("qk_grad_norm" in b and "attn_absorbed" in b for row in log for b in row["blocks"])
    regular = [row["step"] for row in log if not row.get("dense")]
    assert all(s % cfg.log_every == 0 or s == cfg.steps for s in regular)
    rows = {row["step"]: row for row in log}
    bad = {s for s, row in rows.items() if row.get("collapsed_fraction", 0) >= 0.5}
    dense = sorted(row["step"] for row in log if row.get("dense"))
    assert dense, "no dense rows were written"
    opened = [s for s in sorted(rows) if s in bad and s - 1 in rows and s - 2 in rows and not {s - 1, s - 2} & bad]
    assert opened, "no window opened"
    # the two healthy steps before each onset and the two after it, every one logged
    assert all(t in rows for s in opened for t in range(s - 2, min(s + 2, cfg.steps) + 1))


def test_a_run_collapsed_from_its_first_step_opens_no_dense_window(tmp_path):
    # 0.99 labels every batch collapsed: there is never a healthy stretch, so no onset to log densely
    train(RunConfig(**TINY, dense_log_window=4, collapse_spread=0.99), tmp_path / "c", quiet=True)
    log = RunDir(tmp_path / "c").training_log()
    assert all(row.get("collapsed_fraction", 0) >= 0.5 for row in log)
    assert not any(row.get("dense") for row in log)


def test_an_onset_is_a_collapse_right_after_a_full_healthy_stretch():
    ok, bad = {"collapsed_fraction": 0.0}, {"collapsed_fraction": 1.0}
    assert collapse_after_healthy_stretch([ok, ok, ok], bad, 3)
    assert not collapse_after_healthy_stretch([ok, ok], bad, 3)  # the first steps: no stretch yet
    assert not collapse_after_healthy_stretch([], bad, 1)
    assert not collapse_after_healthy_stretch([ok, bad, ok], bad, 3)  # collapsing on and off
    assert not collapse_after_healthy_stretch([ok, ok, ok], ok, 3)
    assert collapse_after_healthy_stretch([bad, ok, ok], bad, 2)  # only the last `stretch` steps count
    assert collapse_after_healthy_stretch([{}, ok], bad, 2)  # a step with non-finite outputs is not a collapse


def test_resume_with_validation_and_dense_window_is_bitwise(tmp_path):
    cfg = RunConfig(**TINY, val_every=5, val_trials=2, dense_log_window=3)
    train(cfg, tmp_path / "a", quiet=True)
    train(cfg, tmp_path / "b", quiet=True, stop_after=17)
    train(cfg, tmp_path / "b", quiet=True)
    a = torch.load(RunDir(tmp_path / "a").model_path)
    b = torch.load(RunDir(tmp_path / "b").model_path)
    assert all(torch.equal(a[k], b[k]) for k in a)
    va, vb = (RunDir(tmp_path / x).train_summary()["validation"] for x in "ab")
    assert va == vb


def test_a_run_with_validation_and_dense_window_whose_checkpoints_are_all_corrupt_restarts_cleanly(tmp_path):
    cfg = RunConfig(**TINY, val_every=5, val_trials=2, dense_log_window=3)
    train(cfg, tmp_path / "a", quiet=True)
    train(cfg, tmp_path / "b", quiet=True, stop_after=25)
    for path in RunDir(tmp_path / "b").checkpoints():
        path.write_bytes(b"not a checkpoint")
    train(cfg, tmp_path / "b", quiet=True)  # from step 0, with every counter the run keeps
    a, b = (torch.load(RunDir(tmp_path / x).model_path) for x in "ab")
    assert all(torch.equal(a[k], b[k]) for k in a)
