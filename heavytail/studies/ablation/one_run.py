"""What the ablation notebook (``notebooks/04_ablation.py``) computes besides training and evaluation.

- :func:`figure5_trial`: the evaluation instance of Figure 5 (App. D.2): for the sheared swap the shear
  is set to the identity, j = k = 0, so the operator reduces to the coordinate exchange P; for the
  matrix inverse, whose B(omega_T) has no such neutral draw that the paper names, the trial's own omega.
- :func:`transport_sample`: the arrows of Figure 5: a window over the central part of the points and a
  uniform subsample of the points whose input and output both fall inside it.
- :func:`findings`: the closing sentence, built from ``results.json`` rather than typed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import Tensor

from heavytail.science.operators import EXCHANGE, Benchmark, Trials, shear_matrix


def figure5_trial(bench: Benchmark, trials: Trials, index: int = 0) -> Trials:
    """One trial for the transport picture (App. D.2, Figure 5), as a Trials of length 1.

    Sheared swap: omega_T = (j, k) = (0, 0), so T_in = M(0, 0) = I and the target is P_# eta (eq. 23),
    keeping trial ``index``'s marginal parameters. Matrix inverse: trial ``index`` unchanged.
    """
    if not 0 <= index < len(trials):
        raise ValueError(f"index={index} is out of range for {len(trials)} trials")
    trial = trials[index]
    if bench.operator != "sheared_swap":
        return trial
    zero = torch.zeros_like(trial.omega_T[:, 0])
    t_in = shear_matrix(zero, zero)
    return Trials(torch.zeros_like(trial.omega_T), trial.marginal_params.clone(), t_in,
                  t_in @ EXCHANGE.to(t_in.device, t_in.dtype))


@dataclass(frozen=True)
class TransportSample:
    """Arrows from inputs ``x`` (n, 2) to outputs ``y`` (n, 2), all inside ``window``.

    window: ((x0_low, x0_high), (x1_low, x1_high)); inside_fraction: the share of the N points whose input
    and output both lie inside it; indices: the chosen points' positions in the full ensemble.
    """

    x: Tensor
    y: Tensor
    indices: Tensor
    window: tuple[tuple[float, float], tuple[float, float]]
    inside_fraction: float
    n_points: int


def transport_sample(x: Tensor, y: Tensor, n_arrows: int = 140, central: float = 0.98,
                     generator: torch.Generator | None = None) -> TransportSample:
    """Choose the arrows of Figure 5 from one ensemble.

    x, y: (N, 2) inputs and the model's outputs, point i mapped to point i. The window is, per axis, the
    central ``central`` quantile range of the inputs and outputs pooled, so heavy tails do not shrink the
    bulk to a dot; ``n_arrows`` points are drawn uniformly without replacement among those whose input and
    output are both inside (all of them when fewer are). The paper draws 140 arrows from the 94 % of
    16384 points inside its window.
    """
    if x.ndim != 2 or x.shape[-1] != 2 or x.shape != y.shape:
        raise ValueError(f"x and y must both have shape (N, 2); got {tuple(x.shape)} and {tuple(y.shape)}")
    if not 0 < central <= 1:
        raise ValueError(f"central={central!r} is not allowed; it must lie in (0, 1]")
    if isinstance(n_arrows, bool) or not isinstance(n_arrows, int) or n_arrows < 1:
        raise ValueError(f"n_arrows={n_arrows!r} is not allowed; it must be a positive integer")
    finite = torch.isfinite(x).all(-1) & torch.isfinite(y).all(-1)
    if not finite.any():
        raise ValueError("no point has a finite input and output; there is nothing to draw")
    pooled = torch.cat([x[finite], y[finite]]).double()
    tail = (1 - central) / 2
    q = torch.tensor([tail, 1 - tail], dtype=torch.float64)
    bounds = torch.quantile(pooled, q, dim=0)  # (2 quantiles, 2 axes)
    lo, hi = bounds[0], bounds[1]
    inside = finite & ((x.double() >= lo) & (x.double() <= hi) & (y.double() >= lo) & (y.double() <= hi)).all(-1)
    candidates = torch.nonzero(inside).flatten()
    take = min(n_arrows, candidates.numel())
    chosen = candidates[torch.randperm(candidates.numel(), generator=generator)[:take]]
    window = ((float(lo[0]), float(hi[0])), (float(lo[1]), float(hi[1])))
    return TransportSample(x=x[chosen], y=y[chosen], indices=chosen, window=window,
                           inside_fraction=float(inside.double().mean()), n_points=x.shape[0])


def _interval(stat: Mapping[str, Any]) -> str:
    return f"{stat['ratio']:.3f} (95% interval {stat['low']:.3f}-{stat['high']:.3f})"


def findings(results: Mapping[str, Any], skipped_steps: int | None = None) -> str:
    """The notebook's closing sentence, from an evaluation results dict (the structure of results.json)."""
    cfg = results["config"]
    energy, collapse = results["energy"], results["collapse"]
    n = len(energy["d"])
    finite = sum(1 for v in energy["d"] if math.isfinite(v))
    median, mean = energy["median"], energy["mean"]

    def verdict(stat: Mapping[str, Any]) -> str:
        # App. H.2: bold when the interval contains or lies below one (i.e. its low end is <= 1).
        if stat["high"] < 1:
            return "below the i.i.d. sampling floor"
        if stat["bold"]:
            return "consistent with the floor"
        return "above the floor"

    transform = "with symlog" if cfg["symlog"] else "without symlog"
    parts = [
        f"{cfg['kernel']} attention ({cfg['norm']}-norm, {transform}) on the {cfg['benchmark'].replace('_', ' ')} "
        f"with {cfg['marginals'].replace('_', ' ')} marginals, after {cfg['steps']} steps at N = {cfg['n_points']}, "
        f"has a median energy-distance ratio of {_interval(median)}, {verdict(median)}, and a mean ratio of "
        f"{_interval(mean)}, {verdict(mean)}, over {n} evaluation trials at N = {cfg['eval_n_points']}",
    ]
    if finite < n:
        parts.append(f"{n - finite} of them diverged (non-finite outputs)")
    fraction = collapse["fraction"]
    if collapse["label"] == "collapse":
        parts.append(f"the run is labelled ensemble collapse: {fraction:.0%} of the trials have an output "
                     f"spread below {collapse['threshold']:g} of the target's")
    else:
        parts.append(f"no ensemble collapse ({fraction:.0%} of the trials below the spread threshold "
                     f"{collapse['threshold']:g})")
    if skipped_steps:
        parts.append(f"{skipped_steps} training steps were skipped as non-finite")
    return "; ".join(parts) + "."
