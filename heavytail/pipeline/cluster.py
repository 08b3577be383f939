"""What the grid asks a SLURM cluster: can it take these jobs, and what state are its jobs in.

Only the client commands every cluster has are used (``sinfo``, ``squeue``): many small clusters run
without an accounting database, where ``sacct`` (what submitit polls) fails on every call. ``squeue
--states=all`` still reports a finished job's end state (COMPLETED, CANCELLED, TIMEOUT, ...) for
``MinJobAge`` seconds after it ends (300 by default); after that a job is gone, and the grid falls back
to what the job itself wrote (submitit's result file, the run folder's execution record).

Every problem the user can fix (no ``sbatch``, an unknown partition, more cores, memory, GPUs or time
than the partition's nodes offer) is a :class:`ValueError` with one line that says what was asked and
what is allowed, raised before anything is submitted.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable

# States in which a job still holds, or will again hold, its run folder.
ACTIVE_STATES = ("PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING",
                 "COMPLETING", "SUSPENDED", "RESIZING", "STAGE_OUT", "SIGNALING", "PREEMPTED")
CANCELLED = "CANCELLED"
_TIMEOUT_S = 30


def _command(args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except FileNotFoundError as err:
        raise ValueError(f"{args[0]} is not on the PATH: --executor slurm needs SLURM's client commands "
                         f"(run on a cluster login node, or use --executor local)") from err
    except subprocess.TimeoutExpired as err:
        raise ValueError(f"{' '.join(args)} did not answer in {_TIMEOUT_S} s: is slurmctld up?") from err


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


# --------------------------------------------------------------------------------------------------
# Before submitting: does the partition exist and can its nodes hold one task?
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Partition:
    """A partition's name and what its largest node offers one task."""

    name: str
    default: bool
    cpus: int
    mem_mb: int
    gpus: int
    max_time_min: int | None  # None: no limit

    def describe(self) -> str:
        limit = "no time limit" if self.max_time_min is None else f"time limit {self.max_time_min} min"
        return (f"partition {self.name!r}: nodes with up to {self.cpus} CPUs, {self.mem_mb // 1024} GB memory, "
                f"{self.gpus} GPUs, {limit}")


def _gpus(gres: str) -> int:
    """GPUs in a node's GRES string: ``gpu:4``, ``gpu:a100:4(S:0-1)``, ``gpu:a100:2,gpu:v100:2``, ``(null)``."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu":
            count = parts[-1] if len(parts) > 1 else "1"
            total += int(count) if count.isdigit() else 1
    return total


def _minutes(limit: str) -> int | None:
    """A SLURM time limit (``infinite``, ``30``, ``1:00:00``, ``2-00:00:00``, ``UNLIMITED``) in minutes."""
    limit = limit.strip().lower()
    if limit in ("infinite", "unlimited", "n/a", ""):
        return None
    days = 0
    if "-" in limit:
        day, limit = limit.split("-", 1)
        days = int(day)
    parts = [int(p) for p in limit.split(":")]
    if len(parts) == 1:  # "minutes", or "days-hours"
        hours, minutes, seconds = (parts[0], 0, 0) if days else (0, parts[0], 0)
    elif days:  # days-hours:minutes[:seconds]
        hours, minutes, seconds = (parts + [0])[:3]
    else:  # minutes:seconds or hours:minutes:seconds
        hours, minutes, seconds = [0] * (3 - len(parts)) + parts
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def partitions() -> dict[str, Partition]:
    """Every partition ``sinfo`` lists, with its largest node's resources."""
    if shutil.which("sbatch") is None:
        raise ValueError("sbatch is not on the PATH: --executor slurm needs a SLURM cluster "
                         "(run on a login node, or use --executor local / submitit-local)")
    done = _command(["sinfo", "-h", "-N", "-o", "%P|%c|%m|%G|%l"])
    if done.returncode != 0:
        raise ValueError(f"SLURM does not answer (sinfo: {_last_line(done.stderr)})")
    found: dict[str, Partition] = {}
    for line in done.stdout.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5:
            continue
        name, cpus, mem, gres, limit = fields
        default = name.endswith("*")
        name = name.rstrip("*")
        cpus_i = int(re.sub(r"\D.*", "", cpus) or 0)
        mem_i = int(re.sub(r"\D.*", "", mem) or 0)
        node = Partition(name, default, cpus_i, mem_i, _gpus(gres), _minutes(limit))
        old = found.get(name)
        if old is not None:  # one line per node: keep the largest of each resource
            node = Partition(name, default or old.default, max(cpus_i, old.cpus), max(mem_i, old.mem_mb),
                             max(node.gpus, old.gpus), node.max_time_min)
        found[name] = node
    return found


def check_resources(partition: str | None, cpus_per_task: int, mem_gb: int, gpus_per_node: int,
                    timeout_min: int) -> Partition:
    """The partition the jobs will go to, after checking one task fits on one of its nodes."""
    known = partitions()
    if not known:
        raise ValueError("sinfo lists no partition: this SLURM cluster has no nodes to run on")
    if partition is None:
        defaults = [p for p in known.values() if p.default]
        if not defaults:
            raise ValueError(f"slurm.partition is not set and the cluster has no default partition; "
                             f"set one of: {', '.join(sorted(known))}")
        chosen = defaults[0]
    elif partition not in known:
        raise ValueError(f"slurm.partition={partition!r} does not exist on this cluster; "
                         f"partitions: {', '.join(sorted(known))}")
    else:
        chosen = known[partition]
    asked = []
    if cpus_per_task > chosen.cpus:
        asked.append(f"cpus_per_task={cpus_per_task}")
    if mem_gb * 1024 > chosen.mem_mb:
        asked.append(f"mem_gb={mem_gb}")
    if gpus_per_node > chosen.gpus:
        asked.append(f"gpus_per_node={gpus_per_node}")
    if chosen.max_time_min is not None and timeout_min > chosen.max_time_min:
        asked.append(f"timeout_min={timeout_min}")
    if asked:
        raise ValueError(f"slurm: {', '.join(asked)} exceeds what {chosen.describe()} offers; "
                         f"lower it in the grid file's slurm section or choose another partition")
    return chosen


# --------------------------------------------------------------------------------------------------
# After submitting: job states without sacct
# --------------------------------------------------------------------------------------------------
def job_states(job_ids: Iterable[str]) -> dict[str, str]:
    """``{job id: state}`` for the jobs SLURM still knows (array tasks as ``<array>_<task>``).

    A job missing from the answer has left the controller's memory (it ended more than ``MinJobAge``
    ago) or never existed. Raises :class:`ValueError` when squeue itself fails.
    """
    ids = sorted({str(j) for j in job_ids})
    if not ids:
        return {}
    bases = sorted({j.split("_")[0] for j in ids})
    done = _command(["squeue", "-h", "-r", "--states=all", "-o", "%i|%T", "--jobs", ",".join(bases)])
    if done.returncode != 0:
        if "invalid job id" in (done.stderr or "").lower():
            return {}  # none of them is known any more
        raise ValueError(f"squeue failed: {_last_line(done.stderr)}")
    states = {}
    for line in done.stdout.splitlines():
        if "|" in line:
            job, state = line.strip().split("|", 1)
            states[job] = state.split()[0] if state else "UNKNOWN"
    return {j: states[j] for j in ids if j in states}


def is_active(state: str) -> bool:
    return state.split()[0].rstrip("+") in ACTIVE_STATES


def current_job_id(environ) -> str | None:
    """This process's SLURM job id as squeue spells it (``<array>_<task>`` for an array task)."""
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return environ.get("SLURM_JOB_ID")


class _OncePerKind(logging.Filter):
    """Lets through the first 'sacct error' warning of submitit's status poller and drops the rest, so a
    cluster without accounting does not print one warning per poll."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "sacct" not in record.getMessage():
            return True
        if self.seen:
            return False
        self.seen = True
        record.msg = f"{record.getMessage()} (further sacct errors are not shown; states come from squeue)"
        record.args = ()
        return True


def quiet_sacct_warnings() -> None:
    """Install the filter on submitit's logger (once)."""
    logger = logging.getLogger("submitit")
    if not any(isinstance(f, _OncePerKind) for f in logger.filters):
        logger.addFilter(_OncePerKind())
