"""The converged-gap study (heavytail.studies.kernel_gap.converged) and the subnormal A/B on synthetic runs: the
selection rule picks on its own seeds only, writes stage 2's grid, and the claims read the floor-free excess."""

from __future__ import annotations

import functools
import math

import numpy as np
import yaml

from heavytail.__main__ import main as cli_main
from heavytail.harness.config import RunConfig
from heavytail.studies import claims as C
import heavytail.studies.kernel_gap.converged as G
import heavytail.studies.kernel_gap.subnormal_ab as AB
from summaries import complete

M = 1000
TOL = 3 * math.sqrt(0.05 * 0.95 / M)


@functools.lru_cache(maxsize=None)  # the null simulations build the same few configurations ~10^5 times
def _config(seed, n, kernel, backend, lr, extra):
    return RunConfig(d_model=32, n_blocks=2, d_ff=64, kernel=kernel, attention_backend=backend, lr=lr, seed=seed,
                     n_points=n, trials_per_step=1, steps=3000, warmup_steps=100, eval_n_points=1024,
                     eval_at_train_n=True, device="cpu", **dict(extra)).to_dict()


def _run(seed, n, kernel="softmax", backend="sdpa", lr=1e-3, val=0.0, ratio=2.0, train_ratio=None, **extra):
    cfg = dict(_config(seed, n, kernel, backend, lr, tuple(sorted(extra.items()))))
    return complete({"config": cfg, "median": {"ratio": ratio}, "trace": {"val_log_energy": [val + 1, val]},
                     "at_train_n": {"n_points": n, "median": {"ratio": train_ratio if train_ratio is not None else ratio}},
                     "collapse": {"label": "ok", "fraction": 0.0}, "train_seconds": 10.0})


def _selection_runs(best=3e-3, variants=(("softmax", "sdpa"), ("log_elu", "auto")), ns=(256, 1024)):
    runs = []
    for n in ns:
        for kernel, backend in variants:
            for lr in G.LEARNING_RATES:
                for s in G.SELECT_SEEDS:
                    runs.append(_run(s, n, kernel, backend, lr, val=abs(math.log(lr / best)) + 0.01 * s))
    return runs


def test_selection_picks_the_lowest_median_score_and_flags_edges():
    sel = G.select_lr(_selection_runs(best=3e-3))
    assert {s.lr for s in sel} == {3e-3} and not any(s.edge for s in sel)
    sel = G.select_lr(_selection_runs(best=1e-2))
    assert all(s.edge for s in sel)


def test_an_edge_extension_at_one_cell_leaves_the_other_cells_selected():
    """log-ELU (sorted first) extended to lr 3e-2 at N = 256, the edge rule's extension: every other cell is still
    chosen from the grid's own rates, and the extended cell is no longer at an edge once the optimum is inside."""
    runs = _selection_runs(best=1e-2)
    runs += [_run(s, 256, "log_elu", "auto", 3e-2, val=abs(math.log(3e-2 / 1e-2)) + 0.01 * s) for s in G.SELECT_SEEDS]
    sel = {(s.variant[0], s.n_points): s for s in G.select_lr(runs)}
    assert set(sel) == {(k, n) for k in ("softmax", "log_elu") for n in (256, 1024)}
    assert sel["log_elu", 256].lr == 1e-2 and not sel["log_elu", 256].edge and 3e-2 in sel["log_elu", 256].scores
    assert all(s.edge for key, s in sel.items() if key != ("log_elu", 256))


def test_selection_never_reads_deciding_seeds_and_waits_for_every_rate():
    runs = _selection_runs(best=3e-3)
    # a deciding seed with a far better score at another rate must not move the choice
    runs.append(_run(5, 256, lr=3e-4, val=-100.0))
    assert all(s.lr == 3e-3 for s in G.select_lr(runs))
    incomplete = [r for r in runs if not (r["config"]["n_points"] == 1024 and r["config"]["seed"] == 2
                                          and r["config"]["lr"] == 1e-2)]
    assert {s.n_points for s in G.select_lr(incomplete)} == {256}
    one_rate = [r for r in runs if r["config"]["n_points"] == 256 or r["config"]["lr"] == 3e-4]
    assert {s.n_points for s in G.select_lr(one_rate)} == {256}, "a cell with rates still to run was chosen"


def test_decision_grid_is_a_valid_grid_on_the_deciding_seeds(tmp_path):
    from heavytail.pipeline.grid_file import GridSpec

    template = yaml.safe_load(open(G.SELECT_GRID))
    grid = G.decision_grid(G.select_lr(_selection_runs()), template)
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(grid))
    configs = GridSpec.from_yaml(path).configs
    assert {c.seed for c in configs} == set(G.DECIDE_SEEDS)
    assert {c.lr for c in configs} == {3e-3}
    assert all(c.stop_tolerance == template["base"]["stop_tolerance"] for c in configs)


def test_select_lr_command_refuses_a_folder_without_a_grid_in_one_line(tmp_path, capsys):
    assert cli_main(["select-lr", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "grid.json" in err[0]


def _deciding(slope, rng, ns=(256, 1024, 4096), seeds=G.DECIDE_SEEDS, sd=0.2):
    """Softmax's excess over log-ELU's growing by exp(slope) per doubling of N (log-ELU's excess fixed at 1)."""
    runs = []
    for s in seeds:
        eff = rng.normal(0, sd)
        for n in ns:
            log_excess = eff + slope * math.log2(n / ns[0]) + rng.normal(0, sd)
            runs.append(_run(s, n, train_ratio=1 + math.exp(log_excess)))
            runs.append(_run(s, n, "log_elu", "auto", train_ratio=2.0))
    return runs


def test_excess_growth_claim_reads_the_floor_free_statistic():
    rng = np.random.default_rng(1)
    found = {f["id"]: f for f in G.findings(_deciding(math.log(1.5), rng))}
    assert found["converged-excess-grows"]["verdict"] == C.REPRODUCED
    assert 1.3 < found["converged-excess-grows"]["estimate"] < 1.7
    assert found["converged-excess-grows"]["seeds"] == len(G.DECIDE_SEEDS)


def test_the_scale_a_growth_claim_states_is_the_n_its_slopes_used():
    """A run at a new N whose log-ELU partner has not finished (stage 2 runs seed by seed) is no part of any slope,
    so it must not widen the N the claim says decided it."""
    runs = _deciding(math.log(1.5), np.random.default_rng(5), ns=(256, 1024))
    runs.append(_run(G.DECIDE_SEEDS[0], 4096, lr=1e-3, train_ratio=3.0))
    claim = {f["id"]: f for f in G.findings(runs)}["converged-excess-grows"]
    assert "4096" not in claim["scale"], claim["scale"]
    runs.append(_run(G.DECIDE_SEEDS[0], 4096, "log_elu", "auto", lr=3e-2, train_ratio=2.0))  # its partner: it counts
    assert "4096" in {f["id"]: f for f in G.findings(runs)}["converged-excess-grows"]["scale"]


def test_excess_growth_rule_false_positive_rate_under_no_growth():
    rng = np.random.default_rng(2)
    hits = sum(G.findings(_deciding(0.0, rng))[0]["verdict"] == C.REPRODUCED for _ in range(M))
    assert hits / M <= 0.05 + TOL


def test_a_seed_at_or_below_its_floor_is_left_out_and_said():
    runs = _deciding(0.0, np.random.default_rng(3))
    runs[0]["at_train_n"]["median"]["ratio"] = 0.9  # seed 3, N = 256: softmax below its floor
    found = {f["id"]: f for f in G.findings(runs)}
    assert found["converged-excess-grows"]["seeds"] == len(G.DECIDE_SEEDS) - 1
    assert "left out" in found["converged-excess-grows"]["evidence"]


def test_seven_deciding_seeds_are_undecided():
    runs = _deciding(math.log(2.0), np.random.default_rng(4), seeds=G.DECIDE_SEEDS[:7])
    assert G.findings(runs)[0]["verdict"] == C.UNDECIDED


def test_subnormal_ab_pairs_by_seed_and_calls_equivalence():
    rng = np.random.default_rng(5)
    runs = []
    for s in range(8):
        base = math.exp(rng.normal(1, 0.3))
        runs.append(_run(s, 1024, ratio=base, flush_subnormals=False))
        runs.append(_run(s, 1024, ratio=base * math.exp(rng.normal(0, 0.02)), flush_subnormals=True))
    (claim,) = AB.findings(runs)
    assert claim["verdict"] == C.NOT_REPRODUCED and "equivalent" in claim["evidence"]
    for r in runs[1::2]:
        r["median"]["ratio"] *= 2
    assert AB.findings(runs)[0]["verdict"] == C.REPRODUCED


def _claim(cid, estimate, verdict, seeds=8):
    return {"id": cid, "estimate": estimate, "low": estimate / 1.5, "high": estimate * 1.5, "verdict": verdict,
            "seeds": seeds}


def test_the_front_page_summary_states_both_recipes_with_their_verdicts_and_intervals():
    design = [_claim("gap-grows-with-n", 1.29, C.REPRODUCED), _claim("design-excess-grows", 1.31, C.REPRODUCED)]
    converged = [_claim("converged-excess-grows", 1.03, C.UNDECIDED),
                 _claim("converged-gap-n1024", 0.9, C.UNDECIDED), _claim("converged-gap-n256", 1.05, C.UNDECIDED),
                 _claim("converged-gap-n4096", 0.77, C.UNDECIDED, seeds=6)]
    design_runs = [_run(0, 256, lr=1e-2) | {"config": {**_run(0, 256)["config"], "steps": 300, "lr": 1e-2}}]
    text = " ".join(G.summary(design, converged, design_runs, [_run(3, 256)]).split())
    assert "300 steps at lr 0.01" in text and "at most 3000 steps" in text
    for c in design + converged:
        assert f"x{C.fmt(c['estimate'])} [{C.fmt(c['low'])}, {C.fmt(c['high'])}]" in text, c["id"]
    # the paired ratios in order of N, one shared verdict said once with each N's seeds
    assert text.index("at N = 256") < text.index("at N = 1024") < text.index("at N = 4096")
    assert f"({C.UNDECIDED}; 8, 8 and 6 seeds)" in text
    converged[1] = _claim("converged-gap-n1024", 0.9, C.NOT_REPRODUCED)  # verdicts differ: each N says its own
    text = " ".join(G.summary(design, converged, design_runs, [_run(3, 256)]).split())
    assert f"at N = 1024 ({C.NOT_REPRODUCED}, 8 seeds)" in text and f"at N = 4096 ({C.UNDECIDED}, 6 seeds)" in text
