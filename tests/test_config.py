"""RunConfig: Table 3 defaults, and every bad key or value rejected by name before any compute."""

import pytest

from heavytail.harness.config import RunConfig


def test_defaults_are_table_3():
    cfg = RunConfig()
    assert (cfg.n_blocks, cfg.d_model, cfg.d_ff, cfg.n_heads) == (6, 256, 512, 1)
    assert (cfg.lr, cfg.weight_decay, cfg.grad_clip, cfg.loss_p) == (1e-3, 0.0, 1.0, 1.0)
    assert (cfg.steps, cfg.n_points, cfg.trials_per_step, cfg.seed) == (50_000, 16_384, 64, 0)
    assert (cfg.eval_trials, cfg.eval_n_points, cfg.bootstrap_resamples) == (128, 16_384, 2000)
    assert cfg.norm == "post" and cfg.alpha_rs == 4.899 and cfg.skip_nonfinite
    assert cfg.hill_k == 1638  # App. J.1: k = floor(0.1 * 16384)


def test_unknown_key_is_named_with_the_allowed_ones():
    with pytest.raises(ValueError, match=r"unknown configuration key\(s\) \['kernal'\].*allowed keys.*kernel"):
        RunConfig.from_dict({"kernal": "softmax"})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("kernel", "relu", r"kernel='relu' is not allowed; choose one of: softmax, squared_elu, linear_elu, log_elu"),
        ("norm", "sandwich", r"norm='sandwich'.*post, pre"),
        ("precision", "fp8", r"precision='fp8'.*float32, bf16"),
        ("lr", -1.0, r"lr=-1.0 is not allowed; it must be finite and > 0"),
        ("lr", float("nan"), r"lr=nan"),
        ("steps", 2.5, r"steps must be an integer"),
        ("symlog", "yes", r"symlog must be true or false"),
        ("loss_p", 2.0, r"p in \(0, 2\)"),
        ("hill_phi", 1.5, r"hill_phi=1.5"),
        ("d_model", 30, r"divisible by n_heads"),
        ("alpha_rs", 0.0, r"alpha_rs=0.0 is not allowed; it must be finite and > 0"),
        ("attention_backend", "fast", r"attention_backend='fast'.*auto, dense, tiled, flash, flex, sdpa"),
        ("energy_backend", "numba", r"energy_backend='numba' is not allowed; choose one of: auto, compiled, eager"),
    ],
)
def test_invalid_values_are_named(key, value, message):
    overrides = {"n_heads": 4} if key == "d_model" else {}
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict({key: value, **overrides})


def test_matrix_inverse_on_gaussian_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"unidentifiable \(Prop\. 6.*takes marginals mirrored_pareto"):
        RunConfig(benchmark="matrix_inverse", marginals="gaussian")


def test_yaml_round_trip_and_string_numbers(tmp_path):
    # YAML 1.1 reads 1e-3 as a string; it is still a number to a researcher.
    path = tmp_path / "run.yaml"
    path.write_text("kernel: log_elu\nlr: 1e-3\nsteps: 10\nwarmup_steps: 2\nsymlog: true\n")
    cfg = RunConfig.from_yaml(path)
    assert cfg.lr == 1e-3 and cfg.kernel == "log_elu" and cfg.symlog
    again = tmp_path / "again.yaml"
    again.write_text(cfg.to_yaml())
    assert RunConfig.from_yaml(again) == cfg


def test_a_backend_that_cannot_run_the_kernel_or_device_is_refused_up_front():
    with pytest.raises(ValueError, match=r"attention_backend='sdpa' computes softmax only, got kernel='log_elu'"):
        RunConfig(kernel="log_elu", attention_backend="sdpa")
    with pytest.raises(ValueError, match=r"'flex' cannot train on device='cpu'"):
        RunConfig(attention_backend="flex", device="cpu")
    RunConfig(kernel="softmax", attention_backend="sdpa")  # the allowed combinations still pass
    RunConfig(kernel="log_elu", attention_backend="flex", device="auto")


def test_every_configuration_that_validates_builds_its_model():
    """Validation once, completely: whatever RunConfig accepts, the model accepts too, so a grid checked
    before it runs never fails later inside a notebook cell."""
    import itertools

    from heavytail.names import BACKENDS, NORMS, kernel_names
    from heavytail.science.model import ModelConfig

    kernels = kernel_names()
    accepted = 0
    for kernel, backend, norm, alpha, heads in itertools.product(kernels, BACKENDS, NORMS, (0.0, 1e-9, 4.899),
                                                                 (1, 3, 4)):
        values = dict(kernel=kernel, attention_backend=backend, norm=norm, alpha_rs=alpha, n_heads=heads,
                      d_model=32, d_ff=8, n_blocks=1)
        try:
            cfg = RunConfig.from_dict(values)
        except ValueError:
            continue
        ModelConfig(**cfg.model_kwargs())  # must not raise
        accepted += 1
    assert accepted == (len(kernels) - 1) * 5 * 2 * 2 * 2 + 6 * 2 * 2 * 2  # the sdpa-with-non-softmax cells refused


def test_the_docstring_and_not_table3_name_every_default_that_is_not_the_papers():
    from heavytail.harness import config

    assert set(config.NOT_TABLE3) == {"precision", "warmup_steps", "collapse_spread"}
    assert RunConfig().precision == "float32" and config.NOT_TABLE3["precision"].startswith("bf16")
    for key in config.NOT_TABLE3:
        assert key.split("_")[0] in config.__doc__


def test_the_model_states_no_default_that_a_run_states():
    """Table 3 is written once: every model setting a run configures comes from RunConfig, with no second default."""
    import dataclasses

    from heavytail.science.model import ModelConfig

    stated = set(RunConfig().model_kwargs())
    defaulted = {f.name for f in dataclasses.fields(ModelConfig) if f.default is not dataclasses.MISSING}
    assert stated and not stated & defaulted, stated & defaulted
    assert stated <= {f.name for f in dataclasses.fields(ModelConfig)}


def test_a_kernel_name_is_checked_once_on_its_way_to_the_attention_call(monkeypatch):
    """From the values a grid file holds to the attention call: the name is checked against the registry once
    (RunConfig), resolved once (``model_kwargs``), and the model and attention receive the resolved Kernel."""
    import torch

    from heavytail import names
    from heavytail.harness.build import build_model
    from heavytail.science import model as model_module
    from heavytail.science.kernels import Kernel

    checks, seen = [], []
    real_names, real_attention = names.kernel_names, model_module.kernel_attention
    monkeypatch.setattr(names, "kernel_names", lambda: checks.append(1) or real_names())
    monkeypatch.setattr(model_module, "kernel_attention",
                        lambda q, k, v, kernel, **kw: seen.append(kernel) or real_attention(q, k, v, kernel, **kw))
    cfg = RunConfig.from_dict({"kernel": "log_elu", "d_model": 8, "d_ff": 8, "n_blocks": 2})
    model = build_model(cfg)
    model(torch.randn(1, 16, 2))
    assert len(checks) == 1
    assert len(seen) == 2 and all(isinstance(k, Kernel) and k.name == "log_elu" for k in seen)
    with pytest.raises(ValueError, match=r"kernel='log_elx' is not allowed; choose one of: softmax"):
        RunConfig.from_dict({"kernel": "log_elx"})
