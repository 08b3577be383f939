"""Where a notebook writes its figures and tables, and where the repository is.

What notebooks import, so it stays light: no torch, papermill, submitit or jupyter. The report runner
(:mod:`heavytail.pipeline`) injects ``report`` and ``output_root`` into every notebook it executes; the
notebook passes them to :func:`artifacts`, which owns the artifact paths ``<output_root>/<notebook>/``.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .io import atomic_write_text, dumps_json

NOTEBOOK_PATTERN = re.compile(r"^\d{2}_[A-Za-z0-9_]+$")


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
