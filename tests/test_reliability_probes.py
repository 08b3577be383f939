"""Faults and bad input, each as a user meets it: one line on stderr and exit 2 with nothing lost, or a clean resume.
docs/reliability.md lists each promise with the test here (or in tests/test_flash_native.py) that checks it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from heavytail.__main__ import main
from heavytail.harness.artifacts import repo_root
from heavytail.harness.config import RunConfig
from heavytail.harness.rundir import RunDir
from heavytail.pipeline.grid_file import GridSpec
from heavytail.studies import run_summary
from heavytail.studies import reference_maps as R

ROOT = repo_root()
PARAMS = ROOT / "params"


def _one_line(capsys, command: str) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[grid] ")
           or line.startswith("[grid] error: ")]
    assert len(err) == 1 and err[0].startswith(f"[{command}] error: "), err
    return err[0]


def _run(args: list[str]) -> int:
    """The exit code of ``python -m heavytail ARGS`` (argparse-time refusals exit through SystemExit)."""
    try:
        return main(args)
    except SystemExit as exit_:
        return exit_.code


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------- shipped maps are never lost
def _grid_record(folder: Path, grid: str, source: str, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    entries = [{"name": f"c{i}", "status": "ok", "run_dir": f"c{i}"} for i in range(n)]
    (folder / "grid.json").write_text(json.dumps({"grid": grid, "source": source, "configurations": entries}))


def _fake_runs(n: int) -> list[dict]:
    clean = {"commit": "a" * 40, "dirty": False}
    from heavytail.harness.config import RunConfig

    return [{"name": f"c{i}", "config": RunConfig(seed=i).to_dict(), "median": {"ratio": 1.5}, "mean": {"ratio": 1.5},
             "collapse": {"label": "ok"}, "provenance": [clean]} for i in range(n)]


@pytest.fixture
def shipped(tmp_path) -> Path:
    """A copy of the shipped one-trial-per-step map, where ship-map may write in these tests."""
    out = tmp_path / "kernel_gap_design.json"
    out.write_bytes((ROOT / R.REFERENCE_DIR / R.MAPS["gap-design"].file).read_bytes())
    return out


def test_a_shipped_map_is_not_replaced_by_a_map_of_another_grid(tmp_path, shipped, capsys, monkeypatch):
    monkeypatch.setattr(run_summary, "collect", lambda grid_dir: _fake_runs(3))
    other = tmp_path / "grid-smoke"
    _grid_record(other, "grid-smoke", str(PARAMS / "grid_smoke.yaml"), 3)
    before = shipped.read_bytes()
    for force in ([], ["--force"]):  # the map's provenance would name a grid file its runs are not of
        assert main(["ship-map", "gap-design", str(other), "--output", str(shipped), *force]) == 2
        line = _one_line(capsys, "ship-map")
        assert "holds grid 'grid-smoke'" in line and "not 'grid-gap-design' of params/grid_gap_design.yaml" in line
    assert shipped.read_bytes() == before and not shipped.with_name(shipped.name + ".bak").exists()


def test_a_shipped_map_is_replaced_only_by_as_many_finished_runs_or_with_force_keeping_a_backup(
        tmp_path, shipped, capsys, monkeypatch):
    held = len(json.loads(shipped.read_text())["runs"])
    grid_dir = tmp_path / "grid-gap-design"
    _grid_record(grid_dir, "grid-gap-design", "/elsewhere/params/grid_gap_design.yaml", held)
    before = shipped.read_bytes()
    monkeypatch.setattr(run_summary, "collect", lambda grid_dir: _fake_runs(2))  # the grid resumed, 2 runs so far
    assert main(["ship-map", "gap-design", str(grid_dir), "--output", str(shipped)]) == 2
    assert f"holds {held} finished runs and this grid 2" in _one_line(capsys, "ship-map")
    assert shipped.read_bytes() == before

    assert main(["ship-map", "gap-design", str(grid_dir), "--output", str(shipped), "--force"]) == 0
    assert shipped.with_name(shipped.name + ".bak").read_bytes() == before
    assert len(json.loads(shipped.read_text())["runs"]) == 2

    monkeypatch.setattr(run_summary, "collect", lambda grid_dir: _fake_runs(held))  # finished: it may replace it
    assert main(["ship-map", "gap-design", str(grid_dir), "--output", str(shipped)]) == 0
    assert json.loads(shipped.read_text())["provenance"]["complete"]


def test_a_grid_resumed_in_a_fresh_folder_ships_with_the_runs_shipped_before(tmp_path, capsys, monkeypatch):
    """A later session reruns only the pending configurations (--only, in a new folder); shipping keeps the runs
    the earlier ship holds, in the grid's order, and takes a run held in both from the folder."""
    out = tmp_path / "kernel_gap_design.json"
    first = tmp_path / "session-1" / "grid-gap-design"
    _grid_record(first, "grid-gap-design", str(PARAMS / "grid_gap_design.yaml"), 5)
    monkeypatch.setattr(run_summary, "collect", lambda grid_dir: _fake_runs(5)[:3])
    assert main(["ship-map", "gap-design", str(first), "--output", str(out)]) == 0
    assert json.loads(out.read_text())["provenance"]["finished"] == 3

    later = tmp_path / "session-2" / "grid-gap-design"
    _grid_record(later, "grid-gap-design", str(PARAMS / "grid_gap_design.yaml"), 5)
    rerun = _fake_runs(5)[2:]
    for r in rerun:
        r["median"] = {**r["median"], "rerun": True}  # the same numbers (c2 is shipped: others need --replace)
    monkeypatch.setattr(run_summary, "collect", lambda grid_dir: rerun)
    assert main(["ship-map", "gap-design", str(later), "--output", str(out)]) == 0
    shipped = json.loads(out.read_text())
    assert [r["name"] for r in shipped["runs"]] == ["c0", "c1", "c2", "c3", "c4"]
    assert [bool(r["median"].get("rerun")) for r in shipped["runs"]] == [False, False, True, True, True]
    assert shipped["provenance"]["complete"] and shipped["provenance"]["kept_from_earlier_ship"] == 2


def test_a_grid_file_that_gained_configurations_reships_its_map_before_any_of_them_finished(tmp_path, capsys,
                                                                                           monkeypatch):
    """The map keeps every run it held and records the grid's new count, so it agrees with its grid file again;
    a folder with nothing finished over no shipped runs of the grid is still refused."""
    out = tmp_path / "kernel_gap_design.json"
    first = tmp_path / "session-1" / "grid-gap-design"
    _grid_record(first, "grid-gap-design", str(PARAMS / "grid_gap_design.yaml"), 3)
    monkeypatch.setattr(run_summary, "collect", lambda grid_dir: _fake_runs(3))
    assert main(["ship-map", "gap-design", str(first), "--output", str(out)]) == 0
    before = json.loads(out.read_text())
    assert before["provenance"]["complete"] and before["provenance"]["configurations"] == 3

    grown = tmp_path / "session-2" / "grid-gap-design"
    _grid_record(grown, "grid-gap-design", str(PARAMS / "grid_gap_design.yaml"), 5)  # two cells added
    monkeypatch.setattr(run_summary, "collect", lambda grid_dir: [])
    assert main(["ship-map", "gap-design", str(grown), "--output", str(out)]) == 0
    after = json.loads(out.read_text())
    assert after["runs"] == before["runs"]
    assert after["provenance"]["configurations"] == 5 and after["provenance"]["finished"] == 3
    assert not after["provenance"]["complete"] and after["provenance"]["kept_from_earlier_ship"] == 3

    assert main(["ship-map", "gap-design", str(grown), "--output", str(tmp_path / "none.json")]) == 2
    assert "holds no finished configuration yet" in _one_line(capsys, "ship-map")


def test_unshipped_runs_only_the_configurations_the_shipped_map_lacks(tmp_path, capsys, monkeypatch):
    from heavytail.pipeline import grid as G

    spec = GridSpec.from_yaml(PARAMS / "grid_collapse_ladder.yaml")
    shipped, load = R.load("ladder"), R.load
    # The shipped map less its seed-5 runs and the grid's first configuration: what a resumed session meets,
    # whether or not the real map is complete by now.
    lacking = {n for n in spec.names if "-seed5-" in n} | {spec.names[0]}
    partial = {**shipped, "runs": [r for r in shipped["runs"] if r["name"] not in lacking]}
    monkeypatch.setattr(R, "load", lambda name, root=None: partial if name == "ladder" else load(name, root))
    held = {r["name"] for r in partial["runs"]}
    assert held and G.unshipped(spec) == [n for n in spec.names if n not in held]
    # A pattern selects among the unshipped runs only; a shipped run's own name selects nothing, which is refused.
    seed = re.search(r"-seed\d+-", G.unshipped(spec)[-1]).group()
    assert G.unshipped(spec, [f"*{seed}*"]) == [n for n in spec.names if seed in n and n not in held]
    with pytest.raises(ValueError, match="already holds every configuration"):
        G.unshipped(spec, [sorted(held)[0]])
    ran = {}
    monkeypatch.setattr(G, "run_grid", lambda grid, **kw: ran.setdefault("only", kw["only"]) and 1 / 0)
    with pytest.raises(ZeroDivisionError):  # what the command would run, caught before anything runs
        G.main([str(PARAMS / "grid_collapse_ladder.yaml"), "--unshipped", "--output-root", str(tmp_path)])
    assert ran["only"] == G.unshipped(spec)
    monkeypatch.setattr(R, "load", lambda name, root=None: {"runs": [{"name": n} for n in spec.names]})
    with pytest.raises(ValueError, match="already holds every configuration of grid"):
        G.unshipped(spec)
    assert main(["grid", str(PARAMS / "grid_smoke.yaml"), "--unshipped", "--list", "--output-root", str(tmp_path)]) == 2
    assert "not the grid file of a shipped map" in _one_line(capsys, "grid")


@pytest.mark.parametrize("damage, says", [
    (lambda b: b[: len(b) // 2], "not valid JSON"),
    (lambda b: b"", "empty"),
    (lambda b: b"\xff\xfe" + b[2:], "not a UTF-8 text file"),
    (lambda b: b'{"provenance": {}, "runs": [{"name": "x"}]}', "not a reference map: run 0 has no config"),
    (lambda b: b"[1, 2]", "not a reference map"),
])
def test_a_damaged_shipped_map_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch, damage, says):
    path = tmp_path / R.REFERENCE_DIR / R.MAPS["gap-design"].file
    path.parent.mkdir(parents=True)
    path.write_bytes(damage((ROOT / R.REFERENCE_DIR / R.MAPS["gap-design"].file).read_bytes()))
    monkeypatch.setattr(R, "repo_root", lambda: tmp_path)
    assert main(["claims", "gap-design"]) == 2
    line = _one_line(capsys, "claims")
    assert str(path) in line and says in line, line


# ------------------------------------------------------------------------- finished runs are never lost
def _smoke_grid(tmp_path: Path, **base) -> tuple[Path, GridSpec]:
    grid = yaml.safe_load((PARAMS / "grid_smoke.yaml").read_text())
    grid["base"].update(base)
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(grid))
    return grid_file, GridSpec.from_yaml(grid_file)


def _finished_folder(run_dir: Path, cfg: RunConfig) -> None:
    """A configuration's folder as a finished grid leaves it (the files the grid and the notebook write)."""
    run = RunDir(run_dir)
    (run_dir / "04_ablation").mkdir(parents=True)
    run.config_path.write_text(cfg.to_yaml())
    run.complete_path.write_text(cfg.name + "\n")
    run.results_path.write_text(json.dumps({"config": cfg.to_dict()}))
    run.execution_path.write_text(json.dumps({"status": "ok", "config": cfg.to_dict(), "html": "04_ablation.html"}))
    (run_dir / "04_ablation.html").write_text("<html>the finished notebook</html>")
    (run_dir / "04_ablation" / "training_curve.png").write_bytes(b"png")


def test_rerunning_a_grid_without_its_set_is_refused_before_anything_is_touched(tmp_path, capsys):
    grid_file, spec = _smoke_grid(tmp_path)
    ran = spec.configs[0].replace(steps=5)  # run earlier with --set steps=5
    _finished_folder(tmp_path / spec.name / spec.names[0], ran)
    before = _snapshot(tmp_path / spec.name)
    for extra in ([], ["--list"]):
        assert main(["grid", str(grid_file), "--output-root", str(tmp_path), *extra]) == 2
        line = _one_line(capsys, "grid")
        assert "steps: 5 there, 12 here" in line and "--set steps=5" in line, line
        assert _snapshot(tmp_path / spec.name) == before  # no figure deleted, no record rewritten, no grid.json
    assert main(["grid", str(grid_file), "--output-root", str(tmp_path), "--list", "--set", "steps=5"]) == 0
    listed = json.loads((tmp_path / spec.name / "grid.json").read_text())["configurations"]
    assert listed[0]["status"] == "skipped"


def test_a_configuration_another_grid_command_finished_is_never_recorded_as_locked(tmp_path):
    from heavytail.pipeline import lock
    from heavytail.pipeline.grid_record import GridEntry, GridReport

    _, spec = _smoke_grid(tmp_path)
    grid_dir = tmp_path / spec.name
    done, dead = spec.names
    _finished_folder(grid_dir / done, spec.configs[0])
    (grid_dir / dead).mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a holder that has exited
    (grid_dir / dead / lock.LOCK_FILE).write_text(json.dumps(
        {"pid": gone.pid, "host": os.uname().nodename, "job_id": None, "since": "then"}))
    entries = [GridEntry(name=n, run_dir=n, status="locked", error="being run by another grid command",
                         config=c.to_dict()) for n, c in zip(spec.names, spec.configs)]
    report = GridReport(name=spec.name, directory=grid_dir, executor="local", entries=entries)
    report.write()  # what this command writes after the other one finished `done` and died on `dead`
    recorded = {e["name"]: e["status"] for e in json.loads((grid_dir / "grid.json").read_text())["configurations"]}
    assert recorded == {done: "skipped", dead: "pending"}


def _weights(run_dir: Path) -> dict:
    return torch.load(RunDir(run_dir).model_path, weights_only=True)


def test_a_corrupt_latest_checkpoint_is_named_set_aside_and_the_one_before_it_resumes(tmp_path, tiny_cfg, capsys):
    from heavytail.harness.train import train

    train(tiny_cfg, tmp_path / "whole", quiet=True)
    run = RunDir(tmp_path / "cut")
    train(tiny_cfg, run.path, quiet=True, stop_after=8)  # checkpoints at steps 4 and 8
    latest = run.checkpoint_path(8)
    latest.write_bytes(latest.read_bytes()[:200])
    capsys.readouterr()
    train(tiny_cfg, run.path, quiet=True)
    err = capsys.readouterr().err
    assert f"{latest} is unreadable" in err and "moved to step_00000008.pt.corrupt" in err
    assert latest.with_name(latest.name + ".corrupt").is_file()  # kept for a look, out of the resume's way
    whole, resumed = _weights(tmp_path / "whole"), _weights(run.path)
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)  # resumed from step 4: the same run


def test_a_corrupt_model_is_one_line_naming_it(tmp_path, tiny_cfg, capsys):
    from heavytail.harness.train import train

    run = RunDir(train(tiny_cfg.replace(steps=4), tmp_path / "run", quiet=True))
    run.model_path.write_bytes(b"not a model")
    assert main(["evaluate", str(run.path)]) == 2
    assert "model.pt is not the file training wrote" in _one_line(capsys, "evaluate")  # its digest is bound
    summary = run.train_summary()
    del summary["binding"]  # a run trained before bindings: the file itself is found unreadable
    run.train_summary_path.write_text(json.dumps(summary))
    assert main(["evaluate", str(run.path)]) == 2
    line = _one_line(capsys, "evaluate")
    assert f"{run.model_path} is not a readable model of this run" in line
    assert not run.has_results()


# ------------------------------------------------------------------------- output folders that cannot be written
@pytest.mark.parametrize("command", ["train", "grid", "report", "ship-map"])
def test_an_output_below_a_file_is_one_line_before_any_work(tmp_path, capsys, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "out"
    args = {"train": ["train", "--output", str(out), "--set", "steps=2"],
            "grid": ["grid", str(PARAMS / "grid_smoke.yaml"), "--output-root", str(out)],
            "report": ["report", str(PARAMS / "smoke.yaml"), "--output", str(out)],
            "ship-map": ["ship-map", "gap-design", str(tmp_path / "g"), "--output", str(out / "map.json")]}[command]
    if command == "ship-map":
        _grid_record(tmp_path / "g", "grid-gap-design", "", 1)
    assert _run(args) == 2
    assert f"{blocker} is a file, not a folder" in _one_line(capsys, command)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_output_is_one_line_before_any_work(tmp_path, capsys):
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert _run(["train", "--output", str(locked / "run"), "--set", "steps=2"]) == 2
        assert "cannot be written" in _one_line(capsys, "train")
    finally:
        locked.chmod(0o755)


# ------------------------------------------------------------------------- memory, refusals, Ctrl-C
def test_a_configuration_that_cannot_fit_in_memory_is_refused_with_the_estimate_and_what_fits(tmp_path, capsys):
    from heavytail.harness import memory

    grid_file, spec = _smoke_grid(tmp_path, n_points=200_000)  # dense attention: N^2 scores per trial
    assert main(["grid", str(grid_file), "--output-root", str(tmp_path / "out"), "--list"]) == 2
    line = _one_line(capsys, "grid")
    assert "needs about" in line and "GB for its training" in line and "N up to" in line and "fits" in line, line
    assert not (tmp_path / "out").exists()
    cfg = spec.configs[0]
    assert memory.estimate(cfg).total > 100 * memory.estimate(cfg.replace(attention_backend="flash")).total
    limit = memory.estimate(cfg.replace(n_points=4096)).total
    why = memory.refusal(cfg, limit)
    fits = int(why.split("N up to ")[1].split()[0].replace(",", ""))
    assert 4096 <= fits < 200_000 and memory.refusal(cfg.replace(n_points=fits), limit) is None


def test_a_run_that_cannot_fit_in_memory_is_refused_by_train_before_its_folder_exists(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--output", str(out), "--set", "n_points=200000", "attention_backend=dense", "device=cpu"]
    assert main(args) == 2
    line = _one_line(capsys, "train")
    assert "needs about" in line and "N up to" in line, line
    assert not out.exists()


@pytest.mark.parametrize("extra", [["--only", "nothing*"], ["--executor", "slurm"]])
def test_a_refused_grid_leaves_no_empty_folder(tmp_path, capsys, extra):
    assert main(["grid", str(PARAMS / "grid_smoke.yaml"), "--output-root", str(tmp_path / "out"), *extra]) == 2
    _one_line(capsys, "grid")
    assert not (tmp_path / "out").exists()


def test_a_wrong_typed_notebook_parameter_is_refused_by_name(tmp_path, capsys):
    params = yaml.safe_load((PARAMS / "cpu.yaml").read_text())
    params["notebooks"]["01_integrability"]["n_paths"] = "abc"
    params_file = tmp_path / "cpu.yaml"
    params_file.write_text(yaml.safe_dump(params))
    assert main(["report", str(params_file), "--output", str(tmp_path / "out")]) == 2
    line = _one_line(capsys, "report")
    assert "n_paths='abc'" in line and "is an integer" in line and "n_paths = 3" in line, line
    assert not (tmp_path / "out").exists()


def _sigint_default() -> None:
    # A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored across exec: Python
    # then installs no KeyboardInterrupt handler. The grid under test is a terminal's foreground job.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_a_grid_is_one_line_and_leaves_its_records_consistent(tmp_path):
    grid = yaml.safe_load((PARAMS / "grid_smoke.yaml").read_text())
    grid["base"].update(steps=100_000, warmup_steps=1, checkpoint_every=50_000)  # still running when interrupted
    grid["axes"]["tasks"] = grid["axes"]["tasks"][:1]
    grid["local"] = {"workers": 1, "threads_per_worker": 1}
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(grid))
    spec = GridSpec.from_yaml(grid_file)
    run = RunDir(tmp_path / spec.name / spec.names[0])
    # A session of its own, as a terminal's foreground job: Ctrl-C signals the whole group (grid and workers).
    proc = subprocess.Popen([sys.executable, "-m", "heavytail", "grid", str(grid_file), "--output-root",
                             str(tmp_path), "--quiet"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=_sigint_default)
    try:
        deadline = time.monotonic() + 300
        while not run.metrics_path.is_file():  # training has started in the notebook
            assert proc.poll() is None and time.monotonic() < deadline, "the grid never started training"
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            import psutil

            alive = [f"{c.pid} {c.status()} {' '.join(c.cmdline())[:120]}" for c in
                     [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]]
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            raise AssertionError(f"the grid did not exit within 120 s of Ctrl-C; still alive: {alive}; "
                                 f"it printed: {err[-3000:]}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = [line for line in err.strip().splitlines() if not line.startswith("[grid] ") or "interrupted" in line]
    assert proc.returncode == 130 and lines == ["[grid] interrupted; rerun the same command to resume"], err[-3000:]
    recorded = json.loads((tmp_path / spec.name / "grid.json").read_text())
    assert [c["status"] for c in recorded["configurations"]] == ["cancelled"] and not recorded["finished"]
    assert run.execution()["status"] == "cancelled"
    from heavytail.pipeline import lock

    assert lock.holder(run.path) is None  # its worker is gone: a rerun takes the folder and resumes


def _interrupt_when(args, ready, timeout=300):
    """Start ``python -m heavytail ARGS`` as a terminal's foreground job, send Ctrl-C to its group once ``ready()``,
    and return (exit code, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "heavytail", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_sigint_default)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline, f"never ready: {proc.stderr.read()[-2000:]}"
            time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err


def test_ctrl_c_during_train_is_one_line_and_the_run_resumes(tmp_path):
    from tests.conftest import TINY

    run = RunDir(tmp_path / "run")
    sets = [f"{k}={v}" for k, v in {**TINY, "steps": 100_000, "checkpoint_every": 5}.items()]
    code, err = _interrupt_when(["train", "--set", *sets, "--output", str(run.path), "--quiet"],
                                lambda: bool(run.checkpoints()))
    assert code == 130 and err.strip().splitlines() == ["[train] interrupted; rerun the same command to resume"], err
    assert not run.is_complete() and run.checkpoints()


def test_ctrl_c_during_a_report_marks_the_notebook_interrupted_never_running(tmp_path):
    from tests.test_report import tiny_notebooks

    out = tmp_path / "out"
    nbs = tiny_notebooks(tmp_path / "nbs", {"01_first": "print('fine')", "02_slow": "import time\ntime.sleep(600)",
                                            "03_after": "print(x)"})
    params = tmp_path / "params.yaml"
    params.write_text("report: t\nnotebooks:\n  01_first: {}\n  02_slow: {}\n  03_after: {}\n")
    index = out / "index.json"

    def slow_running() -> bool:
        try:
            entries = {n["name"]: n["status"] for n in json.loads(index.read_text())["notebooks"]}
        except (OSError, ValueError):
            return False
        return entries.get("02_slow") == "running"

    code, err = _interrupt_when(["report", str(params), "--notebooks-dir", str(nbs), "--output-dir", str(out),
                                 "--quiet"], slow_running)
    assert code == 130 and "Traceback" not in err, err[-3000:]
    ours = [ln for ln in err.splitlines() if ln.startswith("[report] ") and "running" not in ln and " ok in " not in ln]
    assert ours == ["[report] interrupted: the pages mark what did not finish; rerun the same command"], err[-3000:]
    recorded = json.loads(index.read_text())
    status = {n["name"]: n["status"] for n in recorded["notebooks"]}
    assert status == {"01_first": "ok", "02_slow": "interrupted", "03_after": "interrupted"} and not recorded["finished"]
    assert "Interrupted (Ctrl-C)" in (out / "index.html").read_text()
