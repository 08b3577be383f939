"""environment.yml must list exactly what pyproject.toml declares (pyproject is the source of truth)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# conda-forge names that differ from PyPI's
CONDA_NAME = {"torch": "pytorch"}
# declared packages environment.yml installs with pip (its `pip:` section) instead of from conda-forge
PIP_ONLY = {"tailestim"}


def _split(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req)
    assert m, req
    return m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")


def _pyproject() -> tuple[dict[str, str], dict[str, list[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    reqs = list(project["dependencies"]) + [r for group in extras.values() for r in group]
    pairs = dict(_split(r) for r in reqs)
    return {CONDA_NAME.get(k, k): v for k, v in pairs.items()}, extras


def _environment() -> tuple[dict[str, str], list[str], str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda, pip = {}, []
    python = ""
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip += dep.get("pip", [])
            continue
        name, spec = _split(dep)
        if name == "python":
            python = spec
        elif name != "pip":
            conda[name] = spec
    return conda, pip, python


def test_environment_lists_the_same_packages_and_versions_as_pyproject():
    declared, _ = _pyproject()
    conda, pip, _ = _environment()
    pinned = dict(_split(p) for p in pip if not p.startswith("-e"))
    assert set(pinned) == PIP_ONLY, f"environment.yml's pip section lists {sorted(pinned)}, PIP_ONLY is {sorted(PIP_ONLY)}"
    assert not PIP_ONLY & set(conda), f"{sorted(PIP_ONLY & set(conda))} listed for both conda and pip"
    listed = {**conda, **pinned}
    missing = sorted(set(declared) - set(listed))
    extra = sorted(set(listed) - set(declared))
    assert not missing and not extra, f"environment.yml missing {missing}, has undeclared {extra}"
    differing = {k: (declared[k], listed[k]) for k in declared if declared[k] != listed[k]}
    assert not differing, f"version specs differ (pyproject, environment.yml): {differing}"


def test_environment_installs_the_package_with_every_extra():
    _, extras = _pyproject()
    _, pip, _ = _environment()
    editable = [p for p in pip if p.startswith("-e .")]
    assert editable, "environment.yml must install the package itself with `-e .[...]`"
    named = set(re.search(r"\[(.*)\]", editable[0]).group(1).split(","))
    assert named == set(extras), f"pip section installs extras {sorted(named)}, pyproject has {sorted(extras)}"


def test_python_requirement_matches():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    _, _, python = _environment()
    assert python == project["requires-python"].replace(" ", "")
