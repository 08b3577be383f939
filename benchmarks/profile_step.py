"""Where a training step spends its time, per kernel, next to softmax: torch.profiler on whole CPU training steps.

Runs ``heavytail.harness.train.training_step`` and the optimizer step (as ``benchmarks/bench_train_cpu.py`` does)
at one trial per step, D = 32, 2 blocks (the ``base`` of params/grid_cpu.yaml), N in {1024, 4096}, 1 and 2
threads (one process per thread count, threads set as the grid sets them), the kernels taking turns step by step.
Every profiled op's own (self) CPU time is attributed to

- a region of the step: data draw, attention forward (``kernel_attention`` inside the model), the rest of the
  model's forward, the energy distance (eq. 10; value and gradient are both computed in its forward), attention
  backward (the autograd node of the flash path or of SDPA), the rest of the backward, gradient clipping, the
  AdamW step, and anything else;
- a class of op: matmul (``mm``/``bmm``/``addmm``/``baddbmm``), SDPA's fused kernel, the fused C++ flash loop
  (``heavytail.science.flash_native``: scores, weight chains and products in one call), compiled elementwise
  (inductor graphs: the kernel's ``log g`` / ``g`` / ``dlog g`` chains), torch.compile's per-call dispatch (guards,
  wrappers), allocation and fills (``empty*``, ``zeros*``, ``fill_``, ``zero_``), and other eager ops.

Besides the profile, each kernel's minor page faults per step are counted (without the profiler) and priced at the
cost of one fault measured in the same process, since first-touch page faults of freshly mapped tiles do not
appear as an op of their own. The FLOP count of a step is the matmul work, counted from the shapes: attention
14 N^2 d per block and trial (forward q k^T and A v: 4 N^2 d; backward recomputes q k^T and computes dP, dV, dQ,
dK: 10 N^2 d; SDPA's CPU backward recomputes the same way), the linear layers 3 x (8 N D^2 + 4 N D d_ff) per block
(forward and twice that in backward). The achieved rate is set against a plain float32 matmul measured in the
same process: a square 1024^3 product and the attention-shaped (N x d) @ (d x N) score product.

    python benchmarks/profile_step.py            # writes benchmarks/results/profile_<date>.md and .json
    python benchmarks/profile_step.py --n 1024 --threads 1 --rounds 2

The profiler adds a few microseconds per op: read shares and differences, not absolute times.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import resource
import statistics
import sys
import time
import types
from pathlib import Path

import _bench

REGIONS = ("data", "attention forward", "model forward (rest)", "energy distance", "attention backward",
           "backward (rest)", "clip", "optimizer", "other")
CLASSES = ("matmul", "sdpa kernel", "native flash loop", "compiled elementwise", "compile dispatch", "alloc+fill",
           "other ops")
_MATMUL = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
_ALLOC = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::zeros", "aten::zeros_like", "aten::zero_",
          "aten::fill_", "aten::new_empty", "aten::new_zeros", "aten::full", "aten::ones_like", "aten::full_like",
          "aten::new_empty_strided", "aten::resize_"}
_ATTN_BACKWARD = ("_FlashKernelAttentionBackward", "_NativeFlashBackward", "ScaledDotProductFlashAttentionForCpuBackward",
                  "CheckpointFunction")


def _op_class(name: str) -> str:
    if name in _MATMUL:
        return "matmul"
    if name.startswith("aten::_scaled_dot_product_flash_attention"):
        return "sdpa kernel"
    if name.startswith("heavytail::native_flash"):
        return "native flash loop"
    if name.startswith("## Call CompiledFxGraph"):
        return "compiled elementwise"
    if name.startswith(("Torch-Compiled Region", "TorchDynamo", "Pregraph bytecode", "CompiledFunction",
                        "## Call ", "torch_compile", "Compiled")):
        return "compile dispatch"
    if name in _ALLOC:
        return "alloc+fill"
    return "other ops"


_LABELS = {"step.data": "data", "step.attention_forward": "attention forward",
           "step.model_forward": "model forward (rest)", "step.energy_distance": "energy distance", "step.clip": "clip",
           "step.optimizer": "optimizer"}


def _region(event) -> str:
    """The step region an event belongs to: its nearest labelled ancestor (itself included)."""
    e = event
    while e is not None:
        name = e.name
        if name in _LABELS:
            return _LABELS[name]
        if name.startswith("autograd::engine::evaluate_function:"):
            return "attention backward" if any(a in name for a in _ATTN_BACKWARD) else "backward (rest)"
        e = e.cpu_parent
    return "other"


def _flops(cfg) -> dict[str, float]:
    n, dm, dff, blocks, trials = cfg.n_points, cfg.d_model, cfg.d_ff, cfg.n_blocks, cfg.trials_per_step
    d_head = dm // cfg.n_heads
    attention = 14 * n * n * d_head * cfg.n_heads * blocks * trials
    linear = 3 * (8 * n * dm * dm + 4 * n * dm * dff) * blocks * trials
    return {"attention": attention, "linear": linear, "total": attention + linear}


def _matmul_rates(n: int, d: int, reps: int = 5) -> dict[str, float]:
    import torch

    def rate(a, b):
        a @ b
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            a @ b
            ts.append(time.perf_counter() - t0)
        return 2 * a.shape[0] * a.shape[1] * b.shape[1] / statistics.median(ts) / 1e9

    x = torch.randn(1024, 1024)
    q, k = torch.randn(n, d), torch.randn(d, n)
    return {"square_1024_gflops": rate(x, x), f"scores_{n}x{d}x{n}_gflops": rate(q, k)}


def _fault_cost_s() -> float:
    """Seconds per minor page fault: touch 256 MiB of fresh memory."""
    import torch

    best = float("inf")
    for _ in range(3):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        torch.empty(64 * 2**20).fill_(1.0)
        dt = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        if faults > 1000:
            best = min(best, dt / faults)
    return best


def _fresh_code(fn):
    """A copy of ``fn`` with its own code object (so its own dynamo cache and recompile limit)."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _per_score_costs(n: int, d: int, kernels: list[str], reps: int = 30) -> dict[str, float]:
    """Nanoseconds per score, CPU time on one cache-resident (64 x n) tile, of what the attention of one kernel
    does per score: the score matmul q k^T, the weights' matmul A v, SDPA's whole forward+backward on (1, 1, n, d)
    (per score, for scale), and per kernel the flash path's fused elementwise chains (forward: row maximum,
    g(S)/g(m), row sum; backward: the weights again, (log g)', dS), compiled as the flash path compiles them, and
    the transcendental functions they are built from, eager; and per kernel the fused C++ loop's whole
    forward+backward on (1, n, d), timed in turns with SDPA's (its ratio to SDPA is the median over the pairs)."""
    import torch
    import torch.nn.functional as F

    from heavytail.science.kernels import get_kernel

    def cost(fn, elements):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(reps):
            t0 = time.thread_time()
            fn()
            ts.append(time.thread_time() - t0)
        return statistics.median(ts) / elements * 1e9

    rows, scale = 64, d ** -0.5
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(1, rows, d, generator=g), torch.randn(1, n, d, generator=g), torch.randn(1, n, d, generator=g)
    s = torch.bmm(q, k.transpose(1, 2)) * 4
    dp = torch.randn(1, rows, n, generator=g)
    el = rows * n
    out = {"matmul q k^T": cost(lambda: torch.bmm(q, k.transpose(1, 2)), el), "matmul A v": cost(lambda: torch.bmm(s, v), el)}
    q4, k4, v4 = (torch.randn(1, 1, n, d, generator=g).requires_grad_() for _ in range(3))
    go = torch.randn(1, 1, n, d, generator=g)
    out["SDPA fwd+bwd (all of it)"] = cost(lambda: F.scaled_dot_product_attention(q4, k4, v4).backward(go), n * n)
    x = s.abs()
    for name, fn in (("exp", torch.exp), ("log", torch.log), ("log1p", torch.log1p), ("reciprocal", torch.reciprocal)):
        out[f"eager {name}"] = cost(lambda fn=fn: fn(x), el)
    from heavytail.science import flash_native

    def sdpa_and(fn):
        """``fn`` and SDPA's forward+backward taking turns: ns per score of ``fn``, and the median over calls of
        fn / SDPA within a pair (a neighbour's slowdown hits both alike)."""
        sdpa = lambda: F.scaled_dot_product_attention(q4, k4, v4).backward(go)  # noqa: E731
        for _ in range(3):
            fn()
            sdpa()
        pairs = []
        for _ in range(reps):
            t0 = time.thread_time()
            fn()
            t1 = time.thread_time()
            sdpa()
            pairs.append((t1 - t0, time.thread_time() - t1))
        return (statistics.median(a for a, _ in pairs) / (n * n) * 1e9,
                statistics.median(a / b for a, b in pairs))

    for name in kernels:
        kern = get_kernel(name)
        if flash_native.native_flash(q4[0], k4[0], v4[0], kern) is not None:
            out[f"{name} C++ loop fwd+bwd (all of it)"], out[f"{name} C++ loop x SDPA (paired)"] = sdpa_and(
                lambda kern=kern: flash_native.native_flash(q4[0], k4[0], v4[0], kern).backward(go[0]))

        def fwd(s, kern=kern):
            m = s.amax(-1, keepdim=True) * scale
            lg = kern.log_g(m)
            row = kern.ratio_row(m, lg)
            p = kern.g_ratio(s * scale, lg, row)
            return p, p.sum(-1, keepdim=True), lg, row

        def bwd(s, dp, lg, row, inv, delta, kern=kern):
            ss = s * scale
            p = kern.g_ratio(ss, lg, row) * inv
            return p, p * (dp - delta) * kern.dlog_g(ss) * scale

        # A fresh code object per kernel and N: dynamo's recompile limit (8) is per code object, and one shared
        # ``fwd`` compiled for 7 kernels at two N silently ran eager from the 9th compile on.
        cf, cb = torch.compile(_fresh_code(fwd), dynamic=False), torch.compile(_fresh_code(bwd), dynamic=False)
        _, den, lg, row = fwd(s)
        inv, delta = den.reciprocal(), torch.randn(1, rows, 1, generator=g)
        out[f"{name} forward chain"] = cost(lambda cf=cf: cf(s), el)
        out[f"{name} backward chain"] = cost(
            lambda cb=cb, lg=lg, row=row, inv=inv, delta=delta: cb(s, dp, lg, row, inv, delta), el)
    return out


def profile_pass(args) -> dict:
    import torch
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    import heavytail.science.model as model_module
    from bench_train_cpu import base_config
    from heavytail import names
    from heavytail.harness.build import build_benchmark, build_model, build_optimizer
    from heavytail.harness.train import draw_batch, training_step
    from heavytail.science.metrics import energy_distance

    threads = _bench.set_threads(args.child)
    # Label the step's regions without changing what it runs: the model calls attention through its module's name,
    # training_step calls the loss it is given and torch.nn.utils.clip_grad_norm_.
    attend = model_module.kernel_attention

    def labelled_attention(*a, **kw):
        with record_function("step.attention_forward"):
            return attend(*a, **kw)

    clip = torch.nn.utils.clip_grad_norm_

    def labelled_clip(*a, **kw):
        with record_function("step.clip"):
            return clip(*a, **kw)

    def labelled_loss(*a, **kw):
        with record_function("step.energy_distance"):
            return energy_distance(*a, **kw)

    class Model(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, **kw):
            with record_function("step.model_forward"):
                return self.inner(x, **kw)

    model_module.kernel_attention = labelled_attention
    torch.nn.utils.clip_grad_norm_ = labelled_clip
    kernels = names.kernel_names() if not args.kernels else args.kernels
    out = {"threads": threads, "points": []}
    for n in args.n:
        cfg = base_config({"n_points": n})
        runs = {}
        for kernel in kernels:
            c = cfg.replace(kernel=kernel)
            torch.manual_seed(c.seed)
            model = build_model(c)
            opt, _ = build_optimizer(c, model)
            runs[kernel] = (c, Model(model), opt, build_benchmark(c), torch.Generator().manual_seed(c.seed))

        def step(kernel, runs=runs):
            c, model, opt, bench, gen = runs[kernel]
            with record_function("step.data"):
                x, y = draw_batch(bench, c, gen, torch.device("cpu"))
            training_step(model, opt, x, y, c, torch.device("cpu"), labelled_loss)
            with record_function("step.optimizer"):
                opt.step()

        for kernel in kernels:
            for _ in range(2):
                step(kernel)
        per_round = {k: [] for k in kernels}
        wall = {k: [] for k in kernels}
        for _ in range(args.rounds):
            for kernel in kernels:
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    t0 = time.perf_counter()
                    step(kernel)
                    wall[kernel].append(time.perf_counter() - t0)
                cell: dict[str, float] = {}
                for e in prof.events():
                    key = f"{_region(e)}|{_op_class(e.name)}"
                    cell[key] = cell.get(key, 0.0) + e.self_cpu_time_total / 1e6
                per_round[kernel].append(cell)
        # The median over rounds of each cell: a neighbour's time slice lands in whichever op is running, and the
        # median drops the round it hit.
        cells = {k: {key: statistics.median(c.get(key, 0.0) for c in rounds)
                     for key in set().union(*rounds)} for k, rounds in per_round.items()}
        faults, plain = {k: [] for k in kernels}, {k: [] for k in kernels}
        for _ in range(args.rounds):
            for kernel in kernels:
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t0 = time.perf_counter()
                step(kernel)
                plain[kernel].append(time.perf_counter() - t0)
                faults[kernel].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        out["points"].append({
            "n": n, "config": cfg.to_dict(), "flops": _flops(cfg), "matmul_rates": _matmul_rates(n, cfg.d_model),
            "fault_cost_s": _fault_cost_s(), "cells": cells,
            "per_score_ns": _per_score_costs(n, cfg.d_model // cfg.n_heads, kernels),
            "profiled_step_s": {k: statistics.median(v) for k, v in wall.items()},
            "step_s": {k: statistics.median(v) for k, v in plain.items()},
            "minor_faults_per_step": {k: statistics.median(v) for k, v in faults.items()},
        })
        print(f"threads {threads} N {n} done", file=sys.stderr, flush=True)
    return out


def _markdown(record: dict, passes: list[dict]) -> str:
    prov = record["provenance"]
    lines = [f"# Where a CPU training step spends its time ({prov['date'][:10]})", "",
             f"Generated by `benchmarks/profile_step.py` ({' '.join(record['argv']) or 'defaults'}). Commit "
             f"{prov['commit']} (dirty tree: {prov['dirty']}), torch {prov['torch']}, {prov['machine']}. "
             f"Load average at start {record['load_average_start'][0]:.1f} (2 shared cores: times are noisy, "
             "compare within a table).", "",
             "Seconds per step of self CPU time under torch.profiler, by region and op class (see the script's "
             "docstring); the `- softmax` column is the kernel's region total minus softmax's.", ""]
    for p in passes:
        for point in p["points"]:
            n, kernels = point["n"], list(point["cells"])
            flops = point["flops"]
            rates = point["matmul_rates"]
            lines += [f"## N = {n}, {p['threads']} thread(s)", ""]
            lines.append(f"Matmul work per step: {flops['total'] / 1e9:.2f} GFLOP ({flops['attention'] / 1e9:.2f} "
                         f"attention, {flops['linear'] / 1e9:.2f} linear layers). Plain float32 matmul here: "
                         + ", ".join(f"{k.removesuffix('_gflops')} {v:.0f} GFLOP/s" for k, v in rates.items())
                         + f". One minor page fault costs {point['fault_cost_s'] * 1e6:.2f} us.")
            lines.append("")
            lines.append("| kernel | step s (unprofiled) | x softmax | achieved GFLOP/s | % of square matmul | "
                         "page faults/step | est. fault s |")
            lines.append("|---|---:|---:|---:|---:|---:|---:|")
            soft = point["step_s"][kernels[0]]
            square = rates["square_1024_gflops"]
            for k in kernels:
                s = point["step_s"][k]
                gf = flops["total"] / s / 1e9
                fl = point["minor_faults_per_step"][k]
                lines.append(f"| {k} | {s:.3f} | {s / soft:.2f} | {gf:.1f} | {100 * gf / square:.0f}% | {fl:.0f} | "
                             f"{fl * point['fault_cost_s']:.3f} |")
            lines.append("")
            ps = point["per_score_ns"]
            mm = 3 * ps["matmul q k^T"] + 4 * ps["matmul A v"]
            lines.append(f"Per score, CPU time on a cache-resident 64 x {n} tile (ns): q k^T {ps['matmul q k^T']:.2f}, "
                         f"A v {ps['matmul A v']:.2f}; SDPA's whole forward+backward {ps['SDPA fwd+bwd (all of it)']:.2f}; "
                         + ", ".join(f"{f} {ps['eager ' + f]:.2f}" for f in ("exp", "log", "log1p", "reciprocal"))
                         + " (eager). The flash path's seven matmuls per score (three of the q k^T kind, four of the "
                         f"A v kind) take about {mm:.2f}; with each kernel's fused elementwise chains the floor "
                         "(no dispatch, no cache misses) is:")
            lines.append("")
            lines.append("| kernel | forward chain ns | backward chain ns | floor ns/score | floor x SDPA | "
                         "C++ loop fwd+bwd ns/score | C++ loop x SDPA |")
            lines.append("|---|---:|---:|---:|---:|---:|---:|")
            sdpa = ps["SDPA fwd+bwd (all of it)"]
            for k in kernels:
                if f"{k} forward chain" not in ps:
                    continue
                f_, b_ = ps[f"{k} forward chain"], ps[f"{k} backward chain"]
                loop = ps.get(f"{k} C++ loop fwd+bwd (all of it)")
                paired = ps.get(f"{k} C++ loop x SDPA (paired)")
                loop_cells = "- | -" if loop is None else f"{loop:.2f} | {paired:.2f}"
                lines.append(f"| {k} | {f_:.2f} | {b_:.2f} | {mm + f_ + b_:.2f} | {(mm + f_ + b_) / sdpa:.2f} | "
                             f"{loop_cells} |")
            lines.append("")
            for k in kernels:
                cells, base = point["cells"][k], point["cells"][kernels[0]]
                lines.append(f"**{k}** (profiled step {point['profiled_step_s'][k]:.3f} s)")
                lines.append("")
                lines.append("| region | " + " | ".join(CLASSES) + " | total | - softmax |")
                lines.append("|---|" + "---:|" * (len(CLASSES) + 2))
                for region in REGIONS:
                    vals = [cells.get(f"{region}|{c}", 0.0) for c in CLASSES]
                    total = sum(vals)
                    btotal = sum(base.get(f"{region}|{c}", 0.0) for c in CLASSES)
                    if total == 0 and btotal == 0:
                        continue
                    lines.append(f"| {region} | " + " | ".join(f"{v:.4f}" for v in vals)
                                 + f" | {total:.4f} | {total - btotal:+.4f} |")
                lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--kernels", nargs="*", default=None, help="default: every registered kernel (softmax first)")
    p.add_argument("--rounds", type=int, default=5, help="profiled steps per kernel")
    p.add_argument("--out", type=Path, help="markdown file (default: benchmarks/results/profile_<date>.md)")
    args = p.parse_args(argv)
    if args.child:
        print(_bench.child_json(profile_pass(args)))
        return
    record = _bench.header("profile_step", argv)
    forward = ["--n", *map(str, args.n), "--rounds", str(args.rounds)]
    if args.kernels:
        forward += ["--kernels", *args.kernels]
    passes = []
    for threads in args.threads:
        res = _bench.run_child([__file__, "--child", str(threads), *forward], _bench.child_env(threads), 7200)
        if "error" in res:
            raise SystemExit(f"profile pass with {threads} thread(s) failed: {res['error']}")
        passes.append(res)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d")
    md = args.out or _bench.RESULTS / f"profile_{stamp}.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(_markdown(record, passes))
    path = _bench.write_json("profile", {**record, "passes": passes}, md.with_suffix(".json"))
    print(f"wrote {md} and {path}")


if __name__ == "__main__":
    main()
