"""App. A's quantity at trained weights: does block 0's attention output grow with N, and what tails enter each block?

App. A's condition is about attention at fixed weights on heavy-tailed tokens; Remark 1 notes that after the
first block the measure attention sees is a learned representation. A trained measure transformer
(heavytail.science.model) embeds the raw points linearly (W_in), so block 0's attention sees tokens with the
input's tail index a (the heavier latent axis dominates |x|); with post-norm blocks every later block sees
LayerNorm's output, whose norm is bounded. This module measures both at the trained weights:

- :func:`attention_growth`: block ``b``'s attention output (eq. 7) for one query over nested ensembles, the
  first N of N_max input points, in float64 through :func:`heavytail.studies.phase.moment_condition.nested_attention`;
  its growth exponent (moment_condition.fit_exponent) is compared with moment_condition.predicted_slope at
  the kernel's q and the ensemble's heavier-axis tail index;
- :func:`block_tail_indices`: the Hill estimate (eq. 38, k = 0.1 N) of the token norms |h_j| entering each
  block, with its asymptotic band a_hat (1 +- 1.96 / sqrt k) as notebook 08 draws it.

Only block 0's growth is exact on nested ensembles: later blocks' tokens depend on all N points through the
blocks before them, so a prefix of block 1's tokens at N_max is not block 1's tokens at the prefix's N.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

import heavytail.studies.phase.moment_condition as M

HILL_PHI = 0.1  # eq. 38's k = 0.1 N (App. J.1)


def _double(model: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(model).double().eval()


def block_inputs(model: torch.nn.Module, x: torch.Tensor, upto: int | None = None) -> list[torch.Tensor]:
    """The tokens entering each block of a measure transformer: x (B, N, 2) -> [(B, N, D)] * n_blocks (blocks
    0 .. ``upto`` only, when given: each block costs N^2), in the model's dtype. A post-norm block's attention
    reads its input as is; a pre-norm block's reads LN(input) (:func:`attention_tokens`)."""
    from heavytail.science.transforms import symlog

    last = len(model.blocks) - 1 if upto is None else upto
    h = model.w_in(symlog(x) if model.cfg.symlog else x)
    out = []
    with torch.no_grad():
        for b, block in enumerate(model.blocks):
            out.append(h)
            if b == last:
                break
            h = block(h)
    return out


def attention_tokens(model: torch.nn.Module, block: int, h: torch.Tensor) -> torch.Tensor:
    """What block ``block``'s attention sublayer reads from its input ``h`` (..., N, D): h under post-norm,
    LN(h) under pre-norm (Section 3.3.2)."""
    b = model.blocks[block]
    return b.ln_attn(h) if model.cfg.norm == "pre" else h


def attention_growth(model: torch.nn.Module, x: torch.Tensor, ns: Sequence[int], block: int = 0) -> np.ndarray:
    """(R, len(ns)) norms of block ``block``'s attention output for the first point of each of R ensembles
    x (R, N_max, 2), over its first N points for every N in ``ns`` (N_max = max(ns)), at the model's weights in
    float64. The output is the value-weighted part of eq. 7, sum_j g(s_j) W_V h_j / sum_j g(s_j), heads
    concatenated: the value bias b_V is a constant every N shares and would only dilute the exponent. Exact on
    nested ensembles for block 0 only (see the module docstring)."""
    m = _double(model)
    attn = m.blocks[block].attn
    heads = m.cfg.n_heads
    log_g = m.cfg.kernel.log_g
    out = np.empty((len(x), len(ns)))
    with torch.no_grad():
        for r in range(len(x)):
            xr = x[r: r + 1, : max(ns)].double()
            h = attention_tokens(m, block, block_inputs(m, xr, upto=block)[block])[0]  # (N_max, D)
            q = attn.q(h[:1]).view(1, heads, -1).transpose(0, 1)  # (H, 1, dh)
            k = attn.k(h).view(-1, heads, q.shape[-1]).transpose(0, 1)  # (H, N_max, dh)
            v = (h @ attn.v.weight.T).view(-1, heads, q.shape[-1]).transpose(0, 1)  # (H, N_max, dh), no bias
            s = (q @ k.transpose(-1, -2))[:, 0] / math.sqrt(q.shape[-1])  # (H, N_max) scores of eq. 1
            o = M.nested_attention(log_g(s), v, ns)  # (H, L, dh)
            out[r] = o.transpose(0, 1).reshape(len(ns), -1).norm(dim=-1).numpy()
    return out


def block_tail_indices(model: torch.nn.Module, x: torch.Tensor, phi: float = HILL_PHI) -> np.ndarray:
    """(R, n_blocks) Hill estimates (eq. 38, k = floor(phi N)) of the norms |h_j| of the tokens entering each
    block, one per ensemble of x (R, N, 2)."""
    from heavytail.names import hill_k
    from heavytail.science.metrics import hill_estimate

    m = _double(model)
    k = hill_k(x.shape[-2], phi)
    with torch.no_grad():
        hs = block_inputs(m, x.double())
    return np.stack([hill_estimate(h.norm(dim=-1), k).numpy() for h in hs], axis=-1)


def fixed_trials(bench, n: int, heavier_a: float, lighter_a: float, generator: torch.Generator):
    """``n`` trials of ``bench`` (fresh task parameters omega_T) with the latent tail indices fixed at
    (lighter_a, heavier_a) on axes (0, 1): the exponent is predicted per tail index, and a regime's trials
    would mix several."""
    trials = bench.sample_trials(n, generator=generator)
    params = torch.tensor([lighter_a, heavier_a], dtype=torch.float64).expand(n, 2).clone()
    return dataclasses.replace(trials, marginal_params=params)


def measure_run(run_dir: str | Path, ns: Sequence[int], reps: int, hill_n: int, seed: int = 0,
                n_boot: int = 2000) -> dict[str, Any]:
    """For one finished run: at the lower and upper end of its regime's heavier-axis range (the lighter axis at
    its range's middle), block 0's attention-output exponent over ``ns`` (``reps`` ensembles, bootstrap
    interval) against App. A's prediction, and the Hill estimate of the tokens entering each block at N =
    ``hill_n`` (median over the ensembles, with the band of eq. 38 at that k)."""
    from heavytail.harness.build import build_benchmark
    from heavytail.harness.checkpoints import load_model
    from heavytail.names import KERNEL_ROWS, TAIL_REGIMES, hill_k

    model, cfg = load_model(run_dir)
    bench = build_benchmark(cfg)
    (lo0, hi0), (lo1, hi1) = TAIL_REGIMES[cfg.tail_regime]
    row = KERNEL_ROWS[cfg.kernel]
    out = {"run": Path(run_dir).name, "kernel": cfg.kernel, "q": row.order, "tail_regime": cfg.tail_regime,
           "n_points": cfg.n_points, "seed": cfg.seed, "ns": list(ns), "reps": reps, "hill_n": hill_n, "at": []}
    for j, a in enumerate((lo1, hi1)):
        gen = torch.Generator().manual_seed(seed + j)
        trials = fixed_trials(bench, reps, a, (lo0 + hi0) / 2, gen)
        x = bench.sample_inputs(trials, max(ns), generator=gen, dtype=torch.float64)
        norms = attention_growth(model, x, ns, block=0)
        e = M.fit_exponent(ns, norms, n_boot=n_boot)
        hill = block_tail_indices(model, x[:, :hill_n])
        half = 1.96 / math.sqrt(hill_k(hill_n, HILL_PHI))
        med = np.median(hill, axis=0)
        out["at"].append({"a": a, "predicted": M.predicted_slope(row.order, a, ns, row.growth == "logarithmic"),
                          "measured": e.beta, "low": e.low, "high": e.high,
                          "medians": np.median(norms, axis=0).tolist(),
                          "hill": [{"block": b, "median": float(v), "band_low": float(v * (1 - half)),
                                    "band_high": float(v * (1 + half))} for b, v in enumerate(med)]})
    return out


NS = tuple(2**k for k in range(8, 17))  # nested ensembles N = 256 .. 65536 around the training N = 1024 .. 4096
REPS = 48
HILL_N = 4096


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heavytail.studies.phase.fixed_weight RUN_DIR ... --output FILE``: :func:`measure_run` on each
    finished run, with provenance."""
    import argparse
    import sys
    import time

    from heavytail.harness.provenance import record
    from heavytail.io import save_json

    parser = argparse.ArgumentParser(prog="python -m heavytail.studies.phase.fixed_weight", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="finished run folders")
    parser.add_argument("--output", required=True)
    parser.add_argument("--reps", type=int, default=REPS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    prov = record()
    start = time.time()
    results = []
    for r in args.runs:
        results.append(measure_run(r, NS, args.reps, HILL_N) | {"trained": _run_provenance(r)})
    prov |= {"command": "python -m heavytail.studies.phase.fixed_weight " + " ".join(argv if argv is not None
                                                                               else sys.argv[1:]),
             "seconds": round(time.time() - start, 1)}
    path = save_json({"provenance": prov, "runs": results}, Path(args.output))
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0


def _run_provenance(run_dir: str | Path) -> list[dict]:
    from heavytail.io import load_json

    p = Path(run_dir) / "train_summary.json"
    return list(load_json(p).get("provenance", [])) if p.is_file() else []


if __name__ == "__main__":
    raise SystemExit(main())


def table(shipped: Mapping[str, Any]) -> dict[str, Any]:
    """The shipped fixed-weight measurements as one table: per trained run and tail index a, App. A's predicted
    exponent, block 0's measured exponent with its 95 % interval, and each block's Hill estimate of its tokens."""
    runs = shipped["runs"]
    rows = [{"run": f"{r['kernel']}, {r['tail_regime']}, N = {r['n_points']}", "a": f"{at['a']:.3g}",
             "predicted": f"{at['predicted']:.3f}",
             "block 0 exponent (95 %)": f"{at['measured']:.3f} ({at['low']:.3f} - {at['high']:.3f})",
             **{f"Hill, block {h['block']}": f"{h['median']:.3g} ({h['band_low']:.3g} - {h['band_high']:.3g})"
                for h in at["hill"]}} for r in runs for at in r["at"]]
    return {"title": "At trained weights: block 0's attention-output exponent and each block's token tail index",
            "columns": list(rows[0]) if rows else [], "rows": rows,
            "notes": f"nested ensembles N = {runs[0]['ns'][0]} .. {runs[0]['ns'][-1]}, {runs[0]['reps']} ensembles per a; "
                     f"Hill at N = {runs[0]['hill_n']}, k = 0.1 N, band a_hat (1 +- 1.96/sqrt k)"}


def within(shipped: Mapping[str, Any], margin: float) -> tuple[int, int]:
    """(cases whose block-0 exponent lies within +-``margin`` of App. A's prediction, all (run, a) cases)."""
    cases = [at for r in shipped["runs"] for at in r["at"]]
    return sum(abs(at["measured"] - at["predicted"]) <= margin for at in cases), len(cases)


def summary(shipped: Mapping[str, Any], margin: float) -> str:
    """What the fixed-weight measurements show, in one paragraph."""
    hit, total = within(shipped, margin)
    b1 = [at["hill"][1]["median"] for r in shipped["runs"] for at in r["at"] if len(at["hill"]) > 1]
    if not b1:
        return f"**What it shows:** {hit} of {total} within +-{margin:g}."
    return (f"**What it shows:** block 0's exponent at trained weights lies within +-{margin:g} of App. A's prediction "
            f"in {hit} of {total} (run, a) cases (point estimates; 95 % intervals in the table). The tokens entering "
            f"block 1 have Hill estimates of {min(b1):.3g} to {max(b1):.3g} against the input's a (dashed): post-norm "
            "LayerNorm bounds them, so App. A's condition holds trivially from block 1 on.")
