"""The splice sweep of Section 4.1 / App. F: configuration, determinism, resume, eq. 32 and notebook 02's findings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from heavytail.studies.testbed import (COLUMNS, NoiseUnitCurve, SweepConfig, noise_unit_curves, run_sweep, sweep_cell,
                               sweep_findings, sweep_hill_k)

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


# ------------------------------------------------------------------- notebook 02's findings
def _curves(cfg, mean_of, z_of=None, varsigma=0.5):
    """One NoiseUnitCurve per (statistic, N, q0) of ``cfg``: mean_of(stat, n, q) gives the (A,) means; z defaults
    to the means shifted to 0 at a_ref (varsigma 1), so the tests control both by hand."""
    a = np.asarray(cfg.a_grid, dtype=float)
    out = []
    for stat in ("energy", "w2", "hill_gap"):
        for n in cfg.budgets:
            for q in cfg.seams:
                mean = np.asarray(mean_of(stat, n, q), dtype=float)
                z = np.asarray(z_of(stat, n, q), dtype=float) if z_of else mean - mean[list(a).index(cfg.a_ref)]
                out.append(NoiseUnitCurve(stat, n, q, a, mean, np.ones_like(mean), varsigma, z))
    return out


def test_sweep_findings_at_ref_for_every_seam_and_the_flat_maxima():
    cfg = SweepConfig(**TINY)  # a_grid (1.0, 1.5, 2.2), budgets (64, 128), seams (0.5, 0.9)
    scale = {"energy": 1.0, "w2": 0.1, "hill_gap": 2.0}

    def mean(stat, n, q):  # V-shaped around a_ref; the right arm grows with N and with the seam
        return [3.0, 0.0, scale[stat] * (n / 64) * (1 + q)]

    curves = _curves(cfg, mean, varsigma=0.5)
    curves[0] = NoiseUnitCurve("energy", 64, 0.5, curves[0].a_star, curves[0].mean, curves[0].std, 0.01, curves[0].z)
    f = sweep_findings(curves, cfg)
    assert (f.n_small, f.n_large) == (64, 128)
    assert f.argmins == {0.5: 1.5, 0.9: 1.5} and f.hill_argmins == {0.5: 1.5, 0.9: 1.5} and f.all_at_ref
    # Only a* = 2.2 lies above a_ref; the left arm (3.0) must not count.
    assert f.flat["energy", 64] == pytest.approx(1.9) and f.flat["energy", 128] == pytest.approx(3.8)
    assert f.flat["hill_gap", 128] == pytest.approx(7.6) and f.flat["w2", 128] == pytest.approx(0.38)
    assert f.w2_flatter and f.min_varsigma == 0.01
    js = f.to_json(sweep_seconds=1.5)
    assert list(js) == ["energy_argmin_at_largest_budget", "energy_minimum_at_a_ref_for_every_seam",
                        "hill_gap_argmin_at_largest_budget", "max_abs_noise_units_above_a_ref", "smallest_varsigma",
                        "sweep_seconds"]
    assert js["max_abs_noise_units_above_a_ref"]["w2@N=64"] == pytest.approx(0.19) and js["sweep_seconds"] == 1.5


def test_an_argmin_away_from_a_ref_is_reported_and_w2_can_be_steeper():
    cfg = SweepConfig(**TINY)

    def mean(stat, n, q):  # at the largest budget and seam 0.9 the energy distance is smallest at a* = 2.2
        if stat == "energy" and n == 128 and q == 0.9:
            return [1.0, 0.5, 0.2]
        if stat == "hill_gap" and n == 128 and q == 0.5:
            return [0.1, 0.5, 0.9]
        return [1.0, 0.0, 10.0 if stat == "w2" else 1.0]

    f = sweep_findings(_curves(cfg, mean), cfg)
    assert f.argmins == {0.5: 1.5, 0.9: 2.2} and not f.all_at_ref
    assert f.hill_argmins == {0.5: 1.0, 0.9: 1.5}
    assert not f.w2_flatter  # 10 noise units against the energy distance's 1
    # The argmin at the small budget does not matter, only the largest one does.
    f = sweep_findings(_curves(cfg, lambda s, n, q: [0.0, 1.0, 2.0] if n == 64 else [1.0, 0.0, 1.0]), cfg)
    assert f.all_at_ref


def test_sweep_findings_name_what_is_missing():
    cfg = SweepConfig(**TINY)
    curves = _curves(cfg, lambda s, n, q: [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="no hill_gap curve at N = 128, q0 = 0.9"):
        sweep_findings([c for c in curves if not (c.statistic == "hill_gap" and c.seam == 0.9)], cfg)
    low = SweepConfig(**{**TINY, "a_grid": (1.0, 1.5), "a_ref": 1.5})
    with pytest.raises(ValueError, match="no candidate index above a_ref"):
        sweep_findings(_curves(low, lambda s, n, q: [1.0, 0.0]), low)


def test_sweep_findings_on_a_real_tiny_sweep_match_the_curves():
    cfg = SweepConfig(**TINY)
    curves = noise_unit_curves(run_sweep(cfg, progress=False), a_ref=cfg.a_ref)
    f = sweep_findings(curves, cfg)
    energy = [c for c in curves if c.statistic == "energy" and c.budget == 128]
    assert f.argmins == {c.seam: float(c.a_star[np.argmin(c.mean)]) for c in energy}
    assert f.flat["energy", 128] == max(abs(c.z[-1]) for c in energy)  # a* = 2.2 is the only index above 1.5
