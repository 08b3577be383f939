"""The README against the tree: every file it names exists, every `python -m heavytail` command it shows is a
registered command, and its kernel-gap claims are exactly what `python -m heavytail claims` prints from the
shipped map (the block between its claims markers), so no number there is typed by hand."""

from __future__ import annotations

import re
from pathlib import Path

from heavytail.__main__ import _COMMANDS
from heavytail.studies import kernel_gap_claims as K
from heavytail.studies import reference_maps as R

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"<!-- claims (\S+) -->\n(.*?)\n<!-- /claims -->", re.S)


def test_every_path_the_readme_names_exists():
    named = set(re.findall(r"`((?:heavytail|params|notebooks|tests|benchmarks|outputs/reference|\.ci)/[^`\s*<>]*)`",
                           README))
    named |= {f"notebooks/{m}.py" for m in re.findall(r"`(\d\d_[a-z_]+)`", README)}
    assert len(named) > 15, "the README should name the files a reader needs"
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert not missing, f"the README names files that do not exist: {missing}"


def test_every_command_the_readme_shows_is_registered():
    shown = set(re.findall(r"python -m heavytail ([a-z-]+)", README))
    assert {"report", "grid", "ship-map", "claims"} <= shown
    assert shown <= set(_COMMANDS), f"not commands: {sorted(shown - set(_COMMANDS))}"


def test_the_readme_kernel_gap_claims_are_printed_from_the_shipped_map():
    blocks = BLOCK.findall(README)
    assert blocks, "the README has no claims block"
    for name, text in blocks:
        shipped = R.load(name, ROOT)
        assert shipped is not None, f"{name} is not shipped"
        runs = shipped["runs"]
        expected = K.markdown(K.claims_of(name, runs))
        assert text.strip() == expected.strip(), (
            f"README's {name} claims differ from the shipped map's; rerun python -m heavytail claims {name} --update README.md")
