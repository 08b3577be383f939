"""Execute one notebook: jupytext converts the ``.py`` source, papermill runs it, nbconvert renders HTML.

Pipeline per notebook (``notebooks/NN_name.py``, jupytext py:percent, python3 kernelspec in the header):

1. jupytext converts the ``.py`` source to ``.ipynb`` (papermill cannot read a ``.py`` notebook);
2. papermill executes it with the repository root as working directory and the given parameters injected
   after the cell tagged ``parameters`` (plus ``report`` and ``output_root``, which :func:`run_notebook`
   injects itself: notebooks pass them to :func:`heavytail.harness.artifacts.artifacts`);
3. nbconvert renders the executed notebook (complete or partial) to HTML.

A failure inside the notebook is a :class:`NotebookResult` with its failing code cell, never an exception.
:func:`check_parameters` refuses, before anything runs, a name the notebook's ``parameters`` cell does not
define (papermill would only warn and run the notebook with its defaults).
:func:`write_index` writes the ``index.html`` / ``index.json`` listing of a folder of executed notebooks
(the report's and each grid's). The lowest layer of :mod:`heavytail.pipeline`: it imports only
:mod:`heavytail.io` and :mod:`heavytail.harness.artifacts`.
"""

from __future__ import annotations

import ast
import datetime as _dt
import html
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from heavytail.harness.artifacts import NOTEBOOK_PATTERN
from heavytail.io import atomic_write_text, dumps_json

RUNNER_PARAMETERS = ("report", "output_root")
INTERRUPTED = "interrupted"  # a notebook a Ctrl-C stopped, or never started because of it


@dataclass
class NotebookResult:
    name: str
    status: str = "pending"  # then running, and ok, failed or skipped; interrupted when a Ctrl-C stopped the report
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


def _inspect(source: Path) -> dict[str, dict[str, Any]]:
    _require_notebook_tools()
    import jupytext
    import papermill as pm

    with tempfile.TemporaryDirectory(prefix=f"heavytail-inspect-{source.stem}-") as tmp:
        converted = Path(tmp) / f"{source.stem}.ipynb"  # papermill cannot read a .py notebook
        jupytext.write(jupytext.read(source), converted)
        return dict(pm.inspect_notebook(str(converted)))


def parameters_of(source: Path) -> tuple[str, ...]:
    """The names the notebook's ``parameters`` cell defines, as papermill itself reads them: papermill
    injects any other name too but only warns about it, and the notebook runs with its defaults."""
    return tuple(_inspect(source))


def defaults_of(source: Path) -> dict[str, Any]:
    """The literal default of each name in the notebook's ``parameters`` cell (names whose default is not a
    literal are left out)."""
    values = {name: _default_value(p.get("default", "")) for name, p in _inspect(source).items()}
    return {name: v for name, v in values.items() if v is not _UNKNOWN}


_UNKNOWN = object()
# Arithmetic of literals (``2**20``, ``-1e-3``) is a default's value too.
_ARITHMETIC = (ast.Expression, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Tuple, ast.List)


def _default_value(text: str) -> Any:
    """The value of a parameter's default as written in the cell, or _UNKNOWN for anything but literals."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return _UNKNOWN
    if not all(isinstance(node, _ARITHMETIC + (ast.Load,)) for node in ast.walk(tree)):
        return _UNKNOWN
    try:
        return eval(compile(tree, "<default>", "eval"), {"__builtins__": {}})  # noqa: S307  (literals only, checked)
    except Exception:  # noqa: BLE001  (2**10**10 and the like: no type to check against)
        return _UNKNOWN


def _kind(default: Any) -> tuple[tuple[type, ...], str] | None:
    """The types a value may have in place of ``default`` and their name, or None when any value may."""
    if default is None or default is _UNKNOWN:
        return None
    if isinstance(default, bool):
        return (bool,), "true or false"
    if isinstance(default, int):
        return (int,), "an integer"
    if isinstance(default, float):
        return (int, float), "a number"
    if isinstance(default, str):
        return (str,), "a string"
    if isinstance(default, (list, tuple)):
        return (list, tuple), "a list"
    if isinstance(default, dict):
        return (Mapping,), "a mapping"
    return None


def _wrong_type(value: Any, default: Any) -> str | None:
    kind = _kind(default)
    if kind is None or value is None:
        return None
    types, what = kind
    if isinstance(value, bool) and bool not in types:
        return what
    return None if isinstance(value, types) else what


def check_parameters(source: Path, names: Sequence[str], where: str, values: Mapping[str, Any] | None = None) -> None:
    """Refuse (ValueError, one line) names the notebook's ``parameters`` cell does not define, listing those
    it does, and ``values`` of another type than the cell's default (``n_paths: abc`` for ``n_paths = 3``), which
    would fail cells later without naming the parameter; ``where`` says who set them."""
    found = _inspect(source)
    taken = tuple(found)
    unknown = sorted(set(names) - set(taken))
    if unknown:
        settable = [n for n in taken if n not in RUNNER_PARAMETERS]
        raise ValueError(f"{where} sets {unknown}, which {source} does not take; its parameters: "
                         f"{', '.join(settable) or 'none'}")
    for name, value in (values or {}).items():
        text = (found.get(name) or {}).get("default")
        if text is None:
            continue
        wrong = _wrong_type(value, _default_value(text))
        if wrong:
            raise ValueError(f"{where} sets {name}={value!r}, but {source.name}'s {name} is {wrong} "
                             f"({name} = {text} in its parameters cell)")
        low = lower_bound(found[name].get("help") or "")
        below = [v for v in (value if isinstance(value, (list, tuple)) else [value])
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and low is not None and v < low]
        if below:
            raise ValueError(f"{where} sets {name}={value!r}, but {source.name}'s {name} must be at least {low:g} "
                             f"(its parameters cell: {found[name]['help']})")


_AT_LEAST = re.compile(r"\(at least (-?\d+(?:\.\d+)?)(?: each)?\)")


def lower_bound(comment: str) -> float | None:
    """The lower bound a parameter's comment states as "(at least K)" ("(at least K each)" for a list), or None:
    how a notebook declares the range of a count, so a value of the right type but out of range is refused before
    anything runs."""
    m = _AT_LEAST.search(comment)
    return float(m.group(1)) if m else None


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


# nbconvert's lab template loads require.js, MathJax and mermaid from a CDN. The notebooks use none of them
# (figures are embedded PNGs, no LaTeX), and a report must open offline without console errors, so the
# rendered pages drop those three script tags and keep the template otherwise.
_OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{% block html_head_js_requirejs %}{% endblock %}
{% block html_head_js_mathjax %}{% endblock %}
{% block html_head_js_mermaidjs %}{% endblock %}
"""


def render_html(ipynb_path: Path, html_path: Path) -> None:
    """Render an executed notebook to standalone HTML with nbconvert (no network: no CDN scripts)."""
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    nb = nbformat.read(ipynb_path, as_version=4)
    exporter = HTMLExporter(extra_loaders=[DictLoader({"heavytail-offline.html.j2": _OFFLINE_TEMPLATE})],
                            template_file="heavytail-offline.html.j2")
    body, _ = exporter.from_notebook_node(nb)
    atomic_write_text(html_path, body)


def _ipc_kernel_manager():
    """A kernel manager whose kernels talk over local IPC sockets instead of TCP ports.

    ipykernel warns on every start that a TCP kernel is unencrypted; the report's kernels are local
    subprocesses of this process, so a Unix socket (in Jupyter's private runtime folder) is both the
    quieter and the safer transport.
    """
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _default_transport(self):
            return "ipc"

        @default("ip")
        def _default_ip(self):
            # jupyter_client's default IPC path is "kernel-ipc" in the working folder, shared by every
            # kernel started there: two grid workers then pick the same socket files and read each
            # other's messages ("Invalid Signature"). A unique prefix per kernel keeps them apart (the
            # socket files are removed when the kernel shuts down).
            return os.path.join(tempfile.gettempdir(), f"heavytail-kernel-{uuid.uuid4().hex}")

        async def _async_interrupt_kernel(self) -> None:
            # jupyter_client interrupts a kernel before every shutdown request, and ipykernel logs that interrupt
            # as "ERROR | KeyboardInterrupt caught in kernel" although nothing failed. papermill shuts a kernel
            # down once its last cell has returned, so there is nothing to interrupt then; an interrupt asked
            # for while the kernel runs (a timeout) still goes through.
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return IPCKernelManager


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
                kernel_name=kernel, log_output=False, request_save_on_cell_execute=True,
                kernel_manager_class=_ipc_kernel_manager(),
                # papermill's 60 s for a kernel to answer was exceeded on a busy 2-core machine
                # (two SLURM tasks starting at once); a slow start is not a failed configuration
                start_timeout=600,
                # one transient bar named after the notebook; the caller prints the line that stays
                progress_bar={"desc": f"[report] {name}", "leave": False} if progress else False,
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
    colors = {"ok": "#1a7f37", "failed": "#cf222e", "skipped": "#6e7781", "running": "#9a6700", "pending": "#6e7781",
              INTERRUPTED: "#9a6700"}
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
    write_index_json(out_dir, report, results, params_source, finished)
    return index


def write_index_json(out_dir: Path, report: str, results: Sequence[NotebookResult], params_source: Path | None,
                     finished: bool) -> Path:
    """``index.json``: every notebook's result, for scripts and tests (the pages are for people)."""
    path = out_dir / "index.json"
    atomic_write_text(path, dumps_json(
        {"report": report, "finished": finished, "params": str(params_source or ""),
         "notebooks": [r.__dict__ for r in results]}, indent=2) + "\n")
    return path
