"""docs/layout.md's three recipes, followed end to end: adding a kernel, a study and a notebook takes the steps the
page names and nothing else."""

from __future__ import annotations

import json

from heavytail import names
from heavytail.harness.config import RunConfig
from heavytail.harness.train import train
from heavytail.io import save_records_json
from heavytail.studies import claim_groups, claims, reference_maps
from heavytail.studies.run_summary import run_summary
from tests.conftest import TINY


def test_adding_a_kernel_is_one_row_and_it_trains_and_evaluates(monkeypatch, tmp_path):
    from heavytail.harness.evaluate import evaluate

    monkeypatch.setitem(names.KERNEL_ROWS, "recipe_pow5", names.KernelRow("(s+1)^5", "s^5", 5, "tab:olive",
                                                                          form="power_elu"))
    cfg = RunConfig.from_dict(TINY, kernel="recipe_pow5", attention_backend="auto", steps=3)
    run = train(cfg, tmp_path / "run", quiet=True)
    assert evaluate(run, quiet=True)["energy"]["median"]["ratio"] > 0
    assert names.kernel_label("recipe_pow5") == "(s+1)^5"


def test_adding_a_study_is_a_grid_file_a_map_spec_and_a_claim_group(monkeypatch, tmp_path):
    """A study's rule decides its claim on its shipped map, and `claims <group>` and the findings table list it."""
    grid = tmp_path / "params" / "grid_recipe.yaml"
    grid.parent.mkdir()
    grid.write_text("name: grid-recipe\nbase: {steps: 3}\naxes: {seed: [0, 1]}\n")
    spec = reference_maps.MapSpec("recipe.json", str(grid), "recipe map", "a study added by the recipe")
    monkeypatch.setitem(reference_maps.MAPS, "recipe", spec)

    def findings(runs):
        ratios = [r["median"]["ratio"] for r in runs]
        decision = claims.rate_rule(sum(x > 1 for x in ratios), len(ratios))
        return [claims.make_claim("recipe-above-floor", "The recipe's models end above their floor", "recipe",
                                  "n/a", decision, "share of runs above the floor", "2 seeds", "",
                                  {"notebook": "10_tables56", "section": "", "figures": []}).to_dict()]

    group = claim_groups.ClaimGroup("recipe", "recipe", findings)
    groups = (*claim_groups.GROUPS, group)
    assert "recipe map" in claim_groups.table_markdown(groups, tmp_path)  # before shipping: one row, not run
    cfg = RunConfig.from_dict(TINY, steps=3)
    summaries = []
    for seed in (0, 1):
        from heavytail.harness.evaluate import evaluate

        run = train(cfg.replace(seed=seed), tmp_path / f"run{seed}", quiet=True)
        evaluate(run, quiet=True)
        summaries.append(run_summary(run))
    path = reference_maps.path_of("recipe", tmp_path)
    path.parent.mkdir(parents=True)
    save_records_json({"provenance": {"commits": ["a" * 40]}, "runs": summaries}, "runs", path)
    text = claim_groups.text_of("recipe", tmp_path, groups)
    assert "The recipe's models end above their floor" in text and "2 seeds" in text
    assert "The recipe's models end above their floor" in claim_groups.table_markdown(groups, tmp_path)
    assert json.loads(path.read_text())["runs"][1]["config"]["seed"] == 1


def test_adding_a_notebook_is_a_file_and_a_params_section(tmp_path):
    from heavytail.pipeline import report
    from tests.test_report import tiny_notebooks

    nbs = tiny_notebooks(tmp_path / "notebooks", {"11_recipe": "print('the recipe ran with x =', x)"})
    params = tmp_path / "params.yaml"
    params.write_text("report: recipe\nnotebooks:\n  11_recipe: {x: 3}\n")
    out = tmp_path / "out"
    assert report.main([str(params), "--notebooks-dir", str(nbs), "--output-dir", str(out), "--no-progress"]) == 0
    assert "the recipe ran with x = 3" in (out / "11_recipe.html").read_text()
    assert json.loads((out / "11_recipe" / "x.json").read_text()) == {"x": 3}
    assert "11_recipe" in (out / "index.html").read_text()
