"""Where a number came from: the code's commit (and whether its tree was dirty), torch, machine and date.

Training records this for every stretch of steps it runs (a resumed run has one entry per call), so a
shipped map collects provenance the runs wrote themselves instead of a commit typed at shipping time. The
commit is read from the repository that holds the imported package (not the working directory), so a grid
run from a separate worktree records that worktree's commit. Light: no torch import at module level.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the repository: heavytail/harness/ is two levels down


def _git(*args: str, cwd: Path = PACKAGE_ROOT) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# The instruction sets that decide which arithmetic paths torch and the C++ flash loop take, and whether bf16
# matmuls are native (AVX512 with BF16, or AMX) or run many times slower; the model name alone does not tell
# processors apart (two machines that both read "AMD EPYC" differed by 15x on a bf16 training step).
CPU_FEATURES = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_features() -> list[str]:
    """Which of :data:`CPU_FEATURES` this processor has (its ``flags`` line in /proc/cpuinfo); [] where unreadable."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return [f for f in CPU_FEATURES if f in flags]
    except OSError:
        pass
    return []


def machine() -> str:
    return f"{socket.gethostname()}: {os.cpu_count()} cores, {cpu_model()}, {platform.platform()}"


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def code_state(root: Path = PACKAGE_ROOT, *paths: str, untracked: bool = False) -> dict[str, Any]:
    """The commit of the repository at ``root`` (the package's by default) and whether tracked files differ
    from it (``dirty``; only those under ``paths`` when given, untracked files too when ``untracked``); both
    None when ``root`` is not in a git checkout (an installed wheel). The one place commit and dirty tree are
    read: training runs, the landing page and the benchmarks all record them so."""
    commit = _git("rev-parse", "HEAD", cwd=root)
    args = ["status", "--porcelain", f"--untracked-files={'all' if untracked else 'no'}"]
    status = _git(*args, *(["--", *paths] if paths else []), cwd=root) if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def record() -> dict[str, Any]:
    """One provenance entry: commit, dirty, torch, python, machine, the processor's arithmetic features, date."""
    import torch

    return {**code_state(), "torch": torch.__version__, "python": platform.python_version(),
            "machine": machine(), "cpu_features": cpu_features(), "date": now()}


def check_shippable(entries: Sequence[Mapping[str, Any]], *, allow_dirty: bool = False,
                    allow_mixed: bool = False) -> list[str]:
    """The commits of ``entries`` (one per training stretch of every run); raises ValueError when a run has
    no provenance, came from a dirty tree, or the runs span several commits, unless allowed."""
    if any(not e or e.get("commit") is None for e in entries):
        raise ValueError("a run records no commit (trained before runs recorded provenance, or outside git); "
                         "re-run it, or ship with --allow-mixed to accept it")
    if not allow_dirty and any(e.get("dirty") for e in entries):
        raise ValueError("a run was trained from a dirty tree (uncommitted changes to tracked files); run grids "
                         "from a clean worktree at a commit, or ship with --allow-dirty")
    commits = sorted({e["commit"] for e in entries})
    if len(commits) > 1 and not allow_mixed:
        raise ValueError(f"the runs come from {len(commits)} commits ({', '.join(c[:9] for c in commits)}); "
                         "ship one commit's runs, or pass --allow-mixed")
    return commits
