"""The literate report: run every analysis notebook with papermill and index the rendered results.

Each notebook is one :func:`heavytail.pipeline.notebook.run_notebook` execution (jupytext, papermill,
nbconvert); ``outputs/<report>/index.html`` links every notebook with its status, elapsed time and, for a
failed notebook, the failing cell and error. A failing notebook keeps its partial output, is marked failed,
and the remaining notebooks still run; the runner exits non-zero at the end if any notebook failed.

Params YAML convention (one file carries every notebook's parameters)::

    report: cpu                 # output folder name: outputs/cpu/
    grid: params/grid_cpu.yaml  # optional: the grid whose configurations replace the per-configuration notebook
    notebooks:                  # one section per notebook, keyed by the file stem, run in file-name order
      01_integrability:
        n_max: 65536            # any name defined in the notebook's `parameters` cell
      02_splice_testbed: {}     # an empty section runs the notebook with its own defaults

Notebooks in the folder without a section are listed in the index as skipped (so a small params file,
e.g. ``params/smoke.yaml``, never runs a notebook at an unknown scale). The runner itself injects two
parameters into every notebook: ``report`` (the report name) and ``output_root`` (absolute path of
``outputs/<report>``); notebooks pass them to :func:`heavytail.artifacts.artifacts`.

The top layer of :mod:`heavytail.pipeline`: report -> grid -> notebook execution -> io.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..artifacts import NOTEBOOK_PATTERN, repo_root
from .grid import GridSpec, run_grid
from .notebook import (RUNNER_PARAMETERS, NotebookResult, _require_notebook_tools, discover_notebooks,
                       run_notebook, write_index)


# --------------------------------------------------------------------------------------------------
# Params
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReportParams:
    """A validated params file: the report name and each notebook's parameter section."""

    report: str
    notebooks: dict[str, dict[str, Any]]
    source: Path | None = None
    grid: str | None = None  # a grid file whose configurations replace the per-configuration notebook

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: Path | None = None) -> "ReportParams":
        where = f" in {source}" if source else ""
        if not isinstance(data, Mapping):
            raise ValueError(f"params{where} must be a mapping with keys 'report' and 'notebooks', got {type(data).__name__}")
        unknown = set(data) - {"report", "notebooks", "grid"}
        if unknown:
            raise ValueError(f"unknown top-level keys {sorted(unknown)}{where}; allowed: 'report', 'notebooks', 'grid'")
        grid = data.get("grid")
        if grid is not None and not isinstance(grid, str):
            raise ValueError(f"'grid'{where} must be the path of a grid file (e.g. params/grid_cpu.yaml), got {grid!r}")
        report = data.get("report")
        if not isinstance(report, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", report or ""):
            raise ValueError(f"'report'{where} must be a folder name of letters, digits, '_', '-', '.', got {report!r}")
        sections = data.get("notebooks") or {}
        if not isinstance(sections, Mapping):
            raise ValueError(f"'notebooks'{where} must map notebook names to parameter sections, got {type(sections).__name__}")
        clean: dict[str, dict[str, Any]] = {}
        for name, section in sections.items():
            if not NOTEBOOK_PATTERN.match(str(name)):
                raise ValueError(f"notebook section {name!r}{where} must be named like '01_integrability'")
            section = {} if section is None else section
            if not isinstance(section, Mapping):
                raise ValueError(f"section {name!r}{where} must be a mapping of parameters, got {type(section).__name__}")
            clash = set(section) & set(RUNNER_PARAMETERS)
            if clash:
                raise ValueError(f"section {name!r}{where} sets {sorted(clash)}, which the runner injects itself")
            clean[str(name)] = dict(section)
        return cls(report=report, notebooks=clean, source=source, grid=grid)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "ReportParams":
        import yaml

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"params file {path} does not exist")
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(yaml.safe_load(fh) or {}, source=path)



def run_report(params: ReportParams, notebooks_dir: Path | None = None, output_dir: Path | None = None,
               only: Sequence[str] | None = None, cwd: Path | None = None, progress: bool = True) -> list[NotebookResult]:
    """Run every notebook of ``notebooks_dir`` that has a section in ``params`` (or those in ``only``)."""
    _require_notebook_tools()
    root = repo_root()
    notebooks_dir = Path(notebooks_dir) if notebooks_dir is not None else root / "notebooks"
    out_dir = Path(output_dir) if output_dir is not None else root / "outputs" / params.report
    cwd = Path(cwd) if cwd is not None else root
    sources = discover_notebooks(notebooks_dir)
    names = [s.stem for s in sources]
    missing = [n for n in params.notebooks if n not in names]
    if missing:
        raise ValueError(f"params sections {missing} have no notebook in {notebooks_dir}; notebooks there: {names}")
    if only:
        bad = [n for n in only if n not in names]
        if bad:
            raise ValueError(f"--only names {bad} are not notebooks in {notebooks_dir}; choose from {names}")
    out_dir.mkdir(parents=True, exist_ok=True)
    grid_spec = _grid_spec(params, root)
    grid_notebook = (root / grid_spec.notebook).resolve() if grid_spec is not None else None

    results: list[NotebookResult] = []
    to_run: list[tuple[Path, NotebookResult]] = []
    for src in sources:
        r = NotebookResult(name=src.stem)
        if only and src.stem not in only:
            r.status, r.error = "skipped", "not selected with --only"
        elif grid_notebook is not None and src.resolve() == grid_notebook:
            to_run.append((src, r))  # executed once per configuration, by the grid
        elif src.stem not in params.notebooks:
            r.status, r.error = "skipped", f"no section '{src.stem}' in the params file"
        else:
            to_run.append((src, r))
        results.append(r)
    write_index(out_dir, params.report, results, params.source, finished=False)

    for src, placeholder in to_run:
        is_grid = grid_notebook is not None and src.resolve() == grid_notebook
        if is_grid or not progress:  # otherwise the notebook's progress bar says it is running
            print(f"[report] {src.stem}: running" + (" (the grid)" if is_grid else ""), file=sys.stderr, flush=True)
        placeholder.status = "running"
        write_index(out_dir, params.report, results, params.source, finished=False)
        if is_grid:
            done = _run_grid_step(grid_spec, src.stem, out_dir)
        else:
            done = run_notebook(src, out_dir, params.notebooks[src.stem], cwd=cwd, report=params.report, progress=progress)
        results[results.index(placeholder)] = done
        msg = f"[report] {done.name}: {done.status} in {done.elapsed_s:.1f} s"
        if done.status == "failed":
            msg += f" (cell {done.failed_cell}: {done.error})"
        print(msg, file=sys.stderr, flush=True)
        write_index(out_dir, params.report, results, params.source, finished=False)
    write_index(out_dir, params.report, results, params.source, finished=True)
    return results


def _grid_spec(params: ReportParams, root: Path):
    """The params file's grid, validated before any notebook runs (None when it names none)."""
    if params.grid is None:
        return None
    path = Path(params.grid)
    return GridSpec.load(path if path.is_absolute() else root / path)


def _run_grid_step(spec, name: str, out_dir: Path) -> NotebookResult:
    """Run every configuration of the grid (each one execution of its notebook) as one report entry.

    The grid writes its own folder, outputs/<grid name>/, with one run folder per configuration, grid.json
    and an index; this entry links to that index and fails when any configuration failed.
    """
    start = time.time()
    grid = run_grid(spec, executor="local")
    result = NotebookResult(name=name, elapsed_s=time.time() - start, parameters={"grid": str(spec.source or spec.name)})
    result.html = os.path.relpath(grid.index_path, out_dir)
    failed = grid.failed
    if failed:
        result.status = "failed"
        result.error = f"{len(failed)} of {len(grid.entries)} configurations failed: " + "; ".join(
            f"{e.name} (cell {e.failed_cell}: {e.error})" for e in failed)
    elif not grid.ok:
        result.status, result.error = "failed", "the grid did not finish every configuration"
    else:
        result.status = "ok"
    return result


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m heavytail report",
                                               description="Execute the analysis notebooks and write outputs/<report>/index.html.")
    parser.add_argument("params", help="params YAML (e.g. params/cpu.yaml); see heavytail.pipeline.report for the format")
    parser.add_argument("--notebooks-dir", default=None, help="folder of NN_name.py notebooks (default: <repo>/notebooks)")
    parser.add_argument("--output-dir", default=None, help="report folder (default: <repo>/outputs/<report>)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NOTEBOOK", help="run only these notebooks (e.g. 02_splice_testbed)")
    parser.add_argument("--no-progress", action="store_true", help="hide papermill's per-cell progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: ``python -m heavytail report params/cpu.yaml``. Returns 0 when every run notebook is ok."""
    args = build_parser().parse_args(argv)
    try:
        params = ReportParams.from_yaml(args.params)
        results = run_report(params, notebooks_dir=args.notebooks_dir, output_dir=args.output_dir, only=args.only,
                             progress=not args.no_progress)
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as exc:  # bad params or set-up: no traceback needed
        print(f"[report] error: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(args.output_dir) if args.output_dir else repo_root() / "outputs" / params.report
    failed = [r for r in results if r.status == "failed"]
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "failed", "skipped")}
    total = sum(r.elapsed_s or 0.0 for r in results)
    print(f"[report] {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped in {total:.1f} s"
          + (f" (failed: {', '.join(r.name for r in failed)})" if failed else "")
          + f"; report: {(out_dir / 'index.html').resolve()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
