"""The collapse criterion on constructed outputs: what it labels collapsed at the default threshold, and why.

Labelled collapsed: uniform shrinkage below the threshold (x0.02, x0.04), half or more of the points at one
location, a single cluster, one axis shrunk to 1 %. Not labelled: healthy outputs of every tail index, shrinkage
to 6 % and above, 30 % at one point, wrong tail indices, and (a known blind spot of an IQR criterion) outputs
collapsed onto two to five well-separated clusters, whose quartiles are as far apart as the target's.
"""

from __future__ import annotations

import pytest

from heavytail.harness.config import RunConfig
import heavytail.studies.collapse.calibration as CC


@pytest.fixture(scope="module")
def labels():
    t = CC.table(RunConfig().collapse_spread, trials=20)
    return {(r["case"], r["setting"]): r["collapsed share"] for r in t["rows"]}


def test_healthy_outputs_of_every_tail_index_are_not_collapsed(labels):
    for a in CC.TAIL_INDICES:
        assert labels[("healthy", f"a = {a}")] == 0.0
    for a in (1.1, 3.0):
        assert labels[("wrong tail index", f"a = {a} against the target's")] == 0.0


@pytest.mark.parametrize("c, hit", [(0.02, True), (0.04, True), (0.06, False), (0.1, False), (0.2, False),
                                    (0.5, False)])
def test_uniform_shrinkage_is_collapsed_exactly_below_the_threshold(labels, c, hit):
    assert labels[("uniform shrinkage", f"x{c}")] == (1.0 if hit else 0.0)


def test_half_or_more_at_one_point_is_collapsed_less_is_not(labels):
    assert labels[("point mass + healthy rest", "30% at one point")] == 0.0
    assert labels[("point mass + healthy rest", "50% at one point")] >= 0.5
    for p in (0.6, 0.7, 0.8, 0.95):
        assert labels[("point mass + healthy rest", f"{p:.0%} at one point")] == 1.0


def test_one_cluster_and_one_collapsed_axis_are_collapsed_but_several_clusters_are_not(labels):
    assert labels[("few clusters", "1 cluster")] == 1.0
    assert labels[("one axis collapsed", "x0.01 on axis 1")] == 1.0
    for k in (2, 3, 5):  # the blind spot the notebook states
        assert labels[("few clusters", f"{k} clusters")] == 0.0
