"""The splice sweep of Section 4.1 / App. F: configuration, determinism, resume and eq. 32."""

from __future__ import annotations

import math

import numpy as np
import pytest

from heavytail.testbed import COLUMNS, SweepConfig, noise_unit_curves, sweep_hill_k, run_sweep, sweep_cell

TINY = dict(budgets=(64, 128), repetitions=(3, 2), seams=(0.5, 0.9), a_grid=(1.0, 1.5, 2.2))


def test_defaults_are_the_papers_recipe():
    cfg = SweepConfig()
    assert cfg.budgets == (256, 1024, 4096, 16384, 65536) and cfg.repetitions == (24, 24, 24, 12, 6)
    assert cfg.seams == (0.5, 0.9, 0.99) and cfg.a_grid == (0.6, 0.8, 1.0, 1.2, 1.5, 1.8, 2.2, 2.8, 3.5)
    assert (cfg.a_ref, cfg.scale, cfg.seed) == (1.5, 1.0, 0)
    assert sweep_hill_k(256, 0.99) == 3 and sweep_hill_k(65536, 0.9) == 6554 and sweep_hill_k(100, 0.999) == 2  # App. F.1


@pytest.mark.parametrize("bad,match", [
    (dict(repetitions=(3,)), "one count per budget"),
    (dict(budgets=(64, 2.5)), "integer >= 4"),
    (dict(repetitions=(3, 1)), ">= 2"),
    (dict(seams=(0.5, 1.0)), r"\(0, 1\)"),
    (dict(a_grid=(1.0, -1.0)), "finite and > 0"),
])
def test_bad_settings_say_what_is_allowed(bad, match):
    with pytest.raises(ValueError, match=match):
        SweepConfig(**{**TINY, **bad})
    with pytest.raises(ValueError, match="unknown sweep settings"):
        SweepConfig.from_dict({"budget": [64]})


def test_table_shape_and_resume_gives_identical_numbers(tmp_path):
    cfg = SweepConfig(**TINY)
    fresh = run_sweep(cfg, progress=False)
    rows = len(cfg.a_grid) * len(cfg.seams) * sum(cfg.repetitions)
    assert set(fresh) == set(COLUMNS) and all(len(v) == rows for v in fresh.values())
    assert np.isfinite(fresh["energy"]).all() and (fresh["energy"] >= 0).all()
    cached = run_sweep(cfg, cache_dir=tmp_path, progress=False)
    files = sorted(tmp_path.rglob("cell-*.npz"))
    assert len(files) == len(cfg.budgets) * len(cfg.seams)
    # Simulate a kill after some cells: drop one cell file, resume, and compare with the uninterrupted run.
    files[-1].unlink()
    resumed = run_sweep(cfg, cache_dir=tmp_path, progress=False)
    for c in COLUMNS:
        np.testing.assert_array_equal(fresh[c], cached[c])
        np.testing.assert_array_equal(fresh[c], resumed[c])
    # A different seed must change the numbers (and use a different cache folder).
    other = run_sweep(SweepConfig(**{**TINY, "seed": 1}), cache_dir=tmp_path, progress=False)
    assert not np.array_equal(other["energy"], fresh["energy"])


def test_noise_units_follow_eq32():
    cfg = SweepConfig(**TINY)
    table = run_sweep(cfg, progress=False)
    curves = noise_unit_curves(table, a_ref=cfg.a_ref)
    assert len(curves) == 3 * len(cfg.budgets) * len(cfg.seams)
    for cv in curves:
        sel = (table["budget"] == cv.budget) & (table["seam"] == cv.seam)
        vals = np.stack([table[cv.statistic][sel & (table["a_star"] == a)] for a in cv.a_star])
        s = vals.std(axis=1, ddof=1)
        varsigma = np.median(s[np.isfinite(s)])
        np.testing.assert_allclose(cv.z, (vals.mean(1) - vals.mean(1)[1]) / varsigma)
        assert cv.z[list(cv.a_star).index(1.5)] == 0.0


def test_energy_distance_separates_heavier_tail_at_moderate_n():
    # One cell, N = 4096 at seam 0.5, 6 repetitions: the a* = 0.6 candidate (infinite mean above the seam) must
    # sit above the reference by more than 3 standard errors of the difference of repetition means.
    cfg = SweepConfig(budgets=(4096,), repetitions=(6,), seams=(0.5,), a_grid=(0.6, 1.5))
    cell = sweep_cell(cfg, 0, 0)["energy"]
    diff = cell[0].mean() - cell[1].mean()
    se = math.sqrt(cell[0].var(ddof=1) / 6 + cell[1].var(ddof=1) / 6)
    assert diff > 3 * se
