"""One prepared device check of the paper-scale path: correctness, step time and memory, a collapse probe.

    python benchmarks/gpu_check.py              # one GPU, about 8 minutes; JSON + markdown into benchmarks/results/
    python benchmarks/gpu_check.py --smoke      # CPU, tiny shapes, well under a minute: the script runs end to end
    python benchmarks/gpu_check.py --parts correctness step --out /tmp/check
    python benchmarks/gpu_check.py --from-log LOG --date 2026-12-04   # the record of a run killed before it wrote one

(a) correctness: every kernel (Table 1) x {flex, flash, tiled} (and SDPA for softmax), forward and
    backward of eq. 7 at head dim 256, N = 4096 in float32, against float64 dense attention on the same
    device, on Gaussian and on Pareto(1.1) tokens (the raw inputs block 0 sees), each with one query row
    whose scores all lie far below the exp underflow (-104); then the energy distance (eq. 10) value and
    gradient in float32 against float64 at N = 16384.
(b) step: one whole training step (forward, eq. 10 loss, backward, clipping, AdamW; the data drawn
    beforehand) at the paper's shape (64 x 16384, D = 256, 6 blocks, App. E.4) for every kernel under
    bf16 autocast and in float32 with TF32 off and on; attention through ``auto`` (softmax: SDPA, i.e.
    FlashAttention under bf16). Seconds per step (median of a few steps after one warm-up step that pays
    the compile) and peak memory, as ratios to softmax-bf16 and to softmax at the same precision, all
    measured in this run. The paper (H200): softmax 1.87 s/step and 69.4 GiB, the other kernels 2.51 s and
    78.8 GiB.
(c) probe: a short training at Table 3 width and depth with reduced N and trials: softmax through
    SDPA under bf16 autocast (the paper's recipe) vs softmax exact float32 (tiled, log space) vs log-ELU,
    logging the collapsed fraction and attention concentration (largest weight per row, entropy / log N).

Every part prints its wall time; within a part, items are skipped (and recorded as skipped) once the
part's time budget is spent, so the whole check fits its budget even when compiles are slow. The JSON
records the date, device, torch and CUDA versions, the git commit and the command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import platform
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from heavytail.science.attention import kernel_attention, recording_backends  # noqa: E402
from heavytail.harness.config import KERNELS, RunConfig  # noqa: E402
from heavytail.io import save_json  # noqa: E402  (strict JSON: inf and NaN round-trip)
from heavytail.science.kernels import KERNEL_NAMES  # noqa: E402

# A score row below -104 for every key: e^s underflows in float32, the literal g / sum g of eq. 7 is 0/0.
NEGATIVE_ROW_SCORE = -300.0


@dataclass(frozen=True)
class Sizes:
    """Shapes and time budgets of the three parts (seconds)."""

    attn_n: int = 4096
    attn_d: int = 256
    energy_n: int = 16384
    energy_batch: int = 2
    step_batch: int = 64
    step_n: int = 16384
    d_model: int = 256
    n_blocks: int = 6
    d_ff: int = 512
    step_warmup: int = 1
    step_timed: int = 3
    probe_n: int = 4096
    probe_trials: int = 8
    probe_steps: int = 1500
    probe_warmup: int = 100
    probe_lr: float = 1e-3
    probe_log_every: int = 50
    # The paper's tile (2^31 elements, App. E.4) would hold all of a probe step's scores; 2^27 is one
    # (8, 4096, 4096) float32 score tensor, so exact float32 softmax runs as one checkpointed tile.
    probe_tile_elements: int = 2**27
    budget_correctness: float = 150.0
    budget_step: float = 240.0
    budget_probe: float = 120.0


SMOKE = Sizes(attn_n=80, attn_d=16, energy_n=256, step_batch=2, step_n=96, d_model=16, n_blocks=1, d_ff=32,
              step_timed=1, probe_n=64, probe_trials=2, probe_steps=4, probe_warmup=1, probe_log_every=2,
              probe_tile_elements=2**22, budget_correctness=1e9, budget_step=1e9, budget_probe=1e9)

PRECISIONS = (("bf16", False), ("float32", False), ("float32", True))  # (RunConfig.precision, tf32)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


def _brief(text: str) -> str:
    return text if len(text) <= 90 else text[:87] + "..."


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    if not bool(torch.isfinite(a).all()):
        return math.inf
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


class Budget:
    """Wall-clock budget of one part: ``spent()`` once it is used up."""

    def __init__(self, seconds: float):
        self.t0, self.seconds = time.perf_counter(), seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def spent(self) -> bool:
        return self.elapsed() > self.seconds


# ----------------------------------------------------------------------------------- (a) correctness
def _tokens(kind: str, n: int, d: int, gen: torch.Generator) -> list[torch.Tensor]:
    """q, k, v of shape (1, 1, n, d) in float64: standard Gaussian, or mirrored Pareto(1.1) (the
    sheared swap's raw inputs have such tails); query row 0 scores below -104 against every key."""
    def draw():
        if kind == "gaussian":
            return torch.randn(1, 1, n, d, generator=gen, dtype=torch.float64)
        u = torch.rand(1, 1, n, d, generator=gen, dtype=torch.float64).clamp_min(1e-300)
        sign = torch.where(torch.rand(1, 1, n, d, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0)
        return sign * u.pow(-1.0 / 1.1)

    q, k, v = draw(), draw(), draw()
    k[..., :, 0] = k[..., :, 0].abs() + 1.0
    q[..., 0, :] = 0.0
    q[..., 0, 0] = NEGATIVE_ROW_SCORE * math.sqrt(d)  # S_0j = -300 k_j0 <= -300 (eq. 1)
    return [q, k, v]


def _fwd_bwd(q, k, v, go, kernel: str, backend: str, dtype: torch.dtype):
    x = [t.to(dtype).detach().requires_grad_() for t in (q, k, v)]
    out = kernel_attention(*x, kernel, backend=backend)
    grads = torch.autograd.grad(out, x, go.to(out.dtype))
    return out, grads


def check_attention(sizes: Sizes, device: torch.device, budget: Budget, kernels=KERNEL_NAMES,
                    rows: list | None = None, on_row=lambda: None) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    data = {kind: [t.to(device) for t in _tokens(kind, sizes.attn_n, sizes.attn_d, gen)] for kind in ("gaussian", "pareto")}
    go = torch.randn(1, 1, sizes.attn_n, sizes.attn_d, generator=gen, dtype=torch.float64).to(device)
    refs = {}
    for kind, (q, k, v) in data.items():
        for kernel in kernels:
            out, grads = _fwd_bwd(q, k, v, go, kernel, "dense", torch.float64)
            refs[kind, kernel] = (out.detach(), [g.detach() for g in grads])
    items = [(kernel, backend) for backend in ("flex", "flash", "tiled") for kernel in kernels]
    items += [("softmax", "sdpa")] if "softmax" in kernels else []
    items += [(kernel, "auto") for kernel in kernels]  # what a training run would get here
    rows = [] if rows is None else rows
    for kernel, backend in items:
        for kind, (q, k, v) in data.items():
            row = {"kernel": kernel, "backend": backend, "tokens": kind, "n": sizes.attn_n, "d": sizes.attn_d}
            if budget.spent():
                rows.append({**row, "skipped": "budget"})
                continue
            try:
                with recording_backends() as record:
                    t0 = time.perf_counter()
                    out, grads = _fwd_bwd(q, k, v, go, kernel, backend, torch.float32)
                    _sync(device)
                    row["first_call_s"] = time.perf_counter() - t0
                ref_out, ref_grads = refs[kind, kernel]
                row["ran_on"] = "+".join(entry["backend"] for entry in record.values())
                row["out_rel_err"] = _rel(out, ref_out)
                for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads):
                    row[f"{name}_rel_err"] = _rel(g, r)
                row["negative_row_rel_err"] = _rel(out[..., 0, :], ref_out[..., 0, :])
                row["max_abs_score"] = float((q[..., 1:, :] @ k.transpose(-1, -2)).abs().amax()) / math.sqrt(sizes.attn_d)
            except Exception as exc:  # one backend failing must not hide the others
                row["error"] = _error(exc)
            rows.append(row)
            on_row()
            print(f"  {kernel:<12} {backend:<6} {kind:<9} " + _short(row), flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def check_energy(sizes: Sizes, device: torch.device) -> dict:
    import heavytail.science.energy as energy
    from heavytail.science.energy import energy_distance

    gen = torch.Generator().manual_seed(1)
    shape = (sizes.energy_batch, sizes.energy_n, 2)
    u = torch.rand(shape, generator=gen, dtype=torch.float64).clamp_min(1e-300).pow(-1 / 1.1)
    u = torch.where(torch.rand(shape, generator=gen, dtype=torch.float64) < 0.5, -u, u).to(device)
    v = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3.0).to(device)
    row = {"n": sizes.energy_n, "batch": sizes.energy_batch, "d": 2, "tokens": "pareto(1.1) vs gaussian"}
    try:
        results = {}
        for dtype in (torch.float64, torch.float32):
            x = u.to(dtype).requires_grad_()
            t0 = time.perf_counter()
            value = energy_distance(x, v.to(dtype)).sum()
            (grad,) = torch.autograd.grad(value, x)
            _sync(device)
            results[dtype] = (value.detach(), grad, time.perf_counter() - t0)
        (v64, g64, s64), (v32, g32, s32) = results[torch.float64], results[torch.float32]
        row.update(value=float(v64), value_rel_err=abs(float(v32) - float(v64)) / abs(float(v64)),
                   grad_rel_err=_rel(g32, g64), float32_first_call_s=s32, float64_first_call_s=s64,
                   backend="eager" if energy._compile_failed.get(device.type) else energy._resolve_backend("auto", device))
    except Exception as exc:
        row["error"] = _error(exc)
    print("  energy distance " + _short(row), flush=True)
    return row


def _short(row: dict) -> str:
    if "error" in row:
        return "error: " + row["error"]
    keys = [k for k in row if k.endswith("_err")]
    text = " ".join(f"{k.removesuffix('_rel_err')}={row[k]:.1e}" for k in keys)
    return f"{text} (on {row['ran_on']})" if "ran_on" in row else text


# ------------------------------------------------------------------------------------------ (b) step
def _run_config(sizes: Sizes, device: torch.device, **changes) -> RunConfig:
    base = dict(d_model=sizes.d_model, n_blocks=sizes.n_blocks, d_ff=sizes.d_ff, n_heads=1,
                n_points=sizes.step_n, trials_per_step=sizes.step_batch, device=device.type, steps=1000,
                warmup_steps=10, checkpoint_every=1000, log_every=1000)
    return RunConfig.from_dict({**base, **changes})


def check_step(sizes: Sizes, device: torch.device, budget: Budget, kernels=KERNELS, rows: list | None = None,
               on_row=lambda: None) -> list[dict]:
    """Rows go into ``rows`` as they finish and ``on_row()`` runs after each, so a killed check keeps them."""
    from heavytail.science.metrics import energy_distance
    from heavytail.harness.build import build_benchmark, build_model, build_optimizer
    from heavytail.harness.train import draw_batch, training_step
    from heavytail.harness.precision import float32_matmuls

    rows = [] if rows is None else rows
    for precision, tf32 in PRECISIONS:
        # softmax first at each precision: it is the baseline of the ratios
        for kernel in kernels:
            row = {"kernel": kernel, "precision": precision, "tf32": tf32}
            if budget.spent():
                rows.append({**row, "skipped": "budget"})
                continue
            cfg = _run_config(sizes, device, kernel=kernel, precision=precision, tf32=tf32)
            try:
                torch.manual_seed(0)
                model = build_model(cfg, device)
                optimizer, _ = build_optimizer(cfg, model)
                gen = torch.Generator().manual_seed(0)
                bench = build_benchmark(cfg)
                t0 = time.perf_counter()
                batches = [draw_batch(bench, cfg, gen, device) for _ in range(sizes.step_warmup + sizes.step_timed)]
                _sync(device)
                row["draw_s"] = (time.perf_counter() - t0) / len(batches)
                times, losses = [], []
                with float32_matmuls(cfg, device), recording_backends() as record:
                    for i, (x, y) in enumerate(batches):
                        if i == sizes.step_warmup and device.type == "cuda":
                            torch.cuda.reset_peak_memory_stats(device)
                        t0 = time.perf_counter()
                        _, loss, grad_norm = training_step(model, optimizer, x, y, cfg, device, energy_distance)
                        optimizer.step()
                        _sync(device)
                        (times if i >= sizes.step_warmup else row.setdefault("warmup_s", [])).append(time.perf_counter() - t0)
                        losses.append(loss)
                        if times and budget.spent():  # one slow kernel must not eat the next parts' time
                            break
                    row["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
                row["ran_on"] = "+".join(dict.fromkeys(e["backend"] for e in record.values()))
                row["s_per_step"] = statistics.median(times)
                row["steps_timed"] = len(times)
                row["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
                row["loss_finite"] = all(math.isfinite(v) for v in losses)
                del model, optimizer, batches
            except Exception as exc:
                row["error"] = _error(exc)
            rows.append(row)
            step_ratios(rows)
            on_row()
            print(f"  {precision:<7} tf32={str(tf32):<5} {kernel:<12} "
                  + (f"error: {row['error']}" if "error" in row else
                     f"{row['s_per_step']:.3f} s/step on {row['ran_on']}, warm-up {sum(row['warmup_s']):.1f} s"),
                  flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return step_ratios(rows)


def step_ratios(rows: list[dict]) -> list[dict]:
    """Each timed row's seconds per step over softmax-bf16's and over softmax's at the same precision."""
    base = next((r for r in rows if r["kernel"] == "softmax" and r["precision"] == "bf16" and "s_per_step" in r), None)
    for r in rows:
        same = next((b for b in rows if b["kernel"] == "softmax" and b["precision"] == r["precision"]
                     and b["tf32"] == r["tf32"] and "s_per_step" in b), None)
        if "s_per_step" in r:
            r["x_softmax_bf16"] = r["s_per_step"] / base["s_per_step"] if base else None
            r["x_softmax_same_precision"] = r["s_per_step"] / same["s_per_step"] if same else None
    return rows


# ----------------------------------------------------------------------------------------- (c) probe
PROBE_VARIANTS = (
    ("softmax, SDPA, bf16 autocast (the paper's recipe)", dict(kernel="softmax", attention_backend="sdpa", precision="bf16")),
    ("softmax, exact float32 (tiled log space)", dict(kernel="softmax", attention_backend="tiled", precision="float32")),
    ("log-ELU, float32 attention (auto)", dict(kernel="log_elu", attention_backend="auto", precision="float32")),
)


def check_probe(sizes: Sizes, device: torch.device, budget: Budget, rows: list | None = None,
                on_row=lambda: None) -> list[dict]:
    from heavytail.science.collapse import collapsed, spread_ratio
    from heavytail.science.metrics import energy_distance
    from heavytail.science.model import MeasureTransformer, ModelConfig
    from heavytail.harness.build import build_benchmark, build_optimizer
    from heavytail.harness.train import draw_batch, training_step
    from heavytail.harness.precision import float32_matmuls

    rows = [] if rows is None else rows
    share = budget.seconds / len(PROBE_VARIANTS)
    for i, (label, variant) in enumerate(PROBE_VARIANTS):
        cfg = _run_config(sizes, device, n_points=sizes.probe_n, trials_per_step=sizes.probe_trials,
                          steps=sizes.probe_steps, warmup_steps=sizes.probe_warmup, lr=sizes.probe_lr, **variant)
        row = {"variant": label, **variant, "n_points": cfg.n_points, "trials_per_step": cfg.trials_per_step,
               "steps_planned": cfg.steps, "lr": cfg.lr, "warmup_steps": cfg.warmup_steps, "log": []}
        deadline = time.perf_counter() + max(0.0, (i + 1) * share - budget.elapsed())
        model = optimizer = None
        try:
            torch.manual_seed(0)
            model = MeasureTransformer(ModelConfig(**cfg.model_kwargs(), tile_elements=sizes.probe_tile_elements)).to(device)
            optimizer, scheduler = build_optimizer(cfg, model)
            bench = build_benchmark(cfg)
            gen = torch.Generator().manual_seed(0)  # the same data stream for every variant
            skipped, step = 0, 0
            t0 = time.perf_counter()
            with float32_matmuls(cfg, device):
                for step in range(1, cfg.steps + 1):
                    x, y = draw_batch(bench, cfg, gen, device)
                    logged = step % sizes.probe_log_every == 0 or step == cfg.steps
                    stats = [] if logged else None
                    out, loss, grad_norm = training_step(model, optimizer, x, y, cfg, device, energy_distance, stats)
                    if math.isfinite(loss) and math.isfinite(grad_norm):
                        optimizer.step()
                    else:
                        optimizer.zero_grad(set_to_none=True)
                        skipped += 1
                    scheduler.step()
                    out_of_time = time.perf_counter() > deadline
                    if logged or out_of_time:
                        entry = {"step": step, "loss": loss, "skipped": skipped}
                        if out is not None:
                            entry["collapsed_fraction"] = float(collapsed(spread_ratio(out, y), cfg.collapse_spread).double().mean())
                        if stats:
                            entry["attn_max_weight"] = [s["attn_max_weight"] for s in stats]
                            entry["attn_entropy_ratio"] = [s["attn_entropy_ratio"] for s in stats]
                            entry["max_abs_score_block0"] = stats[0]["max_abs_score"]
                        row["log"].append(entry)
                    if out_of_time:
                        break
            _sync(device)
            row.update(steps_done=step, skipped=skipped, wall_s=time.perf_counter() - t0,
                       final=row["log"][-1] if row["log"] else None)
        except Exception as exc:
            row["error"] = _error(exc)
        rows.append(row)
        on_row()
        final = row.get("final") or {}
        print(f"  {label}: " + (f"error: {row['error']}" if "error" in row else
              f"{row['steps_done']} steps, loss {final.get('loss', math.nan):.3g}, collapsed "
              f"{final.get('collapsed_fraction', math.nan):.2f}, skipped {row['skipped']}"), flush=True)
        del model, optimizer
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------------------------ record from a log
_LOG_HEADER = re.compile(r"^(?P<device_name>.+), torch (?P<torch>\S+), commit (?P<commit>\S+)$")
_LOG_ATTENTION = re.compile(r"^  (?P<kernel>\w+)\s+(?P<backend>\w+)\s+(?P<tokens>gaussian|pareto)\s+(?P<rest>.*)$")
_LOG_ERRS = re.compile(r"(\w+)=(\S+)")
_LOG_ENERGY = re.compile(r"^  energy distance value=(?P<value>\S+) grad=(?P<grad>\S+)$")
_LOG_DONE = re.compile(r"^\((?P<part>[abc])\) done in (?P<s>\d+) s$")
_LOG_STEP = re.compile(r"^  (?P<precision>\w+)\s+tf32=(?P<tf32>True|False)\s+(?P<kernel>\w+)\s+(?:(?P<s>[\d.]+) s/step "
                       r"on (?P<ran_on>\S+), warm-up (?P<warm>[\d.]+) s|error: (?P<error>.*))$")
_LOG_PROBE = re.compile(r"^  (?P<variant>.+): (?:(?P<steps>\d+) steps, loss (?P<loss>\S+), collapsed (?P<collapsed>\S+), "
                        r"skipped (?P<skipped>\d+)|error: (?P<error>.*))$")


def report_from_log(text: str, sizes: Sizes, date: str, incomplete_because: str) -> dict:
    """The record of a check killed before it wrote one, read back from the lines it printed (the formats of
    ``check_*``'s prints): every number is as printed, so at the printed precision; fields a print does not
    carry (peak memory, max |S|, the probe's series) are absent."""
    report = {"meta": {"date": date, "device": "cuda", "cuda": None, "command": "gpu_check.py (record read from its log)",
                       "smoke": False, "complete": False, "incomplete_because": incomplete_because,
                       "source": "log"},
              "sizes": asdict(sizes), "parts": {}}
    part = None
    variants = {label: v for label, v in PROBE_VARIANTS}
    for line in text.splitlines():
        if m := _LOG_HEADER.match(line):
            report["meta"].update(m.groupdict())
            if cu := re.search(r"\+cu(\d+)(\d)$", m["torch"]):  # the CUDA build is in torch's version tag
                report["meta"]["cuda"] = f"{cu[1]}.{cu[2]}"
        elif line.startswith("(a) correctness"):
            part = report["parts"]["correctness"] = {"attention": [], "energy": None, "wall_s": None}
        elif line.startswith("(b) training step"):
            part = report["parts"]["step"] = {"rows": [], "wall_s": None}
        elif line.startswith("(c) collapse probe"):
            part = report["parts"]["probe"] = {"rows": [], "wall_s": None}
        elif m := _LOG_DONE.match(line):
            part["wall_s"] = float(m["s"])
        elif (m := _LOG_ENERGY.match(line)) and "attention" in (part or {}):
            part["energy"] = {"n": sizes.energy_n, "batch": sizes.energy_batch, "d": 2, "tokens": "pareto(1.1) vs gaussian",
                              "value_rel_err": float(m["value"]), "grad_rel_err": float(m["grad"])}
        elif (m := _LOG_ATTENTION.match(line)) and "attention" in (part or {}):
            row = {"kernel": m["kernel"], "backend": m["backend"], "tokens": m["tokens"], "n": sizes.attn_n, "d": sizes.attn_d}
            rest = m["rest"]
            if rest.startswith("error: "):
                row["error"] = rest.removeprefix("error: ")
            else:
                row.update({f"{k}_rel_err": float(v) for k, v in _LOG_ERRS.findall(rest.split(" (on ")[0])})
                row["ran_on"] = rest.split(" (on ")[1].rstrip(")")
            part["attention"].append(row)
        elif (m := _LOG_STEP.match(line)) and "rows" in (part or {}) and "probe" not in report["parts"]:
            row = {"kernel": m["kernel"], "precision": m["precision"], "tf32": m["tf32"] == "True"}
            if m["error"]:
                row["error"] = m["error"]
            else:
                row.update(s_per_step=float(m["s"]), ran_on=m["ran_on"], warmup_s=[float(m["warm"])])
            part["rows"].append(row)
            step_ratios(part["rows"])
        elif (m := _LOG_PROBE.match(line)) and m["variant"] in variants:
            row = {"variant": m["variant"], **variants[m["variant"]], "n_points": sizes.probe_n,
                   "trials_per_step": sizes.probe_trials, "steps_planned": sizes.probe_steps, "lr": sizes.probe_lr}
            if m["error"]:
                row["error"] = m["error"]
            else:
                row.update(steps_done=int(m["steps"]), skipped=int(m["skipped"]),
                           final={"step": int(m["steps"]), "loss": float(m["loss"]),
                                  "collapsed_fraction": float(m["collapsed"]), "skipped": int(m["skipped"])})
            part["rows"].append(row)
    return report


# ------------------------------------------------------------------------------------------- report
def _git_commit() -> str:
    from heavytail.harness.provenance import code_state

    state = code_state(ROOT)
    return "unknown" if state["commit"] is None else state["commit"] + ("-dirty" if state["dirty"] else "")


def _fmt(x, spec=".2e") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return format(x, spec) if math.isfinite(x) else str(x)
    return str(x)


def _wall(part: dict) -> str:
    return "did not finish" if part.get("wall_s") is None else f"{part['wall_s']:.0f} s"


def markdown(report: dict) -> str:
    meta = report["meta"]
    lines = [f"# Device check, {meta['date']}", "",
             f"{meta['device_name']}, torch {meta['torch']} (CUDA {meta['cuda']}), commit {meta['commit']}, "
             f"`{meta['command']}`", ""]
    if not meta.get("complete", True):
        lines += [f"**Incomplete record**: {meta.get('incomplete_because') or 'the check stopped before its end'}. "
                  "A part without a wall time did not finish; rows it did not reach are absent.", ""]
    parts = report["parts"]
    if "correctness" in parts:
        lines += [f"## (a) Attention forward/backward against float64 ({_wall(parts['correctness'])})", "",
                  "Relative errors (Frobenius) of the float32 output and gradients; the negative row's scores all lie "
                  f"at or below {NEGATIVE_ROW_SCORE:g}.", "",
                  "| kernel | backend | ran on | tokens | max abs S | out | dq | dk | dv | negative row |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in parts["correctness"]["attention"]:
            if "error" in r or "skipped" in r:
                lines.append(f"| {r['kernel']} | {r['backend']} | - | {r['tokens']} | "
                             f"{_brief(r.get('error') or 'skipped (' + r['skipped'] + ')')} | | | | | |")
                continue
            lines.append(f"| {r['kernel']} | {r['backend']} | {r['ran_on']} | {r['tokens']} | {_fmt(r.get('max_abs_score'), '.1e')} | "
                         + " | ".join(_fmt(r[k]) for k in ("out_rel_err", "dq_rel_err", "dk_rel_err", "dv_rel_err",
                                                            "negative_row_rel_err")) + " |")
        e = parts["correctness"]["energy"] or {"error": "not reached", "batch": "-", "n": "-", "tokens": "-"}
        lines += ["", f"Energy distance (eq. 10), {e['batch']} sets x N = {e['n']}, {e['tokens']}: "
                  + (f"error {e['error']}" if "error" in e else
                     f"float32 value relative error {_fmt(e['value_rel_err'])}, gradient {_fmt(e['grad_rel_err'])} "
                     f"(backend {e.get('backend', '-')})"), ""]
    if "step" in parts:
        s = report["sizes"]
        lines += [f"## (b) Training step, {s['step_batch']} x {s['step_n']}, D = {s['d_model']}, {s['n_blocks']} blocks "
                  f"({_wall(parts['step'])})", "",
                  "| precision | TF32 | kernel | attention | s/step | x softmax-bf16 | x softmax same precision | peak GiB |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in parts["step"]["rows"]:
            if "s_per_step" not in r:
                lines.append(f"| {r['precision']} | {r['tf32']} | {r['kernel']} | "
                             f"{_brief(r.get('error') or 'skipped (' + r.get('skipped', '?') + ')')} | | | | |")
                continue
            lines.append(f"| {r['precision']} | {r['tf32']} | {r['kernel']} | {r['ran_on']} | {r['s_per_step']:.3f} | "
                         f"{_fmt(r.get('x_softmax_bf16'), '.2f')} | {_fmt(r.get('x_softmax_same_precision'), '.2f')} | "
                         f"{_fmt(r.get('peak_gib'), '.1f')} |")
        lines.append("")
    if "probe" in parts:
        lines += [f"## (c) Collapse probe ({_wall(parts['probe'])})", "",
                  "| variant | steps | final loss | collapsed fraction | skipped | max weight (block 0 / last) | "
                  "entropy / log N (block 0 / last) |", "|---|---|---|---|---|---|---|"]
        for r in parts["probe"]["rows"]:
            f = r.get("final") or {}
            if "error" in r:
                lines.append(f"| {r['variant']} | error: {_brief(r['error'])} | | | | | |")
                continue
            w, h = f.get("attn_max_weight"), f.get("attn_entropy_ratio")
            lines.append(f"| {r['variant']} | {r['steps_done']} / {r.get('steps_planned', '-')} | {_fmt(f.get('loss'), '.3g')} | "
                         f"{_fmt(f.get('collapsed_fraction'), '.2f')} | {r['skipped']} | "
                         f"{f'{w[0]:.3f} / {w[-1]:.3f}' if w else '-'} | {f'{h[0]:.3f} / {h[-1]:.3f}' if h else '-'} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU: checks the script end to end")
    parser.add_argument("--parts", nargs="+", default=["correctness", "step", "probe"],
                        choices=["correctness", "step", "probe"])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the JSON and markdown (default: benchmarks/results, or outputs/gpu-check-smoke)")
    parser.add_argument("--from-log", type=Path, default=None, metavar="LOG",
                        help="write the record of a GPU check killed before it wrote one, from the lines it printed")
    parser.add_argument("--date", default=None, help="with --from-log: when the check ran (the log does not say)")
    parser.add_argument("--because", default="the check was killed before it wrote its record",
                        help="with --from-log: why the record is incomplete")
    args = parser.parse_args(argv)
    if args.from_log is not None:
        if not args.from_log.is_file() or args.date is None:
            print(f"error: --from-log needs a readable log file (got {args.from_log}) and --date", file=sys.stderr)
            return 2
        report = report_from_log(args.from_log.read_text(), Sizes(), args.date, args.because)
        out_dir = args.out or ROOT / "benchmarks" / "results"
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = f"gpu_check-{args.date.replace('-', '')}-{report['meta'].get('commit', 'unknown')[:7]}"
        save_json(report, out_dir / f"{stem}.json")
        (out_dir / f"{stem}.md").write_text(markdown(report) + "\n")
        print(f"wrote {out_dir / stem}.json and .md from {args.from_log}")
        return 0
    if args.smoke:
        sizes, device = SMOKE, torch.device("cpu")
    elif torch.cuda.is_available():
        sizes, device = Sizes(), torch.device("cuda")
    else:
        print("error: no CUDA device; this check is for a GPU (use --smoke to run it at tiny shapes on the CPU)",
              file=sys.stderr)
        return 2
    out_dir = args.out or (ROOT / ("outputs/gpu-check-smoke" if args.smoke else "benchmarks/results"))
    out_dir.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    report = {
        "meta": {
            "date": now.isoformat(timespec="seconds"),
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "commit": _git_commit(),
            "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
            "smoke": args.smoke,
        },
        "sizes": asdict(sizes),
        "parts": {},
    }
    stem = "gpu_check-" + ("smoke" if args.smoke else now.strftime("%Y%m%d-%H%M"))
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    t_all = time.perf_counter()

    def save(complete: bool = False) -> None:
        # Written after every row: a check killed by its caller's time limit keeps what it measured,
        # and meta.complete tells such a record from a finished one.
        report["meta"].update(complete=complete, wall_s=time.perf_counter() - t_all)
        save_json(report, json_path)
        md_path.write_text(markdown(report) + "\n")

    print(f"{report['meta']['device_name']}, torch {torch.__version__}, commit {report['meta']['commit']}", flush=True)
    if "correctness" in args.parts:
        print("(a) correctness", flush=True)
        budget = Budget(sizes.budget_correctness)
        part = report["parts"]["correctness"] = {"attention": [], "energy": None, "wall_s": None}
        check_attention(sizes, device, budget, rows=part["attention"], on_row=save)
        part["energy"] = check_energy(sizes, device)
        part["wall_s"] = budget.elapsed()
        save()
        print(f"(a) done in {budget.elapsed():.0f} s", flush=True)
    if "step" in args.parts:
        print("(b) training step", flush=True)
        budget = Budget(sizes.budget_step)
        part = report["parts"]["step"] = {"rows": [], "wall_s": None}
        check_step(sizes, device, budget, rows=part["rows"], on_row=save)
        part["wall_s"] = budget.elapsed()
        save()
        print(f"(b) done in {budget.elapsed():.0f} s", flush=True)
    if "probe" in args.parts:
        print("(c) collapse probe", flush=True)
        budget = Budget(sizes.budget_probe)
        part = report["parts"]["probe"] = {"rows": [], "wall_s": None}
        check_probe(sizes, device, budget, rows=part["rows"], on_row=save)
        part["wall_s"] = budget.elapsed()
        print(f"(c) done in {budget.elapsed():.0f} s", flush=True)
    save(complete=True)
    print(markdown(report))
    print(f"wrote {json_path} and {md_path} ({report['meta']['wall_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
