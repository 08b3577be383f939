"""The README and its docs/ pages against the tree: every file they name exists, every `python -m heavytail`
command they show is a registered command, and every claims block (the README's findings table, docs/findings.md's
sentences) is exactly what `python -m heavytail claims` prints from the shipped maps, so no number there is typed
by hand. The README stays a front page: short, and no line a reader has to scroll sideways through."""

from __future__ import annotations

import re
from pathlib import Path

from heavytail.__main__ import _COMMANDS
from heavytail.studies import claim_groups as CG
from heavytail.studies import claims as C
from heavytail.studies import paper_claims as PC
import heavytail.studies.kernel_gap.claims as K
from heavytail.studies import reference_maps as R

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
PAGES = {"README.md": README, **{f"docs/{k}": v for k, v in DOCS.items()}}
BLOCK = re.compile(r"<!-- claims (\S+) -->\n(.*?)\n<!-- /claims -->", re.S)
NOT_YET_HERE: set[str] = set()


def test_every_path_the_readme_and_docs_name_exists():
    text = "\n".join(PAGES.values())
    named = set(re.findall(r"`((?:heavytail|params|notebooks|tests|benchmarks|outputs/reference|\.ci)/[^`\s*<>]*)`",
                           text))
    named |= {f"notebooks/{m}.py" for m in re.findall(r"`(\d\d_[a-z_]+)`", text)}
    assert len(named) > 15, "the README and docs should name the files a reader needs"
    def exists(ref: str) -> bool:  # a file, or a test in one: tests/test_x.py::test_name
        path, _, test = ref.partition("::")
        file = ROOT / path.rstrip("/")
        return file.exists() and (not test or re.search(rf"^def {re.escape(test)}\(", file.read_text(), re.M) is not None)

    missing = sorted(p for p in named if not exists(p))
    assert not missing, f"the README or docs name files (or tests) that do not exist: {missing}"


def test_every_link_of_the_readme_resolves():
    links = set(re.findall(r"\]\(([^)#\s]+)", README))
    assert {"docs/cluster.md", "docs/benchmarks.md", "docs/layout.md", "docs/findings.md"} <= links
    missing = sorted(p for p in links - NOT_YET_HERE if not (ROOT / p).exists())
    assert not missing, f"README links to files that do not exist: {missing}"


def test_every_command_the_readme_and_docs_show_is_registered():
    text = "\n".join(PAGES.values())
    shown = set(re.findall(r"python -m heavytail ([a-z-]+)", text))
    assert {"report", "grid", "ship-map", "claims"} <= shown
    assert shown <= set(_COMMANDS), f"not commands: {sorted(shown - set(_COMMANDS))}"


FINDINGS = DOCS["findings.md"]


def test_the_readme_is_a_front_page():
    """It opens with the paper's claims, one row each, then the repository's own questions; short, and no line a
    reader scrolls sideways through."""
    lines = README.splitlines()
    assert len(lines) <= 110, f"README.md has {len(lines)} lines; move detail into docs/"
    long = [(i + 1, len(line)) for i, line in enumerate(lines) if len(line) > 200]
    assert not long, f"README.md lines over 200 characters (line, length): {long}"
    first_table = next(i for i, line in enumerate(lines) if line.startswith("|"))
    assert lines[first_table - 1] == f"<!-- claims {CG.PAPER} -->"
    assert README.index(f"<!-- claims {CG.PAPER} -->") < README.index(f"<!-- claims {CG.OWN} -->") < README.index(
        "## Two commands")
    paper = next(text for name, text in BLOCK.findall(README) if name == CG.PAPER)
    ids = [re.match(r"\| \[(\w+)\]", row).group(1) for row in paper.splitlines()[2:] if row.startswith("| [")]
    assert ids == [pc.id for pc in PC.PAPER_CLAIMS]
    assert f"<!-- claims {CG.TABLE} -->" not in README, "the full claims table lives in docs/findings.md"


def test_every_claims_block_is_printed_from_the_shipped_maps():
    found = {(page, name): text for page, body in PAGES.items() for name, text in BLOCK.findall(body)}
    assert ("README.md", CG.PAPER) in found and ("README.md", CG.OWN) in found
    assert ("docs/findings.md", CG.TABLE) in found, "docs/findings.md has no findings table block"
    # the ladder's summary opens the full findings, before the table; the kernel gap's opens its section
    assert FINDINGS.index(f"<!-- claims {CG.LADDER_SUMMARY} -->") < FINDINGS.index("<!-- claims table -->")
    assert ("docs/findings.md", CG.GAP_SUMMARY) in found
    # every headline group whose map is shipped has its sentences in a page (the others are 'not run' rows)
    assert {name for _, name in found} >= {g.name for g in CG.GROUPS if g.headline and CG.decide(g, ROOT) is not None}
    for (page, name), text in found.items():
        expected = CG.text_of(name, ROOT)
        assert text.strip() == expected.strip(), (
            f"{page}'s {name} claims differ from the shipped maps'; rerun python -m heavytail claims {name} "
            f"--update {page}")


def test_the_findings_table_has_each_shipped_claims_verdict_and_interval():
    """Independently of the table's code: the kernel-gap claims decided on the shipped map, each in a row
    with its verdict and interval."""
    table = next(text for name, text in BLOCK.findall(FINDINGS) if name == CG.TABLE)
    rows = table.splitlines()[2:]
    for claim in K.findings(R.load("gap-design", ROOT)["runs"]):
        row = next((r for r in rows if r.startswith(f"| {claim['claim']} |")), None)
        assert row is not None, f"no row for {claim['id']}"
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[1] == claim["verdict"]
        assert f"[{C.fmt(claim['low'])}, {C.fmt(claim['high'])}]" in cells[2]
        assert cells[3] == str(claim["seeds"])


def test_a_group_whose_map_is_absent_is_one_row_not_run(tmp_path):
    groups = (CG.ClaimGroup("gap-design", "gap-design", K.findings),
              CG.ClaimGroup("later", "not-a-registered-map", K.findings))
    rows = CG.table_rows(groups, root=tmp_path)  # no outputs/reference/ there: nothing is shipped
    assert [r[1] for r in rows] == [C.NOT_RUN, C.NOT_RUN]
    assert "params/grid_gap_design.yaml" in rows[0][-1]
    shipped = CG.table_rows(groups, root=ROOT)
    assert len(shipped) == len(K.findings(R.load("gap-design", ROOT)["runs"])) + 1
    assert shipped[-1][1] == C.NOT_RUN


def test_a_verdict_sentence_names_the_rung_steps_and_n_of_its_own_record():
    """A claim's sentence may name a rung, a step count or a training N only where its record's scale (what decided
    it) says the same: a sentence that names R2 must have been decided on R2's runs, "3000 steps" on 3000-step runs."""
    wrong = []
    for g in CG.GROUPS:
        for c in CG.decide(g, ROOT) or ():
            scale = c.get("scale", "")
            for rung in re.findall(r"\b(R\d\w?)\b", c["claim"]):
                if not re.search(rf"\b{rung}\b", scale):
                    wrong.append((c["id"], rung))
            for steps in re.findall(r"(\d[\d,]*) steps", c["claim"]):
                if f"{steps.replace(',', '')} steps" not in scale.replace(",", "") and f"cap {steps}" not in scale:
                    wrong.append((c["id"], f"{steps} steps"))
            for n in re.findall(r"N = (\d+)", c["claim"]):
                if not re.search(rf"\b{n}\b", scale):
                    wrong.append((c["id"], f"N = {n}"))
    assert not wrong, f"sentences naming an extent their record does not hold: {wrong}"


def test_the_layout_map_is_the_tree():
    """docs/layout.md's module table is made from the tree, and every package path the page names exists."""
    from heavytail import layout

    text = (ROOT / "docs" / "layout.md").read_text()
    block = text.split(layout.BEGIN + "\n", 1)[1].split(layout.END, 1)[0].rstrip("\n")
    assert block == layout.markdown(), "rerun python -m heavytail layout --update docs/layout.md"
    listed = set(re.findall(r"`(heavytail/[\w/]+\.py)`", block))
    assert listed == {m.relative_to(ROOT).as_posix() for m in layout.modules()}
    named = set(re.findall(r"(heavytail/[\w/]+\.(?:py|cpp|css))", text))
    assert not [p for p in named if not (ROOT / p).is_file()], "docs/layout.md names files that do not exist"


def test_the_layout_map_keeps_an_abbreviated_sentence_whole(tmp_path):
    from heavytail import layout

    module = tmp_path / "m.py"
    module.write_text('"""Kernel attention, eq. 7, as in App. I. Another sentence."""\n')
    assert layout.summary_line(module) == "Kernel attention, eq. 7, as in App. I"
