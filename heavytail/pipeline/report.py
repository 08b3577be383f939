"""The literate report: run every analysis notebook with papermill and index the rendered results.

Each notebook is one :func:`heavytail.pipeline.notebook.run_notebook` execution (jupytext, papermill,
nbconvert); ``outputs/<report>/index.html`` is the landing page (:mod:`heavytail.pipeline.landing`): the
report's state, the scale that ran, the findings, and a card per notebook with its status, run time, key
figure and conclusion (for a failed notebook, the failing cell and error). A failing notebook keeps its partial output, is marked failed,
and the remaining notebooks still run; the runner exits non-zero at the end if any notebook failed.

Params YAML convention (one file carries every notebook's parameters and names the grids)::

    report: cpu                       # output folder name: outputs/cpu/
    executor: local                   # optional: how grids run (local | submitit-local | slurm); --executor wins
    grids:                            # optional: short key -> grid file (heavytail.pipeline.grid_file)
      ablation: params/grid_cpu.yaml
      gap: params/grid_gap_cpu.yaml
    notebooks:                        # one section per notebook, keyed by the file stem, run in file-name order
      01_integrability:
        n_max: 65536                  # any name defined in the notebook's `parameters` cell
      02_splice_testbed: {}           # an empty section runs the notebook with its own defaults
      06_summary:
        grids: ablation               # reads a grid: its folder is injected as the parameter `grid_dir`
      05_collapse:
        grids: {grid_dir: ablation, variants_dir: collapse}   # or {notebook parameter: grid key}

A grid's configurations are executions of its own notebook (``notebooks/04_ablation.py``), so every grid
runs where that notebook sits in the order, as that notebook's entry in the index, hence before the later
notebooks that read it (a grid whose notebook is not in the folder runs just before its first reader). Each
grid writes ``<grid name>/`` next to the report's folder (``outputs/grid-cpu/`` beside ``outputs/cpu/``), and
the runner injects that folder into the notebooks that read it, so no params file spells a grid folder. ``grid: <file>`` is short for ``grids: {grid: <file>}``.

Every name a section sets, and every parameter its ``grids`` names, must be one its notebook's ``parameters``
cell defines: the runner refuses the params file otherwise, before any notebook runs (papermill would only
warn and run the notebook with its defaults). Notebooks in the folder without a section are listed in the
index as skipped (so a small params file, e.g. ``params/smoke.yaml``, never runs a notebook at an unknown
scale). The runner itself injects two parameters into every notebook: ``report`` (the report name) and
``output_root`` (absolute path of ``outputs/<report>``); notebooks pass them to
:func:`heavytail.harness.artifacts.artifacts`.

The top layer of :mod:`heavytail.pipeline`: report -> grid -> notebook execution -> io.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from heavytail import cli
from heavytail.harness.artifacts import NOTEBOOK_PATTERN, repo_root
from heavytail.pipeline.configuration import grid_notebook
from heavytail.pipeline.grid import EXECUTORS, run_grid
from heavytail.pipeline.grid_file import GridSpec
from heavytail.pipeline.landing import write_landing
from heavytail.pipeline.notebook import (INTERRUPTED, RUNNER_PARAMETERS, NotebookResult, _require_notebook_tools,
                                         check_parameters, discover_notebooks, run_notebook, write_index_json)

GRID_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
SECTION_GRIDS = "grids"  # the reserved key of a notebook section: which grid folders it reads


# --------------------------------------------------------------------------------------------------
# Params
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReportParams:
    """A validated params file: the report name, its grids, the executor, and each notebook's section.

    ``notebooks`` holds each section's own parameters; ``reads`` what the runner injects on top:
    ``{notebook: {parameter: grid key}}`` (the parameter receives that grid's output folder).
    """

    report: str
    notebooks: dict[str, dict[str, Any]]
    source: Path | None = None
    grids: dict[str, str] = field(default_factory=dict)  # grid key -> grid file
    reads: dict[str, dict[str, str]] = field(default_factory=dict)
    executor: str | None = None  # None: local, unless the command line says otherwise

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: Path | None = None) -> "ReportParams":
        where = f" in {source}" if source else ""
        if not isinstance(data, Mapping):
            raise ValueError(f"params{where} must be a mapping with keys 'report' and 'notebooks', got {type(data).__name__}")
        allowed = ("report", "notebooks", "grids", "grid", "executor")
        unknown = set(data) - set(allowed)
        if unknown:
            raise ValueError(f"unknown top-level keys {sorted(unknown)}{where}; allowed: {', '.join(allowed)}")
        report = data.get("report")
        if not isinstance(report, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", report or ""):
            raise ValueError(f"'report'{where} must be a folder name of letters, digits, '_', '-', '.', got {report!r}")
        executor = data.get("executor")
        if executor is not None and executor not in EXECUTORS:
            raise ValueError(f"'executor'{where} is {executor!r}; choose one of: {', '.join(EXECUTORS)}")
        grids = _grid_files(data, where)
        sections = data.get("notebooks") or {}
        if not isinstance(sections, Mapping):
            raise ValueError(f"'notebooks'{where} must map notebook names to parameter sections, got {type(sections).__name__}")
        clean: dict[str, dict[str, Any]] = {}
        reads: dict[str, dict[str, str]] = {}
        for name, section in sections.items():
            if not NOTEBOOK_PATTERN.match(str(name)):
                raise ValueError(f"notebook section {name!r}{where} must be named like '01_integrability'")
            section = {} if section is None else section
            if not isinstance(section, Mapping):
                raise ValueError(f"section {name!r}{where} must be a mapping of parameters, got {type(section).__name__}")
            section = dict(section)
            wanted = _section_grids(section.pop(SECTION_GRIDS, None), grids, str(name), where)
            clash = (set(section) | set(wanted)) & set(RUNNER_PARAMETERS)
            if clash:
                raise ValueError(f"section {name!r}{where} sets {sorted(clash)}, which the runner injects itself")
            twice = sorted(set(section) & set(wanted))
            if twice:
                raise ValueError(f"section {name!r}{where} sets {twice} both as a parameter and from '{SECTION_GRIDS}'; "
                                 f"the runner injects a grid's folder itself, so remove the parameter")
            clean[str(name)] = section
            if wanted:
                reads[str(name)] = wanted
        return cls(report=report, notebooks=clean, source=source, grids=grids, reads=reads, executor=executor)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "ReportParams":
        return cls.from_dict(cli.read_yaml_file(path, "params file"), source=Path(path))


def _grid_files(data: Mapping[str, Any], where: str) -> dict[str, str]:
    """``grids: {key: file}``, or the one-grid shorthand ``grid: file`` (its key is 'grid')."""
    if "grid" in data and "grids" in data:
        raise ValueError(f"set either 'grid' (one grid file) or 'grids' (key -> grid file){where}, not both")
    raw = {"grid": data["grid"]} if "grid" in data else (data.get("grids") or {})
    if not isinstance(raw, Mapping):
        raise ValueError(f"'grids'{where} must map short keys to grid files, e.g. {{ablation: params/grid_cpu.yaml}}")
    for key, path in raw.items():
        if not isinstance(key, str) or not GRID_KEY.match(key):
            raise ValueError(f"grid key {key!r}{where} must be a short name of letters, digits and '_'")
        if not isinstance(path, str) or not path.endswith((".yaml", ".yml")):
            raise ValueError(f"grid {key!r}{where} must be the path of a grid file (e.g. params/grid_cpu.yaml), got {path!r}")
    return dict(raw)


def _section_grids(value: Any, grids: Mapping[str, str], name: str, where: str) -> dict[str, str]:
    """A section's ``grids``: a grid key (injected as ``grid_dir``) or {notebook parameter: grid key}."""
    if value is None:
        return {}
    wanted = {"grid_dir": value} if isinstance(value, str) else value
    if not isinstance(wanted, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wanted.items()):
        raise ValueError(f"'{SECTION_GRIDS}' of section {name!r}{where} must be a grid key or a mapping "
                         f"{{notebook parameter: grid key}}, got {value!r}")
    unknown = sorted(set(wanted.values()) - set(grids))
    if unknown:
        raise ValueError(f"section {name!r}{where} reads grid(s) {unknown}, which 'grids' does not name; "
                         f"grids: {', '.join(grids) or 'none'}")
    return dict(wanted)


def _check_sections(params: ReportParams, sources: Sequence[Path]) -> None:
    """Refuse a name a section sets (itself or through its ``grids``) that its notebook does not take."""
    by_stem = {s.stem: s for s in sources}
    for name, section in params.notebooks.items():
        names = [*section, *params.reads.get(name, {})]
        if names:
            check_parameters(by_stem[name], names, f"{params.source or 'params'}: section {name!r}", values=section)


@dataclass
class _Grid:
    key: str
    spec: GridSpec
    directory: Path
    notebook: Path


def run_report(params: ReportParams, notebooks_dir: Path | None = None, output_dir: Path | None = None,
               only: Sequence[str] | None = None, cwd: Path | None = None, progress: bool = True,
               executor: str | None = None) -> list[NotebookResult]:
    """Run every notebook of ``notebooks_dir`` that has a section in ``params`` (or those in ``only``).

    Each grid runs (with ``executor``, else the params file's, else ``local``) where its own notebook sits
    (notebook 04: one execution per configuration), and so before any later notebook that reads it; a grid
    whose notebook is not in the folder runs just before the first notebook that reads it. A notebook that
    reads a grid gets that grid's output folder injected as the parameter its section names.
    """
    _require_notebook_tools()
    executor = executor or params.executor or "local"
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r} is not allowed; choose one of: {', '.join(EXECUTORS)}")
    root = repo_root()
    notebooks_dir = Path(notebooks_dir) if notebooks_dir is not None else root / "notebooks"
    out_dir = Path(output_dir) if output_dir is not None else root / "outputs" / params.report
    cwd = Path(cwd) if cwd is not None else root
    sources = discover_notebooks(notebooks_dir)
    names = [s.stem for s in sources]
    missing = [n for n in params.notebooks if n not in names]
    if missing:
        raise ValueError(f"params sections {missing} have no notebook in {notebooks_dir}; notebooks there: {names}")
    _check_sections(params, sources)
    if only:
        bad = [pat for pat in only if not fnmatch.filter(names, pat)]
        if bad:
            raise ValueError(f"--only {bad} match no notebook in {notebooks_dir}; choose from {names}")
        only = [n for n in names if any(fnmatch.fnmatchcase(n, pat) for pat in only)]
    grids = _load_grids(params, root, out_dir.parent)  # every grid validated before any notebook runs
    cli.check_writable(out_dir, "report folder")
    out_dir.mkdir(parents=True, exist_ok=True)

    results: list[NotebookResult] = []
    to_run: list[tuple[Path, NotebookResult, list[_Grid]]] = []
    for src in sources:
        r = NotebookResult(name=src.stem)
        own = [g for g in grids if g.notebook == src.resolve()]
        if only and src.stem not in only:
            r.status, r.error = "skipped", "not selected with --only"
        elif own:
            to_run.append((src, r, own))  # executed once per configuration, by its grid(s)
        elif src.stem not in params.notebooks:
            r.status, r.error = "skipped", f"no section '{src.stem}' in the params file"
        else:
            to_run.append((src, r, []))
        results.append(r)
    _write_pages(out_dir, params, results, root, grids, finished=False)

    try:
        _run_all(to_run, results, params, grids, sources, out_dir, root, cwd, executor, progress)
    except KeyboardInterrupt:  # the pages must not keep saying "running" for a notebook nobody runs
        for r in results:
            if r.status in ("running", "pending"):
                r.status, r.error = INTERRUPTED, "stopped by Ctrl-C before it finished; rerun the same command"
        _write_pages(out_dir, params, results, root, grids, finished=False)
        raise
    _write_pages(out_dir, params, results, root, grids, finished=True)
    return results


def _run_all(to_run, results, params, grids, sources, out_dir, root, cwd, executor, progress) -> None:
    """Run the selected notebooks in order (each grid before its first reader), rewriting the pages after each."""
    in_folder = {s.resolve() for s in sources}
    ran: set[str] = set()
    for src, placeholder, own in to_run:
        # a grid whose notebook lives elsewhere runs before its first reader, as its own entry
        for g in grids:
            if g.key in params.reads.get(src.stem, {}).values() and g.notebook not in in_folder and g.key not in ran:
                entry = NotebookResult(name=f"grid-{g.key}", status="running")
                results.insert(results.index(placeholder), entry)
                results[results.index(entry)] = _run_grid_step([g], entry.name, out_dir, executor)
                ran.add(g.key)
        if own or not progress:  # otherwise the notebook's progress bar says it is running
            print(f"[report] {src.stem}: running" + (f" (grid {', '.join(g.spec.name for g in own)}, {executor})"
                                                     if own else ""), file=sys.stderr, flush=True)
        placeholder.status = "running"
        _write_pages(out_dir, params, results, root, grids, finished=False)
        if own:
            done = _run_grid_step(own, src.stem, out_dir, executor)
            ran.update(g.key for g in own)
        else:
            injected = {param: str(next(g.directory for g in grids if g.key == key))
                        for param, key in params.reads.get(src.stem, {}).items()}
            done = run_notebook(src, out_dir, {**params.notebooks[src.stem], **injected}, cwd=cwd,
                                report=params.report, progress=progress)
        results[results.index(placeholder)] = done
        msg = f"[report] {done.name}: {done.status} in {done.elapsed_s:.1f} s"
        if done.status == "failed":
            msg += f" (cell {done.failed_cell}: {done.error})"
        print(msg, file=sys.stderr, flush=True)
        _write_pages(out_dir, params, results, root, grids, finished=False)


def _write_pages(out_dir: Path, params: ReportParams, results: Sequence[NotebookResult], root: Path,
                 grids: Sequence["_Grid"], finished: bool) -> None:
    """The landing page (index.html, :mod:`heavytail.pipeline.landing`) and index.json, rewritten after
    every notebook so that a killed run reads as partial."""
    write_landing(out_dir, params.report, results, params.source, finished=finished, root=root,
                  grid_dirs=[g.directory for g in grids])
    write_index_json(out_dir, params.report, results, params.source, finished)


def _load_grids(params: ReportParams, root: Path, outputs: Path) -> list[_Grid]:
    """The params file's grids, validated (their notebooks too), with the folder each writes:
    ``<outputs>/<grid name>``, next to the report's own folder (``outputs/<report>``)."""
    grids = []
    for key, file in params.grids.items():
        path = Path(file)
        spec = GridSpec.load(path if path.is_absolute() else root / path)
        grids.append(_Grid(key=key, spec=spec, directory=outputs / spec.name, notebook=grid_notebook(spec)))
    return grids


def _run_grid_step(grids: Sequence[_Grid], name: str, out_dir: Path, executor: str) -> NotebookResult:
    """Run every configuration of each grid (each one execution of its notebook) as one report entry.

    Each grid writes its own folder, outputs/<grid name>/, with one run folder per configuration, grid.json
    and an index; this entry links to the (first) grid's index, lists every grid's index among its
    artifacts, and fails when any configuration failed.
    """
    start = time.time()
    result = NotebookResult(name=name, status="ok",
                            parameters={"grids": {g.key: str(g.spec.source or g.spec.name) for g in grids},
                                        "executor": executor})
    errors = []
    for g in grids:
        grid = run_grid(g.spec, executor=executor, output_root=g.directory.parent)
        index = os.path.relpath(grid.index_path, out_dir)
        result.html = result.html or index
        result.artifacts.append(index)
        prefix = f"grid {g.spec.name}: " if len(grids) > 1 else ""
        failed = grid.failed
        if failed:
            errors.append(f"{prefix}{len(failed)} of {len(grid.entries)} configurations failed: " + "; ".join(
                f"{e.name} (cell {e.failed_cell}: {e.error})" for e in failed))
        elif not grid.ok:
            errors.append(f"{prefix}the grid did not finish every configuration")
    result.elapsed_s = time.time() - start
    if errors:
        result.status, result.error = "failed", "; ".join(errors)
    return result


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m heavytail report",
                                               description="Execute the analysis notebooks and write outputs/<report>/index.html.")
    parser.add_argument("params", help="params YAML (e.g. params/cpu.yaml); see heavytail.pipeline.report for the format")
    parser.add_argument("--notebooks-dir", default=None, help="folder of NN_name.py notebooks (default: <repo>/notebooks)")
    parser.add_argument("--output", "--output-dir", dest="output_dir", default=None,
                        help="report folder (default: <repo>/outputs/<report>)")
    parser.add_argument("--only", nargs="+", default=None, metavar="PATTERN",
                        help="run only the notebooks matching these shell patterns (e.g. 02_splice_testbed, '0[56]_*')")
    parser.add_argument("--executor", choices=EXECUTORS, default=None,
                        help="how the grids run (default: the params file's 'executor', else local)")
    parser.add_argument("--quiet", "--no-progress", dest="quiet", action="store_true",
                        help="no progress bars (papermill's per-cell bar)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: ``python -m heavytail report params/cpu.yaml``. Returns 0 when every run notebook is ok."""
    args = build_parser().parse_args(argv)
    try:
        params = ReportParams.from_yaml(args.params)
        results = run_report(params, notebooks_dir=args.notebooks_dir, output_dir=args.output_dir, only=args.only,
                             progress=not args.quiet, executor=args.executor)
    except cli.BAD_INPUT as err:  # bad params or set-up: one line, no traceback
        return cli.bad_input("report", err)
    except KeyboardInterrupt:
        print("[report] interrupted: the pages mark what did not finish; rerun the same command", file=sys.stderr)
        return 130
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
