"""The studies: the logic behind each notebook, with its plots beside it, kept here so that it is tested.

- ``integrability`` (notebook 01), ``testbed`` (02), ``identifiability`` (03);
- the subpackages of the studies with several modules: ``ablation`` (04, 06), ``collapse`` (05, 09),
  ``kernel_gap`` (07), ``phase`` (08); a notebook imports the subpackage and names each module through it
  (``kernel_gap.plots.gap_figure``), so that two studies' ``claims`` never meet under one name;
- shared by them (the core: studies import it and never each other): ``core`` (the run vocabulary: a run's
  variant, label, colour, ratios, collapsed steps and extent, runs per (variant, N) and paired by seed), ``curves``
  (training curves as Figure 13 draws them), ``claims`` (the verdict states, the calibrated decision rules, the claim record),
  ``run_summary`` (one finished run as a shipped map keeps it), ``run_record`` (the typed record every study reads a
  run as), ``grid_folder`` (the one reader of a grid's
  runs), ``reference_maps`` (the shipped maps), ``claim_groups`` (which map decides which claims), ``tables``,
  ``paper_numbers``.

May import: the harness, the science, ``heavytail.names`` and ``heavytail.io``; never the pipeline.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable


def lazy_submodules(package: str, names: tuple[str, ...]) -> tuple[Callable[[str], ModuleType], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for a subpackage: ``package.name`` imports the submodule on first use, so
    that reading one study's claims (the CLI, the landing page) does not load every figure module with it."""

    def __getattr__(name: str) -> ModuleType:
        if name in names:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}; its modules: {', '.join(names)}")

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
