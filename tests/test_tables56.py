"""Tables 5-6 at Table 3's model (heavytail.studies.collapse.tables56): the grid's design, its refusals, and the
P5 shape rule under simulated nulls."""

from __future__ import annotations

import functools
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from heavytail.__main__ import main as cli_main
from heavytail.names import KERNELS
from heavytail.pipeline.grid_file import GridSpec
from heavytail.studies import claims as C
from heavytail.studies.collapse import tables56 as T

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "params" / "grid_tables56.yaml"


@functools.lru_cache(maxsize=None)
def _grid_configs(path=GRID):
    return tuple(cfg.to_dict() for cfg in GridSpec.from_yaml(path).configs)


def _configs(path=GRID):
    return [dict(c) for c in _grid_configs(path)]


def test_the_cells_are_tables_5_and_6():
    cs = T.cells()
    assert len(cs) == len(set(cs)) == 2 * len(KERNELS) * 2 * 3 == 48
    assert len(T.CLAIM_BEARING) == len(set(T.CLAIM_BEARING)) == 16
    assert set(T.FROM_LADDER) <= set(T.CLAIM_BEARING)


def test_the_grid_file_is_the_plan_in_order():
    configs = _configs()
    got = [(T.cell_of(c), c["seed"]) for c in configs]
    assert got == T.plan()
    assert T.grid_problem(configs) is None
    # the claim-bearing cells come first, seed by seed, the Gaussian control and the matrix inverse first
    assert got[0][0].column == "swap-gaussian" and got[2][0].column == "inverse-pareto"
    bearing = [s for c, s in got if c in T.CLAIM_BEARING]
    assert bearing == sorted(bearing) and len(bearing) == 13 * len(T.SEEDS)
    assert all(c not in T.CLAIM_BEARING for c, _ in got[len(bearing):])
    assert {c for c, _ in got} | set(T.FROM_LADDER) == set(T.cells())


def test_a_ladder_r2_run_is_its_cell():
    cfg = {**_configs()[0], "benchmark": "sheared_swap", "marginals": "mirrored_pareto", "eval_trials": 64}
    assert T.cell_of(cfg) == T.Cell("post", "softmax", False, "swap-pareto")
    assert T.cell_of({**cfg, "lr": 3e-3}) is None
    assert T.cell_of({**cfg, "attention_backend": "tiled"}) is None


def _write(tmp_path, edit):
    data = yaml.safe_load(GRID.read_text())
    edit(data)
    path = tmp_path / "grid_tables56.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["axes"]["runs"].append({**d["axes"]["runs"][-1], "kernel": "elu_pow3", "seed": 0}),
     "not a Tables 5-6 cell"),
    (lambda d: d["base"].update(lr=3e-3), "differs in lr"),
    (lambda d: d["axes"]["runs"].pop(20), "different seed lists"),
    (lambda d: d["axes"].update(runs=[r for r in d["axes"]["runs"] if r["seed"] != 5]), "need at least"),
    (lambda d: d["base"].update(eval_trials=64), "eval_trials=64"),
])
def test_a_grid_that_breaks_the_design_is_one_line_and_exit_2(tmp_path, edit, words, capsys):
    # In process (the command's own entry point); the first case also as a real process, as a user meets it.
    path = _write(tmp_path, edit)
    args = ["grid", str(path), "--list", "--output-root", str(tmp_path / "out")]
    if words == "not a Tables 5-6 cell":
        run = subprocess.run([sys.executable, "-m", "heavytail", *args], capture_output=True, text=True, cwd=ROOT,
                             timeout=120)
        code, err = run.returncode, run.stderr
    else:
        code, err = cli_main(args), capsys.readouterr().err
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_extra_seeds_on_a_one_seed_cell_are_allowed():
    configs = _configs()
    extra = {**configs[-1], "seed": 1}
    assert T.grid_problem([*configs, extra]) is None


# ---------------------------------------------------------------------------------------------------- P5's shape
EVERY = 25
STEPS = np.arange(EVERY, 6001, EVERY)


def _descending(rng, floor=0.05, sigma=0.35):
    """A healthy trace: exponential descent to ``floor`` with log-normal noise on every logged row."""
    return (floor + 0.8 * np.exp(-STEPS / 400.0)) * np.exp(sigma * rng.standard_normal(STEPS.size))


def test_the_shapes_are_told_apart():
    rng = np.random.default_rng(0)
    partner = _descending(rng)
    learned_then_diverged = _descending(rng)
    learned_then_diverged[STEPS >= 3500] = 0.8 * np.exp(0.1 * rng.standard_normal((STEPS >= 3500).sum()))
    got = T.shape(STEPS, learned_then_diverged, STEPS, partner)
    assert got["shape"] == "learned, then diverged" and 3500 <= got["diverged_at"] <= 3500 + 25 * T.WINDOW
    never = 0.6 * np.exp(0.1 * rng.standard_normal(STEPS.size))
    assert T.shape(STEPS, never, STEPS, partner)["shape"] == "never learned"
    assert T.shape(STEPS, _descending(rng), STEPS, partner)["shape"] == "learned"
    late = _descending(rng)
    late[STEPS >= 5800] = 0.8
    assert T.shape(STEPS, late, STEPS, partner)["shape"] == "diverged too late to tell"
    slow = _descending(rng) * np.where(STEPS >= 2000, 1 + (STEPS - 2000) / 600.0, 1.0)
    assert T.shape(STEPS, slow, STEPS, partner)["shape"] != "learned, then diverged"  # a slow drift is not abrupt


def test_p5_shape_is_rare_on_healthy_runs():
    """Under the null (softmax trains as log-ELU does, with heavy noise and occasional spikes) the shape is
    called on few runs, and the rate rule built on it (6 seeds) reads reproduced in at most 5 % of simulated cells."""
    rng = np.random.default_rng(1)
    calls = []
    for _ in range(300):
        a, b = _descending(rng, sigma=0.6), _descending(rng, sigma=0.6)
        spikes = rng.random(STEPS.size) < 0.03
        a[spikes] *= 30.0
        calls.append(T.shape(STEPS, a, STEPS, b)["shape"] == "learned, then diverged")
    rate = float(np.mean(calls))
    assert rate <= 0.02, rate
    hits = rng.binomial(6, max(rate, 0.02), size=4000)
    fp = np.mean([C.rate_rule(int(h), 6).verdict == C.REPRODUCED for h in hits])
    assert fp <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)


def test_regular_rows_drop_skipped_steps():
    trace = {"step": [25, 50, 63, 75], "loss": [1.0, 0.5, float("nan"), 0.4]}
    steps, loss = T.regular_rows(trace, 25)
    assert steps.tolist() == [25, 50, 75] and loss.tolist() == [1.0, 0.5, 0.4]


# ------------------------------------------------------------------------------------------ the rules P1-P5
from heavytail.studies.collapse import tables56_rules as R  # noqa: E402


def _run(cell, seed, fraction, ratio, loss=None):
    cfg = {**_grid_configs()[0], **cell.config(), "seed": seed}
    trace = {"step": STEPS.tolist(), "loss": (loss if loss is not None else np.full(STEPS.size, 0.1)).tolist(),
             "collapsed_fraction": [0.0] * STEPS.size}
    return {"name": f"{cell.label}-{seed}", "config": cfg, "median": {"ratio": ratio}, "mean": {"ratio": ratio},
            "collapse": {"label": "collapse" if fraction >= 0.5 else "ok", "fraction": fraction}, "trace": trace}


def _paper_like(seeds=T.SEEDS):
    """Runs as the paper reports them: post-norm softmax collapses without symlog on both heavy columns and with
    symlog on the sheared swap, learning first and diverging at step 3,500; every other run is healthy."""
    rng = np.random.default_rng(3)
    runs = []
    for cell in T.CLAIM_BEARING:
        for s in seeds:
            bad = cell.kernel == "softmax" and cell.norm == "post" and cell.column in T.HEAVY and (
                not cell.symlog or cell.column == "swap-pareto")
            loss = _descending(rng)
            if bad:
                loss[STEPS >= 3500] = 1.0
            runs.append(_run(cell, s, 0.9 if bad else 0.0, 40.0 if bad else 1.1 * np.exp(0.1 * rng.standard_normal()),
                             loss))
    return runs


def test_paper_like_runs_reproduce_every_claim():
    found = {c["id"]: c for c in R.findings(_paper_like())}
    assert len(found) == 2 * (1 + 3) + 2 + 2 + 2 + 3
    assert all(c["verdict"] == C.REPRODUCED for c in found.values()), {k: c["verdict"] for k, c in found.items()}
    assert "survives labelling at shares 0.4 and 0.6" in found["p1-collapse-swap-pareto"]["evidence"]
    assert "learned, then diverged 6" in found["p5-shape-inverse-pareto"]["evidence"]
    assert "learned, then diverged 6" in found["p5-shape-symlog-swap-pareto"]["evidence"]
    assert "~4,500 with symlog" in found["p5-shape-symlog-swap-pareto"]["paper"]


def test_never_learning_softmax_is_p5_not_reproduced_whatever_its_label():
    runs = _paper_like()
    for r in runs:
        if T.cell_of(r["config"]) == T.Cell("post", "softmax", False, "swap-pareto"):
            r["trace"]["loss"] = [0.7] * STEPS.size
    found = {c["id"]: c for c in R.findings(runs)}
    assert found["p5-shape-swap-pareto"]["verdict"] == C.NOT_REPRODUCED
    assert "never learned 6" in found["p5-shape-swap-pareto"]["evidence"]
    assert found["p1-collapse-swap-pareto"]["verdict"] == C.REPRODUCED


def test_fewer_seeds_are_undecided_never_not_reproduced():
    found = R.findings([r for r in _paper_like() if r["config"]["seed"] < 3])
    assert {c["verdict"] for c in found} == {C.UNDECIDED}


def test_a_threshold_sensitive_label_says_so():
    runs = _paper_like()
    for r in runs:
        if T.cell_of(r["config"]) == T.Cell("post", "softmax", False, "inverse-pareto"):
            r["collapse"]["fraction"] = 0.55
    found = {c["id"]: c for c in R.findings(runs)}
    assert "at other shares: 0.4: reproduced, 0.6: not reproduced" in found["p1-collapse-inverse-pareto"]["evidence"]


def test_two_runs_of_one_seed_are_refused():
    runs = _paper_like()
    with pytest.raises(ValueError, match="two runs of"):
        R.by_cell([*runs, runs[0]])


def test_rate_rules_false_positive_rate_at_the_boundary():
    """At a true collapse rate of 1/2 (the boundary of every rate claim), the composite and reversed rules call
    reproduced in at most 5 % of simulated 6-seed cells."""
    rng = np.random.default_rng(4)
    n_sim, cell = 1000, T.Cell("post", "softmax", False, "swap-pareto")
    wrong = {"p1": 0, "avoid": 0, "p2-swap": 0}
    # Each seed's two possible softmax runs and the slower kernels' runs, built once (the rules only read them).
    runs = {(s, c): _run(cell, s, c, 1.0) for s in T.SEEDS for c in (0.0, 1.0)}
    healthy = {k: [_run(cell, s, 0.0, 1.0) for s in T.SEEDS] for k in SLOWER}
    for _ in range(n_sim):
        soft = [runs[s, float(rng.random() < 0.5)] for s in T.SEEDS]
        wrong["p1"] += R.p1_collapse(soft, healthy).verdict == C.REPRODUCED
        wrong["avoid"] += R.avoids(soft).verdict == C.REPRODUCED
        wrong["p2-swap"] += R.p2_decision(soft, "swap-pareto").verdict == C.REPRODUCED
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / n_sim)
    assert all(v / n_sim <= bound for v in wrong.values()), wrong


SLOWER = ("squared_elu", "linear_elu", "log_elu")


def test_similar_false_positive_rate_at_the_margin():
    """With the true paired log ratio at the margin (x1.5), P3's 'similar' reads reproduced in at most 5 %."""
    rng = np.random.default_rng(5)
    n_sim = 4000
    m = math.log(T.SIMILAR_MARGIN)
    calls = sum(R.similar(list(m + 0.4 * rng.standard_normal(6))).verdict == C.REPRODUCED for _ in range(n_sim))
    assert calls / n_sim <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n_sim)
    assert R.similar([0.01, -0.02, 0.03, 0.0, -0.01, 0.02]).verdict == C.REPRODUCED
    assert R.similar([2.0, 2.1, 1.9, 2.2, 2.0, 1.8]).verdict == C.NOT_REPRODUCED


def test_the_shape_table_says_when_a_softmax_cell_has_no_partner_yet():
    from heavytail.studies.collapse import tables56_views as V

    shaped = {"shape": "learned, then diverged", "diverged_at": 4675}
    table = V.shape_table({"with": {0: shaped}, "without": {}}, label=str)
    rows = {r["softmax runs"]: r for r in table["rows"]}
    assert rows["with"]["seeds"] == "0" and rows["with"]["divergence steps"] == "4,675"
    assert rows["without"]["seeds"] == "none yet with a log-ELU partner" and rows["without"]["divergence steps"] == "-"
