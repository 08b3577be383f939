"""keep_best: the weights of a run's best validation score are kept across a kill, saved beside the final ones,
evaluated on the same trials, and shipped in the run summary."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from heavytail.harness.config import RunConfig
from heavytail.harness.rundir import RunDir
from tests.conftest import TINY

# lr 0.3: the tiny model's best validation score comes at step 2 and later ones are worse, so the best weights are
# neither the final ones nor those of the checkpoint a kill after step 5 leaves.
BEST = dict(TINY, steps=12, val_every=2, val_trials=2, keep_best=True, eval_at_train_n=True, lr=0.3)


@pytest.fixture(scope="module")
def best_run(tmp_path_factory):
    from heavytail.harness.evaluate import evaluate
    from heavytail.harness.train import train

    root = tmp_path_factory.mktemp("best")
    cfg = RunConfig.from_dict(BEST)
    train(cfg, root / "killed", quiet=True, stop_after=5)  # a kill after step 5: the checkpoint at step 4 remains
    train(cfg, root / "killed", quiet=True)
    train(cfg, root / "straight", quiet=True)
    return root, evaluate(root / "killed", quiet=True)


def test_the_best_weights_are_the_best_validation_steps_and_survive_a_kill(best_run):
    root, _ = best_run
    for name in ("killed", "straight"):
        run = RunDir(root / name)
        summary = run.train_summary()
        history = [(s, v) for s, v in summary["validation"]]
        step, value = min(((s, v) for s, v in history), key=lambda sv: (sv[1], sv[0]))
        assert summary["best_validation"] == {"step": step, "value": value}
        assert run.best_model_path.exists()
        assert step < 5, "the test needs a best before the kill"
    # the resumed run kept the same best weights as the run trained straight through
    a = torch.load(RunDir(root / "killed").best_model_path, weights_only=True)
    b = torch.load(RunDir(root / "straight").best_model_path, weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_evaluation_scores_both_weights_on_the_same_trials(best_run):
    root, results = best_run
    best = results["best_weights"]
    assert best["step"] == RunDir(root / "killed").train_summary()["best_validation"]["step"]
    assert best["n_points"] == BEST["eval_n_points"] and best["at_train_n"]["n_points"] == BEST["n_points"]
    for stat in ("median", "mean"):
        # one floor pool for both weights: the same denominator, so the two ratios compare the models alone
        assert best[stat]["floor"] == results["energy"][stat]["floor"]
        assert best[stat]["low"] <= best[stat]["ratio"] <= best[stat]["high"]
    assert best["step"] < BEST["steps"]  # other weights than the final ones, so other distances
    assert best["median"]["candidate"] != results["energy"]["median"]["candidate"]


def test_the_run_summary_ships_the_best_weights(best_run):
    from heavytail.studies.run_summary import run_summary

    root, results = best_run
    summary = run_summary(root / "killed")
    assert summary["best_weights"]["step"] == results["best_weights"]["step"]
    assert summary["best_weights"]["median"]["ratio"] == results["best_weights"]["median"]["ratio"]
    assert summary["best_weights"]["at_train_n"]["median"]["ratio"] == \
        results["best_weights"]["at_train_n"]["median"]["ratio"]


def test_keep_best_without_validation_is_refused_by_name():
    with pytest.raises(ValueError, match="keep_best=true needs val_every"):
        RunConfig.from_dict(dict(TINY, keep_best=True))


@pytest.mark.parametrize("values, message", [
    (dict(steps=100, warmup_steps=100), "warmup_steps=100 must be smaller"),
    (dict(steps=100, warmup_steps=10, val_every=200), "val_every=200 is larger than steps=100"),
])
def test_a_budget_below_its_warmup_or_validation_interval_is_one_line_and_exit_2(tmp_path, values, message):
    out = subprocess.run([sys.executable, "-m", "heavytail", "train", "--set",
                          *[f"{k}={v}" for k, v in values.items()], "--output", str(tmp_path / "run")],
                         capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
