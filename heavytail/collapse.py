"""Ensemble collapse (App. I): a measurable criterion.

The paper labels runs whose output ensembles are degenerate, "concentrated near the single location
marked by the arrow" (Figure 12), but gives no threshold. We measure, per trial and per axis, the
interquartile range of the model's output ensemble relative to that of an independent target
ensemble. Quantiles rather than standard deviations because the targets have infinite variance
(a in [1+eps, 2], Prop. 3): the IQR exists for every law here and is insensitive to the few extreme
points a healthy heavy-tailed ensemble contains.
"""

from __future__ import annotations

import torch


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
