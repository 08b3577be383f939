"""The studies' import graph: each study imports the shared core (heavytail.studies.core, claims, run_summary, ...)
and never another study, and the shipped maps' reader imports no study, so a study can change without moving
another's numbers."""

from __future__ import annotations

import ast
from pathlib import Path

STUDIES_DIR = Path(__file__).resolve().parents[1] / "heavytail" / "studies"
SUBPACKAGES = ("ablation", "collapse", "kernel_gap", "phase")
SINGLE = ("identifiability", "integrability", "testbed")


def _study(module: str) -> str | None:
    """The study a dotted module under heavytail.studies belongs to (None for the core)."""
    parts = module.split(".")
    if parts[:2] != ["heavytail", "studies"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in SUBPACKAGES + SINGLE else None


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def _module_of(path: Path) -> str:
    rel = path.relative_to(STUDIES_DIR.parents[1]).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def test_no_study_imports_another():
    crossings = []
    for path in sorted(STUDIES_DIR.rglob("*.py")):
        own = _study(_module_of(path))
        if own is None:
            continue
        for target in _imports(path):
            other = _study(target)
            if other is not None and other != own:
                crossings.append(f"{_module_of(path)} -> {target}")
    assert not crossings, "studies import each other (move the shared piece into the core): " + "; ".join(crossings)


def test_the_shipped_maps_reader_imports_no_study():
    assert not [t for t in _imports(STUDIES_DIR / "reference_maps.py") if _study(t)]


def test_the_graph_reader_sees_a_crossing(tmp_path):
    """The test above can fail: a lazy import inside a function is an import."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from heavytail.studies.kernel_gap.claims import findings\n")
    assert {_study(m) for m in _imports(module)} - {None} == {"kernel_gap"}
