"""The package's layers: imports run one way (science <- harness <- pipeline), with no cycle, and what
notebooks import never pulls in the batch machinery (papermill, submitit, jupyter)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from heavytail.harness.artifacts import repo_root

ROOT = repo_root(Path(__file__).parent)
PACKAGE = ROOT / "heavytail"
BATCH = ("papermill", "submitit", "jupyter", "jupyter_client", "jupyter_core", "jupytext", "nbconvert", "nbformat")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every heavytail module ``path`` imports, at module level or inside a function."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "heavytail"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "heavytail":
                continue
            found.add(target)
            # `from heavytail import metrics` / `from . import cli` import submodules
            found |= {f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")}
    return {m for m in found if m != name and m != "heavytail"}


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a heavytail module or package (``from heavytail.studies import kernel_gap``)."""
    path = PACKAGE.parent / dotted.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules} for name, path in modules.items()}


def test_the_import_graph_has_no_cycle():
    graph = _graph()
    assert len(graph) > 20, "the graph must see the package's modules"
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


# The layers, bottom first: a module may import its own layer and any layer below, never one above.
LAYERS = ("science", "harness", "studies", "pipeline")
BOTTOM = {"heavytail.names", "heavytail.io", "heavytail.cli", "heavytail.layout"}  # layout: reads sources, imports none


def _layer(module: str) -> int:
    if module in BOTTOM:
        return -1
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def test_layers_import_downward_only():
    graph = _graph()
    placed = [m for m in graph if m not in ("heavytail", "heavytail.__main__")]
    assert all(_layer(m) < len(LAYERS) for m in placed), \
        f"modules outside the layers: {sorted(m for m in placed if _layer(m) == len(LAYERS))}"
    for name, deps in graph.items():
        if name in ("heavytail", "heavytail.__main__"):
            continue
        above = sorted(d for d in deps if _layer(d) > _layer(name))
        assert not above, f"{name} (layer {_layer(name)}) imports a layer above it: {above}"
    # within the pipeline: report -> grid -> notebook execution, never back up
    assert "heavytail.pipeline.report" not in graph["heavytail.pipeline.grid"]
    assert not {"heavytail.pipeline.report", "heavytail.pipeline.grid"} & graph["heavytail.pipeline.notebook"]
    # the names module is the bottom of the package: it reads nothing else
    assert graph["heavytail.names"] == set()


def test_the_layer_check_can_fail():
    # a science module importing the harness is the kind of edge the rule must catch
    assert _layer("heavytail.harness.config") > _layer("heavytail.science.kernels")
    assert _layer("heavytail.pipeline.grid") > _layer("heavytail.studies.ablation.summary") > _layer("heavytail.harness.train")


def _notebook_imports() -> list[str]:
    found = set()
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        for node in ast.walk(ast.parse(nb.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("heavytail"):
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("heavytail")}
    # a study subpackage loads its modules when a notebook names them (kernel_gap.plots): probe them all
    for name in list(found):
        folder = PACKAGE.parent / name.replace(".", "/")
        if (folder / "__init__.py").is_file():
            found |= {f"{name}.{p.stem}" for p in folder.glob("[!_]*.py")}
    return sorted(found)


def test_what_notebooks_import_needs_no_papermill_submitit_or_jupyter():
    modules = _notebook_imports()
    assert "heavytail.harness.artifacts" in modules and "heavytail.names" in modules
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {BATCH!r})))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [], f"importing {modules} loaded {out.stdout.strip()}"
    # and the probe can fail: the pipeline does load them
    code = f"import json, sys, heavytail.pipeline.report\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {BATCH!r})))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "submitit" in json.loads(out.stdout)


def test_repo_root_outside_the_repository_falls_back_to_the_package_checkout(tmp_path):
    # papermill may run a kernel anywhere; the fallback must be the checkout holding the package, not a subfolder
    assert repo_root(tmp_path) == ROOT


def _aliased_heavytail_modules(source: str) -> list[str]:
    """``module as alias`` for each heavytail module ``source`` imports under another name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{a.name} as {a.asname}" for a in node.names if a.name.split(".")[0] == "heavytail" and a.asname]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "heavytail":
            found += [f"{node.module}.{a.name} as {a.asname}" for a in node.names if a.asname
                      and _is_module(f"{node.module}.{a.name}")]
    return found


def test_notebooks_import_heavytail_modules_by_their_own_names():
    # one-letter aliases meant P was summary_plots in one notebook and phase_diagram in another
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    assert len(notebooks) >= 9
    aliased = {nb.name: found for nb in notebooks if (found := _aliased_heavytail_modules(nb.read_text()))}
    assert not aliased, f"notebooks import heavytail modules under aliases: {aliased}"
    # and the check can fail, for either import form, while a function imported under an alias is not a module
    assert _aliased_heavytail_modules("from heavytail.studies import claims as C\nimport heavytail.names as N\n"
                                      "from heavytail.science.metrics import hill_k as k\n") == \
        ["heavytail.studies.claims as C", "heavytail.names as N"]


def _runs_git(source: str) -> bool:
    """Whether ``source`` names the git executable as a command (``["git", ...]`` or ``"git rev-parse ..."``)."""
    return any(isinstance(node, ast.Constant) and isinstance(node.value, str)
               and (node.value == "git" or node.value.startswith(("git rev-parse", "git status", "git describe")))
               for node in ast.walk(ast.parse(source)))


def test_commit_and_dirty_tree_are_read_only_by_the_provenance_module():
    # heavytail.harness.provenance.code_state is the one reader of the commit and the dirty tree: training,
    # the landing page, the benchmarks and gpu_check call it instead of running git themselves
    owner = PACKAGE / "harness" / "provenance.py"
    sources = [p for folder in ("heavytail", "benchmarks", "notebooks") for p in (ROOT / folder).rglob("*.py")]
    assert owner in sources and _runs_git(owner.read_text())
    others = sorted(str(p.relative_to(ROOT)) for p in sources if p != owner and _runs_git(p.read_text()))
    assert not others, f"run git themselves instead of heavytail.harness.provenance.code_state: {others}"
    # and the probe can fail on either form
    assert _runs_git('subprocess.run(["git", "rev-parse", "HEAD"])') and _runs_git('os.popen("git status --porcelain")')
    assert not _runs_git('"earlier records are in git history"')
