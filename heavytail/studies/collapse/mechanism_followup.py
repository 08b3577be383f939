"""The screen's follow-up (the mechanism study, :mod:`heavytail.studies.collapse.mechanism`): where softmax learns in
the first steps, does it then diverge abruptly to a value it keeps, as the paper's did (Sec. 4.2, App. I, Fig. 13)?

Written before any follow-up run:

* **The setting followed** is the cheapest of :data:`mechanism.SETTINGS` (listed cheapest first) in which the screen
  says softmax learns ("yes": every screened seed within x2 of log-ELU), every cheaper setting having said "no".
  While a cheaper setting is undecided, nothing is chosen (:func:`choice`).
* **Its grid** (:func:`grid`): rung R2's recipe exactly (:data:`tables56.RECIPE`: Table 3's model, float32 with
  subnormals flushed, 6,000 steps of the 50,000-step schedule, 256 evaluation trials) with the setting's one change,
  softmax (SDPA) and log-ELU, seeds :data:`SEEDS` as the outer axis, the screen's logging and attention tracking.
* **Claims** on its runs (:func:`findings`), P5's and P1's rules of Tables 5-6 unchanged:
  ``followup-shape-<setting>``: the share of softmax runs whose training loss "learned, then diverged" against
  log-ELU on the same seed (:func:`heavytail.studies.collapse.tables56.shape`), Clopper-Pearson 95 % interval about
  1/2, six seeds at least; ``followup-collapse-<setting>``: the share of softmax runs labelled collapsed (at least
  half their evaluation trials collapsed), the same rate rule, re-read at 0.4 and 0.6.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from heavytail.studies import claims as C
from heavytail.studies.collapse import mechanism as M
from heavytail.studies.collapse import tables56 as T
from heavytail.studies.collapse import tables56_rules as R
from heavytail.studies.core import map_extent
from heavytail.studies.reference_maps import MAPS
from heavytail.studies.run_record import records

Run = Mapping[str, Any]
SEEDS = T.SEEDS
KERNELS = ({"kernel": "softmax", "attention_backend": "sdpa"}, {"kernel": "log_elu", "attention_backend": "auto"})
# The grid files the shipped maps name (heavytail.studies.reference_maps.MAPS owns them).
SCREEN_GRID = MAPS["mechanism-screen"].grid
FOLLOWUP_GRID = MAPS["mechanism-followup"].grid
# R2's recipe keys a setting may change, and the follow-up's length and evaluation (tables56.RECIPE)
_RECIPE_KEYS = ("lr", "warmup_steps", "n_points", "trials_per_step", "steps", "eval_trials")


def choice(states: Mapping[str, str]) -> tuple[str | None, str]:
    """(the setting to follow, or None; why) from :func:`mechanism.screen_states`: the first "yes" in
    :data:`mechanism.SETTINGS`'s order after only "no"s."""
    for i, name in enumerate(M.SETTINGS):
        state = states.get(name, "not run")
        if state == "yes":
            return name, (f"{name}: softmax learns on every screened seed, "
                          + ("and every cheaper setting did not" if i else "the cheapest setting screened"))
        if state != "no":
            return None, f"{name} is not decided yet ({state}); the setting followed is the cheapest that learns, so it waits for {name}"
    return None, "softmax learns in no screened setting: there is nothing to follow"


def grid(setting: str, template: Mapping[str, Any]) -> dict[str, Any]:
    """The follow-up grid file (a mapping, written as YAML) for ``setting``, from the screen's grid file
    ``template`` (its base, logging and executor settings)."""
    if setting not in M.SETTINGS:
        raise ValueError(f"unknown screen setting {setting!r}; the settings are: {', '.join(M.SETTINGS)}")
    base = {**dict(template["base"]), **{k: T.RECIPE[k] for k in _RECIPE_KEYS}, **M.SETTINGS[setting]}
    return {"name": "grid-mechanism-followup", "base": base,
            "axes": {"seed": list(SEEDS), "runs": [dict(k) for k in KERNELS]},
            **{k: template[k] for k in ("local", "slurm") if k in template}}


def findings(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """The follow-up's two claims per followed setting (the module docstring); a setting is the one of
    :func:`mechanism.setting_of` on its runs' configurations at the follow-up's length."""
    out = []
    groups: dict[str, dict[str, list[Run]]] = {}
    for r in records(runs):
        name = M.setting_of(r.config)
        if name is not None and r.steps == T.RECIPE["steps"] and r.kernel in (
                "softmax", "log_elu"):
            groups.setdefault(name, {}).setdefault(r.kernel, []).append(r)
    for name, by in groups.items():
        soft, log = by.get("softmax", []), by.get("log_elu", [])
        per_seed = R.shapes({"softmax": soft, "log_elu": log},
                            lambda g: "log_elu" if g == "softmax" else None).get("softmax", {})
        hits = sum(v["shape"] == T.SHAPES[0] for v in per_seed.values())
        counts = {s: sum(v["shape"] == s for v in per_seed.values()) for s in T.SHAPES}
        where = map_extent([*soft, *log]) + f"; the screen's setting {name}: " + ", ".join(
            f"{k} {v:g}" for k, v in M.SETTINGS[name].items())
        decided_by = {"notebook": M.NOTEBOOK, "section": "Why softmax fails here: the screen and the interventions",
                      "figures": ["mechanism_screen"]}
        out.append(C.make_claim(
            f"followup-shape-{name}", f"Where the screen says softmax learns ({name}), it learns first, then diverges "
            "abruptly and stays (Fig. 13)", "Sec. 4.2, App. I, Fig. 13", "softmax first descends with the other "
            "kernels, then diverges abruptly at step ~3,500 to a value it keeps", C.rate_rule(
                hits, len(per_seed), min_seeds=T.MIN_SEEDS), "share of softmax runs learned, then diverged", where,
            "shapes: " + (", ".join(f"{s} {n}" for s, n in counts.items() if n) or "none") + "; per seed: "
            + ", ".join(f"{s}: {v['shape']}" + (f" at step {v['diverged_at']:,}" if v["diverged_at"] else "")
                        for s, v in sorted(per_seed.items())), decided_by).to_dict())
        out.append(C.make_claim(
            f"followup-collapse-{name}", f"Where the screen says softmax learns ({name}), most softmax runs are "
            "labelled collapsed", "Tables 5-6, App. I", "post-norm softmax collapsed without symlog", R.rate(soft),
            "share of softmax runs labelled collapsed", where,
            f"runs labelled collapsed: softmax {R.count(soft)}, log-ELU {R.count(log)}; at 0.4 / 0.6 of the trials: "
            f"softmax {R.count(soft, 0.4)} / {R.count(soft, 0.6)}", decided_by).to_dict())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heavytail mechanism-followup [GRID_DIR]``: read the screen (the shipped map, or GRID_DIR's finished
    runs in its place), choose the setting to follow by the rule written before the runs, and write its grid file
    (``--output``, default params/grid_mechanism_followup.yaml); a screen that has not decided is one line, exit 2."""
    import argparse

    import yaml

    from heavytail import cli
    from heavytail.harness.artifacts import repo_root
    from heavytail.io import atomic_write_text
    from heavytail.studies import reference_maps

    parser = argparse.ArgumentParser(prog="python -m heavytail mechanism-followup",
                                     description=main.__doc__.splitlines()[0])
    parser.add_argument("grid_dir", nargs="?", default=None,
                        help="a local re-run of the screen, e.g. outputs/grid-mechanism-screen (default: the shipped map)")
    parser.add_argument("--output", default=None, help=f"grid file to write (default: {FOLLOWUP_GRID})")
    args = parser.parse_args(argv)
    try:
        source = reference_maps.source("mechanism-screen", args.grid_dir)
        states = M.screen_states(source.runs)
        setting, why = choice(states)
        if setting is None:
            raise ValueError(f"no follow-up yet: {why} (screen: {'; '.join(f'{k} {v}' for k, v in states.items())})")
        template = cli.read_yaml_file(repo_root() / SCREEN_GRID, "grid file")
    except cli.BAD_INPUT as err:
        return cli.bad_input("mechanism-followup", err)
    header = ("# The mechanism screen's follow-up (heavytail.studies.collapse.mechanism_followup, its rules written\n"
              "# before any of these runs): written by `python -m heavytail mechanism-followup` from\n"
              f"# {source.describe()}.\n"
              f"# Screen: {'; '.join(f'{k} {v}' for k, v in states.items())}. Followed: {why}.\n"
              "# Rung R2's recipe with that one change, 6,000 steps, 256 evaluation trials, softmax (SDPA) and log-ELU,\n"
              "# seeds 0-5 as the outer axis. Run it from a clean worktree at a commit, then ship it:\n"
              f"#   python -m heavytail grid {FOLLOWUP_GRID} --executor local\n"
              "#   python -m heavytail ship-map mechanism-followup outputs/grid-mechanism-followup\n")
    out = Path(args.output) if args.output else repo_root() / FOLLOWUP_GRID
    atomic_write_text(out, header + yaml.safe_dump(grid(setting, template), sort_keys=False))
    print(f"wrote {out}: the follow-up of {setting}, {len(SEEDS) * len(KERNELS)} runs")
    return 0
