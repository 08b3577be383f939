"""RunConfig: Table 3 defaults, and every bad key or value rejected by name before any compute."""

import pytest

from heavytail.config import RunConfig


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
    ],
)
def test_invalid_values_are_named(key, value, message):
    overrides = {"n_heads": 4} if key == "d_model" else {}
    with pytest.raises(ValueError, match=message):
        RunConfig.from_dict({key: value, **overrides})


def test_matrix_inverse_on_gaussian_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="unidentifiable.*Proposition 6"):
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
