"""One finished run as the shipped maps keep it: a small summary of a run folder (:func:`run_summary`), and the
summaries of a grid's runs (:func:`collect`).

A summary holds the configuration, the final loss, eq. 36's ratios with eq. 37's intervals, the collapse label and
onset, the skipped steps, the collapse precursors logged per block (App. I), the attention paths the run's
training and evaluation recorded (:attr:`heavytail.studies.grid_folder.FinishedRun.attention`), and, where evaluation kept them, the per-trial records
at the run's training N (distance, the trial's own floor, its tail indices: :func:`trial_records`), for statistics
of the excess over the floor that eq. 36's ratio of two medians cannot give. Every shipped map
(:mod:`heavytail.studies.reference_maps`) is a list of these; never checkpoints or weights.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from heavytail.harness.rundir import RunDir
from heavytail.studies.grid_folder import GRID_JSON, FinishedRun, finished_runs
from heavytail.studies.run_record import RunRecord

TRACE_KEYS = ("loss", "grad_norm", "collapsed_fraction")
BLOCK_TRACE_KEYS = ("max_abs_score", "attn_entropy_ratio", "attn_max_weight", "qk_spectral_norm", "grad_norm")
# Logged only by runs trained with them (absorption and the W_Q/W_K gradient, App. I's precursors); older
# runs lack them, so they join a summary only where present.
ONSET_BLOCK_KEYS = ("attn_absorbed", "qk_grad_norm")
RATIO_KEYS = ("ratio", "low", "high", "bold", "candidate", "floor")  # eq. 36-37, with the two medians it divides
# Per-trial parameters a record may carry: the mirrored Pareto's tail indices or the Gaussian's stds, per axis.
TRIAL_PARAMS = ("tail_index", "std")
# Significant digits kept in a summary: 9 give back every float32 distance exactly (evaluation computes them in
# float32, accumulated in float64), so d - floor loses nothing; 4 place a tail index (a draw from a range one
# unit wide) to 1e-3, finer than any stratum of it. A shipped map holds 64 trials of hundreds of runs.
_DISTANCE_DIGITS, _PARAM_DIGITS = 9, 4


# ------------------------------------------------------------------------------------ one run
def _sig(x: Any, digits: int = 4) -> Any:
    """Round to significant digits for the shipped traces (they are drawn, not recomputed)."""
    if isinstance(x, float) and math.isfinite(x) and x != 0:
        return float(f"{x:.{digits}g}")
    return x


def run_summary(run: FinishedRun | str | Path) -> dict[str, Any]:
    """The small record of one finished run (:class:`heavytail.studies.grid_folder.FinishedRun`, or a run folder):
    configuration, final loss, ratios with intervals, collapse label and onset, skipped steps, the attention paths
    that ran, the collapse precursors logged per block (App. I) and, where evaluation kept them, the per-trial
    records at the training N (:func:`trial_columns`)."""
    from heavytail.science.collapse import collapse_onset, rolling_median

    if not isinstance(run, FinishedRun):
        run = FinishedRun.from_results(RunDir(run).results(), run)
    results, log = run.results, list(run.log)
    config = results["config"]
    losses = [row["loss"] for row in log if not row.get("skipped")]
    tail = max(1, len(losses) // 10)
    final_loss = float(rolling_median(losses[-tail:], tail)[-1]) if losses else math.nan
    energy = results["energy"]
    blocks: list[dict[str, Any]] = []
    # Rows a dense window added around a collapse (RunConfig.dense_log_window) are not the regular log: the
    # shares of logged steps read the regular rows only, the window is kept apart for the onset figure.
    rows = [row for row in log if row.get("blocks") and not row.get("dense")]
    for b in range(len(rows[-1]["blocks"]) if rows else 0):
        series = {k: [row["blocks"][b].get(k, math.nan) for row in rows] for k in BLOCK_TRACE_KEYS}
        blocks.append({
            "max_abs_score": max(series["max_abs_score"]),
            "final_entropy_ratio": series["attn_entropy_ratio"][-1],
            "final_max_weight": series["attn_max_weight"][-1],
            "max_qk_spectral_norm": max(series["qk_spectral_norm"]),
            "final_grad_norm": series["grad_norm"][-1],
        })
    trace = {"step": [row["step"] for row in rows]}
    for k in TRACE_KEYS:
        trace[k] = [_sig(row.get(k, math.nan)) for row in rows]
    extra = tuple(k for k in ONSET_BLOCK_KEYS if rows and k in rows[-1]["blocks"][0])
    for b in range(len(blocks)):
        for k in BLOCK_TRACE_KEYS + extra:
            trace[f"block{b}.{k}"] = [_sig(row["blocks"][b].get(k, math.nan)) for row in rows]
    validation = [(row["step"], row["val_log_energy"]) for row in log if "val_log_energy" in row]
    if validation:
        trace["val_step"], trace["val_log_energy"] = [s for s, _ in validation], [_sig(v) for _, v in validation]
    skipped = log[-1]["n_skipped"] if log else 0
    summary = run.run_dir.train_summary() if run.run_dir is not None else {}
    records = train_n_records(results)
    return {
        "name": run.run_dir.path.name if run.run_dir is not None else run.name,
        "config": config,
        "final_loss": final_loss,
        "median": {k: energy["median"][k] for k in RATIO_KEYS if k in energy["median"]},
        "mean": {k: energy["mean"][k] for k in RATIO_KEYS if k in energy["mean"]},
        "collapse": {"label": results["collapse"]["label"], "fraction": results["collapse"]["fraction"],
                     "onset": collapse_onset(log)},
        "at_train_n": _ratios_at(results.get("at_train_n", {})),
        "provenance": (results.get("provenance") or {}).get("training"),
        "attention": run.attention,
        "hill_band": (results.get("hill") or {}).get("band_miss"),
        "skipped_steps": skipped,
        "train_seconds": training_seconds(log),
        "blocks": blocks,
        "trace": trace,
        **({"stop": {k: summary[k] for k in ("stopped_at", "stop_reason", "best_validation") if k in summary}}
           if "stop_reason" in summary else {}),
        **({"best_weights": best_weights(results["best_weights"])} if "best_weights" in results else {}),
        **({"per_trial": trial_columns(records)} if records else {}),
        **({"trial_collapse": tc} if (tc := trial_collapse(results)) else {}),
        **({"onset_window": onset_window(log, stretch=config.get("dense_log_window") or 1)} if any(row.get("dense") for row in log) else {}),
    }


def _ratios_at(scored: Mapping[str, Any]) -> dict[str, Any]:
    """One scoring of a model at one N as a summary keeps it: N, the collapse label and eq. 36-37's ratios."""
    return ({k: v for k, v in scored.items() if k in ("n_points", "collapse")}
            | {stat: {k: scored[stat][k] for k in RATIO_KEYS if k in scored[stat]}
               for stat in ("median", "mean") if stat in scored})


def best_weights(scored: Mapping[str, Any]) -> dict[str, Any]:
    """results.json's "best_weights" as a summary keeps it: the step and validation score of the best weights, and
    their ratios at the common N and (where scored) at the training N, in the same form as the final weights'."""
    if scored.get("step") is None:
        return {"step": None, "reason": scored.get("reason", "")}
    out = {"step": scored["step"], "value": scored["value"], **_ratios_at(scored)}
    if "at_train_n" in scored:
        out["at_train_n"] = _ratios_at(scored["at_train_n"])
    return out


def diverged_count(runs: Sequence[Mapping[str, Any]]) -> int:
    """How many runs (summaries or results) carry the ``diverged`` label (:func:`heavytail.science.collapse.diverged`):
    counted beside the collapsed ones wherever runs are counted, since a failed run is neither healthy nor collapsed."""
    return sum((r.get("collapse") or {}).get("label") == "diverged" for r in runs)


def training_seconds(log: Sequence[Mapping[str, Any]]) -> float:
    """The training time of the steps a run's log kept, across resumes. Training records the seconds since it
    started, carried over a resume by the checkpoint; runs trained before that restarted the clock at each resume,
    so a drop in the series is a resume, and the time logged before it is added to what follows."""
    total, last, seen = 0.0, 0.0, False
    for row in log:
        x = row.get("seconds")
        if not isinstance(x, (int, float)) or not math.isfinite(x):
            continue
        if x < last:  # the clock restarted: a resume under the older training code
            total += last
        last, seen = x, True
    return total + last if seen else math.nan


def train_n_records(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """results.json's per-trial records at the run's training N: ``at_train_n``'s, or the common N's when that is
    the training N; [] when the run was not scored at its training N or was evaluated before records existed."""
    cfg = results["config"]
    if cfg["n_points"] == cfg["eval_n_points"]:
        return list(results.get("per_trial") or [])
    return list((results.get("at_train_n") or {}).get("per_trial") or [])


def trial_columns(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Records (T of them, one N) as the summary stores them, a column per field (a shipped map holds hundreds of
    runs, and a JSON object per trial would be most of its size): {"n_points": N, "d": (T,), "floor": (T,),
    "tail_index" or "std": (2, T), one row per latent axis}."""
    param = next(k for k in TRIAL_PARAMS if k in records[0])
    return {"n_points": records[0]["n_points"],
            "d": [_sig(r["d"], _DISTANCE_DIGITS) for r in records],
            "floor": [_sig(r["floor"], _DISTANCE_DIGITS) for r in records],
            param: [[_sig(r[param][axis], _PARAM_DIGITS) for r in records] for axis in (0, 1)]}


def trial_records(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The per-trial records of a run summary at its training N, in results.json's form: per trial
    {"n_points", "d", "floor", "tail_index" or "std": [axis 0, axis 1]}; [] for a run that has none (evaluated
    before evaluation kept them, or not scored at its training N)."""
    cols = run.get("per_trial")
    if not cols:
        return []
    param = next(k for k in TRIAL_PARAMS if k in cols)
    return [{"n_points": cols["n_points"], "d": d, "floor": f, param: [a0, a1]}
            for d, f, a0, a1 in zip(cols["d"], cols["floor"], *cols[param])]


def trial_collapse(results: Mapping[str, Any]) -> dict[str, Any] | None:
    """Per evaluation trial, its spread ratio (the collapse criterion, App. I) and its task parameters omega_T
    (T, k) (eq. 23 or 25): where in the operator family a model collapses. Runs evaluated before results recorded
    omega_T get it re-drawn by :func:`heavytail.harness.evaluate.evaluation_trials` (a function of the seed), and
    say so. None without spread ratios."""
    c = results.get("collapse") or {}
    if not c.get("spread_ratio"):
        return None
    omega, source = c.get("omega_T"), "recorded at evaluation"
    if omega is None:
        from heavytail.harness.config import RunConfig
        from heavytail.harness.evaluate import evaluation_trials

        omega = evaluation_trials(RunConfig.from_dict(results["config"])).omega_T.tolist()
        source = "re-drawn from the seed"
    return {"spread_ratio": [_sig(x) for x in c["spread_ratio"]], "omega_T": [[_sig(v) for v in row] for row in omega],
            "omega_T_source": source}


def onset_window(log: Sequence[Mapping[str, Any]], keys: Sequence[str] = BLOCK_TRACE_KEYS + ONSET_BLOCK_KEYS,
                 stretch: int = 1) -> dict[str, Any]:
    """The steps around the run's collapse onset at full resolution: the dense window (RunConfig.dense_log_window)
    that holds :func:`heavytail.science.collapse.collapse_onset`, or the last one when the run has no lasting onset.
    A window is centred on a collapsed batch that follows ``stretch`` healthy steps logged at every step (training
    opens a window on exactly that, with ``stretch = dense_log_window``), and shows the steps from ``stretch``
    before it to the next such collapse's healthy stretch or the end of the dense steps.
    ``{"onset": step or None, "center": that collapsed step, "step": [...], "loss": [...],
    "collapsed_fraction": [...], "block<b>.<key>": [...]}``, every step of the window in order."""
    from heavytail.science.collapse import collapse_onset

    onset = collapse_onset([row for row in log if not row.get("dense")])
    rows = sorted((row for row in log if row.get("blocks")), key=lambda row: row["step"])
    # Blocks are maximal runs of consecutive steps; back-to-back windows merge into one block.
    blocks, current = [], []
    for row in rows:
        if current and row["step"] != current[-1]["step"] + 1:
            blocks.append(current)
            current = []
        current.append(row)
    if current:
        blocks.append(current)
    windows = [w for block in blocks for w in _windows_of(block, max(1, stretch))]
    if not windows:
        return {"onset": onset}
    # Without a lasting onset, the last window: the trained model's collapses, not the first steps'. A batch at
    # step 1 can collapse before any healthy stretch exists; training logs it densely, but it is no onset.
    chosen = windows[-1]
    if onset is not None:
        chosen = min(windows, key=lambda w: min(abs(r["step"] - onset) for r in w[1]))
    center, chosen = chosen
    out: dict[str, Any] = {"onset": onset, "center": center, "step": [r["step"] for r in chosen]}
    for k in ("loss", "grad_norm", "collapsed_fraction"):
        out[k] = [_sig(r.get(k, math.nan)) for r in chosen]
    for b in range(len(chosen[0]["blocks"])):
        for k in keys:
            out[f"block{b}.{k}"] = [_sig(r["blocks"][b].get(k, math.nan)) for r in chosen]
    return out


def _windows_of(block: Sequence[Mapping[str, Any]], stretch: int) -> list[tuple[int, list[Mapping[str, Any]]]]:
    """(centre step, rows) for each collapsed batch of ``block`` (consecutive steps) that follows ``stretch``
    healthy ones; each window runs from ``stretch`` steps before its centre to the start of the next one."""
    # Imported here: heavytail.science.collapse loads torch (about 3 s), which reading summaries never needs.
    from heavytail.science.collapse import batch_collapsed

    starts, healthy = [], 0
    for i, row in enumerate(block):
        if batch_collapsed(row) and healthy >= stretch:
            starts.append(i)
        healthy = 0 if batch_collapsed(row) else healthy + 1
    bounds = [i - stretch for i in starts] + [len(block)]
    return [(block[i]["step"], list(block[bounds[j]:bounds[j + 1]])) for j, i in enumerate(starts)]


def collect(grid_dir: str | Path) -> list[RunRecord]:
    """The records (:class:`heavytail.studies.run_record.RunRecord`) of the summaries (:func:`run_summary`) of the
    finished runs of a grid's folder, in the grid's order: the runs
    :func:`heavytail.studies.grid_folder.finished_runs` counts, the same the summary notebook reads. [] when the
    folder holds no ``grid.json`` (or does not exist): a map is a grid's runs, and only its record says which."""
    grid_dir = Path(grid_dir)
    if not (grid_dir / GRID_JSON).is_file():
        return []
    return [RunRecord.from_summary(run_summary(r)) for r in finished_runs(grid_dir).runs]
