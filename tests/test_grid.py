"""The ablation grid: grid files, SLURM resources, and two tiny configurations run end to end."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
from pathlib import Path

import jupytext
import pytest
import yaml

from heavytail.studies.ablation.one_run import findings
from heavytail.harness.config import RunConfig
from heavytail.harness.evaluate import load_results
from heavytail.pipeline.configuration import configuration_jobs
from heavytail.pipeline.grid import main, run_grid
from heavytail.pipeline.grid_file import GridSpec
from heavytail.pipeline.notebook import RUNNER_PARAMETERS, parameters_of
from heavytail.pipeline.slurm import slurm_executor
from heavytail.harness.artifacts import repo_root
from heavytail.harness.train import train, training_log

from executed import train_cell

PARAMS = repo_root() / "params"


def _smoke() -> dict:
    return yaml.safe_load((PARAMS / "grid_smoke.yaml").read_text())


# ------------------------------------------------------------------------------------ grid files
def test_grid_files_enumerate_the_paper_ablation():
    cpu = GridSpec.from_yaml(PARAMS / "grid_cpu.yaml")
    assert len(cpu.configs) == 24 and {c.norm for c in cpu.configs} == {"post"}
    assert {(c.benchmark, c.marginals) for c in cpu.configs} == {
        ("sheared_swap", "mirrored_pareto"), ("sheared_swap", "gaussian"), ("matrix_inverse", "mirrored_pareto")}
    assert {c.kernel for c in cpu.configs} == {"softmax", "squared_elu", "linear_elu", "log_elu"}
    assert {c.symlog for c in cpu.configs} == {False, True}

    paper = GridSpec.from_yaml(PARAMS / "grid_paper.yaml")
    assert len(paper.configs) == 48 and {c.norm for c in paper.configs} == {"pre", "post"}
    for c in paper.configs:  # Table 3
        assert (c.n_points, c.trials_per_step, c.steps, c.eval_trials, c.eval_n_points) == (16384, 64, 50_000, 128, 16384)
        assert (c.d_model, c.n_blocks, c.d_ff, c.n_heads, c.lr, c.bootstrap_resamples) == (256, 6, 512, 1, 1e-3, 2000)
    assert paper.slurm.gpus_per_node == 1

    smoke = GridSpec.from_yaml(PARAMS / "grid_smoke.yaml")
    assert len(smoke.configs) == 2 and len(set(smoke.names)) == 2


def test_any_configuration_key_is_an_axis_and_names_every_varying_key():
    grid = _smoke()
    for key in ("attention_backend", "n_points", "trials_per_step"):
        grid["base"].pop(key, None)
    grid["axes"] = {"lr": [1e-3, 3e-3], "attention_backend": ["dense", "tiled"],
                    "sizes": [{"n_points": 64, "trials_per_step": 4}, {"n_points": 128, "trials_per_step": 2}],
                    "precision": ["float32"]}
    spec = GridSpec.from_dict(grid)
    assert len(spec.configs) == 8 and len(set(spec.names)) == 8
    first = spec.configs[0]
    assert (first.lr, first.attention_backend, first.n_points, first.trials_per_step) == (1e-3, "dense", 64, 4)
    # Every key that varies is spelled; one that takes a single value (precision) is not.
    assert spec.names[0] == (f"{first.name}-attention_backend=dense-lr=0.001-n_points=64-trials_per_step=4")
    assert all("precision" not in n for n in spec.names)
    for cfg, name in zip(spec.configs, spec.names):
        assert f"lr={cfg.lr!r}" in name and f"n_points={cfg.n_points}" in name
    # Stable: the same file gives the same names.
    assert GridSpec.from_dict(grid).names == spec.names


@pytest.mark.parametrize("change, message", [
    (lambda g: g["axes"].update(learning_rate=[1e-3, 1e-4]), r"axis 'learning_rate'.*not a configuration key"),
    (lambda g: g["axes"].update(sizes=[{"n_points": 64, "widths": 3}]), r"axis 'sizes'.*mapping of configuration keys"),
    (lambda g: g["axes"].update(lr=[1e-3, 0.0]), r"lr=0.0 is not allowed"),
    (lambda g: g["axes"].update(kernel=["softmax", "relu"]) or g["base"].pop("kernel"), r"kernel='relu' is not allowed"),
    (lambda g: g["axes"].update(kernel=["softmax", "softmax"]) or g["base"].pop("kernel"), r"share the folder"),
    (lambda g: g["axes"].update(kernel=[]) or g["base"].pop("kernel"), r"axis 'kernel'.*non-empty list"),
    (lambda g: g["axes"]["tasks"].append({"benchmark": "sheared_swap"}), r"exactly the keys benchmark, marginals"),
    (lambda g: g["axes"]["tasks"].append({"benchmark": "matrix_inverse", "marginals": "gaussian"}), r"unidentifiable \(Prop\. 6"),
    (lambda g: g["axes"].update(symlog=[True]), r"\['symlog'\] are set in more than one place"),
    (lambda g: g.update(slurm={"gpus": 1}), r"unknown key\(s\) \['gpus'\] in 'slurm'"),
    (lambda g: g.update(local={"workers": 0}), r"local.workers=0"),
    (lambda g: g.update(name="a/b"), r"'name'.*folder name"),
    (lambda g: g.update(grid="x"), r"unknown top-level key\(s\) \['grid'\]"),
])
def test_bad_grids_are_refused_by_name(change, message):
    grid = _smoke()
    change(grid)
    with pytest.raises(ValueError, match=message):
        GridSpec.from_dict(grid)


def test_slurm_resources_reach_the_sbatch_script(tmp_path, monkeypatch):
    # submitit builds a SLURM executor only where srun exists; a stub on the PATH stands in for the cluster.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    grid = yaml.safe_load((PARAMS / "grid_paper.yaml").read_text())
    grid["slurm"].update(setup=["module load cuda"], additional={"account": "proj"}, partition="h200")
    spec = GridSpec.from_dict(grid)
    executor = slurm_executor(spec, tmp_path)
    inner = executor._executor
    inner.parameters["map_count"] = len(spec.configs)  # what map_array sets before writing the script
    script = inner._make_submission_file_text("python -m submitit.core._submit x", "uid")
    for line in ("--gpus-per-node=1", "--cpus-per-task=16", "--mem=128GB", "--time=1440", "--partition=h200",
                 "--account=proj", "--array=0-47%48", "--job-name=heavytail-grid-paper", "--signal=USR2@90"):
        assert f"#SBATCH {line}\n" in script, line
    assert "module load cuda" in script
    assert inner.max_num_timeout == 3  # requeues after a timeout, each resuming from checkpoints


def test_notebook_parameters_are_the_run_configuration(tmp_path):
    """papermill parameters = the run configuration: one `config` mapping of RunConfig keys, plus where to write."""
    import ast

    source_path = repo_root() / "notebooks" / "04_ablation.py"
    nb = jupytext.read(source_path)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1
    # Every name the grid passes is one papermill itself reads from the cell: it warns about (and the notebook
    # would ignore) any other, and it cannot read a multi-line assignment ("Unable to parse line").
    job = configuration_jobs(GridSpec.from_dict(_smoke()), tmp_path, threads=1)[0]
    assert set(parameters_of(source_path)) == set(job.parameters()) | set(RUNNER_PARAMETERS)
    assert "config = None" in cells[0].source
    assert nb.metadata["kernelspec"]["name"] == "python3"
    # config None: the notebook's own quick configuration, a valid RunConfig with the keys a reader looks for.
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    fallback = next(node for node in ast.walk(ast.parse(source))
                    if isinstance(node, ast.If) and ast.unparse(node.test) == "config is None")
    namespace: dict = {}
    exec(ast.unparse(fallback.body[0]), namespace)  # noqa: S102  (our own notebook's literal dict)
    config_keys = {f.name for f in dataclasses.fields(RunConfig)}
    assert {"benchmark", "marginals", "kernel", "norm", "symlog", "seed", "steps", "n_points"} <= set(namespace["config"])
    assert set(namespace["config"]) <= config_keys
    RunConfig.from_dict(namespace["config"])
    assert "globals()" not in source


def test_a_rerun_never_resubmits_a_configuration_slurm_still_runs(tmp_path, monkeypatch):
    from heavytail.pipeline import cluster, slurm

    states = {"7_0": "RUNNING", "7_1": "COMPLETED", "7_2": "PENDING", "7_3": "TIMEOUT", "7_4": "REQUEUED"}
    asked = []

    def squeue(job_ids):
        asked.append(sorted(job_ids))
        return {j: states[j] for j in job_ids if j in states}

    monkeypatch.setattr(cluster, "job_states", squeue)
    entries = [{"name": f"c{i}", "status": "submitted", "job_id": f"7_{i}"} for i in range(5)]
    entries.append({"name": "c5", "status": "failed", "job_id": "7_5"})  # finished with a record: never looked up
    entries.append({"name": "c6", "status": "submitted", "job_id": "7_6"})  # gone from squeue: not active
    (tmp_path / "grid.json").write_text(json.dumps({"configurations": entries}))
    names = [f"c{i}" for i in range(7)]
    assert slurm.active_jobs(tmp_path, names) == {"c0": "7_0", "c2": "7_2", "c4": "7_4"}
    assert asked == [["7_0", "7_1", "7_2", "7_3", "7_4", "7_6"]]  # one squeue call, only the submitted ones
    assert slurm.active_jobs(tmp_path, ["c1", "c3"]) == {}  # configurations no longer in the grid file

    def unreadable(job_ids):
        raise ValueError("squeue failed: slurm_load_jobs error")

    monkeypatch.setattr(cluster, "job_states", unreadable)
    assert slurm.active_jobs(tmp_path, ["c1"]) == {"c1": "7_1"}  # unknown counts as active: never twice


# ------------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_grid_runs_skips_finished_and_isolates_a_failing_cell(tmp_path):
    grid = _smoke()
    spec = GridSpec.from_dict(grid)
    good, bad = spec.configs
    grid_dir = tmp_path / spec.name
    # A folder whose checkpoints/ is a file: this configuration fails inside its training cell, at its first
    # checkpoint. (A folder of another configuration's run is refused before anything runs: test_reliability_probes.)
    (grid_dir / bad.name).mkdir(parents=True)
    (grid_dir / bad.name / "checkpoints").write_text("")

    # A configuration interrupted after 4 steps (a killed worker, a SLURM timeout) resumes, not restarts.
    train(good, grid_dir / good.name, quiet=True, stop_after=4)

    first = run_grid(grid, executor="submitit-local", workers=2, output_root=tmp_path)
    assert [e.status for e in first.entries] == ["ok", "failed"]
    by_name = {e.name: e for e in first.entries}
    failed = by_name[bad.name]
    assert "File exists" in failed.error and "checkpoints" in failed.error
    assert failed.failed_cell == train_cell(grid_dir / failed.ipynb)
    assert (grid_dir / failed.html).is_file()  # the partial notebook is rendered, not lost

    ok = by_name[good.name]
    run_dir = grid_dir / good.name
    for name in ("COMPLETE", "results.json", "04_ablation.ipynb", "04_ablation.html", "execution.json",
                 "04_ablation/fig5_transport.png", "04_ablation/energy_distribution.png",
                 "04_ablation/training_curve.png"):
        assert (run_dir / name).is_file(), name
    results = load_results(run_dir)
    assert ok.summary["median_ratio"] == results["energy"]["median"]["ratio"]
    executed = (run_dir / "04_ablation.ipynb").read_text()
    sentence = findings(results, skipped_steps=training_log(run_dir)[-1]["n_skipped"])
    assert json.dumps(sentence)[1:-1] in executed  # the closing sentence is the one computed from results.json
    assert "image/png" in executed
    assert "training: resuming from step_00000004" in executed

    recorded = json.loads((grid_dir / "grid.json").read_text())
    assert recorded["finished"] and recorded["counts"]["ok"] == 1 and recorded["counts"]["failed"] == 1
    assert [c["status"] for c in recorded["configurations"]] == ["ok", "failed"]
    index = (grid_dir / "index.html").read_text()
    assert f'href="{good.name}/04_ablation.html"' in index and f'href="{bad.name}/04_ablation.html"' in index
    assert f"code cell {failed.failed_cell}" in index

    # Re-run after clearing the conflict, with the process-pool executor: the finished one is skipped.
    shutil.rmtree(grid_dir / bad.name)
    stamp = (run_dir / "results.json").stat().st_mtime_ns
    second = run_grid(grid, executor="local", workers=2, output_root=tmp_path)
    assert [e.status for e in second.entries] == ["skipped", "ok"]
    assert (run_dir / "results.json").stat().st_mtime_ns == stamp
    assert second.ok and json.loads((grid_dir / "grid.json").read_text())["counts"]["skipped"] == 1

    # The command line lists the state without running anything, and exits 0 with nothing failed.
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(grid))
    assert main([str(grid_file), "--output-root", str(tmp_path), "--list"]) == 0
    assert [c["status"] for c in json.loads((grid_dir / "grid.json").read_text())["configurations"]] == ["skipped"] * 2


def test_killing_the_grid_stops_its_workers_and_their_kernels(tmp_path):
    """A killed grid must not leave pool workers that go on training queued configurations."""
    import signal
    import subprocess
    import sys
    import time

    import psutil
    import yaml

    grid = yaml.safe_load((PARAMS / "grid_smoke.yaml").read_text())
    grid["base"].update(steps=100_000, warmup_steps=1, checkpoint_every=50_000)  # long enough to be killed
    grid["local"] = {"workers": 1, "threads_per_worker": 1}
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(grid))
    proc = subprocess.Popen([sys.executable, "-m", "heavytail", "grid", str(grid_file), "--output-root",
                             str(tmp_path / "out")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parent = psutil.Process(proc.pid)
    descendants: list[psutil.Process] = []
    try:
        deadline = time.time() + 300
        kernels: list[psutil.Process] = []
        while time.time() < deadline and not kernels:
            time.sleep(1)
            kernels = [p for p in parent.children(recursive=True) if "ipykernel" in " ".join(p.cmdline())]
        assert kernels, "the grid never started a notebook kernel"
        descendants = parent.children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        gone, alive = psutil.wait_procs(descendants, timeout=60)
        assert not alive, f"still running after the grid was killed: {[p.cmdline()[:4] for p in alive]}"
    finally:  # however the test ends (a failure, a stopped session), its 100,000-step grid must not outlive it
        for p in [parent, *descendants, *(parent.children(recursive=True) if parent.is_running() else [])]:
            try:
                p.kill()
            except psutil.Error:
                pass


def _slow_stand_in(job):
    """Stands in for execute_configuration in the pool's workers: holds the run folder's lock for a while."""
    import time as _time

    from heavytail.pipeline import lock

    run_dir = Path(job.run_dir)
    held = lock.acquire(run_dir)
    try:
        _time.sleep(1.5)
    finally:
        lock.release(run_dir, held)
    return {"name": job.name, "status": "failed", "config": job.config, "error": "stand-in, not run"}


def test_grid_json_counts_as_running_only_what_a_worker_runs(tmp_path, monkeypatch):
    # The process pool pre-queues an item per worker and calls it running before any worker has taken it.
    import threading
    import time as _time

    from heavytail.pipeline import local

    monkeypatch.setattr(local, "execute_configuration", _slow_stand_in)
    grid = _smoke()
    del grid["base"]["seed"]
    grid["axes"]["seed"] = [0, 1]  # four configurations through one worker
    spec = GridSpec.from_dict(grid)
    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            try:
                entries = json.loads((tmp_path / spec.name / "grid.json").read_text())["configurations"]
                seen.append(sum(e["status"] == "running" for e in entries))
            except (OSError, ValueError, KeyError):
                pass
            _time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        report = run_grid(grid, executor="local", workers=1, output_root=tmp_path)
    finally:
        stop.set()
        watcher.join()
    assert [e.status for e in report.entries] == ["failed"] * 4
    assert seen and max(seen) == 1, f"grid.json said {max(seen)} running with one worker"


def test_list_with_only_says_what_the_command_would_run(tmp_path, capsys):
    """`--list --only P` runs nothing and says how many configurations the same command would run; the ones the
    selection leaves out read as not selected instead of plain 'pending', as if they were about to run."""
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(_smoke()))
    names = GridSpec.load(grid_file).names
    assert main([str(grid_file), "--output-root", str(tmp_path), "--list", "--only", names[0]]) == 0
    out = capsys.readouterr()
    assert "1 would run (--list: nothing runs)" in out.err + out.out
    lines = {line.split()[0]: line for line in out.out.splitlines() if line.startswith("  ")}
    assert "not selected" not in lines[names[0]] and lines[names[0]].split()[1] == "pending"
    assert "not selected" in lines[names[1]]
    assert not any((tmp_path / "grid-smoke" / n / "results.json").exists() for n in names)
