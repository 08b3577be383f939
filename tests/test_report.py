"""The report runner end to end: every analysis notebook under params/smoke.yaml, and failure handling.

Kernel start-up costs seconds per notebook, so the notebooks run once (module-scoped fixture) and each
test inspects that run.
"""

from __future__ import annotations

import json
from pathlib import Path

import jupytext
import pytest
import yaml

from heavytail.harness.artifacts import Artifacts, artifacts, repo_root
from heavytail.pipeline import report
from heavytail.pipeline.notebook import discover_notebooks
from heavytail.pipeline.report import ReportParams, run_report

ROOT = repo_root(Path(__file__).parent)

# What each notebook must leave behind (figures come as PNG + SVG).
EXPECTED = {
    "01_integrability": ["fig6_kernels.png", "fig6_kernels.svg", "normalizers_vs_N.png", "normalizers_vs_N.svg",
                         "symlog_tail.png", "symlog_tail.svg", "normalizer_drift.csv", "symlog_tail.json"],
    "02_splice_testbed": ["fig7_splice.png", "fig7_splice.svg", "fig1_tail_sensitivity.png", "fig1_tail_sensitivity.svg",
                          "sweep_raw.csv", "figure1_noise_units.csv", "findings.json"],
    "03_identifiability": ["fig4_densities.png", "fig4_densities.svg", "recovery_vs_N.png", "recovery_vs_N.svg",
                           "prop6_energy.png", "prop6_energy.svg", "recovery_errors.csv", "prop6_energy.csv",
                           "center_mean_vs_median.csv"],
    # no grid at smoke scale: Figures 12-13 are skipped with a note, the numerics study still runs
    "05_collapse": ["collapse_onset_diagnostics.png", "collapse_onset_diagnostics.svg", "gradient_accuracy.csv"],
}

HEADER = """# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---
"""


def _tiny_notebook(name: str, body: str) -> str:
    return HEADER + f"""
# %% tags=["parameters"]
x = 1
report = "scratch"
output_root = None

# %%
from heavytail.harness.artifacts import artifacts
art = artifacts("{name}", report=report, output_root=output_root)
art.save_table("x.json", {{"x": x}})

# %%
{body}
"""


def test_every_notebook_in_the_smoke_params_runs_and_writes_its_artifacts(smoke_report):
    out, params, results = smoke_report.out, smoke_report.params, smoke_report.results
    assert set(EXPECTED) <= set(params.notebooks), "smoke.yaml must cover notebooks 01-03"
    for name in params.notebooks:
        r = results[name]
        assert r.status == "ok", f"{name} failed at cell {r.failed_cell}: {r.error}"
        assert (out / f"{name}.ipynb").is_file() and (out / f"{name}.html").is_file()
        for f in EXPECTED.get(name, []):
            path = out / name / f
            assert path.is_file() and path.stat().st_size > 0, f"{name} did not write {f}"
    index = (out / "index.html").read_text()
    for name in params.notebooks:
        assert f'href="{name}.html"' in index
    # a reader sees figures, tables and sentences, never the repr of what a cell's last call returned
    for name in params.notebooks:
        cells = json.loads((out / f"{name}.ipynb").read_text())["cells"]
        shown = [o["data"].get("text/plain", "") for c in cells for o in c.get("outputs", [])
                 if o.get("output_type") == "execute_result"]
        stray = [s for s in shown if "PosixPath(" in "".join(s)]
        assert not stray, f"{name} shows return values: {stray}"
    data = json.loads((out / "index.json").read_text())
    assert data["finished"] is True


def test_notebook_findings_are_computed_not_pasted(smoke_report):
    # The last cell of every notebook renders its findings; they must mention values from this run.
    out = smoke_report.out
    findings = json.loads((out / "02_splice_testbed" / "findings.json").read_text())
    assert set(findings["energy_argmin_at_largest_budget"]) == {"0.5", "0.9"}  # the smoke seams, not the paper's
    html = (out / "02_splice_testbed.html").read_text()
    assert "At the largest budget N = 256" in html  # the smoke budget, printed from the run


def tiny_notebooks(folder: Path, bodies: dict[str, str]) -> Path:
    """A notebooks folder holding one tiny notebook per name, each running its body after writing x.json."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in bodies.items():
        (folder / f"{name}.py").write_text(_tiny_notebook(name, body))
    return folder


def test_failing_notebook_is_marked_and_the_others_still_run(tmp_path):
    nbs = tiny_notebooks(tmp_path / "nbs", {"01_first": "print('fine')", "03_after": "print(x)", "04_unlisted": "print(x)",
                                            "02_broken": "raise RuntimeError('deliberate failure')"})
    params = tmp_path / "p.yaml"
    params.write_text("report: t\nnotebooks:\n  01_first: {x: 5}\n  02_broken: {}\n  03_after: {x: 7}\n")
    out = tmp_path / "out"
    code = report.main([str(params), "--notebooks-dir", str(nbs), "--output-dir", str(out), "--no-progress"])
    assert code == 1
    data = {n["name"]: n for n in json.loads((out / "index.json").read_text())["notebooks"]}
    assert data["01_first"]["status"] == "ok" and data["03_after"]["status"] == "ok"
    assert data["04_unlisted"]["status"] == "skipped"
    broken = data["02_broken"]
    assert broken["status"] == "failed"
    assert "deliberate failure" in broken["error"] and broken["failed_cell"] is not None
    # Partial output is kept: the cell before the failure ran and wrote its artifact.
    assert json.loads((out / "02_broken" / "x.json").read_text()) == {"x": 1}
    assert (out / "02_broken.html").is_file()
    assert json.loads((out / "03_after" / "x.json").read_text()) == {"x": 7}  # parameters were injected
    index = (out / "index.html").read_text()
    assert "failed" in index and "deliberate failure" in index and f"code cell {broken['failed_cell']}" in index


def test_a_kernel_is_not_interrupted_when_it_is_shut_down(monkeypatch):
    """jupyter_client interrupts a kernel before shutting it down; ipykernel then prints "ERROR |
    KeyboardInterrupt caught in kernel." when the signal lands in a message handler, although nothing failed.
    The report's kernels skip that interrupt (the notebook has finished), and keep any other."""
    import asyncio

    from jupyter_client.manager import AsyncKernelManager

    from heavytail.pipeline.notebook import _ipc_kernel_manager

    sent = []

    async def interrupt(self):
        sent.append(self.shutting_down)

    monkeypatch.setattr(AsyncKernelManager, "_async_interrupt_kernel", interrupt)
    km = _ipc_kernel_manager()(kernel_name="python3")
    km.shutting_down = True
    asyncio.run(km._async_interrupt_kernel())
    assert sent == []
    km.shutting_down = False
    asyncio.run(km._async_interrupt_kernel())
    assert sent == [False]


def test_params_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="unknown top-level keys"):
        ReportParams.from_dict({"report": "x", "notebook": {}})
    with pytest.raises(ValueError, match="'report'"):
        ReportParams.from_dict({"report": "a/b", "notebooks": {}})
    with pytest.raises(ValueError, match="named like"):
        ReportParams.from_dict({"report": "x", "notebooks": {"integrability": {}}})
    with pytest.raises(ValueError, match="injects itself"):
        ReportParams.from_dict({"report": "x", "notebooks": {"01_a": {"output_root": "/"}}})
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    with pytest.raises(ValueError, match="have no notebook"):
        run_report(ReportParams.from_dict({"report": "x", "notebooks": {"07_missing": {}}}), notebooks_dir=nbs,
                   output_dir=tmp_path / "o")
    with pytest.raises(FileNotFoundError):
        ReportParams.from_yaml(tmp_path / "nope.yaml")


@pytest.mark.parametrize("name", ["cpu.yaml", "smoke.yaml", "paper.yaml"])
def test_params_files_parse_and_match_notebook_parameters(name):
    params = ReportParams.from_yaml(ROOT / "params" / name)
    # the runner's own check, which refuses a params file before any notebook runs
    report._check_sections(params, discover_notebooks(ROOT / "notebooks"))
    for file in params.grids.values():
        assert (ROOT / file).is_file()


@pytest.mark.parametrize("name", ["cpu.yaml", "smoke.yaml", "paper.yaml"])
def test_a_params_section_sets_only_what_differs_from_the_notebook(name):
    """One layer of defaults: the notebook's parameters cell holds them, a params file only its differences."""
    from heavytail.pipeline.notebook import defaults_of

    def same(a, b):
        return [*a] == [*b] if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else a == b

    params = ReportParams.from_yaml(ROOT / "params" / name)
    repeated = {stem: [k for k, v in section.items() if k in defaults_of(ROOT / "notebooks" / f"{stem}.py")
                       and same(v, defaults_of(ROOT / "notebooks" / f"{stem}.py")[k])]
                for stem, section in params.notebooks.items()}
    assert not {s: ks for s, ks in repeated.items() if ks}, "a params section repeats the notebook's defaults"


@pytest.mark.parametrize("name", list(EXPECTED))
def test_notebook_sources_have_kernelspec_and_one_parameters_cell(name):
    nb = jupytext.read(ROOT / "notebooks" / f"{name}.py")
    assert nb.metadata["kernelspec"]["name"] == "python3"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert "report =" in tagged[0].source and "output_root =" in tagged[0].source
    assert nb.cells[0].cell_type == "markdown" and "App." in nb.cells[0].source  # says what part of the paper


def test_artifacts_write_figures_and_tables(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    art = artifacts("05_demo", output_root=tmp_path)
    assert isinstance(art, Artifacts) and art.dir == tmp_path / "05_demo"
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    assert art.save_figure(fig, "line") is None  # a cell ending in it shows the figure, not paths
    plt.close(fig)
    paths = [art.dir / "line.png", art.dir / "line.svg"]
    assert all(p.stat().st_size > 0 for p in paths)
    import numpy as np

    art.save_table("t.csv", {"a": np.arange(3), "b": [0.5, 1.5, 2.5]})
    assert (art.dir / "t.csv").read_text().splitlines() == ["a,b", "0,0.5", "1,1.5", "2,2.5"]
    art.save_table("t.json", {"v": np.float64(2.0), "arr": np.ones(2)})
    assert json.loads((art.dir / "t.json").read_text()) == {"v": 2.0, "arr": [1.0, 1.0]}
    # One conversion (heavytail.io.to_plain) behind both: CSV cells keep inf as inf, strict JSON tags it.
    import torch

    from heavytail.io import load_json

    art.save_table("nf.csv", [{"x": np.float32(np.inf), "t": torch.tensor(1.5)}])
    assert (art.dir / "nf.csv").read_text().splitlines() == ["x,t", "inf,1.5"]
    art.save_table("nf.json", {"x": np.array([np.inf, -np.inf]), "t": torch.tensor([0.5])})
    assert json.loads((art.dir / "nf.json").read_text()) == {"x": ["Infinity", "-Infinity"], "t": [0.5]}
    assert load_json(art.dir / "nf.json")["x"] == [float("inf"), float("-inf")]
    with pytest.raises(ValueError, match="different lengths"):
        art.save_table("bad.csv", {"a": [1, 2], "b": [1]})
    with pytest.raises(ValueError, match="end in .csv or .json"):
        art.save_table("t.txt", {})
    with pytest.raises(ValueError, match="plain file name"):
        art.save_figure(fig, "../escape")
    with pytest.raises(ValueError, match="NN_name"):
        artifacts("demo", output_root=tmp_path)
    assert not list(art.dir.glob(".*")), "no temporary files left behind"


def test_the_grid_step_replaces_the_per_configuration_notebook(tmp_path, monkeypatch):
    """A params file naming a grid runs the grid where its notebook (04_ablation) sits, and a failed
    configuration fails that entry with the configuration's name and cell, without stopping the report."""
    from heavytail.pipeline import grid_record

    calls = []

    def fake_run_grid(spec, executor="local", **kw):
        calls.append((spec.name, executor))
        entries = [grid_record.GridEntry(name=c.name, run_dir=c.name, config=c.to_dict()) for c in spec.configs]
        entries[0].status = "ok"
        entries[1].status, entries[1].failed_cell, entries[1].error = "failed", 3, "RuntimeError: boom"
        return grid_record.GridReport(name=spec.name, directory=tmp_path / spec.name, executor=executor, entries=entries,
                                   finished=True)

    monkeypatch.setattr(report, "run_grid", fake_run_grid)
    params = ReportParams.from_dict({"report": "g", "grid": "params/grid_smoke.yaml", "notebooks": {}})
    results = {r.name: r for r in run_report(params, output_dir=tmp_path / "out", only=["04_ablation"], progress=False)}
    assert calls == [("grid-smoke", "local")]
    entry = results["04_ablation"]
    assert entry.status == "failed" and "1 of 2 configurations failed" in entry.error and "(cell 3: RuntimeError: boom)" in entry.error
    assert entry.html.endswith("grid-smoke/index.html")


def test_a_bad_grid_file_is_refused_before_any_notebook_runs(tmp_path):
    bad = tmp_path / "grid.yaml"
    bad.write_text("name: x\nbase: {}\naxes: {kernel: [relu]}\n")
    params = ReportParams.from_dict({"report": "g", "grid": str(bad), "notebooks": {}})
    with pytest.raises(ValueError, match="relu"):
        run_report(params, output_dir=tmp_path / "out", progress=False)


def test_several_grids_run_before_their_readers_and_their_folders_are_injected(tmp_path, monkeypatch):
    """The params format for several grids: 'grids' names each grid file by a key, a notebook section names
    the grids it reads, the runner runs each grid once (with the params file's executor unless the command
    line says otherwise) before its first reader and injects each grid's folder as the named parameter."""
    from heavytail.pipeline import grid_record

    calls = []

    def fake_run_grid(spec, executor="local", output_root=None, **kw):
        calls.append((spec.name, executor, output_root))
        entries = [grid_record.GridEntry(name=n, run_dir=n, status="ok") for n in spec.names]
        return grid_record.GridReport(name=spec.name, directory=output_root / spec.name, executor=executor,
                                   entries=entries, finished=True)

    monkeypatch.setattr(report, "run_grid", fake_run_grid)
    grid_file = tmp_path / "g.yaml"
    grid_file.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / "params" / "grid_smoke.yaml").read_text()),
                                         "name": "grid-two"}))
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    for name, body in (("01_reads_one", "art.save_table('seen.json', {'grid_dir': grid_dir})"),
                       ("02_reads_both", "art.save_table('seen.json', {'a': grid_dir, 'b': other_dir})")):
        source = _tiny_notebook(name, body).replace('output_root = None\n', 'output_root = None\ngrid_dir = None\nother_dir = None\n', 1)
        (nbs / f"{name}.py").write_text(source)
    params_file = tmp_path / "p.yaml"
    params_file.write_text(yaml.safe_dump({
        "report": "t", "executor": "submitit-local",
        "grids": {"ablation": "params/grid_smoke.yaml", "other": str(grid_file)},
        "notebooks": {"01_reads_one": {"grids": "ablation"},
                      "02_reads_both": {"grids": {"grid_dir": "ablation", "other_dir": "other"}}}}))
    out = tmp_path / "reports" / "t"
    assert report.main([str(params_file), "--notebooks-dir", str(nbs), "--output", str(out), "--quiet"]) == 0
    # the grids' notebook (04_ablation) is not in this folder: each grid runs, once, before its first reader
    assert calls == [("grid-smoke", "submitit-local", out.parent), ("grid-two", "submitit-local", out.parent)]
    names = [n["name"] for n in json.loads((out / "index.json").read_text())["notebooks"]]
    assert names == ["grid-ablation", "01_reads_one", "grid-other", "02_reads_both"]
    assert json.loads((out / "01_reads_one" / "seen.json").read_text()) == {"grid_dir": str(out.parent / "grid-smoke")}
    assert json.loads((out / "02_reads_both" / "seen.json").read_text()) == {
        "a": str(out.parent / "grid-smoke"), "b": str(out.parent / "grid-two")}

    calls.clear()
    assert report.main([str(params_file), "--notebooks-dir", str(nbs), "--output", str(out), "--quiet",
                        "--executor", "local", "--only", "02_*"]) == 0
    assert [c[:2] for c in calls] == [("grid-smoke", "local"), ("grid-two", "local")]


def test_grid_params_errors_name_the_problem():
    with pytest.raises(ValueError, match="reads grid\\(s\\) \\['gap'\\], which 'grids' does not name"):
        ReportParams.from_dict({"report": "x", "grids": {"ablation": "params/grid_cpu.yaml"},
                                "notebooks": {"06_summary": {"grids": "gap"}}})
    with pytest.raises(ValueError, match="either 'grid'"):
        ReportParams.from_dict({"report": "x", "grid": "a.yaml", "grids": {"b": "b.yaml"}})
    with pytest.raises(ValueError, match="'executor'.*choose one of: local, slurm, submitit-local"):
        ReportParams.from_dict({"report": "x", "executor": "cloud"})
    with pytest.raises(ValueError, match="both as a parameter and from 'grids'"):
        ReportParams.from_dict({"report": "x", "grids": {"a": "params/grid_cpu.yaml"},
                                "notebooks": {"06_summary": {"grids": "a", "grid_dir": "outputs/elsewhere"}}})
    params = ReportParams.from_dict({"report": "x", "grid": "params/grid_cpu.yaml",
                                     "notebooks": {"06_summary": {"grids": "grid", "filters": {}}}})
    assert params.grids == {"grid": "params/grid_cpu.yaml"} and params.reads == {"06_summary": {"grid_dir": "grid"}}
    assert params.notebooks == {"06_summary": {"filters": {}}} and params.executor is None
