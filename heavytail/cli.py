"""The command-line vocabulary shared by ``train``, ``evaluate``, ``report`` and ``grid``.

The same flag means the same thing in every command: ``--output DIR`` (the folder written), ``--quiet``
(no progress bars), ``--set KEY=VALUE`` (override a setting, the value read as YAML), ``--only PATTERN``
(shell patterns of names to run). Bad input (a missing file, a file that is not YAML, an unknown key, a
value out of range) ends the command with one line on stderr and exit code 2, never a traceback:
:func:`bad_input`. Every YAML file a command is given is read by :func:`read_yaml`.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

# The exceptions a command raises for input it cannot use; anything else is a bug and keeps its traceback.
BAD_INPUT = (ValueError, FileNotFoundError, NotADirectoryError, ModuleNotFoundError)


def check_writable(path: str | os.PathLike, what: str = "output folder") -> Path:
    """Refuse (one-line ValueError) a folder that cannot be created or written, before any work starts: one below a
    file, or in a read-only place. Creates nothing: the nearest existing folder is probed with a file it removes."""
    path = Path(path).absolute()
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{what} {path} cannot be created: {probe} is a file, not a folder")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".heavytail-write-test-", dir=probe)
    except OSError as err:
        raise ValueError(f"{what} {path} cannot be written: {probe}: {err.strerror or err}") from None
    os.close(fd)
    os.unlink(tmp)
    return path


class _WritableFolder(argparse.Action):
    """``--output DIR`` checked for writability as it is parsed: the command's one-line error and exit 2, before it
    reads anything else or starts any work."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            check_writable(values)
        except ValueError as err:
            sys.exit(bad_input(parser.prog.split()[-1], err))
        setattr(namespace, self.dest, values)


def add_output(parser: argparse.ArgumentParser, help: str, *aliases: str, required: bool = False) -> None:
    parser.add_argument("--output", *aliases, dest="output", default=None, required=required, metavar="DIR",
                        help=help, action=_WritableFolder)


def add_quiet(parser: argparse.ArgumentParser, *aliases: str) -> None:
    parser.add_argument("--quiet", *aliases, dest="quiet", action="store_true", help="no progress bars (batch use)")


def add_set(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--set", dest="set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help=f"override {what} (value read as YAML: steps=10, symlog=true, lr=3e-3)")


def add_only(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--only", nargs="+", default=None, metavar="PATTERN",
                        help=f"run only the {what} whose name matches one of these shell patterns")


def parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, values parsed as YAML scalars (``steps=10``, ``symlog=true``)."""
    import yaml

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ValueError(f"--set {pair!r}: the value is not a YAML scalar ({err.__class__.__name__})") from None
    return out


def yaml_scalar(value: Any) -> str:
    """``value`` as ``--set KEY=VALUE`` reads it back (``0.01``, ``true``, ``[1, 2]``)."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def read_yaml(path: str | os.PathLike) -> Any:
    """The YAML document in ``path``; a syntax error is a one-line :class:`ValueError` naming the file, line
    and column (yaml's own message spans several lines and points into the parser)."""
    import yaml

    path = Path(path)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start})") from None
    except yaml.MarkedYAMLError as err:
        mark, context = err.problem_mark, ""
        if err.context and err.context_mark is not None:
            context = f" ({err.context} that starts at line {err.context_mark.line + 1})"
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = err.problem or "syntax error"
        raise ValueError(f"{where}: not valid YAML: {problem}{context}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None


def read_yaml_file(path: str | os.PathLike, what: str) -> Any:
    """:func:`read_yaml` of a file the user named as ``what`` (``"grid file"``): FileNotFoundError naming it when
    it does not exist, and an empty document read as ``{}``."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    return read_yaml(path) or {}


def bad_input(command: str, err: BaseException) -> int:
    """Print ``err`` as the command's one-line error and return the exit code for bad input (2)."""
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if isinstance(err, FileNotFoundError) and err.filename and str(err.filename) not in message:
        message = f"{err.filename}: {message}"
    print(f"[{command}] error: {message}", file=sys.stderr)
    return 2


# ------------------------------------------------------------------------------------- the environment
# The environment variables the package reads, each parsed strictly: a value that is not one of the allowed ones is
# one line and exit 2 at the command's start (:func:`check_environment`), never a silent fallback to a default.
FLAG_TRUE = ("1", "true", "yes", "on")
FLAG_FALSE = ("0", "false", "no", "off", "")
ENV_FLAGS = {"HEAVYTAIL_NATIVE_FLASH": True}  # name -> default when unset
ENV_SECONDS = {"HEAVYTAIL_NATIVE_BUILD_WAIT_S": 900.0}


def env_flag(name: str, default: bool) -> bool:
    """A boolean environment variable: unset -> ``default``; 1/true/yes/on or 0/false/no/off/empty (any case);
    ValueError naming the allowed values otherwise."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in FLAG_TRUE:
        return True
    if value in FLAG_FALSE:
        return False
    raise ValueError(f"environment variable {name}={raw!r} is not allowed; use one of {', '.join(FLAG_TRUE)} "
                     f"(on) or {', '.join(v for v in FLAG_FALSE if v)} or empty (off)")


def env_seconds(name: str, default: float) -> float:
    """A non-negative number of seconds from the environment: unset -> ``default``; ValueError otherwise."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"environment variable {name}={raw!r} is not allowed; it must be a number of seconds >= 0 "
                         f"(unset: {default:g})")
    return value


def check_environment() -> str | None:
    """The first environment variable of the package's with a value that is not allowed, as one line; None if all
    are fine."""
    try:
        for name, default in ENV_FLAGS.items():
            env_flag(name, default)
        for name, default in ENV_SECONDS.items():
            env_seconds(name, default)
    except ValueError as err:
        return str(err)
    return None
