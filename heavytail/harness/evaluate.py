"""Evaluation (App. H.2, App. J): 128 trials against an i.i.d. sampling floor, with Hill diagnostics.

For a trained model, trial i draws its own omega_i, an input ensemble X_i and a target ensemble Y1_i,
and scores d_i = E^2(model(X_i), Y1_i). An independent pool of trials j draws two target ensembles and
scores the floor d_hat_j = E^2(Y2_j, Y3_j) (eq. 11). Reported: the median and mean ratios S(d)/S(d_hat)
(eq. 36) with the two-pool bootstrap interval (eq. 37) and the bold rule. Evaluation is in float32
without autocast, whatever the training precision (Table 3).

Per-trial records (``per_trial``, at the common N and under ``at_train_n``) keep, for each candidate trial i,
d_i, its own floor f_i = E^2(Y'_i, Y1_i) (a second target ensemble of the same omega_i against the one d_i
was scored on: the quantity of eq. 11 for one trial) and omega_i's tail indices (the std for Gaussian
marginals), so that a statistic of d_i - f_i can be read later without retraining or re-evaluating.

The floor pool depends only on the operator, the marginal family, N, the number of trials and the
seed, so it is computed once and cached on disk for every model of that family (App. H.2: "the same
sampling reference for all models").

For mirrored Pareto marginals the Hill diagnostic of App. J.1 maps each ensemble back to latent
coordinates with T_i^-1 and compares per-axis Hill estimates (eq. 38-41). The paper's future work,
Hill errors against the known tail indices over a range of thresholds, is reported as a curve.
"""

from __future__ import annotations

import argparse
import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets in a notebook and warns in red without them

from heavytail.science.collapse import collapsed, diverged, run_label, spread_ratio
from heavytail import cli
from heavytail.names import hill_k
from heavytail.harness.config import DEVICES, RunConfig
from heavytail.io import is_complete, load_json, save_json
from heavytail.harness.build import build_benchmark
from heavytail.harness.checkpoints import load_model
from heavytail.harness.precision import backend_label, float32_matmuls, precision_record, subnormals
from heavytail.harness.rundir import RunDir

# Thresholds (tail fractions phi) of the Hill-error curve; the paper's single choice phi = 0.1 is among them.
HILL_CURVE_PHIS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
# Evaluation draws use their own streams, never the training stream. The per-trial floors' target ensembles
# have a stream of their own, so that drawing them leaves every other draw, and every number evaluation
# reported before they existed, bit for bit as it was.
_CANDIDATE_STREAM, _FLOOR_STREAM, _TRIAL_FLOOR_STREAM = 1_000_003, 2_000_003, 3_000_003


def _generator(seed: int, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed(stream * 1_000 + seed)


def _stream_seeds(trials_count: int, generator: torch.Generator, streams: int) -> torch.Tensor:
    """(trials, streams) seeds: every ensemble of every trial gets its own generator, so the numbers do not
    depend on how many trials share a forward pass (``eval_batch_trials`` is memory, not results)."""
    return torch.randint(0, 2**62, (trials_count, streams), generator=generator)


def _ensembles(sample, trials, seeds: torch.Tensor, n: int) -> torch.Tensor:
    """(len(trials), n, 2): trial i's ensemble drawn with ``sample`` from its own seed ``seeds[i]``."""
    return torch.cat([
        sample(trials[i : i + 1], n, generator=torch.Generator().manual_seed(int(seeds[i])))
        for i in range(len(trials))
    ])


def _latent(y: torch.Tensor, to_latent: torch.Tensor) -> torch.Tensor:
    """(T, N, 2) ensembles -> latent coordinates Y (T_i^-1)^T (App. J.1)."""
    return y.double() @ to_latent.transpose(-1, -2).to(y.device, torch.float64)


def _hill(latent: torch.Tensor, k: int) -> torch.Tensor:
    """Per-axis Hill estimates (T, 2) of (T, N, 2) latent samples, upper tail of each coordinate (eq. 38)."""
    from heavytail.science.metrics import hill_estimate

    return hill_estimate(latent.transpose(-1, -2), k)


def _hill_curve(latent: torch.Tensor, n: int) -> torch.Tensor:
    """(len(HILL_CURVE_PHIS), T, 2) Hill estimates over thresholds."""
    # at least 2 upper order statistics, so the smallest phi still gives an estimate at small N
    return torch.stack([_hill(latent, max(2, hill_k(n, phi))) if phi * n >= 1 else _hill(latent, 2)
                        for phi in HILL_CURVE_PHIS])


def band_k_range(n: int) -> tuple[int, int]:
    """The thresholds the Hill-band summary reads: k from max(10, 1 % of N) to 20 % of N, away from the few
    largest points (too few for the asymptotic band) and from the body of the law (where Hill is biased)."""
    return max(10, n // 100), max(11, n // 5)


def _band_miss(latent: torch.Tensor, tail_index: torch.Tensor, n: int) -> torch.Tensor:
    """(T, 2): per trial and latent axis, the share of k in :func:`band_k_range` where the Hill estimate's
    asymptotic 95 % band excludes the known tail index (metrics.hill_band_miss)."""
    from heavytail.science.metrics import hill_band_miss

    k_lo, k_hi = band_k_range(n)
    return hill_band_miss(latent.transpose(-1, -2), tail_index.to(torch.float64), k_lo, k_hi)


# ------------------------------------------------------------------------------------- floor
def floor_key(cfg: RunConfig) -> str:
    """What the floor pool depends on, hashed: its cache file's name."""
    fields = ("per-trial streams", cfg.benchmark, cfg.marginals, cfg.eval_n_points, cfg.eval_trials, cfg.seed,
              cfg.loss_p, cfg.hill_phi)
    # Another tail regime draws other targets (Section 3.2.1); the paper's adds nothing, so that the floors
    # cached before the regime was a key keep their names.
    if cfg.tail_regime != RunConfig.tail_regime:
        fields += (("tail_regime", cfg.tail_regime),)
    if cfg.energy_backend != RunConfig.energy_backend:  # the pool's last bits, likewise
        fields += (("energy_backend", cfg.energy_backend),)
    return hashlib.sha1(repr(fields).encode()).hexdigest()[:12]


def sampling_floor_pool(cfg: RunConfig, cache_dir: str | Path | None = None, quiet: bool = True) -> dict[str, Any]:
    """The i.i.d. floor pool: d_hat_j (eq. 11) and, for Pareto marginals, the target Hill estimates."""
    from heavytail.science.metrics import energy_distance

    path = Path(cache_dir) / f"floor-{cfg.benchmark}-{cfg.marginals}-{floor_key(cfg)}.json" if cache_dir else None
    if path is not None and path.exists():
        return load_json(path)
    bench = build_benchmark(cfg)
    gen = _generator(cfg.seed, _FLOOR_STREAM)
    trials = bench.sample_trials(cfg.eval_trials, generator=gen)
    seeds = _stream_seeds(cfg.eval_trials, gen, 2)
    d_hat, hill2, hill3, curve2 = [], [], [], []
    for lo in tqdm(range(0, cfg.eval_trials, cfg.eval_batch_trials), disable=quiet, desc="floor pool"):
        part, hi = trials[lo : lo + cfg.eval_batch_trials], lo + cfg.eval_batch_trials
        y2 = _ensembles(bench.sample_targets, part, seeds[lo:hi, 0], cfg.eval_n_points)
        y3 = _ensembles(bench.sample_targets, part, seeds[lo:hi, 1], cfg.eval_n_points)
        d_hat.append(energy_distance(y2, y3, p=cfg.loss_p, backend=cfg.energy_backend))
        if cfg.marginals == "mirrored_pareto":
            z2, z3 = _latent(y2, part.output_to_latent), _latent(y3, part.output_to_latent)
            hill2.append(_hill(z2, cfg.hill_k))
            hill3.append(_hill(z3, cfg.hill_k))
            curve2.append(_hill_curve(z2, cfg.eval_n_points))
    pool: dict[str, Any] = {"key": floor_key(cfg), "d_hat": torch.cat(d_hat).double().tolist()}
    if hill2:
        pool["hill_y2"] = torch.cat(hill2).tolist()
        pool["hill_y3"] = torch.cat(hill3).tolist()
        pool["tail_index"] = trials.marginal_params.tolist()
        pool["curve_y2"] = torch.cat(curve2, dim=1).tolist()
    if path is not None:
        save_json(pool, path)
    return pool


# ---------------------------------------------------------------------------------- evaluate
def _candidate_draw(cfg: RunConfig):
    """(benchmark, trials, generator): the ``cfg.eval_trials`` task instances omega = (omega_T, omega_eta) that
    evaluation scores (App. D.1), the first draw of the candidate stream, and that stream for the ensembles."""
    bench = build_benchmark(cfg)
    gen = _generator(cfg.seed, _CANDIDATE_STREAM)
    return bench, bench.sample_trials(cfg.eval_trials, generator=gen), gen


def evaluation_trials(cfg: RunConfig):
    """The task instances evaluation scores, a function of the seed alone: lets a reader place each trial's result
    in task space for a run evaluated before its results recorded omega_T."""
    return _candidate_draw(cfg)[1]


def _score(model, cfg: RunConfig, dev: torch.device, quiet: bool, hill: bool = True) -> dict[str, Any]:
    """One pass of the candidate trials at ``cfg.eval_n_points``: per-trial energy distances d_i (eq. 10),
    each trial's own floor f_i (eq. 11 for that trial), spread ratios (the collapse criterion) and, with
    ``hill``, the Hill estimates of App. J.1."""
    from heavytail.science.attention import recording_backends
    from heavytail.science.metrics import energy_distance

    bench, trials, gen = _candidate_draw(cfg)
    seeds = _stream_seeds(cfg.eval_trials, gen, 2)
    floor_seeds = _stream_seeds(cfg.eval_trials, _generator(cfg.seed, _TRIAL_FLOOR_STREAM), 1)[:, 0]
    d, floor, spread, hill_out, hill_y1, curve_out, curve_y1, band_out, band_y1 = ([] for _ in range(9))
    with float32_matmuls(cfg, dev), subnormals(cfg), recording_backends() as backends:
        runtime = precision_record(dev, None)  # evaluation runs without autocast (Table 3)
        for lo in tqdm(range(0, cfg.eval_trials, cfg.eval_batch_trials), disable=quiet, desc="evaluate"):
            part, hi = trials[lo : lo + cfg.eval_batch_trials], lo + cfg.eval_batch_trials
            x = _ensembles(bench.sample_inputs, part, seeds[lo:hi, 0], cfg.eval_n_points).to(dev)
            y1 = _ensembles(bench.sample_targets, part, seeds[lo:hi, 1], cfg.eval_n_points).to(dev)
            out = model(x).float()  # float32, no autocast (Table 3: evaluation precision)
            finite = torch.isfinite(out).all(dim=(-1, -2))
            # A diverged trial scores +inf (and NaN Hill estimates) rather than stopping the others.
            dist = torch.full((len(part),), float("inf"), dtype=torch.float64)
            if finite.any():
                dist[finite.cpu()] = energy_distance(out[finite], y1[finite], p=cfg.loss_p,
                                                     backend=cfg.energy_backend).double().cpu()
            d.append(dist)
            # Against Y1_i itself, so that d_i - f_i compares the model and an i.i.d. draw on the same target
            # ensemble (E f_i = 2 delta / N, eq. 34, as for the pool). energy_distance accumulates in float64, as
            # for d_i: on heavy tails eq. 10 is a small difference of huge sums.
            y_f = _ensembles(bench.sample_targets, part, floor_seeds[lo:hi], cfg.eval_n_points).to(dev)
            floor.append(energy_distance(y_f, y1, p=cfg.loss_p, backend=cfg.energy_backend).double().cpu())
            spread.append(spread_ratio(out, y1).cpu())
            if hill and cfg.marginals == "mirrored_pareto":
                z_out, z_y1 = _latent(out, part.output_to_latent), _latent(y1, part.output_to_latent)
                h_out = torch.full((len(part), 2), math.nan, dtype=torch.float64)
                c_out = torch.full((len(HILL_CURVE_PHIS), len(part), 2), math.nan, dtype=torch.float64)
                b_out = torch.full((len(part), 2), math.nan, dtype=torch.float64)
                a_true = part.marginal_params.to(z_out.device)
                if finite.any():
                    h_out[finite.cpu()] = _hill(z_out[finite], cfg.hill_k).double().cpu()
                    c_out[:, finite.cpu()] = _hill_curve(z_out[finite], cfg.eval_n_points).double().cpu()
                    b_out[finite.cpu()] = _band_miss(z_out[finite], a_true[finite], cfg.eval_n_points).cpu()
                hill_out.append(h_out)
                curve_out.append(c_out)
                band_out.append(b_out)
                hill_y1.append(_hill(z_y1, cfg.hill_k).cpu())
                curve_y1.append(_hill_curve(z_y1, cfg.eval_n_points).cpu())
                band_y1.append(_band_miss(z_y1, a_true, cfg.eval_n_points).cpu())

    return {"trials": trials, "runtime": runtime, "backends": backends, "d": d, "floor": floor, "spread": spread,
            "hill_out": hill_out, "hill_y1": hill_y1, "curve_out": curve_out, "curve_y1": curve_y1,
            "band_out": band_out, "band_y1": band_y1}


@torch.no_grad()
def evaluate(
    run_dir: str | Path,
    *,
    floor_cache: str | Path | None = None,
    quiet: bool = False,
    save: bool = True,
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Evaluate the completed run in ``run_dir``; writes ``results.json`` there and returns it."""
    from heavytail.harness.provenance import record as provenance_record

    run_dir = Path(run_dir)
    model, cfg = load_model(run_dir, device)
    floor_cache = Path(floor_cache) if floor_cache is not None else run_dir.parent / "_floors"
    pool = sampling_floor_pool(cfg, floor_cache, quiet=quiet)

    dev = torch.device(device)
    scored = _score(model, cfg, dev, quiet)
    trials, runtime, backends = scored["trials"], scored["runtime"], scored["backends"]
    d, spread = scored["d"], scored["spread"]
    d_all = torch.cat(d).numpy()
    d_hat = np.asarray(pool["d_hat"], dtype=np.float64)
    spread_all = torch.cat(spread)
    collapsed_fraction = float(collapsed(spread_all, cfg.collapse_spread).double().mean())
    results: dict[str, Any] = {
        "name": cfg.name,
        "config": cfg.to_dict(),
        "collapse": {
            "label": run_label(collapsed_fraction),
            "fraction": collapsed_fraction,
            "threshold": cfg.collapse_spread,
            "spread_ratio": spread_all.tolist(),
            "omega_T": trials.omega_T.tolist(),  # each trial's task parameters (T, k), eq. 23 or 25
        },
        "energy": {"d": d_all.tolist(), "d_hat": d_hat.tolist()},
    }
    # What computed these numbers: attention backends and matmul precision, of the evaluation and (when
    # the training recorded them) of the training.
    runtime["attention_backend"] = backend_label(backends, "eval")
    runtime["attention"] = dict(backends)
    summary_path = RunDir(run_dir).train_summary_path
    trained = load_json(summary_path).get("runtime") if summary_path.exists() else None
    results["runtime"] = {"evaluation": runtime, "training": trained}
    results["energy"].update(_ratios(d_all, d_hat, cfg))
    train_summary = load_json(summary_path) if summary_path.exists() else {}
    why = diverged(int(train_summary.get("skipped", 0)), int(train_summary.get("stopped_at") or cfg.steps),
                   float(results["energy"]["median"]["ratio"]))
    if why is not None:  # a failed run is neither healthy nor collapsed: its own label, with the reason
        results["collapse"]["label"], results["collapse"]["diverged"] = "diverged", why
    if cfg.eval_at_train_n and cfg.n_points != cfg.eval_n_points:
        results["at_train_n"] = _at_n(model, cfg, cfg.n_points, floor_cache, dev, quiet)
    if cfg.keep_best:
        results["best_weights"] = _best_weights(run_dir, cfg, train_summary, floor_cache, dev, quiet)
    results["per_trial"] = per_trial_records(cfg.eval_n_points, d_all, torch.cat(scored["floor"]).numpy(),
                                             trials.marginal_params, cfg.marginals)
    results["provenance"] = {"training": load_json(summary_path).get("provenance") if summary_path.exists() else None,
                             "evaluation": provenance_record()}

    if cfg.marginals == "mirrored_pareto":
        results["hill"] = _hill_results(cfg, scored, pool, trials)
    if save:
        save_json(results, RunDir(run_dir).results_path)
    return results


def _hill_results(cfg: RunConfig, scored: dict[str, Any], pool: dict[str, Any], trials) -> dict[str, Any]:
    """App. J.1's Hill diagnostic of a scored model against the floor pool's target pairs (eqs. 39-41), the Hill
    error against the known tail indices over thresholds (Section 5's future work), and the band-miss shares."""
    hill_out, hill_y1, curve_out, curve_y1, band_out, band_y1 = (
        scored[k] for k in ("hill_out", "hill_y1", "curve_out", "curve_y1", "band_out", "band_y1"))
    h_out, h_y1 = torch.cat(hill_out), torch.cat(hill_y1)
    h_y2, h_y3 = torch.tensor(pool["hill_y2"]), torch.tensor(pool["hill_y3"])
    e = (h_out - h_y1).abs()  # eq. 39
    e_hat = (h_y2 - h_y3).abs()  # eq. 40
    tail_index = trials.marginal_params.double()
    c_out, c_y1 = torch.cat(curve_out, dim=1), torch.cat(curve_y1, dim=1)
    return {
        "k": cfg.hill_k,
        "axes": {
            str(axis): {
                "E": _discrepancy(e[:, axis], e_hat[:, axis]),  # eq. 41
                "n_nonfinite_e": int((~torch.isfinite(e[:, axis])).sum()),
                "e": e[:, axis].tolist(),
                "e_hat": e_hat[:, axis].tolist(),
                "hill_output": h_out[:, axis].tolist(),
                "hill_target": h_y1[:, axis].tolist(),
                "tail_index": tail_index[:, axis].tolist(),
            }
            for axis in (0, 1)
        },
        # Future work (Section 5): errors against the known indices over thresholds.
        "curve": {
            "phi": list(HILL_CURVE_PHIS),
            "output_abs_error": _median_abs_error(c_out, tail_index),
            "target_abs_error": _median_abs_error(c_y1, tail_index),
        },
        # The same question over every threshold k in a stated range: the share of k where the Hill band
        # a_hat (1 +- 1.96/sqrt k) excludes the known index, for the model's output and for an i.i.d.
        # target ensemble of equal size (whose share is what a faithful tail scores: the band is pointwise).
        "band_miss": _band_summary(torch.cat(band_out), torch.cat(band_y1), cfg.eval_n_points),
    }


def _ratios(d_all: np.ndarray, d_hat: np.ndarray, cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """Median and mean ratios S(d)/S(d_hat) of eq. 36 with eq. 37's bootstrap interval and the bold rule."""
    from heavytail.science.metrics import ratio_interval

    out = {}
    for stat in ("median", "mean"):
        interval = ratio_interval(d_all, d_hat, statistic=stat, n_resamples=cfg.bootstrap_resamples, seed=cfg.seed)
        out[stat] = {"ratio": interval.ratio, "low": interval.low, "high": interval.high, "bold": interval.bold,
                     "candidate": float(getattr(np, stat)(d_all)), "floor": float(getattr(np, stat)(d_hat))}
    return out


def _at_n(model, cfg: RunConfig, n: int, floor_cache: Path, dev: torch.device, quiet: bool) -> dict[str, Any]:
    """The same model scored at another ensemble size ``n`` (its own floor pool): the eq. 36 ratios and the
    collapsed fraction of trials, without Hill diagnostics."""
    at = cfg.replace(eval_n_points=n)
    pool = sampling_floor_pool(at, floor_cache, quiet=quiet)
    scored = _score(model, at, dev, quiet, hill=False)
    fraction = float(collapsed(torch.cat(scored["spread"]), cfg.collapse_spread).double().mean())
    d = torch.cat(scored["d"]).numpy()
    return {"n_points": n, "collapse": {"label": run_label(fraction), "fraction": fraction},
            **_ratios(d, np.asarray(pool["d_hat"], dtype=np.float64), at),
            "per_trial": per_trial_records(n, d, torch.cat(scored["floor"]).numpy(), scored["trials"].marginal_params,
                                           cfg.marginals)}


def _best_weights(run_dir: Path, cfg: RunConfig, summary: dict[str, Any], floor_cache: Path, dev: torch.device,
                  quiet: bool) -> dict[str, Any]:
    """The weights of the best validation score scored like the final ones, on the same trials: eq. 36-37 at the
    common N and (with ``eval_at_train_n``) at the training N, with the step and validation score they come from.
    ``{"step": None, "reason": ...}`` when training kept none (no validation score was finite)."""
    best = summary.get("best_validation")
    if not best or not RunDir(run_dir).best_model_path.exists():
        return {"step": None, "reason": "no finite validation score: training kept no best weights"}
    model, _ = load_model(run_dir, dev, best=True)
    out = {"step": int(best["step"]), "value": float(best["value"]),
           **_at_n(model, cfg, cfg.eval_n_points, floor_cache, dev, quiet)}
    if cfg.eval_at_train_n and cfg.n_points != cfg.eval_n_points:
        out["at_train_n"] = _at_n(model, cfg, cfg.n_points, floor_cache, dev, quiet)
    return out


def per_trial_records(n: int, d: np.ndarray, floor: np.ndarray, marginal_params: torch.Tensor, marginals: str
                      ) -> list[dict[str, Any]]:
    """One record per evaluation trial i: {"n_points": n, "d": d_i, "floor": f_i, "tail_index": [a_0, a_1]}, or
    "std": [sigma_0, sigma_1] for Gaussian marginals (the per-axis parameter the trial drew from Pi_eta).
    ``d``, ``floor``: (T,) float64; ``marginal_params``: (T, 2)."""
    key = "tail_index" if marginals == "mirrored_pareto" else "std"
    params = marginal_params.double().tolist()
    return [{"n_points": int(n), "d": float(di), "floor": float(fi), key: p} for di, fi, p in zip(d, floor, params)]


def _band_summary(out: torch.Tensor, target: torch.Tensor, n: int) -> dict[str, Any]:
    """Mean over trials of the Hill-band miss share per axis, for the output and the target, and the run's one
    number: the largest excess of the output's share over the target's across the two axes (NaN-safe)."""
    axes = {str(a): {"output": float(out[:, a].nanmean()), "target": float(target[:, a].nanmean())} for a in (0, 1)}
    excess = max(v["output"] - v["target"] for v in axes.values())
    return {"k_range": list(band_k_range(n)), "axes": axes, "excess": excess}


def _discrepancy(e: torch.Tensor, e_hat: torch.Tensor) -> float:
    """E(e, e_hat) of eq. 41; +inf when some candidate Hill error is not finite.

    A fully degenerate output ensemble (every point equal) has an infinite Hill estimate, so its
    Hill error distribution is infinitely far from the reference: report that rather than fail.
    """
    from heavytail.science.metrics import hill_error_discrepancy

    if not bool(torch.isfinite(e).all()):
        return float("inf")
    return float(hill_error_discrepancy(e, e_hat))


def _median_abs_error(curve: torch.Tensor, tail_index: torch.Tensor) -> dict[str, list[float]]:
    """Median over trials of |a_hat - a| per threshold and axis: {axis: [per phi]}."""
    err = (curve.double() - tail_index.unsqueeze(0)).abs()
    med = err.nanmedian(dim=1).values
    return {str(axis): med[:, axis].tolist() for axis in (0, 1)}


def load_results(run_dir: str | Path) -> dict[str, Any]:
    return RunDir(run_dir).results()


def main(argv: list[str] | None = None) -> int:
    """``python -m heavytail evaluate RUN_DIR ... [--device cpu]``: writes each run's results.json; 2 (one
    line, before anything is evaluated) when a folder is not a completed run, its model.pt is unreadable or the
    device is not there."""
    parser = argparse.ArgumentParser(prog="python -m heavytail evaluate", description="Evaluate completed runs.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="completed run folders")
    parser.add_argument("--floor-cache", default=None, metavar="DIR",
                        help="folder for the shared floor pools (default: <run folder>/../_floors)")
    parser.add_argument("--device", default="cpu", choices=DEVICES,
                        help="where the model runs (default: cpu; auto: CUDA when torch sees it)")
    cli.add_quiet(parser)
    args = parser.parse_args(argv)
    try:
        unfinished = [d for d in args.run_dirs if not is_complete(d)]
        if unfinished:
            raise ValueError(f"not completed runs (no COMPLETE marker; train them first): {', '.join(unfinished)}")
        from heavytail.harness.build import resolve_device

        device = resolve_device(RunConfig(device=args.device))
        for run_dir in args.run_dirs:  # a damaged model.pt is one line naming it, before any run is evaluated
            load_model(run_dir, device)
    except (*cli.BAD_INPUT, RuntimeError) as err:
        return cli.bad_input("evaluate", err)
    for run_dir in args.run_dirs:
        res = evaluate(run_dir, floor_cache=args.floor_cache, quiet=args.quiet, device=device)
        med, mean = res["energy"]["median"], res["energy"]["mean"]
        print(
            f"{res['name']}: median ratio {med['ratio']:.3f} [{med['low']:.3f}, {med['high']:.3f}]"
            f", mean ratio {mean['ratio']:.3f} [{mean['low']:.3f}, {mean['high']:.3f}], {res['collapse']['label']}"
        )
    return 0
