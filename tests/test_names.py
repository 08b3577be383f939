"""One list of every name: the registry, the attention backends, config and the figures all agree with it."""

import pytest

from heavytail import names


def test_the_kernel_registry_agrees_with_the_names_module():
    from heavytail.science.kernels import KERNEL_NAMES, KERNELS

    assert KERNEL_NAMES == names.KERNELS
    assert {k: v.growth for k, v in KERNELS.items()} == names.KERNEL_GROWTH


def test_backends_norms_and_tasks_are_read_from_the_names_module():
    from heavytail.science import attention, model
    from heavytail.harness import config
    from heavytail.studies import summary, summary_plots

    assert tuple(attention.BACKENDS) == names.BACKENDS
    assert config.BACKENDS is names.BACKENDS and config.KERNELS is names.KERNELS
    assert model.NORMS is names.NORMS and set(summary.NORMS) == set(names.NORMS)
    assert summary.KERNEL_LABELS is names.KERNEL_LABELS
    assert summary_plots.KERNEL_COLORS is names.KERNEL_COLORS  # one colour map for every figure


def test_a_kernel_missing_from_a_table_is_caught_at_import(monkeypatch):
    monkeypatch.setattr(names, "KERNEL_COLORS", {k: "k" for k in names.KERNELS[:-1]})
    with pytest.raises(AssertionError, match="KERNEL_COLORS must list exactly the kernels"):
        names._check()


def test_variant_labels_name_the_attention_path():
    assert names.variant_label("softmax") == "softmax"
    assert names.variant_label("softmax", "sdpa", "bf16") == "softmax, SDPA (flash-style backward), bf16"
