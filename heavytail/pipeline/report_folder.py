"""Reading what a report's notebooks wrote, for its landing page (:mod:`heavytail.pipeline.landing`): their JSON and
CSV files, figures, tables, run folders and one-sentence conclusions, the claims they checked, the anchors nbconvert
gave their headings, and the small text helpers the page's HTML is written with."""

from __future__ import annotations

import csv
import html
import re
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import quote, unquote

from heavytail.harness.artifacts import CONCLUSION_FILE
from heavytail.harness.provenance import code_state
from heavytail.io import load_json
from heavytail.studies.claims import VERDICTS

CLAIMS_FILE = "claims.json"  # a list of claims a notebook checked; see :func:`heavytail.studies.ablation.summary.findings`
TABLE_SUFFIXES = (".csv", ".json")
NOT_REPORT_ITEMS = {CONCLUSION_FILE}  # read by the page, not offered as a table


def read_json(path: Path) -> Any:
    """The JSON a notebook wrote, its tagged inf and NaN turned back into floats (heavytail.io), or None."""
    try:
        return load_json(path)
    except (OSError, ValueError):
        return None


def read_csv(path: Path) -> list[dict[str, str]] | None:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return None


def href(path: str) -> str:
    """A relative link: each segment percent-encoded, '/' kept."""
    return html.escape(quote(path, safe="/#"), quote=True)


def esc(text: Any) -> str:
    return html.escape(str(text))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def heading_ids(page: Path) -> dict[str, str]:
    """The anchors nbconvert gave a rendered notebook's headings, by heading text (spaces as in the text)."""
    try:
        text = page.read_text(encoding="utf-8")
    except OSError:
        return {}
    return {unquote(m.group(1)).replace("-", " "): m.group(1) for m in re.finditer(r'<h[1-6][^>]*\sid="([^"]+)"', text)}


def anchor(out_dir: Path, notebook: str, section: str | None) -> str:
    """``<notebook>.html#<id of section>``, or the page itself when the section has no anchor there."""
    page = f"{notebook}.html"
    if section:
        ident = heading_ids(out_dir / page).get(section.replace("-", " "))
        if ident:
            return f"{page}#{ident}"
    return page


def figures_of(folder: Path) -> list[Path]:
    """A notebook's saved figures (PNG, each with its SVG), in the order the notebook saved them. A figure being
    written (its hidden ``.<name>.tmp.png``, :meth:`heavytail.harness.artifacts.Artifacts.save_figure`) is not one
    yet, and a file renamed away while the page is written is skipped."""
    if not folder.is_dir():
        return []
    found = []
    for p in folder.glob("*.png"):
        if p.name.startswith("."):
            continue
        try:
            found.append((p.stat().st_mtime, p.name, p))
        except FileNotFoundError:
            continue
    return [p for *_, p in sorted(found)]


def tables_of(folder: Path) -> list[Path]:
    """A notebook's tables (CSV, JSON) at the top of its artifact folder; subfolders hold run internals."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in TABLE_SUFFIXES
                  and p.name not in NOT_REPORT_ITEMS and not p.name.startswith("."))


def run_folders_of(folder: Path) -> list[Path]:
    """Training run folders a notebook wrote inside its artifact folder (any folder holding config.yaml)."""
    if not folder.is_dir():
        return []
    return sorted(p.parent for p in folder.rglob("config.yaml") if not any(part.startswith(("_", ".")) for part in
                                                                          p.relative_to(folder).parts))


def conclusion_of(folder: Path) -> Mapping[str, Any] | None:
    data = read_json(folder / CONCLUSION_FILE)
    return data if isinstance(data, Mapping) and data.get("sentence") else None


def claims_in(out_dir: Path, names: Iterable[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every (notebook, claim) of the notebooks' ``claims.json`` files, in notebook order."""
    found = []
    for name in names:
        data = read_json(out_dir / name / CLAIMS_FILE)
        if isinstance(data, list):
            found += [(name, c) for c in data if isinstance(c, Mapping) and c.get("verdict") in VERDICTS]
    return found


def git_commit(root: Path) -> str | None:
    state = code_state(root)
    if state["commit"] is None:
        return None
    return state["commit"][:7] + (" (with uncommitted changes)" if state["dirty"] else "")
