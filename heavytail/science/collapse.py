"""Ensemble collapse (App. I): a measurable criterion.

The paper labels runs whose output ensembles are degenerate, "concentrated near the single location
marked by the arrow" (Figure 12), but gives no threshold. We measure, per trial and per axis, the
interquartile range of the model's output ensemble relative to that of an independent target
ensemble. Quantiles rather than standard deviations because the targets have infinite variance
(a in [1+eps, 2], Prop. 3): the IQR exists for every law here and is insensitive to the few extreme
points a healthy heavy-tailed ensemble contains.
"""

from __future__ import annotations

from typing import Any

import torch

from heavytail.names import BACKEND_ROWS


def spread_ratio(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Smallest per-axis ratio IQR(output) / IQR(target).

    output, target: (..., N, d) and (..., M, d)  ->  (...). 1 for a healthy model, near 0 for a
    collapsed one; 0 when every output point coincides.
    """
    def iqr(x: torch.Tensor) -> torch.Tensor:
        q = torch.quantile(x.detach().double(), torch.tensor([0.25, 0.75], dtype=torch.float64, device=x.device), dim=-2)
        return q[1] - q[0]

    ratio = iqr(output) / iqr(target).clamp_min(torch.finfo(torch.float64).tiny)
    # A non-finite output spread is not a collapse but a divergence; keep it visible as inf/nan.
    return ratio.amin(dim=-1)


def collapsed(ratio: torch.Tensor, threshold: float) -> torch.Tensor:
    """Trials whose smallest-axis spread ratio is below ``threshold`` (bool, same shape)."""
    return ratio < threshold


def run_label(fraction_collapsed: float, majority: float = 0.5) -> str:
    """'collapse' when most evaluation trials are degenerate, as the paper's tables label such runs."""
    return "collapse" if fraction_collapsed >= majority else "ok"


# A run whose training skipped more than this share of its steps (non-finite loss or gradients), or whose evaluation
# is not finite, failed: it is labelled "diverged", its own state beside "collapse" and "ok".
DIVERGED_SKIPPED = 0.1


def diverged(skipped_steps: int, steps: int, median_ratio: float) -> str | None:
    """Why a run is labelled diverged (None when it is not): too many skipped steps, or a non-finite ratio."""
    import math

    if steps and skipped_steps / steps > DIVERGED_SKIPPED:
        return f"{skipped_steps} of {steps} steps skipped (more than {DIVERGED_SKIPPED:.0%})"
    if not math.isfinite(median_ratio):
        return f"its median ratio to the floor is {median_ratio}"
    return None


def batch_collapsed(row: dict, majority: float = 0.5) -> bool:
    """Whether a training-log row's batch collapsed (``collapsed_fraction >= majority``); a row without one (its
    outputs were not finite) is not a collapse."""
    return row.get("collapsed_fraction", 0.0) >= majority


def collapse_onset(log: list[dict], majority: float = 0.5) -> int | None:
    """First logged step from which the batch stays collapsed (``collapsed_fraction >= majority``
    at that and every later logged step); None when the run ends healthy. Figure 13 reads the onset
    off the loss curve; this reads it off the outputs themselves."""
    rows = [row for row in log if "collapsed_fraction" in row]
    steps = [row["step"] for row in rows]
    flags = [batch_collapsed(row, majority) for row in rows]
    if not flags or not flags[-1]:
        return None
    onset = len(flags) - 1
    while onset > 0 and flags[onset - 1]:
        onset -= 1
    return steps[onset]


def rolling_median(values, window: int):
    """Centred rolling median (the heavy traces of Figure 13); NaNs (skipped steps) are ignored."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    half = max(1, window) // 2
    out = np.full_like(x, np.nan)
    for i in range(len(x)):
        chunk = x[max(0, i - half) : i + half + 1]
        chunk = chunk[np.isfinite(chunk)]
        if chunk.size:
            out[i] = np.median(chunk)
    return out


def attention_inputs(model, x: torch.Tensor, block: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The (q, k, v) tensors, each (B, H, N, d_head), that ``block``'s attention sees on input ``x``.

    Lets a diagnostic replay one real attention call of a trained model, for instance to compare
    the gradients of two backends on the scores the model actually produces.
    """
    captured = {}
    attn = model.blocks[block].attn
    handle = attn.register_forward_pre_hook(lambda mod, args: captured.setdefault("x", args[0].detach()))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    h = captured["x"]
    with torch.no_grad():
        return attn._heads(attn.q(h)), attn._heads(attn.k(h)), attn._heads(attn.v(h))


def attention_gradient_error(q, k, v, kernel: str, backend: str, seed: int = 0) -> dict[str, float]:
    """Relative error of one backend's attention gradients against a float64 dense reference.

    A random cotangent is pulled back through ``kernel_attention`` on both paths; the errors are
    ||grad - ref|| / ||ref|| for q, k and v, plus the largest scaled score |S| (eq. 1). Flash-style
    backwards recompute S and subtract a stored log-sum-exp; when |S| is huge that subtraction loses
    every digit for softmax (see heavytail.science.attention), which this measures on real activations.
    """
    from heavytail.science.attention import kernel_attention, scaled_scores

    gen = torch.Generator().manual_seed(seed)
    cot = torch.randn(q.shape[:-1] + (v.shape[-1],), generator=gen, dtype=torch.float64)

    def grads(dtype, name):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        out = kernel_attention(*leaves, kernel, backend=name)
        (out.to(torch.float64) * cot).sum().backward()
        return [t.grad.to(torch.float64) for t in leaves]

    ref = grads(torch.float64, "dense")
    got = grads(torch.float32, backend)
    errors = {
        name: float((g - r).norm() / r.norm().clamp_min(1e-300)) for name, g, r in zip("qkv", got, ref)
    }
    with torch.no_grad():
        errors["max_abs_score"] = float(scaled_scores(q.double(), k.double()).abs().max())
    return errors


# ------------------------------------------------------------------------ kernel or numerics (Sec. 5)
# Backends whose softmax backward recomputes the scores and subtracts a stored log-sum-exp (flash-style),
# against those whose gradients are exact float32 autograd (heavytail.science.attention).
FLASH_STYLE_BACKENDS = tuple(b for b, row in BACKEND_ROWS.items() if row.arithmetic == "flash-style")
EXACT_BACKENDS = tuple(b for b, row in BACKEND_ROWS.items() if row.arithmetic == "exact")


def numerics_pair(runs) -> tuple[Any, Any] | None:
    """The softmax run trained through a flash-style backward and the one trained with exact float32
    gradients, among ``runs`` (objects with a ``config`` mapping); None when either is missing.
    Chosen by configuration, never by a display label."""
    def pick(backends):
        found = [r for r in runs if r.config["kernel"] == "softmax" and r.config["attention_backend"] in backends]
        return found[0] if found else None

    flash, exact = pick(FLASH_STYLE_BACKENDS), pick(EXACT_BACKENDS)
    return (flash, exact) if flash is not None and exact is not None else None


def numerics_verdict(flash_label: str, exact_label: str) -> str:
    """What two softmax runs' collapse labels ('collapse' / 'ok') say about kernel versus numerics."""
    flash, exact = flash_label == "collapse", exact_label == "collapse"
    if flash and not exact:
        return ("At this scale collapse follows the numerics: softmax collapsed through the flash-style path and "
                "not with exact gradients.")
    if flash and exact:
        return "At this scale softmax collapsed with exact gradients too: the collapse is not only a numerical artefact."
    if not flash and not exact:
        return ("At this scale neither softmax run collapsed, so this run cannot separate the kernel from the numerics; "
                "the paper-scale grid (params/grid_paper.yaml) is where that question is decided.")
    return "At this scale softmax collapsed with exact gradients but not through the flash-style path."


def late_attention(log: list[dict], key: str = "attn_max_weight") -> float:
    """Mean over the last fifth of the logged steps (those with block statistics) of a per-block
    attention statistic, averaged over blocks; NaN when the run logged none (track_attention off)."""
    import math

    rows = [row for row in log if row.get("blocks")]
    if not rows:
        return math.nan
    rows = rows[-max(1, len(rows) // 5):]
    return sum(sum(b[key] for b in row["blocks"]) / len(row["blocks"]) for row in rows) / len(rows)


def concentrates(softmax_late: float, other_late: float, factor: float = 5.0) -> bool:
    """Whether softmax puts markedly more weight on its top point than a slower kernel (Section 4.2's
    hypothesis of attention concentrating on few extreme points): ``factor`` times the slower kernel's."""
    return bool(softmax_late > factor * other_late)
