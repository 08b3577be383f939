"""bf16 autocast on a CPU without native bf16 matmuls: said once, with this machine's measured slowdown, before
anything trains (grid and train); the runs still train."""

from __future__ import annotations

import pytest
import torch

from heavytail.__main__ import main
from heavytail.harness import cpu_bf16
from heavytail.pipeline import grid as G
from heavytail.io import is_complete

from test_reliability_probes import _smoke_grid


def test_native_is_what_onednn_reports():
    assert cpu_bf16.native() is bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def test_matmul_rates_are_rates_and_the_slowdown_is_their_ratio():
    r = cpu_bf16.matmul_rates(size=64, repeats=2)
    assert r["float32_gflops"] > 0 and r["bf16_gflops"] > 0
    assert r["slowdown"] == pytest.approx(r["float32_gflops"] / r["bf16_gflops"])


@pytest.mark.parametrize("native, n, warned", [(False, 2, True), (True, 2, False), (None, 2, False), (False, 0, False)])
def test_the_warning_comes_only_for_bf16_runs_on_a_cpu_without_native_bf16(monkeypatch, native, n, warned):
    monkeypatch.setattr(cpu_bf16, "native", lambda: native)
    monkeypatch.setattr(cpu_bf16, "matmul_rates", lambda: {"float32_gflops": 30.0, "bf16_gflops": 0.5,
                                                            "slowdown": 60.0})
    text = cpu_bf16.slow_bf16_warning(n)
    assert (text is not None) is warned
    if warned:
        assert text.startswith("2 runs under bf16 autocast") and "0.5 GFLOP/s" in text and "60x slower" in text


@pytest.mark.parametrize("precision, warned", [("bf16", True), ("float32", False)])
def test_the_grid_warns_once_about_its_bf16_runs_on_such_a_cpu(tmp_path, monkeypatch, capsys, precision, warned):
    monkeypatch.setattr(cpu_bf16, "native", lambda: False)
    _, spec = _smoke_grid(tmp_path, precision=precision)
    G._warn_cpu_bf16(spec, set(spec.names))
    err = capsys.readouterr().err.strip().splitlines()
    if warned:
        assert len(err) == 1 and err[0].startswith(f"[grid] warning: {len(spec.names)} runs under bf16 autocast"), err
    else:
        assert err == []


def test_train_warns_before_a_bf16_run_on_such_a_cpu_and_still_trains_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cpu_bf16, "native", lambda: False)
    out = tmp_path / "run"
    args = ["train", "--output", str(out), "--quiet", "--set", "precision=bf16", "device=cpu", "d_model=16",
            "n_blocks=1", "d_ff=32", "n_points=64", "trials_per_step=2", "steps=2", "warmup_steps=1",
            "eval_trials=4", "eval_n_points=64", "bootstrap_resamples=10"]
    assert main(args) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[train] warning:")]
    assert len(err) == 1 and "1 run under bf16 autocast" in err[0] and "x slower" in err[0], err
    assert is_complete(out)


def test_every_provenance_entry_names_the_processors_arithmetic_features():
    from pathlib import Path

    from heavytail.harness import provenance

    flags = next(line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("flags"))
    entry = provenance.record()
    assert entry["cpu_features"] == [f for f in provenance.CPU_FEATURES if f in flags]
