"""The mechanism screen's follow-up (heavytail.studies.collapse.mechanism_followup): which setting it follows, its
grid (R2's recipe with one change), and its P5 and collapse claims on synthetic traces."""

from __future__ import annotations

import yaml

from heavytail.__main__ import main as cli_main
from heavytail.pipeline.grid_file import GridSpec
from heavytail.studies import claims as C
from heavytail.studies.collapse import mechanism as M
from heavytail.studies.collapse import mechanism_followup as F
from heavytail.studies.collapse import tables56 as T
from summaries import complete

SCREEN = "params/grid_mechanism_screen.yaml"


def test_the_cheapest_setting_that_learns_is_followed_once_every_cheaper_one_said_no():
    states = dict.fromkeys(M.SETTINGS, "not run")
    assert F.choice({**states, "lr3e-4": "so far (1 of 2 seeds)", "trials4": "yes"})[0] is None  # a cheaper one waits
    assert F.choice({**states, "lr3e-4": "yes", "warmup5000": "yes"})[0] == "lr3e-4"
    assert F.choice({**states, "lr3e-4": "no", "warmup5000": "yes"})[0] == "warmup5000"
    setting, why = F.choice(dict.fromkeys(M.SETTINGS, "no"))
    assert setting is None and "nothing to follow" in why


def test_the_followup_grid_is_r2s_recipe_with_the_settings_one_change(tmp_path):
    path = tmp_path / "followup.yaml"
    path.write_text(yaml.safe_dump(F.grid("lr3e-4", yaml.safe_load(open(SCREEN))), sort_keys=False))
    configs = GridSpec.from_yaml(path).configs
    assert len(configs) == len(F.SEEDS) * 2 and [c.seed for c in configs[:2]] == [F.SEEDS[0]] * 2
    for c in configs:
        d = c.to_dict()
        assert M.setting_of(d) == "lr3e-4" and c.lr == 3e-4
        assert all(d[k] == T.RECIPE[k] for k in T.RECIPE if k != "lr"), d
    assert {(c.kernel, c.attention_backend) for c in configs} == {("softmax", "sdpa"), ("log_elu", "auto")}


def _run(config, losses, collapsed_share=0.0):
    steps = list(range(25, T.RECIPE["steps"] + 1, 25))
    return complete({"name": f"{config['kernel']}-{config['seed']}", "config": {**config, "log_every": 25},
                     "trace": {"step": steps, "loss": [losses(s) for s in steps]},
                     "collapse": {"label": "collapsed" if collapsed_share >= 0.5 else "ok", "fraction": collapsed_share,
                                  "trial_fraction": collapsed_share},
                     "median": {"ratio": 5.0}, "skipped_steps": 0})


def test_softmax_that_learns_then_diverges_on_every_seed_reproduces_fig_13s_shape(tmp_path):
    path = tmp_path / "followup.yaml"
    path.write_text(yaml.safe_dump(F.grid("lr3e-4", yaml.safe_load(open(SCREEN))), sort_keys=False))
    runs = []
    for c in (c.to_dict() for c in GridSpec.from_yaml(path).configs):
        if c["kernel"] == "softmax":  # with log-ELU until step 3,500, then x20 within 100 steps, and stays
            runs.append(_run(c, lambda s: 0.05 if s < 3500 else 1.0, collapsed_share=0.9))
        else:
            runs.append(_run(c, lambda s: 0.05))
    found = {f["id"]: f for f in F.findings(runs)}
    shape = found["followup-shape-lr3e-4"]
    assert shape["verdict"] == C.REPRODUCED and shape["seeds"] == len(F.SEEDS)
    assert "learned, then diverged 6" in shape["evidence"]
    assert found["followup-collapse-lr3e-4"]["verdict"] == C.REPRODUCED


def test_softmax_that_never_learns_is_not_figure_13s_shape(tmp_path):
    path = tmp_path / "followup.yaml"
    path.write_text(yaml.safe_dump(F.grid("lr3e-4", yaml.safe_load(open(SCREEN))), sort_keys=False))
    runs = [_run(c, (lambda s: 0.6) if c["kernel"] == "softmax" else (lambda s: 0.05))
            for c in (c.to_dict() for c in GridSpec.from_yaml(path).configs)]
    shape = {f["id"]: f for f in F.findings(runs)}["followup-shape-lr3e-4"]
    assert shape["verdict"] == C.NOT_REPRODUCED and "never learned 6" in shape["evidence"]


def test_an_undecided_screen_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    from heavytail.studies import reference_maps

    monkeypatch.setattr(reference_maps, "source", lambda name, local=None, root=None: reference_maps.Source(
        name, (), name, "absent", {}))
    assert cli_main(["mechanism-followup", "--output", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no follow-up yet" in err[0] and not (tmp_path / "x.yaml").exists()


def test_the_committed_followup_grid_is_what_the_command_writes_from_the_shipped_screen(tmp_path):
    assert cli_main(["mechanism-followup", "--output", str(tmp_path / "x.yaml")]) == 0
    assert yaml.safe_load(open(tmp_path / "x.yaml")) == yaml.safe_load(open(F.FOLLOWUP_GRID))


def test_the_notebooks_sentence_names_the_setting_it_waits_for_or_the_command():
    from heavytail.studies.collapse import mechanism_views as V

    assert "waits for lr3e-4" in V.followup_text([]) and "mechanism-followup`" not in V.followup_text([])
    configs = [c.to_dict() for c in GridSpec.from_yaml(SCREEN).configs if c.lr == 3e-4]
    steps = list(range(25, M.SCREEN_STEPS + 1, 25))
    runs = [complete({"config": {**c, "log_every": 25}, "trace": {"step": steps, "loss": [0.1] * len(steps)}})
            for c in configs]
    text = V.followup_text(runs)
    assert "lr3e-4: softmax learns on every screened seed" in text and "python -m heavytail mechanism-followup" in text
