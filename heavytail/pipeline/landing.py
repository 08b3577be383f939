"""The report's landing page, ``outputs/<report>/index.html``: what did this run find?

Read top to bottom, it answers a reviewer's questions in the order they ask them:

1. the first line: complete, failed (which notebook, at which code cell) or partial (still running,
   interrupted, or notebooks not run);
2. the paper's claims, one row each, decided on the shipped maps (:mod:`heavytail.studies.paper_claims`): whole
   in the first screen;
3. the repository's findings: in brief, the one-sentence conclusion of each notebook that checked claims (so the collapse
   ladder's verdict is not forty rows down the table), then the headline figure (the first that compares maps: the kernel gap at both recipes, each
   recipe's verdict in its caption), then every claim a notebook checked (``claims.json``) in one row: verdict, effect with its interval, seeds, the deciding
   scale as a short label, and the notebook section and figures that decide it; the evidence is folded;
   (the ablation grid's one-seed claims stay in its notebook's page);
4. the scale that decided each claim: the map or grid per claim (``decided_by["map"]``), and the ablation
   grid's settings next to the paper's (the summary notebook's ``scale.csv``), folded;
5. one card per notebook: status, run time, its key figure as a thumbnail, its one-sentence conclusion
   (``conclusion.json``, written by :meth:`heavytail.harness.artifacts.Artifacts.conclude`), and its figures and
   tables; run internals (checkpoints, caches, ``COMPLETE``, ``.ipynb``) are not report items;
6. the grids: each grid's state, with its run folders.

Self-contained: one HTML file with inline CSS, no script, every figure and page linked relatively, so the
report folder opens offline, moves as a whole, and prints. The page reads what notebooks wrote and the shipped
maps' claims (decided by the studies, as ``python -m heavytail claims`` prints them); it computes no result itself.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
from pathlib import Path
from typing import Any, Mapping, Sequence

from heavytail.io import atomic_write_text
from heavytail.studies.claims import VERDICTS, fmt, interval_text, scale_label, seeds_text, statistic_text  # the one list of verdict states
from heavytail.pipeline.report_folder import (anchor, claims_in, conclusion_of, duration, esc, figures_of, git_commit,
                                              href, read_csv, run_folders_of, tables_of)
from heavytail.studies.grid_folder import GRID_JSON, grid_status

SCALE_FILE = "scale.csv"  # columns: setting, this run's value(s), the paper's value

# The page's style sheet, inlined so that index.html stays one file a reviewer can open or mail on its own.
_CSS = Path(__file__).with_name("landing.css").read_text()


# --------------------------------------------------------------------------------------------------
# The sections
# --------------------------------------------------------------------------------------------------
def report_state(results: Sequence[Any], finished: bool) -> tuple[str, str]:
    """('complete' | 'failed' | 'partial', the first line's text)."""
    failed = [r for r in results if r.status == "failed"]
    waiting = [r for r in results if r.status in ("running", "pending")]
    skipped = [r for r in results if r.status == "skipped"]
    ran = [r for r in results if r.status == "ok"]
    if failed:
        parts = []
        for r in failed:
            where = f" at code cell {r.failed_cell}" if r.failed_cell is not None else ""
            error = (r.error or "unknown error").strip()
            parts.append(f"{r.name} failed{where}: {error[:300]}{'…' if len(error) > 300 else ''}")
        tail = f" {len(ran)} of {len(results)} notebooks ran to the end."
        if not finished:
            tail += " The run has not finished (or was interrupted)."
        return "failed", "Failed. " + " ".join(p + "." for p in parts) + tail
    stopped = [r.name for r in results if r.status == "interrupted"]
    if stopped:
        return "partial", (f"Interrupted (Ctrl-C): {len(ran)} of {len(results)} notebooks done; not finished: "
                           f"{', '.join(stopped)}. Rerun the same command to finish it.")
    if not finished or waiting:
        running = [r.name for r in waiting if r.status == "running"]
        pending = [r.name for r in waiting if r.status == "pending"]
        text = f"Partial: the run is in progress or was interrupted; {len(ran)} of {len(results)} notebooks done"
        if running:
            text += f", running: {', '.join(running)}"
        if pending:
            text += f", not started: {', '.join(pending)}"
        return "partial", text + "."
    if skipped:
        why = "; ".join(f"{r.name} ({r.error or 'skipped'})" for r in skipped)
        return "partial", f"Partial: {len(ran)} of {len(results)} notebooks ran, all ok; not run: {why}."
    return "complete", f"Complete: all {len(results)} notebooks ran without error."


def _grid_scale(out_dir: Path, names: Sequence[str]) -> str:
    """The summary notebook's ``scale.csv``: the ablation grid's settings next to the paper's (Table 3)."""
    for name in names:
        rows = read_csv(out_dir / name / SCALE_FILE)
        if not rows:
            continue
        columns = list(rows[0])
        head = "".join(f"<th>{esc(c)}</th>" for c in columns)
        half = (len(rows) + 1) // 2  # two tables side by side
        tables = "".join(
            f"<table><tr>{head}</tr>\n" + "\n".join(
                "<tr>" + "".join(f"<td>{esc(r.get(c, ''))}</td>" for c in columns) + "</tr>" for r in part)
            + "</table>" for part in (rows[:half], rows[half:]) if part)
        ours = columns[1] if len(columns) > 1 else None
        empty = ours is not None and all(r.get(ours, "-") in ("-", "", "0 (0)") for r in rows)
        note = " No runs were found, so only the paper's column is filled." if empty else ""
        return (f"<details><summary>The ablation grid's settings next to the paper's (Table 3), from "
                f"<a href=\"{href(name + '.html')}\">{esc(name)}</a>{note}</summary>"
                f"<div class=\"side\">{tables}</div></details>")
    return "<p class=\"note\">No ablation-grid scale table: the summary notebook did not write one.</p>"


def _decided_on(c: Mapping[str, Any]) -> str:
    return (c.get("decided_by") or {}).get("map") or "not recorded"


def _scale_section(out_dir: Path, names: Sequence[str]) -> str:
    """Per claim, the map (or grid) that decided it and its scale; the claims of one report come from several."""
    by_scale: dict[tuple[str, str], list[str]] = {}
    for _, c in claims_in(out_dir, names):
        by_scale.setdefault((_decided_on(c), c.get("scale") or "n/a"), []).append(c.get("claim", ""))
    rows = [f"<tr><td>{esc(source)}</td><td class=\"evidence\">{esc(scale)}</td><td><ul>"
            + "".join(f"<li>{esc(claim)}</li>" for claim in decided) + "</ul></td></tr>"
            for (source, scale), decided in by_scale.items()]
    table = ("<table class=\"scale\"><tr><th>decided on</th><th>scale</th><th>claims</th></tr>\n" + "\n".join(rows)
             + "</table>") if rows else "<p class=\"note\">No claims recorded, so no scale decided one.</p>"
    return (f"<p class=\"note\">Each claim was decided on the runs of one map or grid, at that map's scale "
            f"(training N, trials per step, steps, width, evaluation N, seeds).</p>{table}"
            + _grid_scale(out_dir, names))


def _links(out_dir: Path, notebook: str, c: Mapping[str, Any]) -> list[str]:
    decided = c.get("decided_by") or {}
    page_of = decided.get("notebook", notebook)
    links = [f"<a href=\"{href(anchor(out_dir, page_of, decided.get('section')))}\">"
             f"{esc(decided.get('section') or page_of)}</a>"]
    for fig in decided.get("figures", ()):
        png = out_dir / page_of / f"{fig}.png"
        if png.is_file():
            links.append(f"<a href=\"{href(f'{page_of}/{fig}.png')}\">{esc(fig)}</a>")
        else:
            links.append(f"<span class=\"note\">{esc(fig)} (not drawn)</span>")
    return links


def _effect(c: Mapping[str, Any]) -> str:
    """'<estimate> [low, high]' with the statistic named below it, or the count a claim states."""
    if c.get("estimate") is None:
        return "<span class=\"note\">n/a</span>"
    value = fmt(c["estimate"])
    if c.get("low") is not None:
        value += interval_text(c, one_seed="no interval from one seed")
    return f"<b>{esc(value)}</b><div class=\"note\">{esc(c.get('statistic', ''))}</div>"


def _drawn(out_dir: Path, notebook: str, c: Mapping[str, Any]) -> list[str]:
    """The figures (relative to the report) a claim names that its notebook drew, in the claim's order."""
    decided = c.get("decided_by") or {}
    page_of = decided.get("notebook", notebook)
    return [f"{page_of}/{fig}.png" for fig in decided.get("figures", ())
            if (out_dir / page_of / f"{fig}.png").is_file()]


def headline_figure(out_dir: Path, claims: Sequence[tuple[str, Mapping[str, Any]]]
                    ) -> tuple[str, list[Mapping[str, Any]]] | None:
    """(figure path relative to the report, the claims its caption states). The headline compares: the first
    drawn figure, in claim order, that shows claims decided on two or more maps (the kernel gap at the design
    recipe and at convergence), with the first claim of each map; a page that led with one recipe's verdict
    would hide the other's. Without such a figure, the first drawn figure of the first claim that has one."""
    shown: dict[str, dict[str, Mapping[str, Any]]] = {}  # figure -> map -> its first claim, in claim order
    for notebook, c in claims:
        for rel in _drawn(out_dir, notebook, c):
            shown.setdefault(rel, {}).setdefault(_decided_on(c), c)
    for rel, by_map in shown.items():
        if len(by_map) > 1:
            return rel, list(by_map.values())
    for notebook, c in claims:
        drawn = _drawn(out_dir, notebook, c)
        if drawn:
            return drawn[0], [c]
    return None


def _caption(c: Mapping[str, Any]) -> str:
    text = f"{c.get('claim', '')}: {c.get('verdict', '')}"
    if c.get("estimate") is not None and c.get("low") is not None:
        text += f", {statistic_text(c)}"
    return f"{text}; decided on {_decided_on(c)}."


def _headline(out_dir: Path, claims: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    found = headline_figure(out_dir, claims)
    if found is None:
        return ""
    rel, stated = found
    caption = "<br>".join(esc(_caption(c)) for c in stated)
    return (f"<figure class=\"headline\" id=\"headline\"><a href=\"{href(rel)}\"><img src=\"{href(rel)}\" "
            f"alt=\"{esc(Path(rel).stem)}\"></a><figcaption class=\"note\">{caption}</figcaption></figure>")


def _in_brief(out_dir: Path, claims: Sequence[tuple[str, Mapping[str, Any]]], results: Mapping[str, Any]) -> str:
    """The conclusion of every notebook that checked claims, in notebook order, each linked to its page."""
    items = []
    for name in dict.fromkeys(notebook for notebook, _ in claims):
        conclusion = conclusion_of(out_dir / name)
        if not conclusion:
            continue
        html_page = getattr(results.get(name), "html", None)
        title = f"<a href=\"{href(html_page)}\">{esc(name)}</a>" if html_page else esc(name)
        items.append(f"<li>{title}: {esc(conclusion['sentence'])}</li>")
    return f"<ul class=\"brief\" id=\"in-brief\">{''.join(items)}</ul>" if items else ""


PAPER_VERDICT_CLASS = {"reproduced": "v-reproduced", "partly reproduced": "v-undecided-at-this-power",
                       "not reproduced": "v-not-reproduced", "undecided": "v-undecided-at-this-power"}


def _paper_section(root: Path, own: bool = False) -> str:
    """The paper's claims, one row each (:mod:`heavytail.studies.paper_claims`), decided on the shipped maps under
    ``root``: the page's first table, whole in the first screen; ``own``: the repository's own questions instead."""
    from heavytail.studies import claim_groups, paper_claims

    def decide(name: str):
        return claim_groups.decide(claim_groups.group(name), root)

    rows = []
    for r in paper_claims.rows(decide, paper_claims.OWN_QUESTIONS if own else paper_claims.PAPER_CLAIMS):
        cls = PAPER_VERDICT_CLASS.get(r["verdict"], "v-not-run")
        which = f"<div class=\"note\">{esc(r['which'])}</div>" if r["which"] else ""
        rows.append(f"<tr><td><b>{esc(r['id'])}</b></td><td>{esc(r['words'])} <span class=\"note\">"
                    f"({esc(r['section'])})</span></td><td><span class=\"badge {cls}\">{esc(r['verdict'])}</span>"
                    f"{which}</td><td>{esc(r['number'])}</td><td>{esc(r['scale'])}</td></tr>")
    if own:
        return ("<table class=\"paper\" id=\"own-questions\"><tr><th></th><th>the repository's own question</th>"
                "<th>verdict</th><th>the number that decided it</th><th>our scale</th></tr>\n" + "\n".join(rows)
                + "</table>")
    return (f"<p class=\"note caption\">Each claim in the paper's words, its verdict from the rules registered before "
            f"the runs, and the scale that decided it; the paper's Section 4.2 ran {esc(paper_claims.PAPER_SCALE)}. "
            "The repository's own questions and every rule's evidence follow.</p>"
            "<table class=\"paper\" id=\"paper-claims\"><tr><th></th><th>the paper claims</th><th>verdict</th>"
            "<th>the number that decided it</th><th>our scale</th></tr>\n" + "\n".join(rows) + "</table>")


def _is_breadth(notebook: str) -> bool:
    """The ablation grid's summary (one seed, smoke-scale steps): breadth, not power; its claims stay in its page."""
    return notebook.endswith("_summary")


def _findings_section(out_dir: Path, names: Sequence[str], results: Mapping[str, Any]) -> str:
    every = claims_in(out_dir, names)
    claims = [(n, c) for n, c in every if not _is_breadth(n)]
    breadth = len(every) - len(claims)
    breadth_note = (f"<p class=\"note\">The ablation grid's {breadth} claims (one seed, 300 steps: breadth, not power) "
                    "are in its notebook's page, not here.</p>") if breadth else ""
    if not claims:
        summary = [n for n in names if n.endswith("summary")]
        why = "; ".join(f"{n}: {results[n].status}" for n in summary if n in results) or "no notebook checked claims"
        return f"<p class=\"note\">No findings recorded ({esc(why)}).</p>" + breadth_note
    counts = {v: sum(c["verdict"] == v for _, c in claims) for v in VERDICTS}
    line = ", ".join(f"<span class=\"v-{v.replace(' ', '-')}\"><b>{counts[v]}</b> {v}</span>" for v in VERDICTS)
    rows = []
    for notebook, c in claims:
        verdict = c["verdict"]
        needs = f"<p>To decide: {esc(c['needs'])}</p>" if c.get("needs") else ""
        # The per-cell evidence runs to many lines for a map's claims: folded, so each row stays one or two lines.
        detail = (f"<details><summary>evidence</summary><p>{esc(c.get('source', ''))}. "
                  f"Paper: {esc(c.get('paper', ''))}</p><p>{esc(c.get('evidence', ''))}</p>{needs}"
                  f"<p>Decided at: {esc(c.get('scale') or 'n/a')}</p></details>")
        scale = esc(scale_label(c.get("scale") or "") or "n/a")
        rows.append(
            f"<tr class=\"finding\"><td><span class=\"badge v-{verdict.replace(' ', '-')}\">{esc(verdict)}</span></td>"
            f"<td>{esc(c.get('claim', ''))} {detail}</td><td>{_effect(c)}</td><td>{esc(seeds_text(c))}</td>"
            f"<td>{scale}<div class=\"note\">{esc(_decided_on(c))}</div></td>"
            f"<td class=\"links\">{' · '.join(_links(out_dir, notebook, c))}</td></tr>")
    return (_in_brief(out_dir, claims, results) + _headline(out_dir, claims)
            + f"<p>{line} of {len(claims)} claims; each row names the map and scale that decided it.</p>" + breadth_note
            + "<table class=\"findings\"><tr><th>verdict</th><th>claim</th><th>effect [95 % interval]</th><th>seeds</th>"
            "<th>decided at</th><th>shown in</th></tr>\n" + "\n".join(rows) + "</table>")


def _files_line(label: str, links: Sequence[str]) -> str:
    return f"<div class=\"files\"><b>{label}:</b> {' · '.join(links)}</div>" if links else ""


def _is_grid_entry(r: Any) -> bool:
    """The report's entry for a grid links the grid's index page instead of a rendered notebook."""
    return bool(r.html) and r.html.endswith("index.html")


def _card(out_dir: Path, r: Any) -> str:
    folder = out_dir / r.name
    title = f"<a href=\"{href(r.html)}\">{esc(r.name)}</a>" if r.html else esc(r.name)
    status = f"<span class=\"badge s-{esc(r.status)}\">{esc(r.status)}</span>"
    parts = [f"<h3>{title} {status} <span class=\"note\">{duration(r.elapsed_s)}</span></h3>"]
    if r.status == "failed":
        where = f"stopped at code cell {r.failed_cell}: " if r.failed_cell is not None else ""
        parts.append(f"<p class=\"s-failed\">{where}{esc(r.error or 'unknown error')}</p>")
    elif r.status == "skipped":
        parts.append(f"<p class=\"note\">Not run: {esc(r.error or 'skipped')}.</p>")
    figures = figures_of(folder)
    conclusion = conclusion_of(folder)
    key = None
    if conclusion and conclusion.get("figure"):
        key = next((f for f in figures if f.stem == conclusion["figure"]), None)
    key = key or (figures[0] if figures else None)
    if key is not None:
        rel = f"{r.name}/{key.name}"
        # Loaded eagerly: a lazy image below the fold never loads in a printout or a headless check.
        parts.append(f"<a class=\"thumb\" href=\"{href(rel)}\"><img src=\"{href(rel)}\" alt=\"{esc(key.stem)}\"></a>")
    if conclusion:
        parts.append(f"<p class=\"conclusion\">{esc(conclusion['sentence'])}</p>")
    elif _is_grid_entry(r):
        parts.append("<p class=\"note\">Executed once per configuration by the grid: see Grids below.</p>")
    elif r.status == "ok":
        parts.append("<p class=\"note\">This notebook recorded no conclusion.</p>")
    fig_links = []
    for f in figures:
        svg = f.with_suffix(".svg")
        link = f"<a href=\"{href(f'{r.name}/{f.name}')}\">{esc(f.stem)}</a>"
        if svg.is_file():
            link += f" (<a href=\"{href(f'{r.name}/{svg.name}')}\">svg</a>)"
        fig_links.append(link)
    parts.append(_files_line("figures", fig_links))
    parts.append(_files_line("tables", [f"<a href=\"{href(f'{r.name}/{t.name}')}\">{esc(t.name)}</a>"
                                        for t in tables_of(folder)]))
    runs = run_folders_of(folder)
    parts.append(_files_line("run folders", [
        f"<a href=\"{href(os.path.relpath(d / ('results.json' if (d / 'results.json').is_file() else 'config.yaml'), out_dir))}\">"
        f"{esc(d.name)}</a>" for d in runs]))
    if r.parameters:
        params = "\n".join(f"{k}: {json.dumps(v, default=str)}" for k, v in r.parameters.items())
        parts.append(f"<details><summary>parameters</summary><pre>{esc(params)}</pre></details>")
    return f"<div class=\"card\" id=\"card-{esc(r.name)}\">" + "\n".join(p for p in parts if p) + "</div>"


def grid_folders(out_dir: Path, results: Sequence[Any], root: Path, known: Sequence[Path] = ()) -> list[Path]:
    """Grid folders this report runs or read: the params file's grids (``known``), a report entry linking a
    grid's index, and any notebook parameter naming a folder that holds a ``grid.json`` (relative paths are
    from the repository root)."""
    found: list[Path] = list(known)
    for r in results:
        if _is_grid_entry(r):
            found.append((out_dir / r.html).parent)
        for value in (r.parameters or {}).values():
            if isinstance(value, str) and value:
                folder = Path(value) if Path(value).is_absolute() else root / value
                if (folder / GRID_JSON).is_file():
                    found.append(folder)
    unique: list[Path] = []
    for f in found:
        f = Path(os.path.normpath(f))
        if f not in unique:
            unique.append(f)
    return unique


def _grids_section(out_dir: Path, folders: Sequence[Path]) -> str:
    if not folders:
        return "<p class=\"note\">This report ran no grid and read none (its params file names no grid).</p>"
    blocks = []
    for folder in folders:
        rel = os.path.relpath(folder, out_dir)
        try:
            record = grid_status(folder)
        except ValueError as err:  # the page still renders, and says what is wrong with the record
            blocks.append(f"<p><b>{esc(folder.name)}</b>: {esc(str(err))}</p>")
            continue
        if record is None:
            state = ("does not exist yet" if not folder.is_dir()
                     else "has no grid.json (not written by the grid runner)")
            blocks.append(f"<p><b>{esc(folder.name)}</b>: the folder {esc(rel)} {state}.</p>")
            continue
        counts = record.get("counts") or {}
        configs = record.get("configurations") or []
        done = counts.get("ok", 0) + counts.get("skipped", 0)
        state = "finished" if record.get("finished") else "not finished"
        head = (f"<p><b><a href=\"{href(rel + '/index.html')}\">{esc(record.get('grid', folder.name))}</a></b>: "
                f"{done} of {len(configs)} configurations finished, {counts.get('failed', 0)} failed "
                f"({state}; executor {esc(record.get('executor', '?'))}; grid file {esc(record.get('source', ''))}).</p>")
        rows = []
        for c in configs:
            name = c.get("name", "")
            page = c.get("html")
            link = f"<a href=\"{href(rel + '/' + page)}\">{esc(name)}</a>" if page else esc(name)
            status = c.get("status", "?")
            shown = "finished earlier" if status == "skipped" else status
            cls = "skipped-done" if status == "skipped" else status
            detail = ""
            if status == "failed":
                detail = (f"code cell {c['failed_cell']}: " if c.get("failed_cell") else "") + str(c.get("error") or "")
            rows.append(f"<tr><td>{link}</td><td><span class=\"badge s-{esc(cls)}\">{esc(shown)}</span></td>"
                        f"<td>{duration(c.get('elapsed_s'))}</td><td class=\"evidence\">{esc(detail)}</td></tr>")
        table = ("<details><summary>run folders</summary><table><tr><th>configuration</th><th>status</th>"
                 "<th>run time</th><th>detail</th></tr>\n" + "\n".join(rows) + "</table></details>") if rows else ""
        blocks.append(head + table)
    return "\n".join(blocks)


# --------------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------------
def render_landing(out_dir: Path, report: str, results: Sequence[Any], params_source: Path | None,
                   finished: bool, root: Path, grid_dirs: Sequence[Path] = ()) -> str:
    """The landing page's HTML for a report folder (see the module docstring for its sections)."""
    state, first_line = report_state(results, finished)
    names = [r.name for r in results]
    by_name = {r.name: r for r in results}
    total = sum(r.elapsed_s or 0.0 for r in results)
    stamp = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    commit = git_commit(root)
    meta = [f"params {esc(params_source or '-')}", f"written {stamp}", f"on {esc(socket.gethostname())} "
            f"({os.cpu_count()} cores)", f"notebook run time {duration(total) or '0 s'}"]
    if commit:
        meta.insert(1, f"commit {esc(commit)}")
    cards = "\n".join(_card(out_dir, r) for r in results)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>heavytail report {esc(report)}: {state}</title>
<style>{_CSS}</style>
</head><body>
<p class="status {state}" id="status">{esc(first_line)}</p>
<h1>heavytail report: {esc(report)}</h1>
<p class="meta">{' · '.join(meta)}</p>
<h2 id="paper">The paper's claims</h2>
{_paper_section(root)}
<h2 id="own">The repository's own questions</h2>
{_paper_section(root, own=True)}
<h2 id="findings">Every claim the notebooks checked</h2>
{_findings_section(out_dir, names, by_name)}
<h2 id="scale">The scale that decided each claim</h2>
{_scale_section(out_dir, names)}
<h2 id="notebooks">Notebooks</h2>
<div class="cards">
{cards}
</div>
<h2 id="grids">Grids</h2>
{_grids_section(out_dir, grid_folders(out_dir, results, root, grid_dirs))}
</body></html>
"""


def write_landing(out_dir: Path, report: str, results: Sequence[Any], params_source: Path | None,
                  finished: bool, root: Path, grid_dirs: Sequence[Path] = ()) -> Path:
    """Write ``<out_dir>/index.html``; rewritten after every notebook, so a killed run says 'partial'."""
    index = Path(out_dir) / "index.html"
    atomic_write_text(index, render_landing(Path(out_dir), report, results, params_source, finished, Path(root),
                                            grid_dirs))
    return index
