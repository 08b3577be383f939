"""The landing page's findings, without a notebook run: the claims of the shipped kernel-gap map written as a
notebook would write them, then the page rendered from that folder (tests/test_browser.py measures the real
smoke report in Chromium)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from heavytail.pipeline.landing import headline_figure, render_landing
from heavytail.pipeline.report_folder import claims_in
from heavytail.pipeline.notebook import NotebookResult
from heavytail.studies import claims as C
import heavytail.studies.kernel_gap.claims as K
from heavytail.studies import reference_maps as R

ROOT = Path(__file__).resolve().parents[1]


def _report(tmp_path: Path) -> tuple[Path, list]:
    found = C.decided_on(K.findings(R.load("gap-design", ROOT)["runs"]), "one-trial-per-step map (shipped)")
    (tmp_path / "07_kernel_gap").mkdir()
    (tmp_path / "07_kernel_gap" / "claims.json").write_text(json.dumps(found))
    (tmp_path / "07_kernel_gap" / "growth_slopes.png").write_bytes(b"\x89PNG")
    return tmp_path, [NotebookResult("07_kernel_gap", status="ok", elapsed_s=1.0, html="07_kernel_gap.html")]


def test_each_finding_is_one_row_with_its_evidence_folded(tmp_path):
    out, results = _report(tmp_path)
    page = render_landing(out, "t", results, None, True, ROOT)
    findings = page[page.index('id="findings"'):page.index('id="scale"')]
    rows = re.findall(r'<tr class="finding">(.*?)</tr>', findings, re.S)
    claims = [c for _, c in claims_in(out, ["07_kernel_gap"])]
    assert len(rows) == len(claims) == 5
    for row, c in zip(rows, claims):
        visible = re.sub(r"<details>.*?</details>", "", row, flags=re.S)
        assert c["verdict"] in visible and f"[{C.fmt(c['low'])}, {C.fmt(c['high'])}]" in visible
        assert C.scale_label(c["scale"]) in visible and "one-trial-per-step map (shipped)" in visible
        assert c["evidence"][:40] not in visible, "the evidence belongs in the folded detail"
        assert "<details>" in row


def test_the_headline_figure_is_the_first_drawn_figure_of_the_first_claim(tmp_path):
    out, results = _report(tmp_path)
    claims = claims_in(out, ["07_kernel_gap"])
    # the first claim names gap_vs_n first, which was not drawn here; growth_slopes was
    assert headline_figure(out, claims) == ("07_kernel_gap/growth_slopes.png", [claims[0][1]])
    page = render_landing(out, "t", results, None, True, ROOT)
    assert page.index('id="headline"') < page.index('class="findings"')
    (out / "07_kernel_gap" / "growth_slopes.png").unlink()
    assert 'id="headline"' not in render_landing(out, "t", results, None, True, ROOT)


def test_the_headline_compares_recipes_where_a_figure_draws_claims_of_two_maps(tmp_path):
    """A figure that shows claims decided on two maps (the design recipe's and the converged one's) leads the
    page over the first claim's own figure, and its caption states one claim of each map, so the page never
    opens on one recipe's verdict alone."""
    out, results = _report(tmp_path)
    design = [c for _, c in claims_in(out, ["07_kernel_gap"])]
    both = {"notebook": "07_kernel_gap", "section": "The gap at convergence", "figures": ["converged_gap_vs_n"]}
    converged = [dict(design[0], id="converged", claim="At convergence the gap is undecided",
                      verdict=C.UNDECIDED, decided_by=dict(both, map="converged-gap map (shipped)")),
                 dict(design[1], id="converged-2", decided_by=dict(both, map="converged-gap map (shipped)"))]
    design_too = dict(design[2], id="design-excess", decided_by=dict(both, map="one-trial-per-step map (shipped)"))
    (out / "07_kernel_gap" / "claims.json").write_text(json.dumps([*design, *converged, design_too]))
    claims = claims_in(out, ["07_kernel_gap"])
    assert headline_figure(out, claims) == ("07_kernel_gap/growth_slopes.png", [claims[0][1]])  # not drawn yet
    (out / "07_kernel_gap" / "converged_gap_vs_n.png").write_bytes(b"\x89PNG")
    rel, stated = headline_figure(out, claims)
    assert rel == "07_kernel_gap/converged_gap_vs_n.png" and [c["id"] for c in stated] == ["converged", "design-excess"]
    page = render_landing(out, "t", results, None, True, ROOT)
    caption = page[page.index("<figcaption"):page.index("</figcaption>")]
    assert "At convergence the gap is undecided: undecided at this power" in caption
    assert "decided on converged-gap map (shipped)" in caption and "decided on one-trial-per-step map" in caption


def test_the_scale_table_names_the_map_that_decided_each_claim(tmp_path):
    out, results = _report(tmp_path)
    page = render_landing(out, "t", results, None, True, ROOT)
    scale = page[page.index('id="scale"'):page.index('id="notebooks"')]
    rows = re.findall(r"<tr><td>(.*?)</td><td class=\"evidence\">(.*?)</td>", scale)
    assert {source for source, _ in rows} == {"one-trial-per-step map (shipped)"}
    assert len(rows) == 2  # the growth claims at three N, the others at the largest
    assert all(s.startswith("training N") for _, s in rows)


def test_a_one_seed_claim_written_as_strict_json_renders(tmp_path):
    # a notebook writes a one-seed interval's infinite ends as the tagged strings of strict JSON (heavytail.io)
    from heavytail.io import save_json
    import heavytail.studies.collapse.ladder as collapse_ladder

    # seed 0 alone: every rung's claims rest on one seed, whatever the shipped map holds by now
    seed0 = [r for r in R.load("ladder", ROOT)["runs"] if r["config"]["seed"] == 0]
    found = C.decided_on(collapse_ladder.findings(seed0), "ladder (shipped, seed 0)")
    one_seed = [c for c in found if c.get("seeds") == 1 and c.get("low") is not None and math.isinf(c["low"])]
    save_json(found, tmp_path / "09_collapse_ladder" / "claims.json")
    results = [NotebookResult("09_collapse_ladder", status="ok", elapsed_s=1.0, html="09_collapse_ladder.html")]
    page = render_landing(tmp_path, "t", results, None, True, ROOT)
    page = page[page.index('id="findings"'):]  # the claims the notebook wrote (the paper's table names "infinity")
    assert "inf" not in page.lower().replace("info", "")
    assert page.count("no interval from one seed") >= len(one_seed) > 0


def test_each_claims_notebooks_conclusion_comes_before_the_figure_and_the_table(tmp_path):
    """A notebook that decided claims far down the table (the ladder's are rows 40-50 of the real report) still says
    its finding at the top: its conclusion, linked to its page, ahead of the headline figure and the table."""
    out, results = _report(tmp_path)
    ladder = C.decided_on(K.findings(R.load("gap-design", ROOT)["runs"])[:1], "a ladder map")
    (out / "09_collapse_ladder").mkdir()
    (out / "09_collapse_ladder" / "claims.json").write_text(json.dumps(ladder))
    (out / "09_collapse_ladder" / "conclusion.json").write_text(json.dumps({"sentence": "Collapse at rung R2 & more."}))
    (out / "07_kernel_gap" / "conclusion.json").write_text(json.dumps({"sentence": "The gap grows."}))
    results = [*results, NotebookResult("09_collapse_ladder", status="ok", elapsed_s=1.0, html="09_collapse_ladder.html")]
    page = render_landing(out, "t", results, None, True, ROOT)
    brief = page[page.index('id="in-brief"'):page.index("</ul>", page.index('id="in-brief"'))]
    items = re.findall(r"<li>(.*?)</li>", brief)
    assert items == ['<a href="07_kernel_gap.html">07_kernel_gap</a>: The gap grows.',
                     '<a href="09_collapse_ladder.html">09_collapse_ladder</a>: Collapse at rung R2 &amp; more.']
    assert page.index('id="in-brief"') < page.index('id="headline"') < page.index('class="findings"')
    (out / "07_kernel_gap" / "conclusion.json").unlink()
    (out / "09_collapse_ladder" / "conclusion.json").unlink()
    assert 'id="in-brief"' not in render_landing(out, "t", results, None, True, ROOT)


def test_the_page_opens_with_the_papers_claims_then_the_repositorys_questions(tmp_path):
    """One row per paper claim (heavytail.studies.paper_claims) before anything else the page lists, then the
    repository's own questions; the ablation grid's one-seed claims stay off the page's findings table."""
    from heavytail.studies import paper_claims as PC

    out, results = _report(tmp_path)
    (out / "06_summary").mkdir()
    breadth = C.decided_on(K.findings(R.load("gap-design", ROOT)["runs"])[:2], "the ablation grid")
    (out / "06_summary" / "claims.json").write_text(json.dumps(breadth))
    results = [*results, NotebookResult("06_summary", status="ok", elapsed_s=1.0, html="06_summary.html")]
    page = render_landing(out, "t", results, None, True, ROOT)
    assert page.index('id="paper-claims"') < page.index('id="own-questions"') < page.index('id="findings"')
    paper = page[page.index('id="paper-claims"'):page.index("</table>", page.index('id="paper-claims"'))]
    assert re.findall(r"<tr><td><b>(\w+)</b>", paper) == [pc.id for pc in PC.PAPER_CLAIMS]
    assert "The ablation grid's 2 claims" in page


def test_a_figure_being_written_is_not_a_report_item(tmp_path):
    """save_figure writes .<name>.tmp.png and renames it: a page written meanwhile must not link the hidden file."""
    from heavytail.pipeline.report_folder import figures_of

    (tmp_path / "done.png").write_bytes(b"\x89PNG")
    (tmp_path / ".collapse_by_task.png.tmp.png").write_bytes(b"\x89PNG")
    assert [p.name for p in figures_of(tmp_path)] == ["done.png"]
