"""App. A's moment condition, tested statically: how fast a kernel's attention output grows with N.

For a strictly positive kernel with g(t) <= C(1 + |t|^q), a finite (q+1)-st absolute moment of the key/value
measure makes attention's population integrals finite (App. A); softmax (q = infinity) has none for any
polynomial tail. Take tokens x_j in R^d with i.i.d. symmetric Pareto(a) coordinates (Section 3.2.1's
marginals, tail index a), fixed random projections W_Q, W_K, W_V, and one query. The attention output
(eq. 7) for N keys is

    o_N = sum_j g(s_j) v_j / sum_j g(s_j),    s_j = <W_Q x_q, W_K x_j> / sqrt(d),   v_j = W_V x_j.

Order statistics give its growth. s_j and v_j are both of the size of |x_j|, which has tail index a, so
g(s_j) has tail index a/q and g(s_j) v_j has tail index a/(q+1). A sum of N i.i.d. terms of tail index
alpha grows like N when alpha > 1 (its mean exists) and like the largest term, N^(1/alpha), when alpha < 1.
Hence the predicted exponent beta in |o_N| ~ N^beta (:func:`predicted_exponent`):

- a > q + 1: numerator and denominator both grow like N: beta = 0, the output converges;
- q < a <= q + 1: numerator ~ N^((q+1)/a), denominator ~ N: beta = (q+1)/a - 1;
- a <= q (softmax for every a): both are dominated by the largest term, o_N ~ v at the largest score:
  beta = 1/a, the growth of the largest of N draws.

:func:`output_growth` measures |o_N| on nested ensembles (the first N of 2^n_max tokens), in float64 with
weights offset by their largest log g so that softmax's exp(s) never overflows, and :func:`fit_exponent` fits
beta with a bootstrap interval over independent repetitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import torch


def predicted_exponent(q: float, a: float) -> float:
    """beta(q, a) above: 0 when a > q + 1, (q+1)/a - 1 when q < a <= q + 1, 1/a when a <= q (q may be inf)."""
    if a <= 0:
        raise ValueError(f"tail index a={a} must be > 0")
    if a > q + 1:
        return 0.0
    if a > q:
        return (q + 1) / a - 1
    return 1 / a


def predicted_slope(q: float, a: float, ns: Sequence[int], logarithmic: bool = False) -> float:
    """The slope a least-squares fit of log |o_N| on log N over ``ns`` should find: :func:`predicted_exponent`,
    plus, for a kernel of logarithmic growth (q -> 0, log-ELU) where its numerator follows its largest term
    (a <= 1), the slope of that term's log factor. There g(s_max) ~ log s_max ~ (1/a) log N (the largest score
    grows like N^(1/a)), so o_N ~ N^(1/a - 1) log N, and log log N has least-squares slope
    ~1 / log N over the fit: 0.10 for N = 2^10 .. 2^20, as large as the tolerance the claim reads."""
    beta = predicted_exponent(q, a)
    if logarithmic and a <= 1:
        x = np.log(np.asarray(ns, dtype=float))
        beta += float(_slopes(x, np.log(x)))
    return beta


def symmetric_pareto(n: int, d: int, a: float, generator: torch.Generator) -> torch.Tensor:
    """(n, d) float64 draws of sign * (U^(-1/a) - 1)."""
    u = torch.rand(n, d, generator=generator, dtype=torch.float64)
    sign = torch.where(torch.rand(n, d, generator=generator, dtype=torch.float64) < 0.5, -1.0, 1.0)
    return sign * (u.pow(-1.0 / a) - 1.0)


def nested_attention(log_g_s: torch.Tensor, v: torch.Tensor, ns: Sequence[int]) -> torch.Tensor:
    """Eq. 7's output over the first n keys, for every n in ``ns`` (increasing) at once: ``log_g_s`` (..., N)
    is log g of each key's score for one query, ``v`` (..., N, d) the values; returns (..., len(ns), d).

    Per segment between consecutive n, the weights are exp(log g - the segment's largest log g), in [0, 1],
    and the segment's sums are kept with that offset; the segments are then combined in order, each rescaled
    to the running largest offset. So softmax's exp(s) never overflows, and a prefix whose scores lie far
    below a later key's still has weights (one global offset would underflow them all to zero)."""
    ns = list(ns)
    if ns != sorted(ns) or ns[-1] > v.shape[-2]:
        raise ValueError(f"ns={ns} must increase and stay within N = {v.shape[-2]}")
    bounds = [0, *ns]
    out = []
    m_run = den = num = None
    for lo, hi in zip(bounds, bounds[1:]):
        lg = log_g_s[..., lo:hi]
        m = lg.amax(-1)  # (...,)
        w = torch.exp(lg - m[..., None])  # (..., n_seg) in [0, 1]
        d_seg, n_seg = w.sum(-1), (w[..., None] * v[..., lo:hi, :]).sum(-2)
        if m_run is None:
            m_run, den, num = m, d_seg, n_seg
        else:
            top = torch.maximum(m_run, m)
            old_scale, new_scale = torch.exp(m_run - top), torch.exp(m - top)
            den = den * old_scale + d_seg * new_scale
            num = num * old_scale[..., None] + n_seg * new_scale[..., None]
            m_run = top
        out.append(num / den[..., None])
    return torch.stack(out, -2)


def output_growth(log_gs: Mapping[str, Callable[[torch.Tensor], torch.Tensor]], a: float, ns: Sequence[int],
                  reps: int, d: int = 2, seed: int = 0, progress: str | None = None) -> dict[str, np.ndarray]:
    """Per kernel, (reps, len(ns)) norms |o_N| of one query's attention output over the first N of max(ns)
    keys. Every kernel sees the same draws: each repetition draws its own projections, query and tokens;
    ``log g`` is applied in float64 and the sums are offset by their largest log g (:func:`nested_attention`).
    ``progress``: a label for a progress bar over the repetitions on stderr (none without it)."""
    from tqdm import tqdm

    n_max = max(ns)
    out = {name: np.empty((reps, len(ns))) for name in log_gs}
    gen = torch.Generator().manual_seed(seed)
    for r in tqdm(range(reps), desc=progress, disable=progress is None, leave=False, unit="rep"):
        w_q, w_k, w_v = (torch.randn(d, d, generator=gen, dtype=torch.float64) for _ in range(3))
        x_q = symmetric_pareto(1, d, a, gen)
        x = symmetric_pareto(n_max, d, a, gen)
        s = ((x_q @ w_q.T) @ (x @ w_k.T).T)[0] / math.sqrt(d)  # (n_max,) scores of eq. 1
        v = x @ w_v.T  # (n_max, d)
        for name, log_g in log_gs.items():
            out[name][r] = nested_attention(log_g(s), v, ns).norm(dim=-1).numpy()
    return out


@dataclass(frozen=True)
class Exponent:
    beta: float
    low: float
    high: float
    sd: float = math.nan  # the bootstrap standard deviation of beta (what sizes a larger run)


def _slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slopes of y (..., L) on x (L,)."""
    xc = x - x.mean()
    return (y - y.mean(axis=-1, keepdims=True)) @ xc / (xc**2).sum()


def fit_exponent(ns: Sequence[int], norms: np.ndarray, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95, chunk: int = 2000) -> Exponent:
    """Slope of log median_r |o_N| on log N with a percentile bootstrap interval (coverage ``level``) over
    repetitions r. ``norms``: (reps, len(ns)). The bootstrap draws ``chunk`` resamples at a time (one
    (chunk, reps, len(ns)) block), so tens of thousands of them stay cheap."""
    x = np.log(np.asarray(ns, dtype=float))
    norms = np.asarray(norms, dtype=float)
    r = len(norms)
    rng = np.random.default_rng(seed)
    boots = []
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, r, (min(chunk, n_boot - start), r))
        boots.append(_slopes(x, np.log(np.median(norms[idx], axis=1))))
    boots = np.concatenate(boots)
    tail = (1 - level) / 2
    beta = float(_slopes(x, np.log(np.median(norms, axis=0))))
    return Exponent(beta, float(np.quantile(boots, tail)), float(np.quantile(boots, 1 - tail)), float(boots.std()))


def exponent_table(kernels: Mapping[str, float], tail_indices: Sequence[float], norms: Mapping[float, Mapping[str, np.ndarray]],
                   ns: Sequence[int], n_boot: int = 1000) -> list[dict]:
    """One row per (kernel with growth order q, tail index a): predicted (:func:`predicted_slope`) and measured
    exponent with its 95 % bootstrap interval and whether it holds the prediction, and the same at the
    Bonferroni level over all the cells (``joint_*``: 1 - 0.05 / cells, what the static claim reads; the
    bootstrap gets 20 / (1 - level) draws at least, so the far quantiles rest on ~10 draws each); ``sd``: the
    bootstrap standard deviation of the measured exponent."""
    from heavytail.names import KERNEL_ROWS

    cells = len(tail_indices) * len(kernels)
    joint = 1 - 0.05 / cells
    rows = []
    for a in tail_indices:
        for name, q in kernels.items():
            e = fit_exponent(ns, norms[a][name], n_boot=n_boot)
            j = fit_exponent(ns, norms[a][name], n_boot=max(n_boot, int(20 / (1 - joint))), level=joint)
            row = KERNEL_ROWS.get(name)
            beta = predicted_slope(q, a, ns, logarithmic=row is not None and row.growth == "logarithmic")
            rows.append({"kernel": name, "q": q, "a": a, "predicted": beta, "measured": e.beta, "low": e.low,
                         "high": e.high, "sd": e.sd, "holds": e.low <= beta <= e.high, "joint_level": joint,
                         "joint_low": j.low, "joint_high": j.high, "joint_holds": j.low <= beta <= j.high})
    return rows


def static_table(rows: Sequence[dict], n_max: int, reps: int) -> dict:
    """The static test's rows as a table (heavytail.studies.tables); a miss is bold red."""
    return {"title": f"Growth exponent of one query's attention output, N = 256 .. {n_max}, {reps} repetitions",
            "columns": ["kernel", "q", "a", "predicted", "measured", "95 % interval", "holds",
                        "Bonferroni interval (the claim's)"],
            "rows": [{"kernel": r["kernel"], "q": f"{r['q']:g}", "a": f"{r['a']:g}", "predicted": f"{r['predicted']:.3f}",
                      "measured": f"{r['measured']:.3f}", "95 % interval": f"{r['low']:.3f} - {r['high']:.3f}",
                      "Bonferroni interval (the claim's)": f"{r['joint_low']:.3f} - {r['joint_high']:.3f}"
                                                           + ("" if r["joint_holds"] else " (misses)"),
                      "holds": {"text": "yes" if r["holds"] else "no", "bold": not r["holds"],
                                "color": None if r["holds"] else "#cf222e"}} for r in rows],
            "notes": "exponent: slope of log median |o_N| on log N; interval: percentile bootstrap over repetitions"}
