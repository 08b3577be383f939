"""The static reference's design (heavytail.studies.phase.static): every kernel's boundary has a tail index on
either side, the pilot's spread sizes the repetitions, and the cross-check of a small run against the reference
flags a cell that is off and passes one that is not."""

from __future__ import annotations

import math

import pytest

import heavytail.studies.phase.static as S


def test_every_kernel_boundary_has_a_tail_index_either_side_and_q2_its_neighbourhood():
    covered = S.boundaries_covered()
    assert "softmax" not in covered and all(v is not None for v in covered.values()), covered
    for lo, hi in covered.values():
        assert hi - lo <= 0.75
    assert any(2.5 <= a < 3 for a in S.TAIL_INDICES) and any(3 < a <= 3.5 for a in S.TAIL_INDICES)


def test_the_allocation_follows_the_widest_cell_of_each_tail_index():
    rows = [{"a": 1.0, "sd": 0.02}, {"a": 1.0, "sd": 0.08}, {"a": 2.0, "sd": 0.01}, {"a": 3.0, "sd": 1.0}]
    reps = S.allocate(rows, 16, least=10, most=500)
    assert reps[1.0] == math.ceil(1.1 * S.reps_needed(0.08, 16, 4, 0.1))  # the wider of its two cells
    assert reps[2.0] == 10 and reps[3.0] == 500  # clipped both ways
    # the half-width it aims at: z sd / sqrt(reps / pilot reps) is 0.1 / sqrt(1.1)
    assert S.joint_z(4) * 0.08 / math.sqrt(reps[1.0] / 16) <= 0.1



def test_an_earlier_reference_with_reps_per_tail_index_sizes_each_from_its_own_count():
    rows = [{"a": 1.0, "sd": 0.05}, {"a": 2.0, "sd": 0.05}]  # equal sds, but a = 2 had 4x the reps
    reps = S.allocate(rows, {1.0: 100, 2.0: 400}, least=1, most=10**6)
    assert reps[2.0] == math.ceil(1.1 * S.reps_needed(0.05, 400, 2, 0.1))
    assert 3.9 < reps[2.0] / reps[1.0] < 4.1

def _row(kernel, a, measured, half, cells):
    return {"kernel": kernel, "a": a, "measured": measured, "joint_low": measured - half,
            "joint_high": measured + half, "joint_level": 1 - 0.05 / cells}


def test_the_cross_check_flags_a_cell_that_is_off():
    ref = [_row("softmax", 2.75, 0.40, 0.02, 63), _row("log_elu", 2.75, 0.0, 0.02, 63)]
    own = [_row("softmax", 2.75, 0.45, 0.15, 21), _row("log_elu", 2.75, 0.02, 0.1, 21),
           _row("log_elu", 9.0, 0.0, 0.1, 21)]  # not in the reference: not compared
    check = S.cross_check(own, ref)
    assert check["shared"] == 2 and check["agree"] is True
    own[1] = _row("log_elu", 2.75, 0.3, 0.1, 21)
    check = S.cross_check(own, ref)
    assert check["agree"] is False and check["misses"] == 1


def test_widen_gives_more_repetitions_only_where_a_cell_is_wider_than_the_tolerance():
    rows = [{"a": 2.0, "measured": 0.5, "joint_low": 0.45, "joint_high": 0.55},   # narrow: keeps its reps
            {"a": 3.0, "measured": 0.5, "joint_low": 0.45, "joint_high": 0.70},   # skewed: its wider side counts
            {"a": 3.0, "measured": 0.2, "joint_low": 0.15, "joint_high": 0.25}]
    assert S.joint_half_width(rows[1]) == pytest.approx(0.2)
    got = S.widen(rows, {2.0: 100, 3.0: 100}, half_width=0.1, safety=1.0)
    assert got == {2.0: 100, 3.0: 400}  # (0.2 / 0.1)^2 = 4x: a half-width falls like 1/sqrt(reps)
    # where an interval lies does not matter, only how wide it is
    moved = [dict(r, measured=r["measured"] + 1, joint_low=r["joint_low"] + 1, joint_high=r["joint_high"] + 1)
             for r in rows]
    assert S.widen(moved, {2.0: 100, 3.0: 100}, half_width=0.1, safety=1.0) == got


def test_every_params_file_cross_checks_its_static_run_against_the_reference():
    """The report's small static run is cross-checked cell by cell against the shipped reference, so its tail
    indices (a params file's, or notebook 08's own default) must be some of the reference's: with [1.5, 2.5, 4.0]
    the CPU report compared 0 cells and printed that the two disagree."""
    import yaml

    from heavytail.harness.artifacts import repo_root
    from heavytail.pipeline.notebook import defaults_of

    root = repo_root()
    default = defaults_of(root / "notebooks" / "08_phase_diagram.py")["tail_indices"]
    used = {"notebook 08's default": default}
    for params in sorted((root / "params").glob("*.yaml")):
        section = (yaml.safe_load(params.read_text()).get("notebooks") or {}).get("08_phase_diagram") or {}
        used[params.name] = section.get("tail_indices", default)
    assert len(used) >= 4
    off = {where: [a for a in indices if float(a) not in S.TAIL_INDICES] for where, indices in used.items()}
    assert not any(off.values()), f"tail indices the static reference {S.TAIL_INDICES} lacks: {off}"
