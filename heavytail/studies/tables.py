"""Tables as plain data (``{"title", "columns", "rows", "notes"}``, cells as text or ``{"text", "bold",
"color"}``), and their one rendering: HTML for the notebooks, flat text rows for CSV. Pandas-free, so the
figure notebooks stay light."""

from __future__ import annotations

import html
import math
from typing import Any, Mapping


def fmt_ratio(x: float) -> str:
    """Three significant digits, trailing zeros kept (0.857, 1.50, 33.2; 1.23e+03 from 1000 up): at these
    evaluation sizes the bootstrap intervals are wider than 1%, so a fourth digit would be noise."""
    if x is None or not math.isfinite(x):
        return "nan" if x is None or math.isnan(x) else ("inf" if x > 0 else "-inf")
    if x == 0:
        return "0"
    if not 1e-3 <= abs(x) < 1e3:
        return f"{x:.2e}"
    text = f"{x:#.3g}"
    return text[:-1] if text.endswith(".") else text


def fmt_sci(x: float) -> str:
    """Two significant digits in scientific notation, as Tables 7 and 8 print E."""
    if x is None or not math.isfinite(x):
        return fmt_ratio(x)
    return f"{x:.1e}"


def cell_text(value: Any) -> str:
    if value is None:
        return "not run"
    if isinstance(value, Mapping):
        return str(value.get("text", ""))
    if isinstance(value, float):
        return fmt_ratio(value)
    return str(value)


def records(table: Mapping[str, Any]) -> list[dict[str, str]]:
    """The table as flat rows of text (for CSV, :meth:`heavytail.harness.artifacts.Artifacts.save_table`)."""
    return [{c: cell_text(row.get(c)) for c in table["columns"]} for row in table["rows"]]


def markdown_grid(columns, rows) -> str:
    """A markdown table: the header ``columns``, then one line per row (a sequence of cells in column order), each
    cell as :func:`cell_text` writes it with pipes escaped and line breaks flattened."""
    def cell(value):
        return cell_text(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(table: Mapping[str, Any]) -> str:
    """The table as a markdown table under its title in bold, its notes in italics below (for the pages that
    embed a printed table, e.g. docs/findings.md)."""
    grid = markdown_grid(table["columns"], [[row.get(c) for c in table["columns"]] for row in table["rows"]])
    return f"**{table['title']}**\n\n{grid}" + (f"\n\n*{table['notes']}*" if table.get("notes") else "")


def to_html(table: Mapping[str, Any]) -> str:
    """An HTML table; bold cells in <b>, missing cells in grey 'not run'."""
    def td(value):
        text = html.escape(cell_text(value))
        style = "padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top"
        if value is None:
            style += ";color:#999"
        elif isinstance(value, Mapping) and value.get("color"):
            style += f";color:{value['color']}"
        if isinstance(value, Mapping) and value.get("bold"):
            text = f"<b>{text}</b>"
        return f"<td style='{style}'>{text}</td>"

    head = "".join(f"<th style='padding:2px 8px;text-align:left;border-bottom:2px solid #444'>{html.escape(c)}</th>"
                   for c in table["columns"])
    body = "\n".join("<tr>" + "".join(td(row.get(c)) for c in table["columns"]) + "</tr>" for row in table["rows"])
    notes = f"<p><i>{html.escape(table['notes'])}</i></p>" if table.get("notes") else ""
    return (f"<p><b>{html.escape(table['title'])}</b></p>\n<table style='border-collapse:collapse;font-size:90%'>"
            f"<tr>{head}</tr>\n{body}\n</table>{notes}")


def show(table: Mapping[str, Any], art=None, name: str | None = None) -> None:
    """Display ``table`` in the notebook and, with ``art`` and ``name``, save it as ``<name>.csv``."""
    from IPython.display import HTML, display

    display(HTML(to_html(table)))
    if art is not None and name:
        art.save_table(f"{name}.csv", records(table))
