"""The CPU benchmarks' bookkeeping (no timing): children import the package the parent measures, a record's
provenance names that package's commit, and the before/after table reads the records' CPU-time ratios."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _bench  # noqa: E402
import compare_results  # noqa: E402


def test_children_import_the_package_the_parent_measures():
    import heavytail

    root = Path(heavytail.__file__).resolve().parents[1]
    assert _bench.package_root() == root
    env = _bench.child_env(1)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(root)
    assert env["OMP_NUM_THREADS"] == "1" and "MALLOC_MMAP_THRESHOLD_" not in env
    assert _bench.child_env(1, memory=True)["MALLOC_MMAP_THRESHOLD_"] == _bench.MMAP_THRESHOLD


def test_a_record_names_the_commit_of_the_package_it_measured():
    head = _bench.header("test", [])
    assert head["provenance"]["commit"] == head["package"]["commit"]
    assert head["package"]["root"] == str(_bench.package_root())
    line = json.loads(_bench.child_json({"x": 1}))
    assert line["x"] == 1 and line["package"]["root"] == head["package"]["root"]


def test_every_shipped_record_names_its_package_commit():
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        rec = json.loads(path.read_text())
        if "package" in rec:
            assert rec["package"]["commit"] == rec["provenance"]["commit"], path.name


def _times(cpu: float, wall: float, rounds: int = 3) -> dict[str, list[float]]:
    return {"wall": [wall] * rounds, "cpu": [cpu] * rounds}


def _records(tmp_path: Path, tag: str, step: float, attn: float, mem: dict[int, float]) -> list[Path]:
    """An attention and a train record: baselines take 1 s per round, the kernel's ratios are ``attn`` and
    ``step`` in CPU time (wall time 0.5 more for attention)."""
    prov = {"commit": tag * 8, "dirty": False, "date": "2026-12-01"}
    common = {"argv": [], "provenance": prov, "package": {"root": "/x", "commit": tag * 8, "dirty": False},
              "load_average_start": [2.0, 2.0, 2.0], "load_average_end": [2.5, 2.0, 2.0]}
    attention = {**common, "script": "bench_attention_cpu",
                 "time": [{"threads": 1, "n": n, "d": 32, "variant": v, "times_s": _times(r, r + 0.5 * (r != 1.0))}
                          for n in mem for v, r in (("sdpa", 1.0), ("log_elu/flash", attn), ("log_elu/tiled", 9.0))],
                 "memory": [r for n, m in mem.items() for r in (
                     {"threads": 1, "n": n, "d": 32, "variant": "sdpa", "extra_mib": n / 1024},
                     {"threads": 1, "n": n, "d": 32, "variant": "log_elu/flash", "extra_mib": m})]}
    train = {**common, "script": "bench_train_cpu",
             "time": [{"threads": 1, "n": n, "kernel": k, "step_times_s": _times(s, s),
                       "attention_times_s": _times(s, s)} for n in mem for k, s in (("softmax", 1.0), ("log_elu", step))]}
    paths = []
    for name, rec in (("attention", attention), ("train", train)):
        paths.append(tmp_path / f"{name}_{tag}.json")
        paths[-1].write_text(json.dumps(rec))
    return paths


def test_the_before_after_table_reads_cpu_ratios_and_checks_the_targets(tmp_path):
    before = _records(tmp_path, "a", step=1.8, attn=3.0, mem={1024: 16.0, 4096: 256.0})
    after = _records(tmp_path, "b", step=1.1, attn=1.5, mem={1024: 2.0, 4096: 8.0})
    md, data = compare_results.build(before, after)
    assert "| log_elu | 1.80 (1.80) -> 1.10 (1.10) | 1.80 (1.80) -> 1.10 (1.10) |" in md
    assert "3.00 (3.50) -> 1.50 (2.00)" in md  # the flash backend's row; the tiled one (9.0) is not compared
    assert "9.00" not in md
    target = data["targets_after"]["log_elu"]
    assert target["step_met"] and not target["attention_met"]
    assert target["memory_met"] and target["memory_linear"]  # 8/4 = 2x SDPA; 2 -> 8 MiB over 4x N: exponent 1
    assert abs(target["memory_growth_exponent"] - 1.0) < 1e-9
    assert compare_results.build(after, before)[1]["targets_after"]["log_elu"]["memory_linear"] is False


def test_files_of_one_side_are_pooled_round_by_round(tmp_path):
    before = _records(tmp_path, "a", step=1.8, attn=3.0, mem={1024: 16.0})
    first = _records(tmp_path, "b", step=1.1, attn=1.5, mem={1024: 2.0})
    second = _records(tmp_path, "c", step=1.3, attn=1.5, mem={1024: 2.0})
    extra = tmp_path / "train_d.json"
    extra.write_text(first[1].read_text())  # a third train run like the first
    _, data = compare_results.build(before, [*first, *second, extra])
    pooled = data["train_step"]["log_elu N=1024 threads=1"]["after"]
    assert pooled["runs"] == 3 and pooled["rounds"] == 9
    assert abs(pooled["cpu_ratio"] - 1.1) < 1e-9  # the median of 1.1 x 6 rounds and 1.3 x 3


def test_a_memory_only_file_gives_its_memory_and_none_of_its_timings(tmp_path):
    before = _records(tmp_path, "a", step=1.8, attn=3.0, mem={1024: 16.0})
    after = _records(tmp_path, "b", step=1.1, attn=1.5, mem={1024: 2.0})
    memory_run = _records(tmp_path, "c", step=1.1, attn=9.0, mem={1024: 0.5})[0]  # its timings: 9x
    _, data = compare_results.build(before, after, after_memory=[memory_run])
    attention = data["attention"]["log_elu N=1024 d=32 threads=1"]["after"]
    assert attention["runs"] == 1 and abs(attention["cpu_ratio"] - 1.5) < 1e-9
    assert data["memory"]["log_elu N=1024 d=32 threads=1"]["after_mib"] == 0.5
    assert [p["memory_only"] for p in data["after"]] == [False, False, True]


def test_the_weight_chain_benchmark_compares_forms_that_compute_the_same_weights():
    """bench_weight_chains times each kernel's current weight formulas against its former ones: both must give the
    same flash weights and derivative factors (to float32 round-off), or the ratio compares different attention."""
    import dataclasses

    import bench_weight_chains
    import torch

    from heavytail import names
    from heavytail.science.kernels import get_kernel

    s = torch.cat([torch.linspace(-60, 60, 4001), torch.logspace(-6, 30, 500)])
    m = s.max().reshape(1)
    for name in bench_weight_chains.FORMER:
        now = get_kernel(name)
        was = dataclasses.replace(now, **bench_weight_chains.former_forms(name, names.KERNEL_ROWS[name].order))
        log_gm = now.log_g(m)
        row = now.ratio_row(m, log_gm)
        torch.testing.assert_close(now.g_ratio(s, log_gm, row), was.g_ratio(s, log_gm, row), rtol=2e-5, atol=1e-30)
        torch.testing.assert_close(now.dlog_g(s), was.dlog_g(s), rtol=1e-6, atol=0)


def test_the_subnormal_benchmark_pairs_modes_on_the_same_batches_and_restores_the_mode():
    import bench_subnormals
    import torch

    from heavytail import names

    before = torch.get_num_threads()
    try:
        res = bench_subnormals.measure(n=64, rounds=2, warmup=0, threads=1)
    finally:
        torch.set_num_threads(before)
    assert [r["kernel"] for r in res["rows"]] == list(names.kernel_names())
    for r in res["rows"]:
        for mode in bench_subnormals.MODES:
            assert len(r[mode]["cpu_s"]) == 2 and r[mode]["min_s"] <= r[mode]["median_s"] <= r[mode]["max_s"]
        if r["kernel"] == "softmax":
            assert r["default"]["x_softmax"] == 1.0 and r["flushed"]["x_softmax"] == 1.0
    tiny = torch.tensor([1e-40], dtype=torch.float32)
    assert (tiny * 1.0).item() != 0.0  # the process is back in the default mode: subnormals kept


def _small_r4(bench):
    """``bench.measure`` on the ladder's R4 cells shrunk to a tiny model, two rounds on one thread (restored after)."""
    import torch

    before = torch.get_num_threads()
    try:
        return bench.measure("R4", rounds=2, warmup=0, threads=1, n_points=32, d_model=8, n_blocks=2, d_ff=16)
    finally:
        torch.set_num_threads(before)


def test_the_ladder_logging_benchmark_times_the_ladders_cells_with_and_without_the_onset_watch():
    import bench_ladder_logging as B

    res = _small_r4(B)
    # R4's cells of the ladder's grid file, by kernel and backend, under bf16 autocast with symlog
    assert [r["cell"] for r in res["rows"]] == ["softmax-sdpa", "log_elu-auto"]
    for r in res["rows"]:
        assert r["config"]["precision"] == "bf16" and r["config"]["symlog"] is True and r["config"]["n_blocks"] == 2
        assert set(r["summary"]) == set(B.MODES) and r["summary"]["plain"]["ratio"] == 1.0
        assert all(len(r["steps"][m]["wall"]) == 2 for m in B.MODES)
        assert set(r["statistics_per_step_s"]) == {"weights", "max_abs_score", "spectral_norm"}
    assert res["matmul_rates"]["bf16_gflops"] > 0 and res["cpu_native_bf16"] in (True, False, None)
    # the tracked step is the training loop's: one dict of statistics per block, gradient norms included
    cfg = B.ladder_configs("R2", n_points=32, d_model=8, n_blocks=2, d_ff=16)["softmax-sdpa"]
    stepper, stats = B._Tracked(cfg), []
    x, y = B.draw_batch(stepper.bench, cfg, stepper.gen, stepper.device)
    B.training_step(stepper.model, stepper.optimizer, x, y, cfg, stepper.device, B.energy_distance, stats)
    assert len(stats) == 2 and {"max_abs_score", "qk_spectral_norm", "qk_grad_norm"} <= set(stats[0])


def test_the_bf16_emulation_benchmark_puts_the_two_paths_and_float32_side_by_side():
    import bench_bf16_emulation as B

    res = _small_r4(B)
    assert [r["cell"] for r in res["rows"]] == ["softmax-sdpa", "log_elu-auto"]
    for r in res["rows"]:
        assert r["config"]["precision"] == "bf16" and r["config"]["n_blocks"] == 2
        assert set(r["summary"]) == set(B.PATHS) and r["summary"]["torch"]["ratio"] == 1.0
        a = r["agreement"]
        # the emulation is torch's bf16 step, far closer to it than float32's step is (the scale, > 0)
        assert a["grad_float32_vs_torch"] > 0 and a["grad_emulated_vs_torch"] < 0.2
        assert a["loss"]["torch"] != a["loss"]["float32"]
    # each stepper's path is the one it names: the float32 stepper trains without autocast
    assert B._PathStepper(B.ladder_configs("R4", n_points=32, d_model=8, n_blocks=2, d_ff=16)["log_elu-auto"],
                          "float32").cfg.precision == "float32"
    assert "emul-torch" in B.table(res)


def test_the_results_index_lists_every_record_kept_and_every_cited_record_is_kept():
    index = (ROOT / "benchmarks" / "results" / "INDEX.md").read_text()
    assert index == _bench.results_index(), "rewrite benchmarks/results/INDEX.md with _bench.results_index()"
    import re

    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    # a record's name starts a word (`phase_fixed_weight.json` under outputs/reference/ is no benchmark record)
    cited = set(re.findall(r"(?<![\w/])((?:compare|train_cpu|attention_cpu|profile|flash|subnormals|weight|ladder_logging|bf16_emulation)[\w.-]*"
                           r"\.(?:md|json))`", docs))
    assert cited, "the docs cite no benchmark record"
    missing = sorted(c for c in cited if not (ROOT / "benchmarks" / "results" / c).is_file())
    assert not missing, f"the docs cite records that are not kept: {missing}"
