"""One process at a time per configuration: a lock file in the run folder.

Two ``grid`` commands on the same grid folder (a second terminal, a rerun while a ``--no-wait``
submission still runs, local and SLURM at once) would otherwise train and evaluate one run folder twice
at the same time, interleaving checkpoints and metrics. The process that executes a configuration
(a pool worker, a submitit job) creates ``<run_dir>/grid.lock`` with ``O_EXCL`` before it touches the
folder and removes it when done; the file says who holds it (pid, host, SLURM job id, since when).

A lock is *stale*, and taken over, when its holder is provably gone: a process on this host that no
longer exists (or whose pid now belongs to a younger process), a SLURM job the cluster reports as
ended, or an earlier attempt of this very job (a requeued job runs again under the same job id). A
holder on another host without a SLURM job cannot be checked from here: it counts as alive, and the
message says which file to delete if it is known to be dead.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from heavytail.pipeline import cluster

LOCK_FILE = "grid.lock"


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    job_id: str | None
    since: str
    pid_start: str | None = None  # /proc start time, so a recycled pid is not taken for the holder

    def describe(self) -> str:
        job = f", SLURM job {self.job_id}" if self.job_id else ""
        return f"pid {self.pid} on {self.host}{job}, since {self.since}"


class Locked(Exception):
    """The configuration is being executed by another process."""

    def __init__(self, run_dir: Path, holder: Holder) -> None:
        self.run_dir, self.holder = run_dir, holder
        super().__init__(f"held by {holder.describe()} ({run_dir / LOCK_FILE})")


def _start_time(pid: int) -> str | None:
    try:  # field 22 of /proc/<pid>/stat, after the parenthesised command name
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _me() -> Holder:
    return Holder(pid=os.getpid(), host=socket.gethostname(), job_id=cluster.current_job_id(os.environ),
                  since=time.strftime("%Y-%m-%dT%H:%M:%S"), pid_start=_start_time(os.getpid()))


def read_file(path: Path) -> Holder | None:
    try:
        data = json.loads(Path(path).read_text())
        return Holder(**{k: data.get(k) for k in ("pid", "host", "job_id", "since", "pid_start")})
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def read(run_dir: Path) -> Holder | None:
    """The lock's holder as the file says (None: no lock, or an unreadable one)."""
    return read_file(Path(run_dir) / LOCK_FILE)


def _alive(holder: Holder) -> bool:
    mine = cluster.current_job_id(os.environ)
    if holder.job_id:
        if mine and holder.job_id == mine:
            return False  # an earlier attempt of this job, before SLURM requeued it
        try:
            state = cluster.job_states([holder.job_id]).get(holder.job_id)
        except ValueError:
            state = None  # squeue unusable from here: decide by the process below
        else:
            return state is not None and cluster.is_active(state)
    if holder.host == socket.gethostname():
        try:
            os.kill(holder.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return holder.pid_start is None or _start_time(holder.pid) == holder.pid_start
    return True


def holder(run_dir: Path) -> Holder | None:
    """The live holder of the run folder's lock, or None when it is free (or its holder is gone)."""
    found = read(run_dir)
    return found if found is not None and _alive(found) else None


def acquire(run_dir: Path) -> Holder:
    """Take the lock for this process; raises :class:`Locked` when a live process holds it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    me = _me()
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            found = read(run_dir)
            if found is not None and _alive(found):
                raise Locked(run_dir, found) from None
            if found is None and time.time() - _mtime(path) < 5:
                time.sleep(0.2)  # another process is between creating and writing it
                continue
            # Stale: move it aside under a unique name, so two processes that both judged it stale
            # cannot each remove the lock the other has just created.
            aside = path.with_name(f"{LOCK_FILE}.stale-{me.pid}-{time.monotonic_ns()}")
            try:
                os.rename(path, aside)
            except FileNotFoundError:
                continue
            if read_file(aside) != found:  # a fresh lock taken meanwhile by a third process: put it back
                try:
                    os.link(aside, path)
                except FileExistsError:
                    pass
            aside.unlink()
            continue
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(me), handle)
        return me
    found = read(run_dir)
    raise Locked(run_dir, found or Holder(pid=0, host="?", job_id=None, since="?"))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def release(run_dir: Path, me: Holder) -> None:
    """Remove the lock if this process still holds it."""
    found = read(run_dir)
    if found is not None and (found.pid, found.host, found.since) == (me.pid, me.host, me.since):
        try:
            (Path(run_dir) / LOCK_FILE).unlink()
        except FileNotFoundError:
            pass
