"""Does flushing subnormal floats change outcomes? A paired A/B, decided before any map uses the switch.

``RunConfig.flush_subnormals`` makes torch treat values below float32's smallest normal (1.2e-38) as 0 while
training and evaluating. Softmax weights of heavy-tailed rows fall there, and x86 computes on them in microcode:
softmax's float32 step at Table 3's model size took 5.0 s instead of 0.24 s. Flushing changes those weights
from ~1e-40 to 0, far below anything a row sum of eq. 7 resolves, so no outcome should move; the rule, written
before the runs (``params/grid_subnormal_ab.yaml``):

per kernel, per seed, log(ratio flushed / ratio default) of the eq. 36 median ratio at the evaluation N, the two
runs trained on the same data stream; :func:`heavytail.studies.claims.equivalence_rule`: the claim "flushing
changes the outcome" is *reproduced* when the 95 % interval excludes 0, *not reproduced* when the runs are
equivalent within x1.20 (TOST at 5 %) or differ the other way, undecided otherwise. Training trajectories
diverge from the first changed rounding (every change of attention arithmetic does that here), so seed-by-seed
equality is not expected; the distribution over seeds is.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from heavytail.studies import claims as C
from heavytail.studies.core import map_extent, variant, variant_name
from heavytail.studies.run_record import records


def pairs(runs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[int, tuple[Mapping, Mapping]]]:
    """{variant: {seed: (default run, flushed run)}} wherever both ran."""
    groups: dict[tuple[tuple[str, str], int, bool], Mapping[str, Any]] = {}
    for r in records(runs):
        groups[(variant(r), r.seed, r.flush_subnormals)] = r
    out: dict[tuple[str, str], dict[int, tuple[Mapping, Mapping]]] = {}
    for (v, seed, flushed), r in groups.items():
        if flushed and (v, seed, False) in groups:
            out.setdefault(v, {})[seed] = (groups[(v, seed, False)], r)
    return {v: dict(sorted(p.items())) for v, p in sorted(out.items())}


def findings(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One claim per kernel: does flushing subnormals move the median ratio?"""
    out = []
    for v, by_seed in pairs(runs).items():
        logs = {s: math.log(b["median"]["ratio"] / a["median"]["ratio"]) for s, (a, b) in by_seed.items()
                if a["median"]["ratio"] > 0 and b["median"]["ratio"] > 0}
        d = C.equivalence_rule(list(logs.values()))
        secs = [(a.get("train_seconds", math.nan), b.get("train_seconds", math.nan)) for a, b in by_seed.values()]
        speed = sorted(x / y for x, y in secs if y and math.isfinite(x) and math.isfinite(y))
        same = sum(a["median"]["ratio"] == b["median"]["ratio"] and a.get("final_loss") == b.get("final_loss")
                   for a, b in by_seed.values())
        out.append(C.make_claim(
            f"subnormals-change-{v[0]}", f"Flushing subnormal floats changes {variant_name(v)}'s outcome",
            "(this repository's switch; the paper does not discuss it)", "not discussed", d,
            "flushed/default ratio", map_extent([r for pair in by_seed.values() for r in pair]),
            f"identical to the last digit (ratio and final loss) in {same} of {len(by_seed)} seeds; "
            "per seed x: " + ", ".join(f"{s}: {math.exp(x):.2f}" for s, x in logs.items())
            + (f"; training time default/flushed, median x{speed[len(speed) // 2]:.2f}" if speed else ""),
            {"notebook": "07_kernel_gap", "section": "Subnormal floats", "figures": []},
            transform=math.exp).to_dict())
    return out
