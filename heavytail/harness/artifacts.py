"""Where a notebook writes its figures and tables, and where the repository is.

What notebooks import, so it stays light: no torch, papermill, submitit or jupyter. The report runner
(:mod:`heavytail.pipeline`) injects ``report`` and ``output_root`` into every notebook it executes; the
notebook passes them to :func:`artifacts`, which owns the artifact paths ``<output_root>/<notebook>/``.

Two conventions the report's landing page reads: every figure goes through :meth:`Artifacts.save_figure`,
which saves it and shows it where the notebook discusses it; each notebook ends with
:meth:`Artifacts.conclude`, its one-sentence conclusion computed from its numbers, naming its key figure.
"""

from __future__ import annotations

import csv
import io
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from heavytail.io import atomic_write_text, dumps_json, to_plain

NOTEBOOK_PATTERN = re.compile(r"^\d{2}_[A-Za-z0-9_]+$")
CONCLUSION_FILE = "conclusion.json"  # {"sentence": str, "figure": figure name or null}; read by the landing page
FIGURE_FORMATS = ("png", "svg")


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
    return Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Artifacts:
    """Where one notebook writes its figures and tables: ``<output_root>/<notebook>/``."""

    dir: Path

    def path(self, name: str) -> Path:
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise ValueError(f"artifact name must be a plain file name, got {name!r}")
        return self.dir / name

    def save_figure(self, fig, name: str, dpi: int = 150) -> None:
        """Save a matplotlib figure as ``name.png`` and ``name.svg`` (:meth:`path`), show it, close it. It returns
        nothing, so that a cell ending in it shows the figure and not a list of paths.

        Inside a notebook the saved PNG itself is displayed, so the executed notebook shows exactly the
        artifact, whatever matplotlib backend is active (under Agg, ``plt.show()`` displays nothing). The
        figure is closed afterwards, or the inline backend would draw it a second time at the cell's end.
        """
        paths = []
        for ext in FIGURE_FORMATS:
            target = self.path(f"{name}.{ext}")
            tmp = target.with_name(f".{target.name}.tmp.{ext}")
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format=ext)
            os.replace(tmp, target)
            paths.append(target)
        shell = _ipython()
        if shell is not None:
            from IPython.display import Image, display

            display(Image(data=paths[0].read_bytes(), format="png"))
        import matplotlib.pyplot as plt

        plt.close(fig)

    def conclude(self, sentence: str, figure: str | None = None) -> None:
        """Record the notebook's one-sentence conclusion for the report's landing page (``conclusion.json``), and
        show it; it returns nothing, so the notebook's last cell shows the sentence, not a path.

        ``sentence`` is computed from the notebook's numbers; ``figure`` names the saved figure (without
        extension) that shows it best, drawn as the notebook's thumbnail on the landing page.
        """
        if not isinstance(sentence, str) or not sentence.strip():
            raise ValueError("a conclusion must be a non-empty sentence")
        if figure is not None and not self.path(f"{figure}.png").is_file():
            saved = sorted(p.stem for p in self.dir.glob("*.png"))
            raise ValueError(f"conclusion figure {figure!r} was not saved by this notebook; saved figures: {saved}")
        target = self.path(CONCLUSION_FILE)
        atomic_write_text(target, dumps_json({"sentence": sentence.strip(), "figure": figure}, indent=2) + "\n")
        if _ipython() is not None:
            from IPython.display import Markdown, display

            display(Markdown(f"**Conclusion.** {sentence.strip()}"))
        else:
            print(f"Conclusion. {sentence.strip()}")

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
            columns = {str(k): list(to_plain(v)) for k, v in table.items()}
            lengths = {len(v) for v in columns.values()}
            if len(lengths) > 1:
                raise ValueError(f"CSV columns of {name!r} have different lengths: "
                                 f"{ {k: len(v) for k, v in columns.items()} }")
            rows = [dict(zip(columns, vals)) for vals in zip(*columns.values())]
            header = list(columns)
        else:
            rows = [to_plain(dict(r)) for r in table]
            header = list(rows[0]) if rows else []
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(target, buffer.getvalue())
        return target


def _ipython():
    """The running IPython shell, or None in a plain interpreter (IPython is imported only when loaded)."""
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()


def artifacts(notebook: str, report: str = "scratch", output_root: str | os.PathLike | None = None) -> Artifacts:
    """The artifact folder of ``notebook`` (created): ``<output_root>/<notebook>/``, where ``output_root``
    defaults to ``<repo root>/outputs/<report>`` (interactive runs land in ``outputs/scratch/``)."""
    if not NOTEBOOK_PATTERN.match(notebook):
        raise ValueError(f"notebook name must look like 'NN_name' (two digits, underscore, name), got {notebook!r}")
    root = Path(output_root) if output_root is not None else repo_root() / "outputs" / report
    folder = root / notebook
    folder.mkdir(parents=True, exist_ok=True)
    return Artifacts(dir=folder)
