"""The attention interventions of the mechanism study (a kernel split at one block, QK-norm, StableMax): each is a
run option recorded in the configuration, changes only what it names, and a bad one is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from heavytail.harness.config import RunConfig
from heavytail.science.model import TABLE3_PARAMETERS, MeasureTransformer, ModelConfig, count_parameters
from summaries import complete

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(d_model=16, n_blocks=3, d_ff=16, n_points=32)


def _model(**kw) -> MeasureTransformer:
    torch.manual_seed(0)
    return MeasureTransformer(ModelConfig(**RunConfig(**{**SMALL, **kw}).model_kwargs()))


def test_the_split_block_alone_computes_the_other_kernel_on_a_backend_that_computes_it():
    m = _model(kernel="softmax", attention_backend="sdpa", split_kernel="log_elu", split_block=0)
    assert [b.attn.kernel.name for b in m.blocks] == ["log_elu", "softmax", "softmax"]
    assert [b.cfg.backend for b in m.blocks] == ["auto", "sdpa", "sdpa"]  # SDPA computes softmax only
    mirror = _model(kernel="log_elu", split_kernel="softmax", split_block=0)
    assert [b.attn.kernel.name for b in mirror.blocks] == ["softmax", "log_elu", "log_elu"]


def test_a_split_changes_the_split_blocks_output_only():
    """Same weights, block 2 split: blocks 0-1 give identical activations, and block 2 differs."""
    plain, split = _model(kernel="softmax"), _model(kernel="softmax", split_kernel="log_elu", split_block=2)
    split.load_state_dict(plain.state_dict())
    x = torch.randn(2, 32, 2)
    h_plain, h_split = plain.w_in(x), split.w_in(x)
    for i, (a, b) in enumerate(zip(plain.blocks, split.blocks)):
        h_plain, h_split = a(h_plain), b(h_split)
        assert torch.equal(h_plain, h_split) == (i < 2)


def test_qk_norm_bounds_the_score_and_adds_two_layernorms_per_block():
    assert count_parameters(MeasureTransformer(ModelConfig(**RunConfig().model_kwargs()))) == TABLE3_PARAMETERS
    with_norm = MeasureTransformer(ModelConfig(**RunConfig(qk_norm=True).model_kwargs()))
    assert count_parameters(with_norm) - TABLE3_PARAMETERS == 6 * 2 * 2 * 256
    m = _model(kernel="softmax", qk_norm=True)
    x = 1e6 * torch.randn(1, 32, 2)  # heavy-tailed-sized tokens
    _, stats = m(x, return_attention_stats=True)
    d_head = 16
    # |q . k| / sqrt(d) <= |q||k| / sqrt(d) = d / sqrt(d) for unit-gain LayerNorm outputs (norm sqrt(d) each)
    assert all(float(s["max_abs_score"]) <= d_head / d_head ** 0.5 + 1e-3 for s in stats)


@pytest.mark.parametrize("bad, words", [
    (dict(split_kernel="log_elu", split_block=6), "outside the model"),
    (dict(split_kernel="log_elu", split_block=0, n_blocks=1), "no block structure to split"),
    (dict(split_block=0), "needs split_kernel"),
    (dict(split_kernel="softmax", split_block=0), "another kernel"),
    (dict(split_kernel="relu", split_block=0), "split_kernel='relu' is not allowed"),
])
def test_a_bad_intervention_is_one_line_and_exit_2(tmp_path, bad, words):
    cfg = {**RunConfig(steps=2, warmup_steps=1, kernel="softmax", **SMALL).to_dict(), **bad}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = subprocess.run([sys.executable, "-m", "heavytail", "train", str(path), "--output", str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0], run.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------- the mechanism study's rules
from heavytail.pipeline.grid_file import GridSpec  # noqa: E402
from heavytail.studies import claims as C  # noqa: E402
from heavytail.studies.collapse import mechanism as M  # noqa: E402


def test_the_grid_files_are_the_registered_design():
    screen = [c.to_dict() for c in GridSpec.from_yaml(ROOT / "params/grid_mechanism_screen.yaml").configs]
    assert len(screen) == len(M.SETTINGS) * 2 * len(M.SCREEN_SEEDS)
    assert all(c["steps"] == M.SCREEN_STEPS and c["schedule_steps"] == 50000 for c in screen)
    inter = [c.to_dict() for c in GridSpec.from_yaml(ROOT / "params/grid_mechanism_interventions.yaml").configs]
    assert {M.intervention_of(c) for c in inter} == set(M.INTERVENTIONS)
    assert all(M._on_r2(c) for c in inter) and {c["seed"] for c in inter} == set(range(6))


def _run(seed, collapsed, ratio, steps_share=0.0, **config):
    cfg = RunConfig(**{"kernel": "softmax", "attention_backend": "sdpa", **config}, seed=seed, steps=6000,
                    schedule_steps=50000, n_points=1024, trials_per_step=1, lr=1e-3, precision="float32",
                    flush_subnormals=True, eval_trials=256, eval_n_points=1024, log_every=25).to_dict()
    n = 240
    flags = [1.0] * round(n * steps_share) + [0.0] * (n - round(n * steps_share))
    return complete({"name": f"r{seed}", "config": cfg, "median": {"ratio": ratio},
                     "collapse": {"label": "collapse" if collapsed else "ok", "fraction": 0.9 if collapsed else 0.0},
                     "trace": {"step": list(range(25, 6001, 25)), "collapsed_fraction": flags, "loss": [0.1] * n}})


def test_the_hypothesis_row_reads_the_interventions():
    plain = [_run(s, True, 100.0, 0.5) for s in range(6)]
    def prevented(keys):
        return [_run(s, False, 3.0, 0.0, **keys) for s in range(6)]

    runs = plain + prevented(M.INTERVENTIONS["block0-log-elu"]) + prevented(M.INTERVENTIONS["stablemax"])
    found = {c["id"]: c for c in M.findings(runs)}
    assert found["prevents-block0-log-elu"]["verdict"] == C.REPRODUCED
    assert found["fewer-steps-stablemax"]["verdict"] == C.REPRODUCED and found["closer-stablemax"]["verdict"] == C.REPRODUCED
    assert found["hypothesis"]["verdict"] == C.REPRODUCED
    # block 0 changed and still failing, softmax in block 0 alone harmless: not supported
    failing = [_run(s, True, 100.0, 0.5, split_kernel="log_elu", split_block=0) for s in range(6)]
    harmless = [_run(s, False, 3.0, 0.0, **{**M.INTERVENTIONS["block0-softmax"]}) for s in range(6)]
    found = {c["id"]: c for c in M.findings(plain + failing + harmless)}
    assert found["hypothesis"]["verdict"] == C.NOT_REPRODUCED
    assert {c["id"]: c for c in M.findings(plain)}["hypothesis"]["verdict"] == C.NOT_RUN
    three = [r for r in runs if r["config"]["seed"] < 3]
    assert {c["id"]: c for c in M.findings(three)}["hypothesis"]["verdict"] == C.UNDECIDED


def test_the_screen_says_softmax_learns_only_within_a_factor_of_log_elu_on_every_seed():
    def run(seed, level, kernel):
        r = _run(seed, False, 1.0, kernel=kernel, attention_backend="sdpa" if kernel == "softmax" else "auto")
        r["trace"]["loss"] = [level] * len(r["trace"]["step"])
        return r
    log = [run(s, 0.1, "log_elu") for s in (0, 1)]
    assert M.learns([run(0, 0.15, "softmax"), run(1, 0.19, "softmax")], log)["learns"]
    assert not M.learns([run(0, 0.15, "softmax"), run(1, 0.6, "softmax")], log)["learns"]
    assert not M.learns([], log)["learns"]


def test_the_intervention_figure_draws_each_intervention_against_plain_softmax_and_log_elu_on_its_seeds():
    from heavytail.studies.collapse import mechanism_views as V

    def absorbed(run, share):
        run["trace"]["block0.attn_absorbed"] = [share] * len(run["trace"]["step"])
        return run

    plain = [absorbed(_run(s, True, 100.0, 0.5), 1.0) for s in range(3)]
    log_elu = [absorbed(_run(s, False, 2.0, kernel="log_elu", attention_backend="auto"), 0.0) for s in range(3)]
    mine = [absorbed(_run(s, False, 3.0, **M.INTERVENTIONS["block0-log-elu"]), 0.0) for s in (0, 1)]
    fig = V.interventions_figure(plain + log_elu + mine)
    loss, absorbed_ax = fig.axes[0], fig.axes[1]
    # one column: seeds 0 and 1 of each group (plain softmax's seed 2 has no intervention partner), loss and block 0
    assert len(fig.axes) == 2 and "block0-log-elu, seeds 0, 1" in loss.get_title()
    assert len(loss.lines) == 6 and len(absorbed_ax.lines) == 6
    assert sorted(line.get_label() for line in loss.lines if not line.get_label().startswith("_")) == [
        "block0-log-elu", "log-ELU", "plain softmax (SDPA)"]
    assert {round(line.get_ydata()[-1], 6) for line in absorbed_ax.lines} == {0.0, 1.0}
