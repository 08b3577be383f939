"""benchmarks/gpu_check.py --smoke: the device check runs end to end at tiny shapes on the CPU, and what it
writes is what a GPU run will be read by (every kernel x backend, the step table, the probe)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from heavytail.harness.config import KERNELS
from heavytail.io import load_json

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_smoke_runs_all_parts_and_records_provenance(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for part in ("(a) done in", "(b) done in", "(c) done in"):
        assert part in proc.stdout  # each part's wall time is printed
    report = load_json(tmp_path / "gpu_check-smoke.json")
    meta = report["meta"]
    assert meta["torch"] == torch.__version__ and meta["date"] and meta["device"] == "cpu"
    assert len(meta["commit"].removesuffix("-dirty")) == 40

    rows = report["parts"]["correctness"]["attention"]
    cells = {(r["kernel"], r["backend"], r["tokens"]): r for r in rows}
    for kernel in KERNELS:
        for backend in ("flex", "flash", "tiled", "auto"):
            for tokens in ("gaussian", "pareto"):
                row = cells[kernel, backend, tokens]
                if backend == "flex":  # CPU flex has no backward: reported, not hidden
                    assert "no backward on CPU" in row["error"]
                    continue
                # float32 against float64 on O(1) scores: a few hundred eps at most, the all-underflow row included
                if tokens == "gaussian":
                    assert max(row[k] for k in ("out_rel_err", "dq_rel_err", "dk_rel_err", "dv_rel_err")) < 1e-3, row
                assert row["negative_row_rel_err"] < 1e-4, row
    assert cells["log_elu", "auto", "gaussian"]["ran_on"] == "flash:native"  # CPU float32: the fused C++ loop
    energy = report["parts"]["correctness"]["energy"]
    assert energy["value_rel_err"] < 1e-5 and energy["grad_rel_err"] < 1e-5, energy

    steps = report["parts"]["step"]["rows"]
    assert {(r["kernel"], r["precision"], r["tf32"]) for r in steps} == {
        (k, p, t) for k in KERNELS for p, t in (("bf16", False), ("float32", False), ("float32", True))}
    assert all(r["s_per_step"] > 0 and r["loss_finite"] for r in steps), steps
    base = next(r for r in steps if r["kernel"] == "softmax" and r["precision"] == "bf16")
    assert base["x_softmax_bf16"] == 1.0 and base["ran_on"] == "sdpa"
    assert all(r["tf32_matmul"] is False for r in steps)  # the CPU leaves CUDA's TF32 switches alone

    probe = report["parts"]["probe"]["rows"]
    assert len(probe) == 3
    for row in probe:
        assert row["steps_done"] == row["steps_planned"] and "error" not in row
        final = row["final"]
        assert 0.0 <= final["collapsed_fraction"] <= 1.0
        assert len(final["attn_max_weight"]) == report["sizes"]["n_blocks"]
    markdown = (tmp_path / "gpu_check-smoke.md").read_text()
    assert "## (a)" in markdown and "## (b)" in markdown and "## (c)" in markdown
    assert meta["complete"] is True and "Incomplete record" not in markdown

    # A check killed before its end is recorded from what it printed: the same rows, at the printed precision.
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    lines = proc.stdout.split("(c) collapse probe")[0] + "(c) collapse probe\n"  # killed at the start of (c)
    partial = gpu_check.report_from_log(lines, gpu_check.SMOKE, "2026-01-01", "killed")
    assert partial["meta"]["complete"] is False and partial["meta"]["commit"] == meta["commit"]
    got = {(r["kernel"], r["backend"], r["tokens"]): r for r in partial["parts"]["correctness"]["attention"]}
    assert got.keys() == cells.keys()
    for key, row in cells.items():
        assert ("error" in row) == ("error" in got[key])
        for name in ("out_rel_err", "dq_rel_err", "dv_rel_err", "negative_row_rel_err"):
            if name in row:  # printed with two significant digits
                assert abs(got[key][name] - row[name]) <= 0.051 * row[name] + 1e-300, (key, name)
    assert [(r["kernel"], r["precision"], r["tf32"]) for r in partial["parts"]["step"]["rows"]] == [
        (r["kernel"], r["precision"], r["tf32"]) for r in steps]
    assert partial["parts"]["probe"] == {"rows": [], "wall_s": None}
    assert "Incomplete record" in gpu_check.markdown(partial) and "(did not finish)" in gpu_check.markdown(partial)
