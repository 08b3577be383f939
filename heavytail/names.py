"""Every name the package, the grid files and the notebooks share, with its display label and colour.

One list, read by :mod:`heavytail.harness.config` (allowed values), :mod:`heavytail.studies.summary` and
:mod:`heavytail.studies.summary_plots` (labels, table order, the one colour map) and the notebooks. It imports nothing
heavy (no torch), so the report runner and the figure notebooks can read it cheaply. The kernel registry
(:mod:`heavytail.science.kernels`) checks at import that it defines exactly :data:`KERNELS`, with the growth
given here; adding a kernel therefore means adding its functions to the registry and its row here.
"""

from __future__ import annotations

import math

# ---------------------------------------------------------------------------------------- kernels
# The kernels of Table 1, fastest-growing first (the paper's table order).
KERNELS = ("softmax", "squared_elu", "linear_elu", "log_elu")
SLOWER_KERNELS = KERNELS[1:]  # the three slower-growing kernels the paper proposes
KERNEL_LABELS = {
    "softmax": "Softmax (e^s)",
    "squared_elu": "Squared ELU ((s+1)^2)",
    "linear_elu": "Linear ELU (s+1)",
    "log_elu": "Log ELU (log(1+s)+1)",
}
# Growth of g's positive branch as s -> inf (last column of Table 1) ...
KERNEL_GROWTH = {"softmax": "exponential", "squared_elu": "quadratic", "linear_elu": "linear",
                 "log_elu": "logarithmic"}
# ... and as a polynomial order q (g(s) ~ s^q): E[g(S)] is finite on a Pareto(a) score iff q < a (App. A).
GROWTH_ORDER = {"exponential": math.inf, "quadratic": 2.0, "linear": 1.0, "logarithmic": 0.0}
# The one colour per kernel that every figure uses.
KERNEL_COLORS = {"softmax": "tab:red", "squared_elu": "tab:purple", "linear_elu": "tab:green", "log_elu": "tab:blue"}

# --------------------------------------------------------------------------------------- backends
# How attention is computed (heavytail.science.attention): auto picks per device; dense materialises the N x N
# weights; tiled is exact float32 log-space attention through autograd; flash is the hand-written
# flash-style backward; flex is torch's flex_attention; sdpa is torch's fused softmax (softmax only).
BACKENDS = ("auto", "dense", "tiled", "flash", "flex", "sdpa")
SOFTMAX_ONLY_BACKENDS = ("sdpa",)
BACKEND_LABELS = {"auto": "auto", "dense": "dense", "tiled": "exact float32 (tiled)", "flash": "flash-style",
                  "flex": "flex_attention", "sdpa": "SDPA (flash-style backward)"}

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
# The marginal families each operator is trained on (matrix inverse + Gaussian is unidentifiable, Prop. 6).
BENCHMARK_MARGINALS = {"sheared_swap": ("mirrored_pareto", "gaussian"), "matrix_inverse": ("mirrored_pareto",)}

# ---------------------------------------------------------------------------- evaluation (App. H)
RATIO_STATISTICS = ("median", "mean")  # the summaries of eq. 36
STATISTIC_COLORS = {"median": "tab:blue", "mean": "tab:orange"}


def kernel_label(name: str) -> str:
    """The display label of a kernel (its name when it has none)."""
    return KERNEL_LABELS.get(name, name)


def variant_label(kernel: str, backend: str = "auto", precision: str = "float32") -> str:
    """How a figure names one (kernel, attention path, precision) variant, e.g. 'softmax, SDPA ...'."""
    parts = [kernel]
    if backend != "auto":
        parts.append(BACKEND_LABELS.get(backend, backend))
    if precision != "float32":
        parts.append(precision)
    return ", ".join(parts)


def _check() -> None:
    for table, what in ((KERNEL_LABELS, "KERNEL_LABELS"), (KERNEL_GROWTH, "KERNEL_GROWTH"),
                        (KERNEL_COLORS, "KERNEL_COLORS")):
        if tuple(table) != KERNELS:
            raise AssertionError(f"heavytail.names.{what} must list exactly the kernels {KERNELS}")
    if set(KERNEL_GROWTH.values()) - set(GROWTH_ORDER):
        raise AssertionError("every kernel growth needs an order in heavytail.names.GROWTH_ORDER")
    if set(BACKEND_LABELS) != set(BACKENDS) or set(NORM_TABLE_ORDER) != set(NORMS):
        raise AssertionError("heavytail.names: labels and orders must cover every backend and norm")


_check()
