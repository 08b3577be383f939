"""The paper's own numbers (Tables 5 and 6, and App. I's collapse onset), for side-by-side comparison only: one
module the summary tables, the claims and the kernel-gap figures read, so no value of the paper is typed twice."""

from __future__ import annotations

from typing import Any, Sequence

from heavytail.names import BENCHMARK_MARGINALS, KERNELS

# App. I, Fig. 13: the step of the loss divergence of the paper's post-norm softmax runs (of 50,000), without / with
# symlog.
PAPER_ONSET = {False: 3500, True: 4500}

# Row: kernel -> values in column order (Pareto none, Pareto symlog[, Gaussian none, Gaussian symlog]);
# "C" = collapse, a trailing "b" = bold in the paper.
_PAPER = {
    ("sheared_swap", "median", "pre"): "0.857b 0.817b 1.123b 1.101b|0.844b 0.827b 1.127b 1.143b|0.815b 0.845b 1.123b 1.074b|0.795b 0.806b 1.057b 1.097b",
    ("sheared_swap", "median", "post"): "C C 1.119b 1.097b|1.174b 0.863b 1.088b 1.130b|0.980b 0.833b 1.082b 1.092b|1.006b 0.767b 1.051b 1.147b",
    ("sheared_swap", "mean", "pre"): "0.833b 0.779b 1.148b 1.142b|0.849b 0.770b 1.129b 1.136b|0.828b 0.777b 1.142b 1.164b|0.847b 0.749b 1.127b 1.190",
    ("sheared_swap", "mean", "post"): "C C 1.181 1.185|1.707 0.805b 1.153b 1.192|1.317b 0.804b 1.171b 1.189|1.474 0.750b 1.189 1.215",
    ("matrix_inverse", "median", "pre"): "1.085b 1.053b|1.145b 1.133b|1.143b 1.092b|1.181b 1.164b",
    ("matrix_inverse", "median", "post"): "C 1.120b|3.423 1.167b|1.295b 1.149b|1.354b 1.135b",
    ("matrix_inverse", "mean", "pre"): "0.869b 0.806b|0.933b 0.797b|0.816b 0.807b|0.889b 0.868b",
    ("matrix_inverse", "mean", "post"): "C 0.806b|3.718 0.849b|1.427 0.866b|1.466 0.821b",
}


def paper_value(benchmark: str, marginals: str, norm: str, kernel: str, symlog: bool,
                statistic: str) -> str | dict[str, Any]:
    """The paper's Table 5/6 entry as the paper prints it: '1.174', a bold cell {'text': '0.863', 'bold': True},
    or 'collapse'."""
    rows = _PAPER[(benchmark, statistic, norm)].split("|")
    columns = [(m, s) for m in BENCHMARK_MARGINALS[benchmark] for s in (False, True)]
    raw = rows[KERNELS.index(kernel)].split()[columns.index((marginals, bool(symlog)))]
    if raw == "C":
        return "collapse"
    return {"text": raw[:-1], "bold": True} if raw.endswith("b") else raw




def paper_text(benchmark: str, marginals: str, norm: str, kernel: str, symlog: bool, statistic: str = "median") -> str:
    """The paper's Table 5/6 entry as text, bold or not: '1.174', '0.863' or 'collapse'."""
    value = paper_value(benchmark, marginals, norm, kernel, symlog, statistic)
    return value["text"] if isinstance(value, dict) else value


def paper_range(benchmark: str, kernels: Sequence[str], symlog: bool | Sequence[bool], marginals: str = "mirrored_pareto",
                norm: str = "post", statistic: str = "median") -> str:
    """The smallest to the largest of the paper's Table 5/6 entries for ``kernels`` in the column(s) of ``symlog``
    (one transform, or several), as the paper prints them ('0.980-1.174'); ValueError when one of them is a
    collapse (a range of ratios has none)."""
    transforms = (symlog,) if isinstance(symlog, bool) else tuple(symlog)
    texts = [paper_text(benchmark, marginals, norm, k, s, statistic) for k in kernels for s in transforms]
    if "collapse" in texts:
        raise ValueError(f"the paper reports a collapse among {list(kernels)} ({benchmark}, {marginals}, {norm}-norm, "
                         f"symlog {transforms}): no range of ratios")
    texts = sorted(texts, key=float)
    return f"{texts[0]}-{texts[-1]}"


def paper_gap() -> str:
    """The kernel gap as the paper reports it (Table 5: sheared swap, mirrored Pareto, post-norm, no symlog, at
    N = 16384), in the words the kernel-gap claims quote."""
    soft, log = (paper_text("sheared_swap", "mirrored_pareto", "post", k, False) for k in ("softmax", "log_elu"))
    softmax = "softmax collapses" if soft == "collapse" else f"softmax reaches {soft}"
    return f"{softmax} at N = 16384 while log-ELU reaches {log} (Table 5)"
