"""What the CPU benchmark scripts share: child processes that see training's threads and allocator, interleaved
timing, peak-memory passes, and the JSON record under ``benchmarks/results/``.

Timing and memory are separate passes because they need opposite allocators:

- time: glibc's default allocator, the one training runs under (it keeps freed large blocks and reuses them,
  so a step does not pay fresh page faults for every tile). The variants compared take turns, one call each
  per round (A, B, A, B, ...), so a noisy neighbour on the shared cores slows each alike; a ratio is the median
  over rounds of the two calls' ratio within one round.
- memory: a fresh process per point with ``MALLOC_MMAP_THRESHOLD_=131072``: every block of 128 KiB or more is
  its own mapping and goes back to the OS when freed, so the peak resident set (``VmHWM`` after resetting it
  through ``/proc/self/clear_refs``) tracks the live tensors rather than the allocator's retained heap. The
  number is that peak minus the resident set before the call (the memory the call added).

Threads are set the way the grid sets them for a training worker (OMP/MKL/OpenBLAS variables in the child's
environment, read by torch at start-up), and ``torch.set_num_threads`` besides.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# The grid's own list (heavytail.pipeline.configuration.THREAD_VARIABLES), restated here so that importing this
# module stays light (the pipeline imports papermill's helpers).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
MMAP_THRESHOLD = "131072"
TIMING_METHOD = ("glibc default allocator (as training), variants interleaved one call each per round; ratio = "
                 "median over rounds of (variant / baseline) wall time within the round; cpu_ratio: the same for the "
                 "process's CPU time (all threads), which a neighbour taking the core away does not inflate")
MEMORY_METHOD = ("fresh process per point with MALLOC_MMAP_THRESHOLD_=131072, after one warm-up call (compiles "
                 "included): VmHWM - VmRSS before the measured call (peak reset via /proc/self/clear_refs), MiB")


def child_env(threads: int | None, memory: bool = False) -> dict[str, str]:
    """The environment of a child process: ``threads`` for torch's pools, the checkout of the package this process
    imports first on the path, and the mmap threshold only for a memory pass (a timing pass must not inherit one
    from the caller's shell)."""
    env = dict(os.environ)
    # The checkout whose package this process imports goes first: with PYTHONPATH=<another worktree> the children
    # measure that worktree's package (the scripts themselves may come from a newer checkout).
    env["PYTHONPATH"] = str(package_root()) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if memory:
        env["MALLOC_MMAP_THRESHOLD_"] = MMAP_THRESHOLD
    if threads:
        for var in THREAD_VARIABLES:
            env[var] = str(threads)
    return env


def run_child(args: list[str], env: dict[str, str], timeout: float) -> dict:
    """Run ``python args...`` and return the JSON object of its last stdout line that holds one, or
    ``{"error": ...}`` with the last line of its stderr."""
    try:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {timeout:.0f}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            res = json.loads(line)
            measured = res.get("package", {}).get("root")
            if measured is not None and Path(measured) != package_root():
                return {"error": f"the child imported heavytail from {measured}, not from {package_root()}"}
            res.pop("package", None)  # checked: the header's ``package`` holds it once
            return res
    return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]}


def set_threads(threads: int | None) -> int:
    import torch

    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 2) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds per call of each function (``{"wall": [...], "cpu": [...]}``), ``rounds`` calls each,
    the functions taking turns call by call after ``warmup`` untimed calls each (compiles, allocator)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            times[name]["wall"].append(time.perf_counter() - t0)
            times[name]["cpu"].append(time.process_time() - c0)
    return times


def summarize(times: dict[str, dict[str, list[float]]], baseline: str) -> dict[str, dict[str, float]]:
    """Per variant: median and minimum wall seconds, and its ratio to ``baseline`` (the median over rounds of the
    ratio within each round, and the ratio of the minima); the median CPU seconds and CPU-time ratio likewise."""
    base = times[baseline]
    out = {}
    for name, ts in times.items():
        wall, cpu = ts["wall"], ts["cpu"]
        out[name] = {
            "median_s": statistics.median(wall),
            "min_s": min(wall),
            "ratio": statistics.median(t / b for t, b in zip(wall, base["wall"])),
            "ratio_of_min": min(wall) / min(base["wall"]),
            "cpu_median_s": statistics.median(cpu),
            "cpu_ratio": statistics.median(t / b for t, b in zip(cpu, base["cpu"])),
            "rounds": len(wall),
        }
    return out


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_extra_mib(fn: Callable[[], object]) -> float:
    """Peak resident memory ``fn()`` adds, in MiB (see the module docstring for the allocator it needs)."""
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark to the current RSS
    before = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - before) / 1024


def package_root() -> Path:
    """The checkout that holds the ``heavytail`` package this process imports (found without importing it): the
    code measured, which need not be the checkout of these scripts (``PYTHONPATH=<worktree> python
    benchmarks/...`` measures that worktree's package with these scripts)."""
    spec = importlib.util.find_spec("heavytail")
    if spec is None or spec.origin is None:
        raise RuntimeError("heavytail is not importable")
    return Path(spec.origin).resolve().parents[1]


def package_state() -> dict:
    """The package measured: its checkout, commit, and whether its tracked files under ``heavytail/`` differ from
    that commit (``dirty``; the benchmark scripts' own edits do not count)."""
    from heavytail.harness.provenance import code_state

    root = package_root()
    return {"root": str(root), **code_state(root, "heavytail")}


def child_json(payload: dict) -> str:
    """A child's result line: ``payload`` with the package it imported (``run_child`` checks it is the parent's)."""
    import heavytail

    state = package_state()
    if Path(heavytail.__file__).resolve().parents[1] != Path(state["root"]):
        raise RuntimeError(f"heavytail imported from {heavytail.__file__}, not from {state['root']}")
    return json.dumps({**payload, "package": state})


def header(script: str, argv: list[str]) -> dict:
    """What a result file records about its run: provenance of the package measured (commit and whether the tree
    is dirty, read from the checkout the imported ``heavytail`` lives in, torch, machine with its CPU model,
    date), the package's checkout and whether its ``heavytail/`` is dirty (``package``), the commit of these
    scripts (``scripts``), the command line and the load average at the start."""
    from heavytail.harness.provenance import code_state, record

    prov = record()
    package = package_state()
    if prov["commit"] != package["commit"]:
        raise RuntimeError(f"provenance names commit {prov['commit']}, the imported package is at {package['commit']}")
    scripts = {"root": str(ROOT), **code_state(ROOT, "benchmarks", untracked=True)}
    return {"script": script, "argv": argv, "provenance": prov, "package": package, "scripts": scripts,
            "load_average_start": os.getloadavg(), "timing_method": TIMING_METHOD, "memory_method": MEMORY_METHOD}


def write_json(stem: str, payload: dict, out: Path | None = None) -> Path:
    """Write ``payload`` (with the load average at the end added) to ``out`` or to
    ``benchmarks/results/<stem>_<UTC date and time>.json``; returns the path."""
    payload = {**payload, "load_average_end": os.getloadavg()}
    if out is None:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        out = RESULTS / f"{stem}_{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    return out


def results_index(results: Path = RESULTS) -> str:
    """``benchmarks/results/INDEX.md``: every record kept, with the package commit it measured (a comparison:
    the commits of its two sides; a markdown table: its JSON's). Only the latest record per benchmark, the
    records the docs cite and the inputs of the latest comparison are kept; the others are in git history."""
    def commits(path: Path) -> str:
        data = json.loads(path.read_text())
        if "before" in data and "after" in data:
            sides = [sorted({f["commit"][:7] for f in data[s]}) for s in ("before", "after")]
            return f"before {', '.join(sides[0])}, after {', '.join(sides[1])}"
        state = data.get("package") or data.get("provenance") or data.get("meta") or {}  # gpu_check: meta
        return (state.get("commit") or "not recorded")[:7]

    rows = []
    for path in sorted(results.iterdir()):
        if path.name in ("README.md", "INDEX.md") or path.suffix not in (".json", ".md"):
            continue
        record = path if path.suffix == ".json" else path.with_suffix(".json")
        rows.append(f"| `{path.name}` | {commits(record) if record.is_file() else 'not recorded'} |")
    return ("# Benchmark records kept\n\nThe latest record per benchmark, the records the docs cite, and the inputs "
            "of the latest comparison; earlier records are in git history (`git log -- benchmarks/results`). "
            "Written by `benchmarks/_bench.py` (`results_index`), checked by `tests/test_benchmarks.py`.\n\n"
            "| record | package commit |\n|---|---|\n" + "\n".join(rows) + "\n")
