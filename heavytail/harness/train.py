"""Training: the paper's recipe (Section 3.4, Table 3) as a resumable run.

Each step draws a fresh parameter instance omega per trial (App. D.1), an input ensemble
X ~ mu_I(omega)^N and an independent target ensemble Y ~ mu_O(omega)^N, and minimises the mean over
trials of the energy distance E_1^2(model(X), Y) (eqs. 4, 10). A step whose loss, outputs or gradient
is non-finite is skipped and counted, as the paper does (Table 3, "skip non-finite step").

The run folder is the unit of work; its layout (config.yaml, metrics.jsonl, checkpoints/, model.pt, and
COMPLETE written last: a run without it is unfinished, whatever else exists) is owned by
:class:`heavytail.harness.rundir.RunDir`.

Every file is written atomically (``heavytail.io``). Calling :func:`train` on a folder that holds a
checkpoint resumes from it; on CPU a run killed at any point and resumed ends with weights bitwise
equal to an uninterrupted run's, because the data generator, the global RNGs, the optimizer and the
scheduler are all restored (tests/test_train.py kills a real subprocess to check it).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import math
import random
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets in a notebook and warns in red without them

from heavytail import cli
from heavytail.science.collapse import batch_collapsed, collapsed, spread_ratio
from heavytail.harness import cpu_bf16
from heavytail.harness.config import RunConfig
from heavytail.io import atomic_torch_save, atomic_write_text, dumps_json, is_complete, read_jsonl, save_json
from heavytail.harness.build import build_benchmark, build_model, build_optimizer, resolve_device
from heavytail.harness.checkpoints import UNREADABLE, check_config, checkpoints, save_checkpoint, set_rng_state
from heavytail.harness.precision import autocast, backend_label, float32_matmuls, precision_record, subnormals
from heavytail.harness.rundir import RunDir
from heavytail.harness.stopping import CAP, CONVERGED, converged

# The validation set's own stream (heavytail.harness.stopping): never the training draws, never evaluation's.
_VALIDATION_STREAM = 3_000_017
# A collapse after a healthy stretch opens a window of per-step logging; at most this many per run, so a run
# whose batches collapse on and off all along keeps a log of bounded size.
MAX_DENSE_WINDOWS = 8


def collapse_after_healthy_stretch(recent: Sequence[Mapping[str, Any]], row: Mapping[str, Any], stretch: int) -> bool:
    """Whether ``row``'s batch collapsed (``collapsed_fraction >= 0.5``, App. I) right after ``stretch`` healthy
    steps, the rows in ``recent`` (oldest first): the onset a dense window is opened for. A collapse at the first
    steps, before any healthy stretch, or one in a run collapsing on and off, is not an onset."""
    return (batch_collapsed(row) and len(recent) >= stretch
            and not any(batch_collapsed(r) for r in list(recent)[-stretch:]))


# ----------------------------------------------------------------------------------- training
def draw_batch(bench, cfg: RunConfig, generator: torch.Generator, device: torch.device):
    """One step's data: a fresh omega per trial (App. D.1), then X ~ mu_I(omega)^N and an
    independent Y ~ mu_O(omega)^N, each (trials_per_step, n_points, 2)."""
    trials = bench.sample_trials(cfg.trials_per_step, generator=generator)
    x = bench.sample_inputs(trials, cfg.n_points, generator=generator)
    y = bench.sample_targets(trials, cfg.n_points, generator=generator)
    return x.to(device), y.to(device)


def training_step(model, optimizer, x, y, cfg: RunConfig, device: torch.device, loss_fn, stats: list | None = None):
    """Forward, energy-distance loss (eq. 4 with D = E_p^2 of eq. 10) and backward with clipping.

    Returns ``(outputs or None if non-finite, loss, grad_norm)``; gradients are left in place for the
    caller to apply or discard, so a non-finite step can be skipped (Table 3). Passing a list as
    ``stats`` fills it with one dict of attention statistics and the gradient norm per block.
    """
    optimizer.zero_grad(set_to_none=True)
    with autocast(cfg, device), cpu_bf16.emulation(cfg.precision, device):
        if stats is None:
            out = model(x)
        else:
            out, block_stats = model(x, return_attention_stats=True)
            stats.extend({k: float(v) for k, v in s.items()} for s in block_stats)
    out = out.float()
    if not bool(torch.isfinite(out).all()):
        return None, math.nan, math.nan
    loss = loss_fn(out, y, p=cfg.loss_p).mean()
    value = float(loss.detach())
    if not math.isfinite(value):
        return out.detach(), value, math.nan
    with cpu_bf16.emulation(cfg.precision, device):  # the model's bf16 backward, as its forward
        loss.backward()
    if stats is not None:
        for entry, block in zip(stats, model.blocks):
            grads = [p.grad.detach().norm() for p in block.parameters() if p.grad is not None]
            entry["grad_norm"] = float(torch.stack(grads).norm()) if grads else 0.0
            # the score form's own weights (W_Q, W_K of eq. 1): what moves the scores a collapse follows
            qk = [p.grad.detach().norm() for m in (block.attn.q, block.attn.k) for p in m.parameters()
                  if p.grad is not None]
            entry["qk_grad_norm"] = float(torch.stack(qk).norm()) if qk else 0.0
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
    return out.detach(), value, grad_norm


def validation_set(bench, cfg: RunConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed validation ensembles of the stopping rule, ``(val_trials, n_points, 2)`` each, from their own
    stream (the same for every run of a seed, whatever the kernel or learning rate)."""
    gen = torch.Generator().manual_seed(_VALIDATION_STREAM * 1_000 + cfg.seed)
    trials = bench.sample_trials(cfg.val_trials, generator=gen)
    x = bench.sample_inputs(trials, cfg.n_points, generator=gen)
    y = bench.sample_targets(trials, cfg.n_points, generator=gen)
    return x.to(device), y.to(device)


@torch.no_grad()
def validation_score(model, val: tuple[torch.Tensor, torch.Tensor], cfg: RunConfig, loss_fn) -> float:
    """Mean over the validation trials of log E_p^2(model(X), Y) (eq. 10), in float32 without autocast as
    evaluation; +inf when an output is non-finite."""
    x, y = val
    logs = []
    for lo in range(0, len(x), cfg.eval_batch_trials):
        out = model(x[lo : lo + cfg.eval_batch_trials]).float()
        if not bool(torch.isfinite(out).all()):
            return math.inf
        d = loss_fn(out, y[lo : lo + cfg.eval_batch_trials], p=cfg.loss_p).double()
        logs.append(torch.log(d.clamp_min(1e-300)))
    return float(torch.cat(logs).mean())


def _fresh_state(cfg: RunConfig, device: torch.device):
    """A run's state at step 0, built in a fixed order from its seed: model, optimizer, schedule, benchmark, data
    generator and counters."""
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(cfg, device)
    optimizer, scheduler = build_optimizer(cfg, model)
    counters: dict[str, Any] = {"skipped": 0, "validation": [], "dense_windows": 0}
    return model, optimizer, scheduler, build_benchmark(cfg), torch.Generator().manual_seed(cfg.seed), counters


@dataclasses.dataclass
class _State:
    """Everything a run carries from one step to the next (and across a resume, through its checkpoint)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    bench: Any
    data_gen: torch.Generator
    counters: dict[str, Any]
    step: int = 0

    def checkpoint(self, run_dir: Path) -> None:
        save_checkpoint(run_dir, self.step, self.model, self.optimizer, self.scheduler, self.data_gen, self.counters)


def resume(cfg: RunConfig, run_dir: Path, device: torch.device) -> _State:
    """The run's state at its newest intact checkpoint (step 0 without one). A checkpoint that cannot be read (a disk
    fault, a copy cut short) is moved aside as <name>.corrupt, named on stderr, and the one before it is used. Lines
    logged after the checkpoint belong to steps that will be redone: they are dropped from the log."""
    state = _State(*_fresh_state(cfg, device))
    for path in reversed(checkpoints(run_dir)):
        try:
            # On the CPU: RNG states must stay CPU tensors; load_state_dict moves weights and optimizer state.
            saved = torch.load(path, map_location="cpu", weights_only=False)
            state.model.load_state_dict(saved["model"])
            state.optimizer.load_state_dict(saved["optimizer"])
            state.scheduler.load_state_dict(saved["scheduler"])
            set_rng_state(saved["rng"], state.data_gen)
            state.counters.update(saved["counters"])
            state.step = saved["step"]
            break
        except torch.OutOfMemoryError:
            raise  # the machine's fault, not the file's
        except UNREADABLE as exc:  # a damaged zip, pickle or state: the file is unusable
            aside = path.with_name(path.name + ".corrupt")
            path.replace(aside)
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            print(f"[train] warning: {path} is unreadable ({type(exc).__name__}: {reason}); moved to {aside.name}, "
                  "using the one before it (step 0 if none)", file=sys.stderr, flush=True)
            # A partly applied state must not leak into the next attempt: rebuilt as above, in the same order.
            state = _State(*_fresh_state(cfg, device))
    log_path = RunDir(run_dir).metrics_path
    kept = [row for row in read_jsonl(log_path) if row["step"] <= state.step]
    atomic_write_text(log_path, "".join(dumps_json(row) + "\n" for row in kept))
    return state


def step_row(step: int, loss: float, lr: float, grad_norm: float, skipped: bool, out, y, state: _State, t0: float,
             backends: Mapping[str, Any], cfg: RunConfig, stats: list | None) -> dict[str, Any]:
    """One training step as the log records it: loss, lr, gradient norm, skipped steps so far, the seconds trained,
    the attention path that computed it, the batch's collapse (App. I) and, with ``stats``, per-block statistics."""
    row = {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm, "skipped": skipped,
           "n_skipped": state.counters["skipped"], "seconds": time.perf_counter() - t0,
           # the attention that computed this step ("auto" may fall back, see heavytail.science.attention)
           "attention_backend": backend_label(backends)}
    if out is not None:
        ratio = spread_ratio(out, y)
        row["spread_median"] = float(ratio.median())
        row["collapsed_fraction"] = float(collapsed(ratio, cfg.collapse_spread).double().mean())
    if stats:
        row["blocks"] = stats
    return row


class _DenseLog:
    """Per-step rows of the last ``dense_log_window`` steps, written when a batch collapses after a healthy stretch,
    and every step logged for the window after it: the steps around a collapse onset at full resolution (App. I)."""

    def __init__(self, cfg: RunConfig, counters: dict[str, Any]) -> None:
        self.on, self.counters = bool(cfg.dense_log_window), counters
        self.window: collections.deque = collections.deque(maxlen=max(1, cfg.dense_log_window))
        self.until = -1

    def keeps(self, step: int) -> bool:
        return step <= self.until

    def see(self, step: int, row: dict[str, Any] | None, logged: bool, skipped: bool, log) -> bool:
        """Record ``row``; at an onset write the healthy steps before it. Returns whether ``row`` is now logged."""
        if not self.on or row is None:
            return logged
        onset = (self.until < step and self.counters["dense_windows"] < MAX_DENSE_WINDOWS
                 and collapse_after_healthy_stretch([r["row"] for r in self.window], row, self.window.maxlen))
        if onset:
            for earlier in self.window:
                if not earlier["logged"]:
                    log.write(dumps_json({**earlier["row"], "dense": True}) + "\n")
            self.counters["dense_windows"] += 1
            self.until = step + self.window.maxlen
            logged = True
        self.window.append({"row": row, "logged": logged or skipped})
        return logged


def _run_steps(cfg: RunConfig, run_dir: Path, state: _State, device: torch.device, end: int, quiet: bool,
               val, history: list) -> tuple[str | None, dict[str, Any]]:
    """Train steps ``state.step + 1`` to ``end`` (fewer when the stopping rule fires), logging, validating and
    checkpointing on the way. Returns the stop reason (None: not stopped by the rule) and the runtime record."""
    from heavytail.science.attention import recording_backends  # noqa: PLC0415
    from heavytail.science.metrics import energy_distance as eq10  # noqa: PLC0415  (the compiled loss loads only when training)

    energy_distance = functools.partial(eq10, backend=cfg.energy_backend)

    counters, log_path = state.counters, RunDir(run_dir).metrics_path
    dense, stop_reason = _DenseLog(cfg, counters), None
    state.model.train()
    bar = tqdm(total=cfg.steps, initial=state.step, disable=quiet, desc=cfg.name, unit="step", dynamic_ncols=True)
    # "seconds" counts the training time of every step that survives, across resumes: the checkpoint keeps the
    # time reached at its step, and steps redone after a kill count once.
    t0 = time.perf_counter() - counters.get("seconds", 0.0)
    with (float32_matmuls(cfg, device), subnormals(cfg), recording_backends() as backends,
          open(log_path, "a") as log):
        runtime = precision_record(device, torch.bfloat16 if cfg.precision == "bf16" else None)
        for step in range(state.step + 1, end + 1):
            x, y = draw_batch(state.bench, cfg, state.data_gen, device)
            logged = step % cfg.log_every == 0 or step == end or dense.keeps(step)
            stats = [] if (cfg.track_attention and (logged or cfg.dense_log_window)) else None
            out, loss, grad_norm = training_step(state.model, state.optimizer, x, y, cfg, device, energy_distance,
                                                 stats)
            skipped = not (math.isfinite(loss) and math.isfinite(grad_norm))
            if skipped and not cfg.skip_nonfinite:
                raise FloatingPointError(f"non-finite loss or gradient at step {step} and skip_nonfinite is false")
            if skipped:
                state.optimizer.zero_grad(set_to_none=True)
                counters["skipped"] += 1
            else:
                state.optimizer.step()
            lr = state.optimizer.param_groups[0]["lr"]
            state.scheduler.step()
            state.step = step
            row = (step_row(step, loss, lr, grad_norm, skipped, out, y, state, t0, backends, cfg, stats)
                   if logged or skipped or cfg.dense_log_window else None)
            logged = dense.see(step, row, logged, skipped, log)
            if val is not None and step % cfg.val_every == 0:
                score = validation_score(state.model, val, cfg, loss_fn=energy_distance)
                history.append((step, score))
                counters["validation"] = [list(pair) for pair in history]
                row = row or step_row(step, loss, lr, grad_norm, skipped, None, y, state, t0, backends, cfg, None)
                row["val_log_energy"] = score
                logged = True
                if cfg.keep_best:
                    remember_best(counters, state.model, step, score)
                if converged(history, step, cfg.stop_tolerance, cfg.stop_min_steps):
                    stop_reason = CONVERGED
            if row is not None and (logged or skipped):
                dense_row = dense.keeps(step) and step % cfg.log_every
                log.write(dumps_json({**row, "dense": True} if dense_row else row) + "\n")
                log.flush()
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3g}", skipped=counters["skipped"])
            if stop_reason is not None:
                break
            if step % cfg.checkpoint_every == 0 and step < cfg.steps:
                log.flush()
                counters["seconds"] = time.perf_counter() - t0
                state.checkpoint(run_dir)
    bar.close()
    counters["seconds"] = time.perf_counter() - t0
    runtime["attention_backend"] = backend_label(backends)
    runtime["attention"] = dict(backends)
    return stop_reason, runtime


def _finish(cfg: RunConfig, run_dir: Path, state: _State, stop_reason: str | None, runtime: dict[str, Any]) -> None:
    """The final weights (and the best ones, with keep_best), the last checkpoint and train_summary.json, then, last
    and only now, the COMPLETE marker that says every file above is in place."""
    counters = state.counters
    atomic_torch_save(state.model.state_dict(), RunDir(run_dir).model_path)
    if counters.get("best"):  # before COMPLETE, like model.pt: a finished keep_best run always has both
        atomic_torch_save(counters["best"]["model"], RunDir(run_dir).best_model_path)
    state.checkpoint(run_dir)
    save_json({"steps": cfg.steps, "skipped": counters["skipped"], "name": cfg.name, "runtime": runtime,
               "stopped_at": state.step, "stop_reason": stop_reason or CAP,
               "validation": counters.get("validation", []),
               "best_validation": best_validation(counters.get("validation", [])),
               "provenance": counters.get("provenance", []), "binding": RunDir(run_dir).binding(cfg)},
              RunDir(run_dir).train_summary_path)
    atomic_write_text(RunDir(run_dir).complete_path, f"{cfg.name}\n")


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    quiet: bool = False,
    stop_after: int | None = None,
) -> Path:
    """Train (or resume) the run of ``cfg`` in ``run_dir``; returns ``run_dir``.

    ``stop_after`` ends the call after that many steps of this call (checkpointing first) without
    marking the run complete: the next call resumes. ``cfg.track_attention`` adds per-block attention
    statistics and gradient norms to the logged lines (App. I, future work).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    check_config(run_dir, cfg)
    if is_complete(run_dir):
        return run_dir
    device = resolve_device(cfg)
    state = resume(cfg, run_dir, device)
    start = state.step
    val = validation_set(state.bench, cfg, device) if cfg.val_every else None
    history = [tuple(pair) for pair in state.counters.get("validation", [])]
    stop_reason = CONVERGED if history and converged(history, start, cfg.stop_tolerance, cfg.stop_min_steps) else None
    end = cfg.steps if stop_after is None else min(cfg.steps, start + stop_after)
    if stop_reason is not None:  # killed between the rule firing and the final save: finish, train nothing
        end = start
    # Who trained which steps: one provenance entry per call that trains (a resumed run has several), kept
    # in the checkpoint and written to train_summary.json, so a shipped map never relies on a typed commit.
    if end > start:
        from heavytail.harness.provenance import record as provenance_record  # noqa: PLC0415

        state.counters["provenance"] = [*state.counters.get("provenance", []), {
            **provenance_record(), "from_step": start + 1, "bf16_matmuls": cpu_bf16.path(cfg.precision, device)}]
    ran_reason, runtime = _run_steps(cfg, run_dir, state, device, end, quiet, val, history)
    stop_reason = stop_reason or ran_reason
    if state.step < cfg.steps and stop_reason is None:
        state.checkpoint(run_dir)
        return run_dir
    _finish(cfg, run_dir, state, stop_reason, runtime)
    return run_dir


def remember_best(counters: dict[str, Any], model: torch.nn.Module, step: int, score: float) -> None:
    """Keep a copy of the weights when ``score`` is the lowest finite validation score so far (ties keep the
    earlier step). The copy travels in the checkpoint's counters, so a resumed run keeps the best weights it saw
    before the kill."""
    best = counters.get("best")
    if math.isfinite(score) and (best is None or score < best["value"]):
        counters["best"] = {"step": step, "value": score,
                            "model": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}}


def best_validation(history: list) -> dict[str, float] | None:
    """The step and value of the lowest validation score of a run (``[[step, score], ...]``), None without one:
    where a fixed budget's best weights lay, next to where it stopped."""
    finite = [(float(v), int(s)) for s, v in history if v is not None and math.isfinite(v)]
    if not finite:
        return None
    value, step = min(finite)
    return {"step": step, "value": value}


def training_log(run_dir: str | Path) -> list[dict[str, Any]]:
    """The logged steps of a run (complete or not)."""
    return RunDir(run_dir).training_log()


# ---------------------------------------------------------------------------------------- CLI
parse_overrides = cli.parse_sets  # ``key=value`` pairs as YAML scalars (the benchmarks use it too)


def main(argv: list[str] | None = None) -> int:
    """``python -m heavytail train [run.yaml] --output runs/x [--set KEY=VALUE ...]``: 0 when the run is
    complete or paused, 2 (one line) for bad input: a missing file, a bad key or value, a folder of
    another run, a device that is not there."""
    parser = argparse.ArgumentParser(prog="python -m heavytail train", description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", help="YAML run configuration (defaults: Table 3)")
    cli.add_output(parser, "run folder; an existing one is resumed", "--run-dir", required=True)
    cli.add_set(parser, "configuration keys")
    cli.add_quiet(parser)
    parser.add_argument("--stop-after", type=int, default=None, help="pause after this many steps")
    args = parser.parse_args(argv)
    try:
        overrides = cli.parse_sets(args.set)
        if args.config and not Path(args.config).is_file():
            raise FileNotFoundError(f"configuration file {args.config} does not exist")
        cfg = RunConfig.from_yaml(args.config, **overrides) if args.config else RunConfig.from_dict(overrides)
        if args.stop_after is not None and args.stop_after < 1:
            raise ValueError(f"--stop-after {args.stop_after} is not allowed; it must be a positive number of steps")
        on_cpu = resolve_device(cfg).type == "cpu"
        if on_cpu:  # GPU memory is the device's own; only the CPU's is estimated here
            from heavytail.harness import memory  # noqa: PLC0415

            memory.check(cfg)
        if RunDir(args.output).config_path.is_file():
            check_config(Path(args.output), cfg)  # a folder of another run: refused before any work
    except (*cli.BAD_INPUT, RuntimeError) as err:
        return cli.bad_input("train", err)
    if on_cpu and cfg.precision == "bf16" and not is_complete(args.output):
        if (notice := cpu_bf16.emulation_notice(1)) is not None:
            print(f"[train] {notice}", file=sys.stderr, flush=True)
    train(cfg, args.output, quiet=args.quiet, stop_after=args.stop_after)
    state = "complete" if is_complete(args.output) else "paused (resume by running the same command)"
    print(f"{args.output}: {state}")
    return 0
