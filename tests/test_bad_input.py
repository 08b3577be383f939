"""Bad input stops at the command's boundary: one line on stderr naming the problem, exit code 2, no
traceback, and nothing run."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from heavytail.__main__ import main
from heavytail.harness.artifacts import repo_root

ROOT = repo_root()
NOT_YAML = "steps: 3\nkernel: [softmax\nseed: 0\n"  # the flow sequence never closes


def _one_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"[{command}] error: "), err
    return err[0]


@pytest.mark.parametrize("command, extra", [
    ("train", ["--output", "RUN"]),
    ("grid", ["--output-root", "RUN", "--list"]),
    ("report", ["--output", "RUN"]),
])
def test_a_yaml_syntax_error_is_one_line_naming_file_and_line(tmp_path, capsys, command, extra):
    bad = tmp_path / "bad.yaml"
    bad.write_text(NOT_YAML)
    args = [str(tmp_path / "run") if a == "RUN" else a for a in extra]
    assert main([command, str(bad), *args]) == 2
    line = _one_line(capsys, command)
    # yaml notices the unclosed list on line 3 and says where it started
    assert f"{bad}:3:" in line and "not valid YAML" in line and "line 2" in line, line
    assert not (tmp_path / "run").exists()


def test_a_grid_file_named_by_a_params_file_is_read_the_same_way(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(NOT_YAML)
    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"report": "t", "grids": {"g": str(grid)}, "notebooks": {}}))
    assert main(["report", str(params), "--output", str(tmp_path / "out")]) == 2
    assert f"{grid}:3:" in _one_line(capsys, "report")
    assert not (tmp_path / "out").exists()


def test_the_command_line_itself_prints_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(NOT_YAML)
    done = subprocess.run([sys.executable, "-m", "heavytail", "grid", str(bad), "--list"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"[grid] error: {bad}:3:5: not valid YAML: expected ',' or ']', "
                                                f"but got ':' (while parsing a flow sequence that starts at line 2)"]


def test_a_misspelled_notebook_parameter_is_refused_before_any_notebook_runs(tmp_path, capsys):
    params = yaml.safe_load((ROOT / "params" / "cpu.yaml").read_text())
    params["notebooks"]["01_integrability"]["n_maxx"] = 3
    params_file = tmp_path / "cpu.yaml"
    params_file.write_text(yaml.safe_dump(params))
    out = tmp_path / "out"
    assert main(["report", str(params_file), "--output", str(out)]) == 2
    line = _one_line(capsys, "report")
    assert "section '01_integrability' sets ['n_maxx']" in line and "01_integrability.py does not take" in line
    assert "its parameters: n_max, n_paths," in line and "output_root" not in line  # what can be set instead
    assert not out.exists()  # nothing ran, not even the notebooks before it


def test_a_misspelled_grid_parameter_is_refused_too(tmp_path, capsys):
    params = yaml.safe_load((ROOT / "params" / "cpu.yaml").read_text())
    params["notebooks"]["07_kernel_gap"]["grids"] = {"grid_dirr": "gap"}
    params_file = tmp_path / "cpu.yaml"
    params_file.write_text(yaml.safe_dump(params))
    assert main(["report", str(params_file), "--output", str(tmp_path / "out"), "--only", "01_*"]) == 2
    assert "section '07_kernel_gap' sets ['grid_dirr']" in _one_line(capsys, "report")


def test_a_grid_whose_notebook_does_not_take_the_configuration_is_refused(tmp_path, capsys):
    grid = yaml.safe_load((ROOT / "params" / "grid_smoke.yaml").read_text())
    grid["notebook"] = "notebooks/01_integrability.py"
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(grid))
    assert main(["grid", str(grid_file), "--output-root", str(tmp_path / "out")]) == 2
    line = _one_line(capsys, "grid")
    assert "sets ['config', 'floor_cache', 'progress', 'run_dir'], which" in line and "01_integrability.py" in line
    assert not list((tmp_path / "out").rglob("execution.json"))
