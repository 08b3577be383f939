"""The mechanism screen's views (heavytail.studies.collapse.mechanism_views): every screen run is placed in its
setting, and the table states the criterion's numbers per seed."""

from __future__ import annotations

from collections import Counter

import matplotlib

matplotlib.use("Agg")

from heavytail.pipeline.grid_file import GridSpec  # noqa: E402
from heavytail.studies.collapse import mechanism as M  # noqa: E402
from heavytail.studies.collapse import mechanism_views as V  # noqa: E402
from summaries import complete  # noqa: E402


def test_every_run_of_the_screen_grid_is_one_setting_with_both_kernels_on_both_seeds():
    configs = [c.to_dict() for c in GridSpec.from_yaml("params/grid_mechanism_screen.yaml").configs]
    settings = Counter(M.setting_of(c) for c in configs)
    assert settings == {name: 2 * len(M.SCREEN_SEEDS) for name in M.SETTINGS}


def _run(config, loss):
    steps = list(range(25, M.SCREEN_STEPS + 1, 25))
    return complete({"config": {**config, "log_every": 25}, "trace": {"step": steps, "loss": [loss] * len(steps)}})


def test_the_screen_table_states_each_seeds_ratio_and_the_verdict():
    configs = [c.to_dict() for c in GridSpec.from_yaml("params/grid_mechanism_screen.yaml").configs]
    runs = []
    for c in configs:
        if M.setting_of(c) == "trials4":  # softmax within x2 of log-ELU on both seeds: learns
            runs.append(_run(c, 0.15 if c["kernel"] == "softmax" else 0.1))
        elif M.setting_of(c) == "lr3e-4":  # softmax x5 log-ELU on seed 1: does not learn
            runs.append(_run(c, (0.5 if c["seed"] == 1 else 0.12) if c["kernel"] == "softmax" else 0.1))
    rows = {r["setting"]: r for r in V.screen_table(runs)["rows"]}
    assert rows["trials4"]["softmax learns"] == "yes" and rows["trials4"]["softmax / log-ELU"] == "1.5, 1.5"
    assert rows["lr3e-4"]["softmax learns"] == "no" and rows["lr3e-4"]["softmax / log-ELU"] == "1.2, 5"
    text = V.screen_summary(runs)
    assert "learns with log-ELU in trials4" in text and "not in lr3e-4" in text and "warmup5000" in text
    V.screen_figure(runs)


def test_a_setting_with_one_seed_screened_learns_only_so_far():
    configs = [c.to_dict() for c in GridSpec.from_yaml("params/grid_mechanism_screen.yaml").configs]
    runs = [_run(c, 0.15 if c["kernel"] == "softmax" else 0.1) for c in configs
            if M.setting_of(c) == "trials4" and c["seed"] == 0]
    assert V.screen_table(runs)["rows"][0]["softmax learns"] == "so far (1 of 2 seeds)"
    assert "no setting is fully screened yet; softmax learns so far in trials4 (1 of 2 seeds)" in V.screen_summary(runs)
