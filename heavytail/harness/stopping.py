"""When a run has converged: the stopping rule read off its validation scores.

Every ``val_every`` steps the model is scored on a fixed validation set (``RunConfig.val_trials`` trials at
the training N, drawn once from a stream of their own): the score is the mean over those trials of
log E_p^2(model(X_j), Y_j) (eq. 10), a geometric mean, because single heavy-tailed trials span orders of
magnitude and an arithmetic mean would follow the largest. The rule, fixed before any run used it:

    at a validation step t >= stop_min_steps, with at least two scores in (4t/5, t] and one before it,
    stop when  min over (4t/5, t]  >  min over [0, 4t/5]  +  log(1 - stop_tolerance),

i.e. when the best score of the last fifth of training improves on the best before it by less than the
fraction ``stop_tolerance`` of the energy distance. ``steps`` is the cap: a run that reaches it without the
rule firing says so (``stop_reason = "cap"``).
"""

from __future__ import annotations

import math
from typing import Sequence

CONVERGED, CAP = "converged", "cap"


def converged(history: Sequence[tuple[int, float]], step: int, tolerance: float, min_steps: int = 0) -> bool:
    """Whether the rule above fires at ``step`` on ``history`` ((step, score) pairs up to and including it).

    Non-finite scores (a diverged model) never count as an improvement."""
    if tolerance <= 0 or step < min_steps:
        return False
    cut = 0.8 * step
    recent = [v for s, v in history if cut < s <= step]
    before = [v for s, v in history if s <= cut]
    if len(recent) < 2 or not before:
        return False
    best_recent = min((v for v in recent if math.isfinite(v)), default=math.inf)
    best_before = min((v for v in before if math.isfinite(v)), default=math.inf)
    if not math.isfinite(best_before):
        return False
    return best_recent > best_before + math.log1p(-tolerance)
