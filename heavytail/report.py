"""The literate report: run every analysis notebook with papermill and index the rendered results.

Pipeline per notebook (``notebooks/NN_name.py``, jupytext py:percent, python3 kernelspec in the header):

1. jupytext converts the ``.py`` source to ``.ipynb`` (papermill cannot read a ``.py`` notebook);
2. papermill executes it with the repository root as working directory and the notebook's section of
   the params YAML injected after the cell tagged ``parameters``;
3. nbconvert renders the executed notebook (complete or partial) to HTML;
4. ``outputs/<report>/index.html`` links every notebook with its status, elapsed time and, for a failed
   notebook, the failing cell and error.

A failing notebook keeps its partial output, is marked failed, and the remaining notebooks still run; the
runner exits non-zero at the end if any notebook failed.

Params YAML convention (one file carries every notebook's parameters)::

    report: cpu                 # output folder name: outputs/cpu/
    notebooks:                  # one section per notebook, keyed by the file stem, run in file-name order
      01_integrability:
        n_max: 65536            # any name defined in the notebook's `parameters` cell
      02_splice_testbed: {}     # an empty section runs the notebook with its own defaults

Notebooks in the folder without a section are listed in the index as skipped (so a small params file,
e.g. ``params/smoke.yaml``, never runs a notebook at an unknown scale). The runner itself injects two
parameters into every notebook: ``report`` (the report name) and ``output_root`` (absolute path of
``outputs/<report>``); notebooks pass them to :func:`artifacts`, which owns the artifact paths.

Also provides the helpers notebooks use: :func:`repo_root`, :func:`artifacts` /
:class:`Artifacts` (``save_figure`` writes PNG+SVG, ``save_table`` writes CSV or JSON).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import html
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .io import atomic_write_text, dumps_json

NOTEBOOK_PATTERN = re.compile(r"^\d{2}_[A-Za-z0-9_]+$")
RUNNER_PARAMETERS = ("report", "output_root")
STATUSES = ("ok", "failed", "skipped", "running", "pending")


# --------------------------------------------------------------------------------------------------
# Helpers used from inside notebooks
# --------------------------------------------------------------------------------------------------
def repo_root(start: str | os.PathLike | None = None) -> Path:
    """The repository root: the first folder at or above ``start`` (default: the current folder) holding
    both ``pyproject.toml`` and ``heavytail/``; falls back to the folder above this installed package.

    Papermill runs a kernel in the caller's folder, and Jupyter in the notebook's folder, so notebooks
    call this instead of assuming a working directory.
    """
    here = Path(start if start is not None else os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "heavytail").is_dir():
            return folder
    return Path(__file__).resolve().parent.parent


def _jsonable(obj: Any) -> Any:
    """Convert numpy / torch scalars and arrays into plain Python values for CSV cells."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays/scalars and torch tensors
        return _jsonable(obj.tolist())
    if isinstance(obj, Path):
        return str(obj)
    return obj


@dataclass(frozen=True)
class Artifacts:
    """Where one notebook writes its figures and tables: ``<output_root>/<notebook>/``."""

    dir: Path

    def path(self, name: str) -> Path:
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise ValueError(f"artifact name must be a plain file name, got {name!r}")
        return self.dir / name

    def save_figure(self, fig, name: str, dpi: int = 150) -> list[Path]:
        """Save a matplotlib figure as ``name.png`` and ``name.svg``; returns both paths."""
        paths = []
        for ext in ("png", "svg"):
            target = self.path(f"{name}.{ext}")
            tmp = target.with_name(f".{target.name}.tmp.{ext}")
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format=ext)
            os.replace(tmp, target)
            paths.append(target)
        return paths

    def save_table(self, name: str, table) -> Path:
        """Save a table. ``name`` ending in ``.json``: any JSON-able structure (numpy allowed).
        ``name`` ending in ``.csv``: a dict of equal-length columns or a list of row dicts."""
        target = self.path(name)
        if name.endswith(".json"):
            atomic_write_text(target, dumps_json(table, indent=2) + "\n")  # inf/NaN as tagged strings (heavytail.io)
            return target
        if not name.endswith(".csv"):
            raise ValueError(f"table name must end in .csv or .json, got {name!r}")
        if isinstance(table, Mapping):
            columns = {k: list(_jsonable(v)) for k, v in table.items()}
            lengths = {len(v) for v in columns.values()}
            if len(lengths) > 1:
                raise ValueError(f"CSV columns of {name!r} have different lengths: "
                                 f"{ {k: len(v) for k, v in columns.items()} }")
            rows = [dict(zip(columns, vals)) for vals in zip(*columns.values())]
            header = list(columns)
        else:
            rows = [_jsonable(dict(r)) for r in table]
            header = list(rows[0]) if rows else []
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(target, buffer.getvalue())
        return target


def artifacts(notebook: str, report: str = "scratch", output_root: str | os.PathLike | None = None) -> Artifacts:
    """The artifact folder of ``notebook`` (created): ``<output_root>/<notebook>/``, where ``output_root``
    defaults to ``<repo root>/outputs/<report>`` (interactive runs land in ``outputs/scratch/``)."""
    if not NOTEBOOK_PATTERN.match(notebook):
        raise ValueError(f"notebook name must look like 'NN_name' (two digits, underscore, name), got {notebook!r}")
    root = Path(output_root) if output_root is not None else repo_root() / "outputs" / report
    folder = root / notebook
    folder.mkdir(parents=True, exist_ok=True)
    return Artifacts(dir=folder)


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


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------
@dataclass
class NotebookResult:
    name: str
    status: str = "pending"
    elapsed_s: float | None = None
    failed_cell: int | None = None  # 1-based index among code cells, as a reader counts them
    error: str | None = None
    html: str | None = None  # relative to the report folder
    ipynb: str | None = None
    artifacts: list[str] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)


def _require_notebook_tools() -> None:
    """Fail before any notebook runs when the notebook extra is missing, saying how to install it."""
    import importlib.util

    missing = [m for m in ("jupytext", "papermill", "nbconvert", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(f"the report needs {', '.join(missing)} in {sys.executable}; install the notebook "
                                  "extra: pip install -e '.[notebooks]' (or run `make report`, which does)")


def discover_notebooks(notebooks_dir: Path) -> list[Path]:
    """The ``NN_name.py`` notebook sources of ``notebooks_dir``, in file-name order."""
    if not notebooks_dir.is_dir():
        raise FileNotFoundError(f"notebooks folder {notebooks_dir} does not exist")
    return sorted(p for p in notebooks_dir.glob("*.py") if NOTEBOOK_PATTERN.match(p.stem))


def _code_cell_number(nb, cell_index: int | None) -> int | None:
    """Papermill reports the failing cell's index among all cells; readers count code cells."""
    if cell_index is None:
        return None
    count = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            count += 1
        if i == cell_index:
            return count
    return None


def _failing_cell(nb) -> tuple[int | None, str | None]:
    """Find the first code cell with an error output in an executed notebook (1-based code-cell number)."""
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        count += 1
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return count, f"{out.get('ename')}: {out.get('evalue')}"
    return None, None


def render_html(ipynb_path: Path, html_path: Path) -> None:
    """Render an executed notebook to standalone HTML with nbconvert."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(ipynb_path, as_version=4)
    body, _ = HTMLExporter().from_notebook_node(nb)
    atomic_write_text(html_path, body)


def run_notebook(source: Path, out_dir: Path, parameters: Mapping[str, Any], cwd: Path,
                 report: str, progress: bool = True) -> NotebookResult:
    """Convert, execute and render one notebook; never raises for a failure inside the notebook."""
    import jupytext
    import nbformat
    import papermill as pm

    name = source.stem
    out_dir.mkdir(parents=True, exist_ok=True)
    result = NotebookResult(name=name, status="running", parameters=dict(parameters))
    out_ipynb = out_dir / f"{name}.ipynb"
    out_html = out_dir / f"{name}.html"
    art_dir = out_dir / name
    # Stale figures from an earlier run must not look like this run's output.
    shutil.rmtree(art_dir, ignore_errors=True)
    for stale in (out_ipynb, out_html):
        stale.unlink(missing_ok=True)
    injected = {**parameters, "report": report, "output_root": str(out_dir.resolve())}

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"heavytail-report-{name}-") as tmp:
        src_ipynb = Path(tmp) / f"{name}.ipynb"
        try:
            nb = jupytext.read(source)
            kernel = (nb.metadata.get("kernelspec") or {}).get("name")
            if not kernel:
                raise ValueError(f"{source} has no kernelspec in its jupytext header; add the python3 kernelspec")
            nbformat.write(nb, src_ipynb)
            pm.execute_notebook(
                str(src_ipynb), str(out_ipynb), parameters=injected, cwd=str(cwd),
                kernel_name=kernel, progress_bar=progress, log_output=False, request_save_on_cell_execute=True,
            )
            result.status = "ok"
        except pm.PapermillExecutionError as exc:
            result.status = "failed"
            executed = nbformat.read(out_ipynb, as_version=4) if out_ipynb.exists() else None
            number, _ = _failing_cell(executed) if executed is not None else (None, None)
            result.failed_cell = number if number is not None else _code_cell_number(nb, exc.cell_index)
            result.error = f"{exc.ename}: {exc.evalue}"
        except Exception as exc:  # conversion, kernel start-up, bad parameters: still a failed entry
            result.status = "failed"
            result.error = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
    result.elapsed_s = time.perf_counter() - start

    if out_ipynb.exists():
        result.ipynb = out_ipynb.name
        try:
            render_html(out_ipynb, out_html)
            result.html = out_html.name
        except Exception as exc:  # a rendering failure is reported, not fatal to the report
            result.status = "failed"
            result.error = (result.error + "; " if result.error else "") + f"HTML rendering failed: {exc}"
    if art_dir.is_dir():
        result.artifacts = sorted(str(p.relative_to(out_dir)) for p in art_dir.rglob("*")
                                  if p.is_file() and not p.name.startswith("."))
    return result


def write_index(out_dir: Path, report: str, results: Sequence[NotebookResult], params_source: Path | None,
                finished: bool) -> Path:
    """Write ``index.html`` (and ``index.json``) for the report; rewritten after every notebook so a killed
    run shows 'running'/'pending' entries rather than a complete-looking report."""
    colors = {"ok": "#1a7f37", "failed": "#cf222e", "skipped": "#6e7781", "running": "#9a6700", "pending": "#6e7781"}
    rows = []
    for r in results:
        link = f'<a href="{html.escape(r.html)}">{html.escape(r.name)}</a>' if r.html else html.escape(r.name)
        detail = ""
        if r.status == "failed":
            cell = f"code cell {r.failed_cell} of the executed notebook: " if r.failed_cell is not None else ""
            detail = f"{cell}{html.escape(r.error or 'unknown error')}"
        elif r.status == "skipped":
            detail = html.escape(r.error or "")
        elapsed = f"{r.elapsed_s:.1f} s" if r.elapsed_s is not None else ""
        arts = ", ".join(f'<a href="{html.escape(a)}">{html.escape(Path(a).name)}</a>' for a in r.artifacts)
        rows.append(
            f"<tr><td>{link}</td><td style='color:{colors.get(r.status, '#000')};font-weight:bold'>{r.status}</td>"
            f"<td>{elapsed}</td><td>{detail}</td><td style='font-size:small'>{arts}</td></tr>"
        )
    n_failed = sum(r.status == "failed" for r in results)
    state = ("complete" if finished else "in progress (or interrupted)")
    stamp = _dt.datetime.now().isoformat(timespec="seconds")
    body = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>heavytail report: {html.escape(report)}</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{border-bottom:1px solid #ddd;padding:4px 8px;vertical-align:top;text-align:left}}</style>
</head><body>
<h1>heavytail report: {html.escape(report)}</h1>
<p>Run {state}; {n_failed} failed of {len(results)} notebooks. Params: {html.escape(str(params_source or ''))}. Written {stamp}.</p>
<table><tr><th>notebook</th><th>status</th><th>elapsed</th><th>detail</th><th>artifacts</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
    index = out_dir / "index.html"
    atomic_write_text(index, body)
    atomic_write_text(out_dir / "index.json", dumps_json(
        {"report": report, "finished": finished, "params": str(params_source or ""),
         "notebooks": [r.__dict__ for r in results]}, indent=2) + "\n")
    return index


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
        print(f"[report] {src.stem}: running", file=sys.stderr, flush=True)
        placeholder.status = "running"
        write_index(out_dir, params.report, results, params.source, finished=False)
        if grid_notebook is not None and src.resolve() == grid_notebook:
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
    from .grid import GridSpec

    path = Path(params.grid)
    return GridSpec.load(path if path.is_absolute() else root / path)


def _run_grid_step(spec, name: str, out_dir: Path) -> NotebookResult:
    """Run every configuration of the grid (each one execution of its notebook) as one report entry.

    The grid writes its own folder, outputs/<grid name>/, with one run folder per configuration, grid.json
    and an index; this entry links to that index and fails when any configuration failed.
    """
    from .grid import run_grid

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
    parser.add_argument("params", help="params YAML (e.g. params/cpu.yaml); see heavytail.report for the format")
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
