"""Notebooks decide their claims through heavytail.studies.claim_groups, by the same rule as `claims`: a local re-run
replaces a group's map, and the notebooks call no study's findings directly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heavytail.studies import claim_groups as G
from heavytail.studies import reference_maps

ROOT = Path(__file__).resolve().parents[1]
CLAIMS_NOTEBOOKS = ("06_summary", "07_kernel_gap", "08_phase_diagram", "09_collapse_ladder", "10_tables56")


@pytest.mark.parametrize("name", ["gap-fair", "ladder", "tables56", "phase"])
def test_a_notebooks_claims_are_the_cli_claims_on_the_shipped_maps(name):
    cli = G.decide(G.group(name))
    mine = G.decide_sources(name)
    assert cli is not None and [(c["id"], c["verdict"], c["estimate"]) for c in mine] == [
        (c["id"], c["verdict"], c["estimate"]) for c in cli]


def test_a_local_rerun_replaces_the_groups_map_and_names_itself():
    shipped = reference_maps.source("gap-fair")
    half = reference_maps.Source("gap-fair", tuple(r for r in shipped.runs if r["config"]["seed"] <= 6),
                                 "fair converged-gap map (re-run here)", "local", {})
    found = {c["id"]: c for c in G.decide_sources("gap-fair", {"gap-fair": half})}
    assert found["fair-gap-n256"]["seeds"] == 4 and found["fair-gap-n256"]["verdict"] == "undecided at this power"
    assert found["fair-gap-n256"]["decided_by"]["map"] == "fair converged-gap map (re-run here)"
    assert G.decide_sources("gap-fair", {"gap-fair": reference_maps.Source("gap-fair", (), "x", "absent", {})}) == []


def test_claims_read_from_another_map_than_their_groups_name_it():
    found = {c["id"]: c for c in G.decide_sources("ladder")}
    assert found["paper-collapse-R1"]["decided_by"]["map"] == reference_maps.MAPS["gap-long"].title
    assert found["paper-collapse-R1b"]["decided_by"]["map"] == reference_maps.MAPS["ladder-small"].title
    assert found["paper-collapse-R2"]["decided_by"]["map"] == reference_maps.source("ladder").label


@pytest.mark.parametrize("stem", CLAIMS_NOTEBOOKS)
def test_claims_notebooks_call_no_studys_findings_directly(stem):
    text = (ROOT / "notebooks" / f"{stem}.py").read_text()
    assert not re.findall(r"\.\w*findings\(", text.replace("claim_groups.decide_sources(", ""))
    assert "claim_groups.decide_sources(" in text
