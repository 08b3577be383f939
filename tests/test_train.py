"""Training harness: loss goes down, non-finite steps are skipped, a killed run resumes bitwise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import heavytail.science.metrics
from heavytail.harness.config import RunConfig
from heavytail.io import read_jsonl
from heavytail.io import COMPLETE, is_complete
from heavytail.harness.train import train, training_log
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]


def test_training_lowers_the_loss_on_the_gaussian_sheared_swap(tmp_path):
    cfg = RunConfig.from_dict(
        TINY, marginals="gaussian", steps=80, warmup_steps=5, lr=3e-3, n_points=128, trials_per_step=8
    )
    train(cfg, tmp_path / "run", quiet=True)
    losses = np.array([row["loss"] for row in training_log(tmp_path / "run")])
    assert len(losses) == 80 and np.isfinite(losses).all()
    # Averages over 15 fresh batches each; the untrained map is far from the target (loss ~ O(1)),
    # while a learned affine map reaches a few times the floor 2*delta/N (eq. 34).
    first, last = losses[:15].mean(), losses[-15:].mean()
    assert last < 0.5 * first, (first, last)


def test_a_non_finite_step_is_skipped_and_counted(tmp_path, monkeypatch):
    real = heavytail.science.metrics.energy_distance
    calls = {"n": 0}

    def flaky(u, v, p=1.0, **kw):
        calls["n"] += 1
        value = real(u, v, p=p, **kw)
        return value * float("nan") if calls["n"] == 3 else value

    monkeypatch.setattr(heavytail.science.metrics, "energy_distance", flaky)
    run = train(RunConfig.from_dict(TINY, steps=6), tmp_path / "run", quiet=True)
    log = {row["step"]: row for row in training_log(run)}
    assert log[3]["skipped"] and log[3]["n_skipped"] == 1 and not np.isfinite(log[3]["loss"])
    assert not log[2]["skipped"] and not log[4]["skipped"] and log[6]["n_skipped"] == 1
    weights = torch.load(run / "model.pt", weights_only=True)
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_skip_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setattr(heavytail.science.metrics, "energy_distance", lambda u, v, p=1.0, **kw: u.sum() * float("nan"))
    with pytest.raises(FloatingPointError, match="step 1"):
        train(RunConfig.from_dict(TINY, steps=3, skip_nonfinite=False), tmp_path / "run", quiet=True)


def test_the_eager_and_compiled_losses_train_the_same_run_to_rounding(tmp_path):
    # Both backends of eq. 10 accumulate in float64; only the order of the float64 sums differs, so over a few steps
    # the float32 trajectories may part in their last bits and no further.
    logs = {}
    for backend in ("eager", "compiled"):
        run = train(RunConfig.from_dict(TINY, steps=6, energy_backend=backend), tmp_path / backend, quiet=True)
        logs[backend] = np.array([row["loss"] for row in training_log(run)])
        assert RunConfig.from_yaml(run / "config.yaml").energy_backend == backend  # recorded with the run
    assert len(logs["eager"]) == 6
    np.testing.assert_allclose(logs["eager"], logs["compiled"], rtol=1e-4)


def test_a_run_folder_refuses_another_configuration(tmp_path, tiny_cfg):
    train(tiny_cfg, tmp_path / "run", quiet=True, stop_after=2)
    with pytest.raises(ValueError, match="kernel: saved 'linear_elu', given 'log_elu'"):
        train(tiny_cfg.replace(kernel="log_elu"), tmp_path / "run", quiet=True)


def test_pausing_then_resuming_in_process_matches_an_uninterrupted_run(tmp_path, tiny_cfg):
    train(tiny_cfg, tmp_path / "a", quiet=True, stop_after=5)
    assert not is_complete(tmp_path / "a")
    train(tiny_cfg, tmp_path / "a", quiet=True)
    train(tiny_cfg, tmp_path / "b", quiet=True)
    _assert_same_weights(tmp_path / "a", tmp_path / "b")
    steps = [row["step"] for row in read_jsonl(tmp_path / "a" / "metrics.jsonl")]
    assert steps == list(range(1, tiny_cfg.steps + 1))


def test_a_resumed_run_logs_its_training_time_across_both_calls(tmp_path, tiny_cfg, monkeypatch):
    # A clock that advances one second per reading: the resumed call must count on from the paused one's time,
    # not from zero, or a run summary's train_seconds holds only its last call.
    clock = iter(range(10**6))
    monkeypatch.setattr(heavytail.harness.train.time, "perf_counter", lambda: float(next(clock)))
    train(tiny_cfg, tmp_path / "a", quiet=True, stop_after=5)
    paused = read_jsonl(tmp_path / "a" / "metrics.jsonl")[-1]["seconds"]
    train(tiny_cfg, tmp_path / "a", quiet=True)
    seconds = [row["seconds"] for row in read_jsonl(tmp_path / "a" / "metrics.jsonl")]
    assert paused > 0 and seconds == sorted(seconds) and seconds[-1] > paused


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = (torch.load(p / "model.pt", weights_only=True) for p in (a, b))
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), f"{name} differs"


def _train_cmd(config: Path, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "heavytail", "train", str(config), "--run-dir", str(run_dir), "--quiet"]


def test_a_killed_run_resumes_to_bitwise_the_same_weights(tmp_path):
    # The compiled loss that real runs train with ("auto"), so that its determinism across a resume is what is checked.
    cfg = RunConfig.from_dict(TINY, steps=40, checkpoint_every=5, n_points=256, trials_per_step=8, energy_backend="auto")
    config = tmp_path / "run.yaml"
    config.write_text(cfg.to_yaml())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(config, killed), env=env, cwd=ROOT)
    deadline = time.time() + 120
    # Kill hard (no cleanup handlers) mid-run, as soon as the second checkpoint exists.
    while not (killed / "checkpoints" / "step_00000010.pt").exists():
        assert proc.poll() is None, "training exited before it could be killed"
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / COMPLETE).exists(), "the run finished before the kill: the test proved nothing"
    assert not (killed / "model.pt").exists()

    subprocess.run(_train_cmd(config, killed), env=env, cwd=ROOT, check=True)
    subprocess.run(_train_cmd(config, tmp_path / "straight"), env=env, cwd=ROOT, check=True)
    _assert_same_weights(killed, tmp_path / "straight")
    steps = [row["step"] for row in read_jsonl(killed / "metrics.jsonl")]
    assert steps == sorted(set(steps)) and steps[-1] == 40


def test_a_run_records_its_attention_backend_and_matmul_precision(tmp_path):
    from heavytail.harness.evaluate import evaluate
    from heavytail.io import load_json

    cfg = RunConfig.from_dict(TINY, steps=3, kernel="log_elu", attention_backend="auto", precision="bf16")
    run = train(cfg, tmp_path / "run", quiet=True)
    # what "auto" ran on CPU: the fused C++ flash loop (bf16 calls compute attention in float32)
    assert {row["attention_backend"] for row in training_log(run)} == {"flash:native"}
    trained = load_json(run / "train_summary.json")["runtime"]
    assert trained["attention_backend"] == "flash:native" and trained["autocast_dtype"] == "bfloat16"
    assert trained["attention"]["log_elu cpu bfloat16 train"]["backend"] == "flash:native"
    assert trained["device"] == "cpu" and trained["tf32_matmul"] is False and trained["torch"] == torch.__version__
    # which bf16 path this CPU took (torch's kernels, or float32 emulation where oneDNN has no native bf16)
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert trained["cpu_native_bf16"] is native
    assert trained["bf16_matmuls"] == ("torch" if native else "emulated")
    res = evaluate(run, quiet=True)
    assert res["runtime"]["training"] == trained
    assert res["runtime"]["evaluation"]["autocast_dtype"] is None  # evaluation is float32 (Table 3)
    assert res["runtime"]["evaluation"]["attention_backend"] == "flash:native"


def test_tf32_is_set_for_cuda_runs_and_restored():
    from heavytail.harness.precision import float32_matmuls

    flags = torch.backends.cuda.matmul, torch.backends.cudnn
    before = tuple(f.allow_tf32 for f in flags)
    for tf32 in (True, False):
        with float32_matmuls(RunConfig(tf32=tf32), torch.device("cuda")):
            assert [f.allow_tf32 for f in flags] == [tf32, tf32]  # cuDNN's default (on) is overridden too
        assert tuple(f.allow_tf32 for f in flags) == before
    with float32_matmuls(RunConfig(tf32=True), torch.device("cpu")):
        assert tuple(f.allow_tf32 for f in flags) == before  # CPU runs leave CUDA's switches alone
    assert RunConfig.from_dict({"tf32": True}).tf32 and not RunConfig().tf32
    with pytest.raises(ValueError, match="tf32 must be true or false"):
        RunConfig.from_dict({"tf32": "yes"})
