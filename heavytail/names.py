"""Every name the package, the grid files and the notebooks share, with its properties: one table of rows.

A kernel is one :class:`KernelRow` (label, growth, growth order q, colour), an attention backend one
:class:`BackendRow` (label, the kernels it computes, its arithmetic), a tail regime one row of per-axis tail
index ranges, and the task x marginal pairs no model can learn one row with the reason. The label, colour and
growth maps below are live views of those rows, and the rules that follow from them are functions here
(:func:`backend_refusal`, :func:`task_refusal`, :func:`regime_refusal`, :func:`hill_k`), so the config, the
model, attention and the operators each read a rule instead of restating it.

Adding a kernel: a row in :data:`KERNEL_ROWS` and, unless its row names a closed form the registry builds
(``form="power_elu"``), its functions in :data:`heavytail.science.kernels.FORMS`. Everything else (config
validation, the registry, the figures' colours) reads the row.

It imports nothing heavy (no torch), so the report runner, the grid and the figure notebooks read it cheaply.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Iterator


class _View(Mapping):
    """A read-only map computed from a row table on every access, so a row added later (a test registering a
    kernel) shows in every view at once."""

    def __init__(self, build: Callable[[], dict]):
        self._build = build

    def __getitem__(self, key):
        return self._build()[key]

    def __iter__(self) -> Iterator:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())

    def __repr__(self) -> str:
        return repr(self._build())


# ---------------------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class KernelRow:
    """One attention kernel g of eq. 7: a row of Table 1 (or of the power-ELU family of App. A)."""

    label: str  # how tables and figures name it
    growth: str  # growth of g(s) as s -> inf (the last column of Table 1)
    # q with g(s) ~ s^q as s -> inf (inf for e^s, 0 for slower than every power): E[g(S)] is finite on Pareto(a)
    # scores iff q < a (App. A), so q decides on which tails the normaliser of eq. 7 exists.
    order: float
    color: str  # its one colour in every figure
    paper: bool = False  # one of Table 1's four kernels (the paper's tables and figures list exactly these)
    # The closed form heavytail.science.kernels builds the functions from, or None for hand-written functions
    # registered under the kernel's name. "power_elu": g(s) = (1 + elu(s))^order (App. A).
    form: str | None = None
    short: str = ""  # its name in running text, table cells and legends (variant_name)


# Table 1's kernels first, fastest-growing first (the paper's table order); then the power-ELU family of
# App. A, g_q(s) = (1 + elu(s))^q: C^1 at 0 with g(0) = 1, Table 1's linear and squared ELU at q = 1 and 2.
KERNEL_ROWS: dict[str, KernelRow] = {
    "softmax": KernelRow("Softmax (e^s)", "exponential", math.inf, "tab:red", paper=True, short="softmax"),
    "squared_elu": KernelRow("Squared ELU ((s+1)^2)", "quadratic", 2.0, "tab:purple", paper=True, short="squared ELU"),
    "linear_elu": KernelRow("Linear ELU (s+1)", "linear", 1.0, "tab:green", paper=True, short="linear ELU"),
    "log_elu": KernelRow("Log ELU (log(1+s)+1)", "logarithmic", 0.0, "tab:blue", paper=True, short="log-ELU"),
    "elu_pow0.5": KernelRow("Power ELU ((s+1)^0.5)", "square root", 0.5, "tab:olive", form="power_elu",
                            short="ELU^0.5"),
    "elu_pow1.5": KernelRow("Power ELU ((s+1)^1.5)", "power 1.5", 1.5, "tab:cyan", form="power_elu",
                            short="ELU^1.5"),
    "elu_pow3": KernelRow("Power ELU ((s+1)^3)", "cubic", 3.0, "tab:brown", form="power_elu", short="ELU^3"),
    # Prieto et al.'s StableMax: s + 1 for s >= 0, 1 / (1 - s) below; a bounded-growth replacement for softmax
    # tested as an intervention at Table 3's model (linear growth, as Table 1's linear ELU, a softer negative tail)
    "stablemax": KernelRow("StableMax (s+1; 1/(1-s))", "linear (StableMax)", 1.0, "tab:gray", short="StableMax"),
}
# Table 1's kernels, in its order: what the paper's tables, figures and notebooks iterate.
KERNELS = tuple(k for k, row in KERNEL_ROWS.items() if row.paper)
SLOWER_KERNELS = KERNELS[1:]  # the three slower-growing kernels the paper proposes
# App. A's family: Table 1's kernels and the power ELUs, what the phase studies (notebook 08) range over; a kernel
# registered for another study (StableMax, an intervention) does not enter their registered designs.
def app_a_kernels() -> tuple[str, ...]:
    return tuple(k for k, row in KERNEL_ROWS.items() if row.paper or row.form == "power_elu")


KERNEL_LABELS = _View(lambda: {k: row.label for k, row in KERNEL_ROWS.items()})
KERNEL_COLORS = _View(lambda: {k: row.color for k, row in KERNEL_ROWS.items()})  # the one colour map
GROWTH_ORDER = _View(lambda: {row.growth: row.order for row in KERNEL_ROWS.values()})


def kernel_names() -> tuple[str, ...]:
    """Every registered kernel (Table 1's, then the others), read now: what a run may name."""
    return tuple(KERNEL_ROWS)


def kernel_label(name: str) -> str:
    """The display label of a kernel (its name when it has none), read from its row, so a row added later has one."""
    row = KERNEL_ROWS.get(name)
    return row.label if row is not None else name


# --------------------------------------------------------------------------------------- backends
@dataclass(frozen=True)
class BackendRow:
    """One way to compute eq. 7 (:mod:`heavytail.science.attention`).

    Attributes:
        label: how figures name it.
        computes: the only kernels it computes, or None for every kernel.
        arithmetic: ``"exact"`` (autograd through the kept or checkpointed weights: float32 round-off only),
            ``"flash-style"`` (backward recomputes the scores and subtracts a stored row statistic, which heavy
            tails break for softmax, App. I) or ``"per call"`` (``auto``: whichever backend it picks).
        under_bf16: the precision eq. 7 is computed in when the model runs under bf16 autocast: ``"bf16"``
            (the library kernel takes autocast's inputs, as the paper's FlashAttention softmax did, App. E.4) or
            ``"float32"`` (the hand-written paths cast to float32 with autocast off, as the paper's own kernels).
    """

    label: str
    computes: tuple[str, ...] | None
    arithmetic: str
    under_bf16: str = "float32"


BACKEND_ROWS: dict[str, BackendRow] = {
    "auto": BackendRow("auto", None, "per call"),
    "dense": BackendRow("dense", None, "exact"),
    "tiled": BackendRow("exact float32 (tiled)", None, "exact"),
    "flash": BackendRow("flash-style", None, "flash-style"),
    "flex": BackendRow("flex_attention", None, "flash-style"),
    "sdpa": BackendRow("SDPA (flash-style backward)", ("softmax",), "flash-style", "bf16"),  # torch's fused softmax
}
BACKENDS = tuple(BACKEND_ROWS)
BACKEND_LABELS = _View(lambda: {b: row.label for b, row in BACKEND_ROWS.items()})
ARITHMETICS = ("exact", "flash-style", "per call")
# The energy distance's (eq. 10) blocked sweep, not attention: "compiled" is one fused torch.compile kernel, "eager"
# the same float64 accumulation in eager tiles, "auto" the compiled one where it can be built.
ENERGY_BACKENDS = ("auto", "compiled", "eager")


def backend_refusal(backend: str, kernel: str) -> str | None:
    """Why ``backend`` cannot compute eq. 7 with ``kernel`` ("computes softmax only, ..."), or None when it can."""
    only = BACKEND_ROWS[backend].computes
    if only is None or kernel in only:
        return None
    general = ", ".join(b for b, row in BACKEND_ROWS.items() if row.computes is None)
    return f"computes {', '.join(only)} only, got kernel={kernel!r}; use one of {general}"


def label_backends(label: str) -> tuple[str, ...]:
    """The backends a recorded attention label names, in order, each once. A run records the paths that computed
    its attention as ``+``-joined labels (:func:`heavytail.harness.precision.backend_label`), each a backend or a
    backend with its options after a colon (``"flash:native"``, ``"flex:blocks64"``: the candidates of
    :func:`heavytail.science.attention.auto_candidates`): ``"flex+flash:eager"`` -> ``("flex", "flash")``.
    ValueError for a part that names no backend, or ``"auto"`` (a record names what ran, never the choice)."""
    found = []
    for part in label.split("+"):
        backend = part.split(":", 1)[0]
        if backend not in BACKEND_ROWS or backend == "auto":
            raise ValueError(f"attention label {label!r}: {part!r} names no backend that ran; "
                             f"backends: {', '.join(b for b in BACKENDS if b != 'auto')}")
        found.append(backend)
    return tuple(dict.fromkeys(found))


# --------------------------------------------------------------------------------------- variants
# A variant is what the studies group runs by: (kernel, attention path). Softmax's runs are split by the path
# (SDPA's flash-style backward loses every digit once |S| ~ 1e8, exact float32 does not, App. I); the slower
# kernels' gradients are accurate on every path (tests/test_attention.py), so each of them is one variant,
# whatever path ran, with the path "auto".
PATH_KERNELS = ("softmax",)  # the kernels whose variants are split by attention path
AUTO_PATH = "sdpa"  # what "auto" runs for softmax: the fused library kernel first (attention.auto_candidates)
SOFTMAX_SDPA = ("softmax", "sdpa")  # softmax through SDPA (FlashAttention on CUDA): "auto" for softmax
SOFTMAX_EXACT = ("softmax", "tiled")  # softmax through exact float32 attention (tiled, checkpointed)
SOFTMAX_F32 = ("softmax", "flash")  # softmax's attention in float32 under bf16 autocast (the hand-written path)
LOG_ELU = ("log_elu", "auto")  # the slowest-growing kernel of Table 1
SQUARED_ELU = ("squared_elu", "auto")  # Table 1's polynomial kernel of degree 2 (eq. 3 with q = 2)


# The softmax variants other than SDPA get colours of their own; every other variant takes its kernel's colour. The
# one colour map of variants every figure reads (no kernel has these colours).
VARIANT_COLORS = {SOFTMAX_EXACT: "tab:orange", SOFTMAX_F32: "darkred"}
# The named softmax variants' names; every other variant is named by its kernel's short name. The one list of
# variant names every table, figure and sentence reads (:func:`variant_name`).
VARIANT_NAMES = {SOFTMAX_SDPA: "softmax (SDPA)", SOFTMAX_EXACT: "softmax (exact float32)",
                 SOFTMAX_F32: "softmax (float32 attention)"}


def variant_name(v: tuple[str, str]) -> str:
    """A variant's name in every table, figure and sentence: ``"softmax (SDPA)"``, ``"log-ELU"``; softmax through
    another path names it (``"softmax (flex_attention)"``); a kernel without a short name is named by its key."""
    v = tuple(v)
    if v in VARIANT_NAMES:
        return VARIANT_NAMES[v]
    row = KERNEL_ROWS.get(v[0])
    kernel = (row.short if row is not None and row.short else v[0])
    if v[0] in PATH_KERNELS and v[1] not in ("auto", AUTO_PATH):
        return f"{kernel} ({BACKEND_LABELS.get(v[1], v[1])})"
    return kernel


def variant_color(v: tuple[str, str]) -> str:
    """A variant's colour in every figure: its own for exact and float32-attention softmax, else its kernel's."""
    return VARIANT_COLORS.get(tuple(v), KERNEL_COLORS.get(v[0], "0.4"))


def variant_of(kernel: str, path: str = "auto") -> tuple[str, str]:
    """The variant of a run of ``kernel`` whose attention ran on ``path`` (a backend; ``"auto"``: whichever
    ``"auto"`` picks, SDPA for softmax): (kernel, path) for softmax, (kernel, "auto") for every other kernel."""
    if kernel not in PATH_KERNELS:
        return (kernel, "auto")
    return (kernel, AUTO_PATH if path == "auto" else path)


# ---------------------------------------------------------------------------------------- models
NORMS = ("post", "pre")
NORM_TABLE_ORDER = ("pre", "post")  # the paper's tables list pre-norm rows above post-norm rows
NORM_LABELS = {"pre": "pre-norm", "post": "post-norm, res. scale"}
TRANSFORM_LABELS = {False: "none", True: "signed-log"}
DEVICES = ("auto", "cpu", "cuda")
# "float32": every kernel, softmax included, trained in float32: the common precision the paper could
# not compare at (Section 5, Limitations). "bf16": the paper's recipe (App. E.4): the model under
# bfloat16 autocast, softmax through SDPA/FlashAttention in bf16, the other kernels' attention in float32.
PRECISIONS = ("float32", "bf16")

# ------------------------------------------------------------------------------- tasks (Sec. 3.2)
BENCHMARKS = ("sheared_swap", "matrix_inverse")
BENCHMARK_LABELS = {"sheared_swap": "sheared swap", "matrix_inverse": "matrix inverse"}
MARGINALS = ("mirrored_pareto", "gaussian")
MARGINAL_LABELS = {"mirrored_pareto": "mirrored Pareto", "gaussian": "shifted Gaussian"}
# The (task, marginals) pairs no model can learn, with the reason.
UNLEARNABLE = {
    ("matrix_inverse", "gaussian"): (
        "the matrix inverse is unidentifiable (Prop. 6, App. D.3) on shifted Gaussian marginals: different "
        "parameter instances share one Gaussian input law (same mean and covariance) but have different output "
        "laws, so no model can learn it"),
}
# The marginal families each operator is trained on.
BENCHMARK_MARGINALS = _View(lambda: {b: tuple(m for m in MARGINALS if (b, m) not in UNLEARNABLE) for b in BENCHMARKS})


def task_refusal(benchmark: str, marginals: str) -> str | None:
    """Why no model can learn ``benchmark`` on ``marginals`` (Prop. 6), or None when it can."""
    return UNLEARNABLE.get((benchmark, marginals))


# ------------------------------------------------------------------ tail regimes (Sec. 3.2.1)
# The paper's 1 + eps: the smallest float32 above 1 (float32's machine epsilon is 2^-23), its heaviest tail.
PARETO_A_MIN = 1.0 + 2.0**-23
# Pi_eta of the mirrored Pareto marginals: per regime, the range of the uniform tail index a on latent axis 0
# and on axis 1 (axis 1 carries the heavier tail). What a regime decides is which kernels have a finite
# normaliser E[g(S)] (App. A: iff the growth order q < a) on every trial:
#   paper:    a in [2, 3] and [1 + eps, 2] (Section 3.2.1): only q <= 1 (linear, log, q = 0.5 ELU);
#   moderate: a in [3.5, 4.5] and [2.5, 3.5]: every q <= 2 (not the cubic ELU, q = 3 > 2.5);
#   light:    a in [5.5, 6.5] and [4.5, 5.5]: every polynomial kernel; softmax (q = inf) on no Pareto tail.
TAIL_REGIMES: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "paper": ((2.0, 3.0), (PARETO_A_MIN, 2.0)),
    "moderate": ((3.5, 4.5), (2.5, 3.5)),
    "light": ((5.5, 6.5), (4.5, 5.5)),
}


def regime_refusal(marginals: str, tail_regime: str) -> str | None:
    """Why ``tail_regime`` cannot apply to ``marginals``, or None: a regime sets Pareto tail indices, which the
    shifted Gaussian has none of, so on Gaussian marginals only the paper's (the default) means anything."""
    if marginals != "mirrored_pareto" and tail_regime != "paper":
        return (f"tail_regime={tail_regime!r} sets mirrored Pareto tail indices (Section 3.2.1); "
                f"marginals={marginals!r} has none, so use tail_regime='paper' there")
    return None


# ---------------------------------------------------------------------------- evaluation (App. H)
RATIO_STATISTICS = ("median", "mean")  # the summaries of eq. 36
STATISTIC_COLORS = {"median": "tab:blue", "mean": "tab:orange"}


def hill_k(n: int, phi: float) -> int:
    """k = floor(phi N), the upper order statistics the Hill estimate uses (eq. 38; App. J.1: phi = 0.1 at
    N = 16384 gives 1638). Raises ValueError unless 0 < phi < 1 and 1 <= k < N."""
    if not 0.0 < phi < 1.0:
        raise ValueError(f"hill_phi={phi} must lie in (0, 1) (eq. 38)")
    # round() first: 0.29 * 100 is 28.999999999999996 in floating point, and must give 29
    k = math.floor(round(phi * n, 9))
    if not 1 <= k < n:
        raise ValueError(f"hill_phi={phi} leaves no threshold at N={n}: k = floor(phi N) = {k}, need 1 <= k < N")
    return k


def variant_label(kernel: str, backend: str = "auto", precision: str = "float32") -> str:
    """How a figure names one (kernel, attention path, precision) run: its variant's name (:func:`variant_name`),
    with the precision when it is not float32, e.g. ``"softmax (SDPA), bf16"``."""
    name = variant_name(variant_of(kernel, backend))
    return name if precision == "float32" else f"{name}, {precision}"


def _check() -> None:
    """The rows are consistent: one order per growth, one colour per kernel, known arithmetics and forms,
    regimes whose every tail index a > 1 (the energy distance of eq. 9 needs the first moment)."""
    orders: dict[str, float] = {}
    for name, row in KERNEL_ROWS.items():
        if orders.setdefault(row.growth, row.order) != row.order:
            raise AssertionError(f"heavytail.names: growth {row.growth!r} has two orders ({name!r})")
        if row.form not in (None, "power_elu"):
            raise AssertionError(f"heavytail.names: kernel {name!r} names an unknown form {row.form!r}")
    colors = [row.color for row in KERNEL_ROWS.values()]
    if len(set(colors)) != len(colors):
        raise AssertionError(f"heavytail.names: two kernels share a colour in {dict(KERNEL_COLORS)}")
    if any(row.arithmetic not in ARITHMETICS for row in BACKEND_ROWS.values()):
        raise AssertionError(f"heavytail.names: every backend's arithmetic must be one of {ARITHMETICS}")
    for v in (SOFTMAX_SDPA, SOFTMAX_EXACT, SOFTMAX_F32, LOG_ELU):
        if v[0] not in KERNEL_ROWS or v[1] not in BACKEND_ROWS or variant_of(*v) != v:
            raise AssertionError(f"heavytail.names: variant {v} is not a (kernel, path) that variant_of returns")
    if set(NORM_TABLE_ORDER) != set(NORMS):
        raise AssertionError("heavytail.names: the table order must cover every norm")
    for regime, axes in TAIL_REGIMES.items():
        if len(axes) != 2 or not all(1.0 < lo < hi < math.inf for lo, hi in axes):
            raise AssertionError(f"heavytail.names: tail regime {regime!r} needs two ranges 1 < low < high, got {axes}")


_check()
