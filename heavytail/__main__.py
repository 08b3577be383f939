"""Command line: ``python -m heavytail {train,evaluate,report,grid} ...``.

Each subcommand lives in the module that does the work; this file only dispatches, importing
lazily so that ``python -m heavytail report`` does not pay for torch start-up twice.
"""

from __future__ import annotations

import errno
import sys

_COMMANDS = {
    "train": ("heavytail.harness.train", "Train one configuration (resumes an existing run folder)."),
    "evaluate": ("heavytail.harness.evaluate", "Evaluate a finished run: 128-trial ratios, floors, Hill diagnostics."),
    "report": ("heavytail.pipeline.report", "Execute the notebooks with papermill and render the HTML report."),
    "grid": ("heavytail.pipeline.grid", "Run every configuration of a grid file (local workers or SLURM)."),
    "ship-map": ("heavytail.studies.ship_map", "Ship a grid's finished per-run summaries as a reference map."),
    "claims": ("heavytail.studies.claim_groups", "Print the claims decided on the shipped maps (one group, or the table)."),
    "select-lr": ("heavytail.studies.kernel_gap.converged", "Pick each variant's learning rate and write the deciding grid."),
    "layout": ("heavytail.layout", "Print the package's module map (docs/layout.md's table)."),
    "select-lr-fair": ("heavytail.studies.kernel_gap.fair", "The same for the fair recipe (fixed annealed budget, best weights)."),
    "mechanism-followup": ("heavytail.studies.collapse.mechanism_followup",
                           "Choose the mechanism screen's setting to follow and write its grid file."),
}


def _usage() -> str:
    lines = ["usage: python -m heavytail <command> [options]", "", "commands:"]
    width = max(map(len, _COMMANDS))
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in _COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in _COMMANDS:
        print(f"unknown command {name!r}; allowed: {', '.join(_COMMANDS)}\n\n{_usage()}", file=sys.stderr)
        return 2
    import importlib

    from heavytail import cli

    problem = cli.check_environment()
    if problem:  # before anything runs: a misspelt switch would otherwise fall back silently
        print(f"[{name}] error: {problem}", file=sys.stderr)
        return 2
    module = importlib.import_module(_COMMANDS[name][0])
    try:
        return int(module.main(rest) or 0)
    except KeyboardInterrupt:  # a run resumes from its last checkpoint; every file is written whole or not at all
        print(f"[{name}] interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" writing {err.filename}" if err.filename else ""
        print(f"[{name}] stopped: the disk is full{where}; every file is written whole or not at all, so free space "
              "and rerun the same command to resume", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
