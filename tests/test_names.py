"""One table of names and their properties: the registry, attention, the model, config, the operators and the
figures read its rows and rules, so a new row reaches all of them and a changed rule changes all of them."""

import dataclasses
import math

import pytest
import torch

from heavytail import names
from heavytail.science import kernels

NEW = "bounded_elu"


def _bounded_forms() -> kernels.Forms:
    """g(s) = 2 - 1/(1 + s) for s > 0, e^s for s <= 0: C^1 at 0 (g(0) = g'(0) = 1), bounded by 2, so order 0."""

    def split(s):
        pos = s > 0
        return pos, torch.where(pos, s, 0.0), torch.where(pos, 0.0, s)

    def g(s):
        pos, sp, sn = split(s)
        return torch.where(pos, 2.0 - 1.0 / (1.0 + sp), torch.exp(sn))

    def log_g(s):
        pos, sp, sn = split(s)
        return torch.where(pos, torch.log1p(2.0 * sp) - torch.log1p(sp), sn)

    def dlog_g(s):
        pos, sp, _ = split(s)
        return torch.where(pos, 1.0 / ((1.0 + 2.0 * sp) * (1.0 + sp)), torch.ones_like(s))

    def g_ratio(s, log_gm, row):
        return torch.exp(log_g(s) - log_gm)

    return kernels.Forms(g, log_g, dlog_g, g_ratio, lambda m, log_gm: log_gm)


@pytest.fixture
def new_kernel(monkeypatch):
    """A kernel registered the way a new one is: a row in heavytail.names and its functions in the registry."""
    monkeypatch.setitem(names.KERNEL_ROWS, NEW, names.KernelRow("Bounded ELU (2 - 1/(1+s))", "bounded", 0.0, "tab:pink"))
    monkeypatch.setitem(kernels.FORMS, NEW, _bounded_forms())
    return NEW


def test_every_row_is_a_registered_kernel_with_the_rows_growth():
    for name, row in names.KERNEL_ROWS.items():
        kern = kernels.get_kernel(name)
        assert kern.name == name and kern.growth == row.growth
        assert kernels.get_kernel(name) is kern  # one object per name: the compile caches key on it
    assert names.KERNELS == kernels.KERNEL_NAMES == ("softmax", "squared_elu", "linear_elu", "log_elu")  # Table 1


def test_a_row_without_functions_is_named_when_built(monkeypatch):
    monkeypatch.setitem(names.KERNEL_ROWS, "orphan", names.KernelRow("orphan", "linear", 1.0, "tab:gray"))
    with pytest.raises(ValueError, match="'orphan' has a row in heavytail.names but no functions"):
        kernels.get_kernel("orphan")


def test_a_new_kernel_trains_evaluates_and_has_a_colour(new_kernel, tmp_path):
    from heavytail.harness.config import RunConfig
    from heavytail.harness.evaluate import evaluate
    from heavytail.harness.train import train, training_log
    from heavytail.science.attention import kernel_attention
    from heavytail.studies.ablation import summary_plots

    names._check()  # the new row is consistent with the table
    assert new_kernel in names.kernel_names() and new_kernel not in names.KERNELS
    assert names.KERNEL_COLORS[new_kernel] == summary_plots.KERNEL_COLORS[new_kernel] == "tab:pink"
    assert names.kernel_label(new_kernel).startswith("Bounded ELU")
    # the hand-written flash path agrees with the float64 reference on it
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 40, 8, generator=g, dtype=torch.float64) * 3 for _ in range(3))
    ref = kernel_attention(q, k, v, new_kernel, backend="dense")
    out = kernel_attention(q.float(), k.float(), v.float(), new_kernel, backend="flash", compiled=False)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5

    cfg = RunConfig.from_dict(dict(kernel=new_kernel, d_model=8, n_blocks=1, d_ff=16, steps=20, warmup_steps=2,
                                   n_points=64, trials_per_step=1, device="cpu", attention_backend="tiled",
                                   eval_trials=4, eval_n_points=32, bootstrap_resamples=20, log_every=1))
    run = train(cfg, tmp_path / f"{new_kernel}-run", quiet=True)  # a grid names a run folder by its configuration
    losses = [row["loss"] for row in training_log(run)]
    assert len(losses) == 20 and all(math.isfinite(x) for x in losses)
    res = evaluate(run, floor_cache=tmp_path / "floors", quiet=True)
    assert res["config"]["kernel"] == new_kernel
    assert math.isfinite(res["energy"]["median"]["ratio"]) and len(res["energy"]["d"]) == 4
    assert any(key.startswith(f"{new_kernel} cpu") for key in res["runtime"]["evaluation"]["attention"])
    # and the report's tables and figures that list runs by kernel take it: the kernel-gap table, the runs table
    import heavytail.studies.ablation.summary as summary
    import heavytail.studies.core as kernel_gap
    from heavytail.studies import run_summary
    from heavytail.studies.grid_folder import finished_runs
    import heavytail.studies.kernel_gap.plots as kernel_gap_plots

    summ = run_summary.run_summary(run)
    table = kernel_gap.table(kernel_gap.cells([summ]))
    assert [row["variant"] for row in table["rows"]] == [new_kernel]
    assert kernel_gap.variant_color(kernel_gap.variant(summ)) == "tab:pink"
    assert new_kernel in summary.runs_table(finished_runs(tmp_path).runs)["rows"][0]["run"]
    kernel_gap_plots.gap_figure([summ])  # draws without a paper value for it


def test_backends_norms_and_tasks_are_the_names_modules_own():
    from heavytail.harness import config
    from heavytail.science import attention, model, operators
    from heavytail.studies.ablation import summary, summary_plots

    assert attention.BACKENDS is names.BACKENDS and config.BACKENDS is names.BACKENDS
    assert config.KERNELS is names.KERNELS and model.NORMS is names.NORMS and set(summary.NORMS) == set(names.NORMS)
    assert operators.OPERATORS is names.BENCHMARKS and operators.MARGINALS is names.MARGINALS
    assert summary.KERNEL_LABELS is names.KERNEL_LABELS
    assert summary_plots.KERNEL_COLORS is names.KERNEL_COLORS  # one colour map for every figure


def test_the_backend_rule_is_read_from_the_backend_row(monkeypatch):
    """Change one row (flash computes softmax only) and config, the model and attention all refuse alike;
    let sdpa compute log-ELU and auto tries it first for log-ELU."""
    from heavytail.harness.config import RunConfig
    from heavytail.science.attention import auto_candidates, kernel_attention
    from heavytail.science.model import ModelConfig

    flash = names.BACKEND_ROWS["flash"]
    monkeypatch.setitem(names.BACKEND_ROWS, "flash", dataclasses.replace(flash, computes=("softmax",)))
    with pytest.raises(ValueError, match=r"attention_backend='flash' computes softmax only, got kernel='log_elu'"):
        RunConfig(kernel="log_elu", attention_backend="flash")
    kwargs = {**RunConfig().model_kwargs(), "kernel": "log_elu", "backend": "flash"}
    with pytest.raises(ValueError, match=r"ModelConfig.backend='flash' computes softmax only"):
        ModelConfig(**kwargs)
    q = torch.randn(1, 1, 4, 2)
    with pytest.raises(ValueError, match=r"backend='flash' computes softmax only"):
        kernel_attention(q, q, q, "log_elu", backend="flash")
    RunConfig(kernel="softmax", attention_backend="flash")  # what the row allows still passes

    assert auto_candidates("log_elu", "cpu", torch.float32)[0].backend == "flash"
    monkeypatch.setitem(names.BACKEND_ROWS, "sdpa", dataclasses.replace(names.BACKEND_ROWS["sdpa"],
                                                                        computes=("softmax", "log_elu")))
    assert auto_candidates("log_elu", "cpu", torch.float32)[0].backend == "sdpa"


def test_the_task_rule_is_read_from_the_names_module(monkeypatch):
    from heavytail.harness.config import RunConfig
    from heavytail.science.operators import Benchmark

    RunConfig(marginals="gaussian")
    monkeypatch.setitem(names.UNLEARNABLE, ("sheared_swap", "gaussian"), "a reason only this test gives")
    assert names.BENCHMARK_MARGINALS["sheared_swap"] == ("mirrored_pareto",)
    with pytest.raises(ValueError, match="a reason only this test gives"):
        RunConfig(marginals="gaussian")
    with pytest.raises(ValueError, match="a reason only this test gives"):
        Benchmark("sheared_swap", "gaussian")


def test_inconsistent_rows_are_caught(monkeypatch):
    monkeypatch.setitem(names.KERNEL_ROWS, "twin", names.KernelRow("twin", "linear", 1.0, "tab:red"))
    with pytest.raises(AssertionError, match="share a colour"):
        names._check()
    monkeypatch.setitem(names.KERNEL_ROWS, "twin", names.KernelRow("twin", "linear", 1.5, "tab:gray"))
    with pytest.raises(AssertionError, match="'linear' has two orders"):
        names._check()


def test_hill_k_is_floor_phi_n_and_refuses_an_empty_threshold():
    from heavytail.harness.config import RunConfig

    assert names.hill_k(16384, 0.1) == 1638 and names.hill_k(65536, 0.01) == 655  # App. J.1
    assert names.hill_k(100, 0.29) == 29  # floor, robust to 0.29 * 100 = 28.999999999999996
    assert RunConfig().hill_k == 1638 and RunConfig(eval_n_points=32).hill_k == 3
    for n, phi in ((9, 0.1), (100, 0.0), (100, 1.0)):
        with pytest.raises(ValueError, match="hill_phi"):
            names.hill_k(n, phi)
    with pytest.raises(ValueError, match=r"leaves no threshold at N=9.*\(eval_n_points=9\)"):
        RunConfig(eval_n_points=9)
    with pytest.raises(ValueError, match=r"\(n_points=8\)"):
        RunConfig(n_points=8, eval_at_train_n=True)


def test_variant_labels_name_the_attention_path():
    assert names.variant_label("softmax") == "softmax (SDPA)" and names.variant_label("log_elu") == "log-ELU"
    assert names.variant_label("softmax", "sdpa", "bf16") == "softmax (SDPA), bf16"
    assert names.variant_label("softmax", "flex") == "softmax (flex_attention)"
    # one name per variant everywhere: the ladder's tables read the same list
    from heavytail.studies.collapse.ladder import VARIANT_LABELS

    assert all(label == names.variant_name(v) for v, label in VARIANT_LABELS.items())


def _variant_literals(source: str) -> list[str]:
    """Module-level assignments of a (kernel, backend) pair of string literals: a variant typed out again."""
    import ast

    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 2:
            pair = [e.value if isinstance(e, ast.Constant) else None for e in node.value.elts]
            if pair[0] in names.KERNEL_ROWS and pair[1] in names.BACKEND_ROWS:
                found.append(f"{ast.unparse(node.targets[0])} = {tuple(pair)}")
    return found


def test_the_variants_are_defined_once_in_the_names_module():
    from pathlib import Path

    import heavytail.studies.collapse.ladder as collapse_ladder
    import heavytail.studies.core as kernel_gap

    for v in ("SOFTMAX_SDPA", "SOFTMAX_EXACT", "LOG_ELU"):
        assert getattr(kernel_gap, v) is getattr(names, v) is getattr(collapse_ladder, v), v
    assert collapse_ladder.SOFTMAX_F32 is names.SOFTMAX_F32
    assert collapse_ladder.variant is kernel_gap.variant  # one rule from a configuration to its variant
    package = Path(names.__file__).parent
    copies = {str(p.relative_to(package)): found for p in sorted(package.rglob("*.py")) if p.name != "names.py"
              if (found := _variant_literals(p.read_text()))}
    assert not copies, f"variants typed outside heavytail.names: {copies}"
    assert _variant_literals('X = ("softmax", "sdpa")\nY = ("a", "b")\n') == ["X = ('softmax', 'sdpa')"]  # can fail


def test_a_variant_is_the_kernel_and_for_softmax_the_path():
    assert names.variant_of("softmax") == names.variant_of("softmax", "sdpa") == names.SOFTMAX_SDPA
    assert names.variant_of("softmax", "tiled") == names.SOFTMAX_EXACT
    assert names.variant_of("softmax", "flash") == names.SOFTMAX_F32
    assert names.variant_of("log_elu", "tiled") == names.variant_of("log_elu", "flex") == names.LOG_ELU
    # recorded labels: '+'-joined candidates, options after a colon
    assert names.label_backends("sdpa") == ("sdpa",)
    assert names.label_backends("flex:blocks64+flash:native+flash") == ("flex", "flash")
    for bad in ("auto", "sdpa+cudnn", ""):
        with pytest.raises(ValueError, match="names no backend"):
            names.label_backends(bad)


def test_one_colour_per_variant_in_every_figure():
    """Exact softmax is one colour in notebook 07's figures and 09's, and no variant borrows another kernel's."""
    from heavytail.studies.collapse import ladder_plots
    from heavytail.studies import core as gap

    for v in (names.SOFTMAX_SDPA, names.SOFTMAX_EXACT, names.SOFTMAX_F32, names.LOG_ELU, names.SQUARED_ELU):
        assert gap.variant_color(v) == ladder_plots._color(v) == names.variant_color(v)
    own = set(names.VARIANT_COLORS.values())
    assert not own & set(names.KERNEL_COLORS.values()) and len(own) == len(names.VARIANT_COLORS)
