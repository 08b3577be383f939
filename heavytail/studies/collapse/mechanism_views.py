"""The mechanism screen as a reader sees it (:mod:`heavytail.studies.collapse.mechanism`): which setting a run
screens, the criterion per setting and seed as one table, and the training loss per setting, softmax against log-ELU,
as one figure. Each takes run summaries (the shipped ``mechanism-screen`` map, or a local re-run)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt

from heavytail.names import LOG_ELU, SOFTMAX_SDPA, variant_color
from heavytail.studies import claims as C
from heavytail.studies.collapse import mechanism as M
from heavytail.studies.collapse import mechanism_followup as F
from heavytail.studies.collapse import tables56 as T
from heavytail.studies.run_record import records

Run = Mapping[str, Any]
_KERNELS = {"softmax": SOFTMAX_SDPA, "log_elu": LOG_ELU}


def screen_table(runs: Sequence[Run]) -> dict[str, Any]:
    """Per setting: the seeds screened, each seed's window medians and softmax/log-ELU ratio, and whether softmax
    learns there by the criterion written before the runs."""
    rows = []
    for name, kernels in M.by_setting(runs).items():
        soft, log = kernels.get("softmax", {}), kernels.get("log_elu", {})
        verdict = M.learns(list(soft.values()), list(log.values()))
        seeds = sorted(set(soft) | set(log))
        rows.append({
            "setting": name, "changes": ", ".join(f"{k} {v:g}" for k, v in M.SETTINGS[name].items()),
            "seeds": ", ".join(map(str, seeds)),
            "softmax median loss, per seed": ", ".join(C.fmt(M.window_median(soft[s])) if s in soft else "-"
                                                       for s in seeds),
            "log-ELU median loss, per seed": ", ".join(C.fmt(M.window_median(log[s])) if s in log else "-"
                                                       for s in seeds),
            "softmax / log-ELU": ", ".join(C.fmt(verdict["ratios"][s]) if s in verdict["ratios"] else "-"
                                           for s in seeds),
            "softmax learns": M.screen_state(verdict),
        })
    lo, hi = M.SCREEN_WINDOW
    return {"title": "The mechanism screen: does softmax learn in the first steps of R2's recipe?",
            "columns": ["setting", "changes", "seeds", "softmax median loss, per seed", "log-ELU median loss, per seed",
                        "softmax / log-ELU", "softmax learns"], "rows": rows,
            "notes": f"median training loss over the logged steps {lo:,}-{hi:,}; softmax learns in a setting when on "
                     f"every seed screened its median is at most x{M.LEARN_FACTOR:g} log-ELU's on the same seed "
                     "(heavytail.studies.collapse.mechanism, written before the runs)"}


def screen_figure(runs: Sequence[Run]):
    """One panel per screened setting: training loss against step, softmax (SDPA) and log-ELU, one line per seed,
    the criterion's window shaded."""
    settings = M.by_setting(runs)
    fig, axes = plt.subplots(1, max(1, len(settings)), figsize=(3.2 * max(1, len(settings)), 3.0),
                             constrained_layout=True, squeeze=False, sharey=True)
    for ax, (name, kernels) in zip(axes[0], settings.items()):
        for kernel, seeds in kernels.items():
            for i, (seed, r) in enumerate(sorted(seeds.items())):
                steps, loss = T.regular_rows(r["trace"], r.log_every)
                ax.plot(steps, loss, color=variant_color(_KERNELS[kernel]), lw=0.9, ls=("-", "--")[i % 2],
                        label=f"{'softmax (SDPA)' if kernel == 'softmax' else 'log-ELU'}, seed {seed}")
        ax.axvspan(*M.SCREEN_WINDOW, color="0.9", zorder=0)
        ax.set_yscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("training loss (energy distance)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, frameon=False, loc="outside lower center", ncols=4)
    return fig


def screen_summary(runs: Sequence[Run]) -> str:
    """One sentence: the settings in which softmax learns, those in which it does not, and those not screened yet."""
    table = screen_table(runs)
    said = {v: [r["setting"] for r in table["rows"] if r["softmax learns"] == v] for v in ("yes", "no", "not run")}
    partial = [f"{r['setting']} {r['softmax learns'].removeprefix('so far ')}" for r in table["rows"]
               if r["softmax learns"].startswith("so far")]
    missing = [name for name in M.SETTINGS if name not in {r["setting"] for r in table["rows"]}]
    parts = [f"softmax learns with log-ELU in {', '.join(said['yes'])}" if said["yes"]
             else "no setting is fully screened yet"]
    if partial:
        parts.append(f"softmax learns so far in {', '.join(partial)}")
    if said["no"]:
        parts.append(f"not in {', '.join(said['no'])}")
    if missing or said["not run"]:
        parts.append(f"not screened yet: {', '.join(missing + said['not run'])}")
    return "The screen: " + "; ".join(parts) + f" (the first {M.SCREEN_STEPS:,} steps, seeds " \
        f"{', '.join(map(str, M.SCREEN_SEEDS))})."


def followup_text(screen_runs: Sequence[Run]) -> str:
    """One sentence for a follow-up that has not run: which setting the screen chooses (or why none yet), and the
    command that writes its grid once there is one."""
    setting, why = F.choice(M.screen_states(screen_runs))
    return (f"**The follow-up** (the cheapest setting where softmax learns, {len(F.SEEDS)} seeds, "
            f"{T.RECIPE['steps']:,} steps, P5's rule): not run; {why}."
            + (" Its grid: `python -m heavytail mechanism-followup`." if setting else ""))


# Block 0's trace the intervention figure draws under the loss: the share of its attention rows absorbed (top weight
# exactly 1), the ladder's precursor of the failure (App. I's "tracking attention weights").
_BLOCK0 = "block0.attn_absorbed"
_INTERVENTION_COLOR = "0.15"  # an intervention is no kernel of Table 1: drawn in black beside the kernels' colours


def interventions_figure(runs: Sequence[Run]):
    """One column per intervention that has runs: above, the rolling median training loss of its runs against plain
    softmax's and log-ELU's at R2 (the ladder's runs, the same seeds); below, block 0's absorbed share. One line per
    seed. ``runs``: the interventions' and the ladder's runs together."""
    plain, by = M.groups(runs)
    log_elu = [r for r in records(runs) if r.kernel == "log_elu" and M.intervention_of(r.config) is None
               and M._on_r2({**r.config, "kernel": "softmax", "attention_backend": "sdpa"})]
    names = list(by) or ["(none run yet)"]
    fig, axes = plt.subplots(2, len(names), figsize=(max(6.4, 4.2 * len(names)), 6.0), sharex=True, squeeze=False,
                             constrained_layout=True)
    for col, name in enumerate(names):
        mine = by.get(name, [])
        seeds = {r.seed for r in mine}
        for label, group, color in (("plain softmax (SDPA)", plain, variant_color(SOFTMAX_SDPA)),
                                    ("log-ELU", log_elu, variant_color(LOG_ELU)), (name, mine, _INTERVENTION_COLOR)):
            for i, r in enumerate(x for x in group if x.seed in seeds):
                every = r.log_every
                steps, loss = T.regular_rows(r["trace"], every)
                trace = r["trace"]
                absorbed = [a for s, a in zip(trace.get("step", []), trace.get(_BLOCK0, [])) if s % every == 0]
                kw = dict(color=color, lw=1.0, alpha=0.85, label=label if i == 0 else None)
                axes[0][col].plot(steps, T.rolling_median(loss), **kw)
                if len(absorbed) == len(steps):
                    axes[1][col].plot(steps, T.rolling_median(absorbed), **{**kw, "label": None})
        axes[0][col].set_yscale("log")
        axes[0][col].set_title(f"{name}, seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, sorted(seeds))) or '-'}",
                               fontsize=9)
        axes[1][col].set_ylim(-0.03, 1.03)
        axes[1][col].set_xlabel("step")
        if mine:
            axes[0][col].legend(fontsize=7, loc="lower left")
    axes[0][0].set_ylabel(f"training loss\n(rolling median, {T.WINDOW} rows)")
    axes[1][0].set_ylabel("block 0: share of\nrows absorbed")
    fig.suptitle("Interventions at R2's recipe against plain softmax\nand log-ELU on the same seeds", fontsize=10)
    return fig
