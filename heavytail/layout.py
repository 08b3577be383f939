"""The package's map for newcomers, made from the tree: every module with the first line of its docstring, by layer.

``python -m heavytail layout`` prints it; ``--update docs/layout.md`` rewrites the block between
``<!-- layout modules -->`` and ``<!-- /layout -->`` there, so the map never names a module that moved or misses one
that was added (``tests/test_readme.py`` compares the two). Standard library only: it reads the sources, imports
nothing.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Sequence

PACKAGE = Path(__file__).resolve().parent
LAYERS = (("", "the bottom: names, files and flags every layer shares"),
          ("science", "the paper's objects and equations"),
          ("harness", "one run: configuration, training, evaluation"),
          ("studies", "each notebook's logic, claims and figures"),
          ("pipeline", "batch execution: report, grids, notebooks, the landing page"))
BEGIN, END = "<!-- layout modules -->", "<!-- /layout -->"


_ABBREVIATIONS = ("eq", "eqs", "App", "Sec", "Fig", "Figs", "Prop", "Props", "Thm", "e.g", "i.e", "cf", "vs", "No")


def summary_line(path: Path) -> str:
    """The first sentence of a module's docstring (a period after an abbreviation such as "eq." or "App." does not
    end it), or '' without one."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    for m in re.finditer(r"[.:;](\s|$)", text):
        word = re.findall(r"[\w.]+$", text[: m.start()])
        if not word or word[0] not in _ABBREVIATIONS:
            return text[: m.start()]
    return text


def modules(package: Path = PACKAGE) -> list[Path]:
    """Every module of the package (``__init__`` and ``__main__`` aside), in path order."""
    return sorted(p for p in package.rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))


def markdown(package: Path = PACKAGE) -> str:
    """The module table: one row per module, grouped by layer, with its one-line summary."""
    rows = ["| module | what it is |", "| --- | --- |"]
    for layer, about in LAYERS:
        base = package / layer if layer else package
        found = [m for m in modules(package) if m.parent == base or (layer and base in m.parents)]
        rows.append(f"| **{layer or 'heavytail'}/** | *{about}* |")
        for m in found:
            rel = m.relative_to(package.parent).as_posix()
            rows.append(f"| `{rel}` | {summary_line(m).replace('|', '/')} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heavytail layout [--update FILE]``."""
    from heavytail import cli
    from heavytail.io import replace_block

    parser = argparse.ArgumentParser(prog="python -m heavytail layout", description=__doc__.splitlines()[0])
    parser.add_argument("--update", metavar="FILE", default=None,
                        help=f"rewrite the block between '{BEGIN}' and '{END}' in FILE (docs/layout.md)")
    args = parser.parse_args(argv)
    text = markdown()
    if args.update is None:
        print(text)
        return 0
    path = Path(args.update)
    try:
        replace_block(path, BEGIN, END, text)
    except (*cli.BAD_INPUT, OSError) as err:
        return cli.bad_input("layout", err)
    print(f"updated the module table in {path}")
    return 0
