"""Reading executed notebooks in tests."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat


def train_cell(executed: Path) -> int:
    """1-based number, among code cells, of the cell that trains (the configuration's unit of work)."""
    nb = nbformat.read(executed, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    hits = [i + 1 for i, c in enumerate(code) if re.search(r"run_configuration\(cfg", c.source, re.M)]
    assert len(hits) == 1
    return hits[0]
