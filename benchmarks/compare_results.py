"""A before/after table from the JSON records of ``bench_attention_cpu.py`` and ``bench_train_cpu.py``.

Each cell is ``before -> after`` of one ratio, each measured against its baseline within the same run (so the
before and after runs may have had different machine load): the training step over softmax's, attention
forward+backward over SDPA's, and the extra memory of attention forward+backward over SDPA's. Several files of
one script on one side are pooled: a ratio is then the median over all their rounds of the ratio within a round. Ratios are printed as ``CPU (wall)``: the CPU-time ratio (process CPU
time, the primary measure on shared cores, where a neighbour's time slice inflates wall time at random) and the
wall-time ratio in brackets. A last table checks the "after" records against issue 20's targets (step <= 1.15x
softmax, attention <= 1.3x SDPA, extra memory <= 4x SDPA's and linear in N). Only the ``--backend`` (default
``flash``, what ``auto`` uses on CPU) of the attention records is compared. Writes markdown and JSON.

    python benchmarks/compare_results.py --before A.json B.json --after C.json D.json --out benchmarks/results/x
        [--after-memory M.json]   # a memory run: its memory only, its few timing rounds left out of the pool
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

STEP_TARGET, ATTENTION_TARGET, MEMORY_TARGET = 1.15, 1.3, 4.0
# Extra memory counts as linear in N when it grows no faster than N^1.25 between the smallest and largest N
# measured (quadratic scores would grow as N^2).
LINEAR_EXPONENT = 1.25


def _pooled(pairs: list[tuple[dict, dict]]) -> dict:
    """One summary of a variant against its baseline over every run given: ``pairs`` holds, per run, the
    variant's and the baseline's ``{"wall": [...], "cpu": [...]}`` seconds per round. The ratios are the median
    over all rounds of all runs of the ratio within a round, as ``_bench.summarize`` computes them for one run."""
    wall = [t / b for v, base in pairs for t, b in zip(v["wall"], base["wall"])]
    cpu = [t / b for v, base in pairs for t, b in zip(v["cpu"], base["cpu"])]
    return {"ratio": statistics.median(wall), "cpu_ratio": statistics.median(cpu),
            "ratio_of_min": min(t for v, _ in pairs for t in v["wall"]) / min(t for _, b in pairs for t in b["wall"]),
            "median_s": statistics.median(t for v, _ in pairs for t in v["wall"]),
            "cpu_median_s": statistics.median(t for v, _ in pairs for t in v["cpu"]),
            "rounds": len(wall), "runs": len(pairs)}


def _load(paths: list[Path], backend: str, memory_only: list[Path] = ()) -> tuple[dict, dict, dict, list[dict]]:
    """Attention time summaries by (threads, n, d, kernel), memory by (threads, n, d, kernel) as (MiB, SDPA's
    MiB), train summaries by (threads, n, kernel) as {"step": ..., "attention": ...}, and each file's provenance.
    A point measured in several files is pooled (``_pooled``); memory from the last file that has it. Files in
    ``memory_only`` give their memory alone (a memory run's few timing rounds would otherwise join the pool)."""
    attn_runs, train_runs, mem, prov = {}, {}, {}, []
    for path in [*paths, *memory_only]:
        rec = json.loads(path.read_text())
        package = rec.get("package") or {}
        timed = path not in memory_only
        prov.append({"file": str(path), "memory_only": not timed, "script": rec["script"], "argv": rec["argv"],
                     **rec["provenance"],
                     "package_root": package.get("root"), "package_dirty": package.get("dirty"),
                     "load_average": (rec.get("load_average_start", [None])[0], rec.get("load_average_end", [None])[0]),
                     "threads": sorted({r["threads"] for r in rec.get("time", [])})})

        def kernel_of(variant: str) -> str | None:
            if variant == "sdpa":
                return "sdpa"
            kernel, _, b = variant.partition("/")
            return kernel if b == backend else None

        if rec["script"] == "bench_attention_cpu":
            times = {(r["threads"], r["n"], r["d"], kernel_of(r["variant"])): r["times_s"]
                     for r in (rec["time"] if timed else [])}
            for key, t in times.items():
                if key[3] is not None:
                    attn_runs.setdefault(key, []).append((t, times[(*key[:3], "sdpa")]))
            base = {(r["threads"], r["n"], r["d"]): r.get("extra_mib") for r in rec["memory"] if r["variant"] == "sdpa"}
            for r in rec["memory"]:
                k = kernel_of(r["variant"])
                if "extra_mib" in r and k not in (None, "sdpa"):
                    mem[(r["threads"], r["n"], r["d"], k)] = (r["extra_mib"], base.get((r["threads"], r["n"], r["d"])))
        elif rec["script"] == "bench_train_cpu" and timed:
            rows = {(r["threads"], r["n"], r["kernel"]): r for r in rec["time"]}
            for key, r in rows.items():
                soft = rows[(*key[:2], "softmax")]
                runs = train_runs.setdefault(key, {"step": [], "attention": []})
                runs["step"].append((r["step_times_s"], soft["step_times_s"]))
                runs["attention"].append((r["attention_times_s"], soft["attention_times_s"]))
    attn = {key: _pooled(pairs) for key, pairs in attn_runs.items()}
    train = {key: {part: _pooled(pairs) for part, pairs in runs.items()} for key, runs in train_runs.items()}
    return attn, mem, train, prov


def _ratio(r: dict | None) -> str:
    """``CPU (wall)`` ratio of one summary, or the wall ratio alone for records without CPU times."""
    if r is None:
        return "-"
    if "cpu_ratio" in r:
        return f"{r['cpu_ratio']:.2f} ({r['ratio']:.2f})"
    return f"({r['ratio']:.2f})"


def _pair(a: str, b: str) -> str:
    return f"{a} -> {b}"


def _summary(r: dict | None) -> dict | None:
    return None if r is None else {k: r.get(k) for k in ("cpu_ratio", "ratio", "ratio_of_min", "median_s",
                                                         "cpu_median_s", "rounds", "runs")}


def _file_line(tag: str, p: dict) -> str:
    commit = (p.get("commit") or "unknown")[:9]
    load = ", ".join("-" if x is None else f"{x:.1f}" for x in p["load_average"])
    tag = f"{tag} (memory only)" if p.get("memory_only") else tag
    return (f"- {tag}: `{p['file']}` ({p['script']}, package commit {commit} from {p.get('package_root') or '?'}, "
            f"dirty {p.get('package_dirty', p.get('dirty'))}, threads {p['threads']}, {p['date']}, "
            f"load average start/end {load})")


def _targets(attn: dict, mem: dict, train: dict, kernels: list[str]) -> tuple[list[str], dict]:
    """The after records against issue 20's targets: per kernel, the worst ratio over the points measured."""
    lines = ["## Issue 20's targets, after", "",
             f"Worst point per kernel, CPU-time ratio (wall in brackets). Step: <= {STEP_TARGET}x softmax; attention: "
             f"<= {ATTENTION_TARGET}x SDPA (the (1, 1, N, d) benchmark); memory: <= {MEMORY_TARGET}x SDPA's extra "
             f"memory, and linear in N (growth exponent between the smallest and largest N <= {LINEAR_EXPONENT}).", "",
             "| kernel | step (worst N) | met | attention (worst N, d) | met | memory x SDPA (worst) | met | "
             "memory growth exponent | met |", "|---|---:|---|---:|---|---:|---|---:|---|"]
    out = {}

    def verdict(value: float | None, limit: float) -> str:
        return "-" if value is None else ("yes" if value <= limit else "**no**")

    for k in kernels:
        steps = [(key[1], r["step"]) for key, r in train.items() if key[2] == k]
        attns = [((key[1], key[2]), r) for key, r in attn.items() if key[3] == k]
        mems = {key[1:3]: v for key, v in mem.items() if key[3] == k}
        worst_step = max(steps, key=lambda x: x[1]["cpu_ratio"], default=None)
        worst_attn = max(attns, key=lambda x: x[1]["cpu_ratio"], default=None)
        mem_ratios = [(nd, m / b) for nd, (m, b) in mems.items() if b]
        worst_mem = max(mem_ratios, key=lambda x: x[1], default=None)
        exponents = []
        for d in {d for _, d in mems}:
            ns = sorted(n for n, dd in mems if dd == d)
            if len(ns) > 1 and mems[(ns[0], d)][0] > 0:
                exponents.append(math.log(mems[(ns[-1], d)][0] / mems[(ns[0], d)][0]) / math.log(ns[-1] / ns[0]))
        exponent = max(exponents, default=None)
        row = {
            "step": worst_step and {"n": worst_step[0], **_summary(worst_step[1])},
            "step_met": worst_step and worst_step[1]["cpu_ratio"] <= STEP_TARGET,
            "attention": worst_attn and {"n": worst_attn[0][0], "d": worst_attn[0][1], **_summary(worst_attn[1])},
            "attention_met": worst_attn and worst_attn[1]["cpu_ratio"] <= ATTENTION_TARGET,
            "memory_x_sdpa": worst_mem and {"n": worst_mem[0][0], "d": worst_mem[0][1], "ratio": worst_mem[1]},
            "memory_met": worst_mem and worst_mem[1] <= MEMORY_TARGET,
            "memory_growth_exponent": exponent,
            "memory_linear": None if exponent is None else exponent <= LINEAR_EXPONENT,
        }
        out[k] = row
        cells = [
            "-" if worst_step is None else f"{_ratio(worst_step[1])} (N = {worst_step[0]})",
            verdict(worst_step and worst_step[1]["cpu_ratio"], STEP_TARGET),
            "-" if worst_attn is None else f"{_ratio(worst_attn[1])} (N = {worst_attn[0][0]}, d = {worst_attn[0][1]})",
            verdict(worst_attn and worst_attn[1]["cpu_ratio"], ATTENTION_TARGET),
            "-" if worst_mem is None else f"{worst_mem[1]:.1f} (N = {worst_mem[0][0]})",
            verdict(worst_mem and worst_mem[1], MEMORY_TARGET),
            "-" if exponent is None else f"{exponent:.2f}",
            verdict(exponent, LINEAR_EXPONENT),
        ]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines, out


def build(before: list[Path], after: list[Path], backend: str = "flash", before_memory: list[Path] = (),
          after_memory: list[Path] = ()) -> tuple[str, dict]:
    b_attn, b_mem, b_train, b_prov = _load(before, backend, before_memory)
    a_attn, a_mem, a_train, a_prov = _load(after, backend, after_memory)
    kernels = list(dict.fromkeys(k for (_, _, _, k) in a_attn if k != "sdpa"))
    kernels += [k for (_, _, k) in a_train if k not in kernels and k != "softmax"]
    out = {"before": b_prov, "after": a_prov, "backend": backend, "train_step": {}, "train_attention": {},
           "attention": {}, "memory": {}}
    lines = ["# Flash path before/after", "",
             "Ratios `before -> after`, each as `CPU (wall)`: the CPU-time ratio (process CPU time, primary: on "
             "shared cores a neighbour's time slice inflates wall time at random) and the wall-time ratio in "
             "brackets; each is the median over rounds (of every file on that side) of the ratio to the baseline "
             "measured in the same round. Files:", ""]
    lines += [_file_line("before", p) for p in b_prov] + [_file_line("after", p) for p in a_prov]
    rounds = sorted({r["rounds"] for side in (b_attn, a_attn) for r in side.values()}
                    | {r[part]["rounds"] for side in (b_train, a_train) for r in side.values() for part in r})
    lines += ["", f"Rounds per ratio (all files pooled): {', '.join(map(str, rounds))}.", ""]

    cols = sorted({(t, n) for (t, n, _) in a_train})
    if cols:
        head = ["| kernel | " + " | ".join(f"N = {n}, {t} thr" for t, n in cols) + " |", "|---|" + "---:|" * len(cols)]
        for title, part, key in (("## Whole training step over softmax's", "step", "train_step"),
                                 ("Attention forward+backward alone at the model's shapes, over softmax's (SDPA), "
                                  "same runs:", "attention", "train_attention")):
            lines += [title, ""] + head
            for k in kernels:
                cells = []
                for t, n in cols:
                    pb, pa = b_train.get((t, n, k)), a_train.get((t, n, k))
                    cells.append(_pair(_ratio(pb and pb[part]), _ratio(pa and pa[part])))
                    out[key][f"{k} N={n} threads={t}"] = {"before": _summary(pb and pb[part]),
                                                          "after": _summary(pa and pa[part])}
                lines.append(f"| {k} | " + " | ".join(cells) + " |")
            lines.append("")
        soft = [f"N = {n}, {t} thr: {_s(b_train, (t, n, 'softmax'))} -> {_s(a_train, (t, n, 'softmax'))}"
                for t, n in cols]
        lines += ["Softmax's step, median CPU s (wall s): " + "; ".join(soft) + ".", ""]

    cols = sorted({(t, n, d) for (t, n, d, _) in a_attn})
    if cols:
        lines += [f"## Attention forward+backward over SDPA's, (1, 1, N, d), backend {backend}", "",
                  "| kernel | " + " | ".join(f"N = {n}, d = {d}, {t} thr" for t, n, d in cols) + " |",
                  "|---|" + "---:|" * len(cols)]
        for k in kernels:
            cells = []
            for t, n, d in cols:
                rb, ra = b_attn.get((t, n, d, k)), a_attn.get((t, n, d, k))
                cells.append(_pair(_ratio(rb), _ratio(ra)))
                out["attention"][f"{k} N={n} d={d} threads={t}"] = {"before": _summary(rb), "after": _summary(ra)}
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        lines.append("")

    cols = sorted({(t, n, d) for (t, n, d, _) in a_mem})
    if cols:
        lines += ["## Extra memory of attention forward+backward: MiB (x SDPA's)", "",
                  "| kernel | " + " | ".join(f"N = {n}, d = {d}, {t} thr" for t, n, d in cols) + " |",
                  "|---|" + "---:|" * len(cols)]

        def cell(m):
            return "-" if m is None else f"{m[0]:.1f} ({m[0] / m[1]:.1f}x)" if m[1] else f"{m[0]:.1f}"

        for k in kernels:
            cells = []
            for t, n, d in cols:
                mb, ma = b_mem.get((t, n, d, k)), a_mem.get((t, n, d, k))
                cells.append(_pair(cell(mb), cell(ma)))
                out["memory"][f"{k} N={n} d={d} threads={t}"] = {"before_mib": mb and mb[0], "after_mib": ma and ma[0],
                                                                  "sdpa_before_mib": mb and mb[1],
                                                                  "sdpa_after_mib": ma and ma[1]}
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        lines.append("")
    target_lines, out["targets_after"] = _targets(a_attn, a_mem, a_train, kernels)
    lines += target_lines
    return "\n".join(lines) + "\n", out


def _s(train: dict, key: tuple) -> str:
    r = train.get(key)
    return "-" if r is None else f"{r['step']['cpu_median_s']:.3f} ({r['step']['median_s']:.3f})"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, nargs="+", required=True)
    p.add_argument("--after", type=Path, nargs="+", required=True)
    p.add_argument("--before-memory", type=Path, nargs="*", default=[], help="attention records read for memory only")
    p.add_argument("--after-memory", type=Path, nargs="*", default=[], help="attention records read for memory only")
    p.add_argument("--backend", default="flash", help="the attention records' backend to compare (default flash)")
    p.add_argument("--out", type=Path, required=True, help="path without suffix: writes .md and .json")
    args = p.parse_args(argv)
    md, data = build(args.before, args.after, args.backend, args.before_memory, args.after_memory)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(md)
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    print(md)


if __name__ == "__main__":
    main()
