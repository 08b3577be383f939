"""What a study asks of its grid file beyond valid configurations: grid name -> a check of its configurations.

A study whose claims rest on a balanced design (the same seeds on every cell a rule reads) registers its check
here, and ``python -m heavytail grid`` refuses a grid file that breaks it (one line, exit 2) before anything trains.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from heavytail.studies.collapse import tables56

CHECKS: dict[str, Callable[[Sequence[Mapping[str, Any]]], str | None]] = {
    tables56.GRID_NAME: tables56.grid_problem,
}


def problem(grid_name: str, configs: Sequence[Mapping[str, Any]]) -> str | None:
    """Why grid ``grid_name``'s configurations break its study's design, or None (also for grids with no check)."""
    check = CHECKS.get(grid_name)
    return None if check is None else check(configs)
