"""Notebook 05's computations (App. I): the grid's training curves and collapse onsets (Figure 13), a collapsed
output next to a healthy one (Figure 12), and softmax trained through two attention paths with the accuracy of
their gradients on the trained model's own scores.

Section 5 of the paper trained softmax through FlashAttention under bf16 autocast and the other kernels through
float32 attention. Flash-style backwards recompute the scores S and subtract a stored log-sum-exp, which loses
every digit once |S| is huge (:mod:`heavytail.science.attention`); so collapse could be a property of the
exponential kernel or of the numerics it was trained with. The variants grid trains softmax through both paths
on the same data stream. Every function takes the grid folders' run records
(:class:`heavytail.studies.grid_folder.FinishedRun`) and returns plain data; the notebook only shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from heavytail.names import variant_label
from heavytail.science.collapse import (attention_gradient_error, attention_inputs, collapse_onset, concentrates,
                                        late_attention, numerics_verdict, spread_ratio)
from heavytail.studies.grid_folder import FinishedRun, filter_runs, finished_runs

# Figures 12 and 13 are drawn on the sheared swap with mirrored Pareto marginals, post-norm (App. I).
FIGURE_CELL = {"benchmark": "sheared_swap", "marginals": "mirrored_pareto", "norm": "post"}
GRADIENT_BACKENDS = ("sdpa", "flash", "dense")  # replayed against a float64 dense reference
_FIG12_SEED_OFFSET, _GRADIENT_SEED_OFFSET = 12, 99  # evaluation streams disjoint from training's (seed + offset)


def grid_runs(grid_dir: str | Path, **where: Any) -> list[FinishedRun]:
    """The finished runs of ``grid_dir`` whose configuration has every ``where`` value; [] when the folder does not
    exist (the notebook then says which grid to run)."""
    if not Path(grid_dir).exists():
        return []
    runs = list(finished_runs(grid_dir).runs)
    return filter_runs(runs, **where) if where else runs


@dataclass(frozen=True)
class Curve:
    """One run's training loss (Figure 13): logged steps and losses, (T,) each, and its collapse onset."""

    kernel: str
    symlog: bool
    steps: np.ndarray
    loss: np.ndarray
    onset: int | None


def training_curves(runs: Sequence[FinishedRun]) -> list[Curve]:
    """Figure 13's traces, one per run, ordered by kernel; the onset is
    :func:`heavytail.science.collapse.collapse_onset` (the first logged step from which most trials of the batch
    stay collapsed)."""
    out = []
    for run in sorted(runs, key=lambda r: (r.config["kernel"], bool(r.config["symlog"]))):
        log = list(run.log)
        out.append(Curve(run.config["kernel"], bool(run.config["symlog"]), np.array([row["step"] for row in log]),
                         np.array([row["loss"] for row in log], dtype=float), collapse_onset(log)))
    return out


def onsets_text(curves: Sequence[Curve]) -> str:
    """The onsets of the curves that collapsed, in one sentence."""
    found = sorted(f"{c.kernel} ({'symlog' if c.symlog else 'none'}) at step {c.onset}"
                   for c in curves if c.onset is not None)
    return "collapse onsets: " + (", ".join(found) if found else "none: no grid run collapsed")


def most_collapsed(runs: Sequence[FinishedRun], kernel: str) -> FinishedRun | None:
    """The run of ``kernel`` without symlog with the largest collapsed share at evaluation (Figure 12's pick)."""
    pool = [r for r in runs if r.config["kernel"] == kernel and not r.config["symlog"]]
    return max(pool, key=lambda r: r.results["collapse"]["fraction"]) if pool else None


def figure12_panels(soft: FinishedRun, healthy: FinishedRun) -> dict[str, Any]:
    """One evaluation instance through both models (App. I, Figure 12): ``{"target", "softmax", "log-ELU"}``, each
    (N, 2) array, with each model's IQR ratio to the target (:func:`heavytail.science.collapse.spread_ratio`) under
    ``"<label> ratio"``. Both models see the same instance (drawn from the softmax run's seed)."""
    from heavytail.harness.build import build_benchmark
    from heavytail.harness.checkpoints import load_model

    panels: dict[str, Any] = {}
    for label, run in (("softmax", soft), ("log-ELU", healthy)):
        model, cfg = load_model(run.run_dir.path)
        bench = build_benchmark(cfg)
        gen = torch.Generator().manual_seed(cfg.seed + _FIG12_SEED_OFFSET)
        trials = bench.sample_trials(1, generator=gen)
        x = bench.sample_inputs(trials, cfg.eval_n_points, generator=gen)
        y = bench.sample_targets(trials, cfg.eval_n_points, generator=gen)
        with torch.no_grad():
            out = model(x)[0]
        panels[label], panels["target"] = out.numpy(), y[0].numpy()
        panels[f"{label} ratio"] = float(spread_ratio(out[None], y)[0])
    return panels


def figure12_note(soft: FinishedRun | None, healthy: FinishedRun | None) -> str:
    if soft is None or healthy is None:
        return "Figure 12 needs the grid's softmax and log-ELU runs."
    s, h = soft.results["collapse"], healthy.results["collapse"]
    return (f"The softmax run's evaluation label is '{s['label']}' ({s['fraction']:.0%} of trials collapsed); "
            f"the log-ELU run's is '{h['label']}' ({h['fraction']:.0%}).")


def variants(runs: Sequence[FinishedRun]) -> dict[str, FinishedRun]:
    """The variants grid's runs by their label (kernel, attention path, precision), softmax first."""
    ordered = sorted(runs, key=lambda r: (r.config["kernel"] != "softmax", r.name))
    return {variant_label(r.config["kernel"], r.config["attention_backend"], r.config["precision"]): r
            for r in ordered}


def shared_settings(runs: Sequence[FinishedRun]) -> dict[str, Any]:
    """The configuration values every run shares (the variants differ only in the attention path)."""
    first = runs[0].config
    return {k: v for k, v in first.items() if all(r.config.get(k) == v for r in runs)}


def gradient_accuracy(run: FinishedRun, trials: int) -> list[dict[str, Any]]:
    """Each block's attention of the trained model replayed on ``trials`` evaluation inputs, and each backend's
    relative gradient error against a float64 dense reference
    (:func:`heavytail.science.collapse.attention_gradient_error`): rows {"block", "backend", "max_abs_score", "q",
    "k", "v"}."""
    from heavytail.harness.build import build_benchmark
    from heavytail.harness.checkpoints import load_model

    model, cfg = load_model(run.run_dir.path)
    bench = build_benchmark(cfg)
    gen = torch.Generator().manual_seed(cfg.seed + _GRADIENT_SEED_OFFSET)
    x = bench.sample_inputs(bench.sample_trials(trials, generator=gen), cfg.eval_n_points, generator=gen)
    rows = []
    for block in range(cfg.n_blocks):
        q, k, v = attention_inputs(model, x, block)
        for backend in GRADIENT_BACKENDS:
            rows.append({"block": block, "backend": backend, **attention_gradient_error(q, k, v, "softmax", backend)})
    return rows


def _worst(rows: Sequence[Mapping[str, Any]]) -> float:
    return max(max(r["q"], r["k"], r["v"]) for r in rows)


def describe(label: str, run: FinishedRun) -> str:
    res = run.results
    onset = collapse_onset(list(run.log))
    med = res["energy"]["median"]
    when = f"collapsed from step {onset}" if onset is not None else "did not collapse in training"
    skipped = run.log[-1]["n_skipped"] if run.log else 0
    return (f"{label}: {when}; evaluation label '{res['collapse']['label']}', median ratio {med['ratio']:.2f} "
            f"[{med['low']:.2f}, {med['high']:.2f}], {skipped} non-finite steps skipped")


@dataclass(frozen=True)
class Findings:
    """What the numerics study shows: one line per finding, the verdict, and the report's conclusion."""

    lines: tuple[str, ...]
    verdict: str
    conclusion: str


def findings(by_label: Mapping[str, FinishedRun], pair: tuple[FinishedRun, FinishedRun],
             rows: Sequence[Mapping[str, Any]], fig12: str) -> Findings:
    """The findings from the variants (``by_label``), the flash-style / exact softmax ``pair``
    (:func:`heavytail.science.collapse.numerics_pair`) and the gradient rows (:func:`gradient_accuracy`)."""
    worst = max(rows, key=lambda r: max(r["q"], r["k"], r["v"]))
    exact = [r for r in rows if r["backend"] == "dense"]
    lines = [f"- {describe(label, run)}." for label, run in by_label.items()]
    late = {label: late_attention(list(run.log)) for label, run in by_label.items()}
    soft_late = min(late[label] for label, run in by_label.items() if run.config["kernel"] == "softmax")
    other_late = max((late[label] for label, run in by_label.items() if run.config["kernel"] != "softmax"),
                     default=float("nan"))
    lines.append("- Late in training, the largest attention weight of a query row (block mean) was " + "; ".join(
        f"{v:.3f} for {label}" for label, v in late.items()
    ) + f", against 1/N = {1 / pair[0].config['n_points']:.4f} for uniform weights: " + (
        f"softmax puts at least {soft_late / other_late:.0f}x more weight on its top point, the concentration on few "
        "(extreme) points that Section 4.2 hypothesises" if concentrates(soft_late, other_late) else
        "softmax does not concentrate its attention markedly more than the slower kernel here") + ".")
    gradient = (f"{_worst(rows):.2e} ({worst['backend']}, block {worst['block']})")
    lines.append(f"- On the trained softmax model's own scores (|S| up to {max(r['max_abs_score'] for r in rows):.3g}), "
                 f"the largest relative gradient error was {gradient}; the float32 dense path stayed within "
                 f"{_worst(exact):.2e}.")
    verdict = numerics_verdict(*(run.results["collapse"]["label"] for run in pair))
    lines += [f"- {verdict}", f"- {fig12}"]
    conclusion = (f"{verdict} The largest relative gradient error on the trained softmax model's scores was "
                  f"{gradient}, against {_worst(exact):.2e} for float32 dense attention.")
    return Findings(tuple(lines), verdict, conclusion)

