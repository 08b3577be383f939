"""The rendered report as a reviewer reads it: the smoke report opened in headless Chromium.

params/smoke.yaml goes through the report runner once per session (``smoke_report`` in tests/conftest.py,
shared with tests/test_report.py) into ``outputs/smoke/`` (or ``$HEAVYTAIL_SMOKE_DIR``), so that after the
tests a person can open what they checked, including
``landing.png``, the screenshot of the landing page written here (``HEAVYTAIL_CHECK_REPORT=<folder>``
checks an already rendered report instead, e.g. ``outputs/cpu``). Every page must load without console
errors, every link and image must resolve, the landing page must show the findings and a thumbnail for each
notebook that drew figures, and every figure a notebook saved must be displayed in it. A last test opens a
py:percent notebook in JupyterLab with the repository's settings and expects the notebook view.

Chromium is Debian's ``chromium`` (``.ci/run`` installs it); without it the browser tests are skipped
with the command to install it, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

from heavytail.harness.artifacts import repo_root
from heavytail.pipeline.landing import headline_figure
from heavytail.pipeline.report_folder import claims_in, figures_of
from heavytail.pipeline.notebook import NotebookResult

sys.path.insert(0, str(Path(__file__).parent))
from headless import Chromium, find_chromium  # noqa: E402

ROOT = repo_root(Path(__file__).parent)
LAB_SETTINGS = ROOT / ".jupyter" / "lab" / "settings"

needs_chromium = pytest.mark.skipif(
    find_chromium() is None and os.environ.get("CI") != "true",
    reason="chromium is not installed (Debian: apt-get install chromium; .ci/run does this)")


@pytest.fixture(scope="module")
def checked_report(request):
    """(report folder, results by notebook name): the session's smoke report (tests/conftest.py), or with
    HEAVYTAIL_CHECK_REPORT=<folder> a report that is already rendered (e.g. outputs/cpu after `make report`)."""
    given = os.environ.get("HEAVYTAIL_CHECK_REPORT")
    if given:
        out = Path(given).resolve()
        index = json.loads((out / "index.json").read_text())
        return out, {n["name"]: NotebookResult(**n) for n in index["notebooks"]}
    smoke = request.getfixturevalue("smoke_report")
    return smoke.out, smoke.results


@pytest.fixture(scope="module")
def browser():
    if find_chromium() is None:
        pytest.fail("chromium is not installed, and CI=true: .ci/run should have installed it with apt")
    with Chromium(width=1280, height=900, timeout=60) as chromium:
        yield chromium


def _images_shown(ipynb: Path) -> int:
    nb = nbformat.read(ipynb, as_version=4)
    return sum(1 for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
               if "image/png" in out.get("data", {}) or "image/svg+xml" in out.get("data", {}))


def _executed_notebooks(out: Path) -> list[tuple[Path, Path]]:
    """(executed .ipynb, its artifact folder) for every notebook of the report and of the grids it ran."""
    found = []
    index = json.loads((out / "index.json").read_text())
    for entry in index["notebooks"]:
        if entry.get("ipynb"):
            found.append((out / entry["ipynb"], out / entry["name"]))
        for page in [entry.get("html") or "", *entry.get("artifacts", [])]:
            if page.endswith("index.html") and (out / page).parent.joinpath("grid.json").is_file():
                grid_dir = (out / page).parent
                for config in json.loads((grid_dir / "grid.json").read_text())["configurations"]:
                    if config.get("ipynb"):
                        ipynb = grid_dir / config["ipynb"]
                        found.append((ipynb, ipynb.with_suffix("")))
    return list(dict.fromkeys(found))


def test_every_executed_notebook_displays_at_least_the_figures_it_saved(checked_report):
    out, results = checked_report
    executed = _executed_notebooks(out)
    assert executed, f"no executed notebook in {out}"
    for ipynb, folder in executed:
        saved = figures_of(folder)
        shown = _images_shown(ipynb)
        assert shown >= len(saved), (f"{ipynb.name} saved {len(saved)} figures ({[p.stem for p in saved]}) "
                                     f"but displays {shown}")


def _ids_in(page: Path) -> list[str]:
    return re.findall(r'\sid="([^"]+)"', page.read_text(encoding="utf-8"))


def _check_page(browser: Chromium, page: Path) -> tuple[list[str], dict]:
    """Open ``page``; return the problems a reader would meet and what the page holds."""
    visit = browser.open(page.as_uri())
    problems = [f"{page.name}: {e}" for e in visit.errors]
    info = browser.evaluate("""(() => {
        const imgs = [...document.images];
        return {
          links: [...document.querySelectorAll('a[href]')].map(a => a.href),
          images: imgs.map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0,
                                  thumb: !!i.closest('.thumb'), card: (i.closest('.card') || {}).id || ''})),
          ids: [...document.querySelectorAll('[id]')].map(e => e.id),
        };
    })()""")
    for img in info["images"]:
        if not img["ok"]:
            problems.append(f"{page.name}: image does not load: {img['src'][:120]}")
    for href in info["links"]:
        url = urlparse(href)
        if url.scheme != "file":
            problems.append(f"{page.name}: link leaves the report: {href}")
            continue
        target = Path(unquote(url.path))
        if not target.exists():
            problems.append(f"{page.name}: broken link {href}")
        elif url.fragment and target.suffix == ".html":
            # nbconvert writes heading ids percent-encoded; the browser may hand either form back
            wanted = {url.fragment, unquote(url.fragment)}
            ids = info["ids"] if target == page else _ids_in(target)
            if not wanted & set(ids):
                problems.append(f"{page.name}: {target.name} has no anchor #{url.fragment}")
    return problems, info


@needs_chromium
def test_the_landing_page_shows_the_state_the_findings_and_a_thumbnail_per_notebook(checked_report, browser):
    out, results = checked_report
    landing = out / "index.html"
    problems, info = _check_page(browser, landing)
    first = browser.evaluate("document.body.firstElementChild.textContent")
    assert first.split(":")[0].split(".")[0] in ("Complete", "Failed", "Partial"), first
    assert browser.evaluate("document.querySelector('#status').className").split()[-1] in ("complete", "failed",
                                                                                       "partial")
    claims = browser.evaluate("""[...document.querySelectorAll('#findings ~ table tr')]
        .filter(tr => tr.querySelector('.badge')).map(tr => tr.querySelector('.badge').textContent)""")
    from heavytail.studies.claims import VERDICTS

    assert claims and set(claims) <= set(VERDICTS), claims
    for name in results:
        if figures_of(out / name):
            thumbs = browser.evaluate(f"""[...document.querySelectorAll('#card-{name} .thumb img')]
                .filter(i => i.complete && i.naturalWidth > 0).length""")
            assert thumbs >= 1, f"the landing page shows no thumbnail for {name}, which saved figures"
    shot = browser.screenshot(out / "landing.png")
    assert shot.stat().st_size > 20_000
    assert not problems, "\n".join(problems)


@needs_chromium
def test_each_finding_fits_a_laptop_screen_under_the_headline_figure(checked_report, browser):
    """At 1280 px wide, no findings row is taller than 900 px (its evidence folded away), and the headline
    figure (the first claim's: the kernel gap against N, which notebook 07 draws) is shown above the table."""
    out, results = checked_report
    browser.open((out / "index.html").as_uri())
    assert browser.evaluate("window.innerWidth") == 1280
    heights = browser.evaluate("""[...document.querySelectorAll('table.findings tr.finding')]
        .map(tr => Math.round(tr.getBoundingClientRect().height))""")
    assert heights, "the landing page has no findings rows"
    assert max(heights) <= 900, f"findings rows taller than a screen (px): {[h for h in heights if h > 900]}"
    # a verdict's badge stays inside its column: one wider than the column ran over the claim's first words
    spilled = browser.evaluate("""[...document.querySelectorAll('table.findings tr.finding .badge')]
        .filter(b => b.getBoundingClientRect().right > b.closest('td').getBoundingClientRect().right + 0.5)
        .map(b => b.textContent)""")
    assert not spilled, f"verdict badges wider than their column: {sorted(set(spilled))}"
    # the paper's claims open the page and fit, whole, in a 1280 x 800 laptop's first screen
    bottom = browser.evaluate("document.querySelector('#paper-claims').getBoundingClientRect().bottom + window.scrollY")
    assert bottom <= 800, f"the paper-claims table ends at {bottom:.0f} px, below a 1280 x 800 first screen"
    expected = headline_figure(out, claims_in(out, list(results)))
    assert expected is not None, "no claim of this report names a figure that was drawn"
    shown = browser.evaluate("""(() => {
        const img = document.querySelector('#headline img'), table = document.querySelector('table.findings');
        if (!img) return null;
        const box = img.getBoundingClientRect();
        return {src: decodeURIComponent(img.src), ok: img.complete && img.naturalWidth > 0, height: box.height,
                above: box.bottom <= table.getBoundingClientRect().top};
    })()""")
    assert shown is not None, "the landing page has no headline figure"
    assert shown["ok"] and shown["height"] > 150 and shown["above"], shown
    assert shown["src"].endswith(expected[0]), (shown["src"], expected[0])
    browser.screenshot(out / "landing_top.png", full_page=False)


@needs_chromium
def test_every_page_of_the_report_loads_cleanly_and_shows_every_figure_it_saved(checked_report, browser):
    out, _ = checked_report
    problems = []
    pages = [(out / "index.html", None)] + [(ipynb.with_suffix(".html"), folder)
                                             for ipynb, folder in _executed_notebooks(out)]
    for entry in json.loads((out / "index.json").read_text())["notebooks"]:
        pages += [(out / a, None) for a in entry.get("artifacts", []) if a.endswith("index.html")]
    for page, folder in dict.fromkeys(pages):
        found, info = _check_page(browser, page)
        problems += found
        if folder is not None:
            shown = sum(1 for img in info["images"] if img["ok"])
            saved = figures_of(folder)
            if shown < len(saved):
                problems.append(f"{page.name}: saved {len(saved)} figures ({[p.stem for p in saved]}) "
                                f"but shows {shown}")
    assert not problems, "\n".join(problems)


def test_the_repository_lab_settings_open_py_files_as_notebooks():
    overrides = json.loads((LAB_SETTINGS / "overrides.json").read_text())
    viewers = overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers["python"] == "Jupytext Notebook"
    makefile = (ROOT / "Makefile").read_text()
    assert "--LabApp.app_settings_dir=" in makefile and ".jupyter/lab/settings" in makefile


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_chromium
def test_jupyterlab_opens_a_py_notebook_in_the_notebook_view(browser):
    """What `make lab` starts, with a throw-away user configuration, so only the repository's settings apply."""
    if shutil.which("jupyter", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("jupyterlab is not installed (the notebooks extra)")
    tmp = Path(tempfile.mkdtemp(prefix="heavytail-lab-"))
    port, token = _free_port(), "heavytail-browser-test"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_DATA_DIR": str(tmp / "data"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(tmp / "user-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--LabApp.app_settings_dir={LAB_SETTINGS}", f"--ServerApp.root_dir={ROOT}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not start: {server.stderr.read()[-2000:] if server.poll() is not None else 'timeout'}")
                time.sleep(0.5)
        browser.open(f"http://127.0.0.1:{port}/lab/tree/notebooks/01_integrability.py?token={token}", settle=1)
        rendered = "document.querySelectorAll('.jp-NotebookPanel .jp-MarkdownCell .jp-RenderedMarkdown h1').length"
        shown = browser.wait_for(f"{rendered} > 0", timeout=180)
        editors = browser.evaluate("document.querySelectorAll('.jp-FileEditor').length")
        assert shown, ("JupyterLab did not open 01_integrability.py in the notebook view with rendered markdown "
                       f"({editors} text editors open)")
        assert editors == 0
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(tmp, ignore_errors=True)
