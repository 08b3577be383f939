"""MeasureTransformer (App. E.1, Table 3) and symlog/symexp (eq. 8)."""

import math
import warnings

import pytest
import torch

from heavytail.harness.config import RunConfig
from heavytail.science import model as model_module
from heavytail.science.model import TABLE3_PARAMETERS, MeasureTransformer, count_parameters
from heavytail.science.transforms import SymexpOverflowWarning, symexp, symexp_limit, symlog

# Small model for behaviour tests; head dim 32 so compiled flash blocks are shared with test_attention.
SMALL = dict(d_model=32, d_ff=64, n_blocks=2)


def model_config(**changes) -> model_module.ModelConfig:
    """The model of a default run (Table 3: RunConfig's defaults; the model has none of its own) with ``changes``."""
    return model_module.ModelConfig(**{**RunConfig().model_kwargs(), **changes})


def test_table3_parameter_count():
    assert count_parameters(MeasureTransformer(model_config())) == TABLE3_PARAMETERS == 3_163_906
    # pre-norm by eq. 30 has the same count; the optional final LayerNorm adds 2 D
    assert count_parameters(MeasureTransformer(model_config(norm="pre"))) == 3_163_906
    assert count_parameters(MeasureTransformer(model_config(norm="pre", final_norm=True))) == 3_163_906 + 2 * 256


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"kernel": "relu"}, "softmax, squared_elu, linear_elu, log_elu"),
        ({"norm": "mid"}, "post, pre"),
        ({"backend": "cuda"}, "flash"),
        ({"backend": "sdpa", "kernel": "log_elu"}, "softmax only"),
        ({"n_heads": 3}, "divide"),
        ({"d_model": 0}, "positive integer"),
        ({"alpha_rs": float("nan")}, "alpha_rs"),
        ({"final_norm": True}, "norm='pre'"),
    ],
)
def test_config_validation(kwargs, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        model_config(**kwargs)


def test_post_norm_block_is_ln_of_scaled_residual():
    torch.manual_seed(0)
    model = MeasureTransformer(model_config(kernel="linear_elu", backend="dense", **SMALL))
    block = model.blocks[0]
    x = torch.randn(2, 16, 32)
    a = 4.899
    h = block.ln_attn(a * x + block.attn(x))
    expected = block.ln_ff(a * h + block.ff(h))
    torch.testing.assert_close(block(x), expected)
    pre = MeasureTransformer(model_config(kernel="linear_elu", backend="dense", norm="pre", **SMALL)).blocks[0]
    h = x + pre.attn(pre.ln_attn(x))
    torch.testing.assert_close(pre(x), h + pre.ff(pre.ln_ff(h)))


BACKEND_CASES = [
    ("dense", "log_elu"),
    ("tiled", "log_elu"),
    ("flash", "log_elu"),
    ("flex", "log_elu"),
    ("sdpa", "softmax"),
    ("auto", "squared_elu"),
    ("auto", "softmax"),
]


@pytest.mark.parametrize("backend,kernel", BACKEND_CASES)
def test_permutation_equivariance(backend, kernel):
    torch.manual_seed(0)
    model = MeasureTransformer(model_config(kernel=kernel, backend=backend, tile_elements=2 * 37 * 10, **SMALL))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 37, 2, generator=g) * 3
    perm = torch.randperm(37, generator=g)
    grad_ctx = torch.no_grad() if backend == "flex" else torch.enable_grad()  # flex: CPU forward only
    with grad_ctx:
        y = model(x)
        y_perm = model(x[:, perm])
    assert torch.isfinite(y).all()
    # float32 sums in a different order: a few eps of the O(1) outputs, times depth
    torch.testing.assert_close(y_perm, y[:, perm], rtol=1e-4, atol=1e-5)
    if backend != "flex":
        y.square().mean().backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_backends_agree_in_the_model():
    torch.manual_seed(0)
    x = torch.randn(1, 50, 2) * 5
    outs = {}
    for backend in ("dense", "tiled", "flash"):
        torch.manual_seed(0)
        outs[backend] = MeasureTransformer(model_config(kernel="log_elu", backend=backend, **SMALL))(x)
    torch.testing.assert_close(outs["tiled"], outs["dense"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(outs["flash"], outs["dense"], rtol=1e-4, atol=1e-5)


def test_symlog_roundtrip_and_slope_at_zero():
    y = torch.tensor([-80.0, -3.0, -1e-8, 0.0, 1e-8, 2.0, 80.0], dtype=torch.float64)
    torch.testing.assert_close(symlog(symexp(y)), y, rtol=1e-12, atol=1e-20)
    x = torch.tensor([-1e30, -5.0, 0.0, 7.0, 1e30], dtype=torch.float64)
    torch.testing.assert_close(symexp(symlog(x)), x, rtol=1e-12, atol=0)
    torch.testing.assert_close(symlog(x), torch.sign(x) * torch.log1p(x.abs()))  # eq. 8
    z = torch.zeros(3, requires_grad=True)
    (ga,) = torch.autograd.grad(symlog(z).sum(), z)
    (gb,) = torch.autograd.grad(symexp(z).sum(), z)
    assert (ga == 1).all() and (gb == 1).all()
    big = torch.tensor([-1e38, 1e38], requires_grad=True)
    (gc,) = torch.autograd.grad(symlog(big).sum(), big)
    assert torch.isfinite(gc).all()


def test_symexp_overflow_is_loud_never_silent():
    limit = symexp_limit(torch.float32)
    assert 88.6 < limit < 88.73
    y = torch.tensor([1.0, 88.0, 89.0, -500.0])
    with pytest.warns(SymexpOverflowWarning, match="2 of 4 entries"):
        out = symexp(y)
    assert torch.isfinite(out).all()
    assert out[2] == out.max() and out[3] == -out.max()
    with pytest.raises(ValueError, match="overflows"):
        symexp(y, on_overflow="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.isfinite(symexp(torch.tensor([88.0, -88.0]))).all()  # in range: no warning


def test_symlog_model_warns_instead_of_inf():
    torch.manual_seed(0)
    model = MeasureTransformer(model_config(kernel="linear_elu", backend="dense", symlog=True, **SMALL))
    with torch.no_grad():
        model.w_out.bias.fill_(100.0)
    with pytest.warns(SymexpOverflowWarning):
        y = model(torch.randn(1, 10, 2))
    assert torch.isfinite(y).all()


def test_attention_stats_only_when_asked():
    torch.manual_seed(0)
    model = MeasureTransformer(model_config(kernel="softmax", backend="dense", **SMALL))
    x = torch.randn(2, 40, 2)
    y = model(x)
    assert isinstance(y, torch.Tensor)
    y2, stats = model(x, return_attention_stats=True)
    torch.testing.assert_close(y2, y)
    assert len(stats) == 2
    for st in stats:
        assert 1 / 40 <= st["attn_max_weight"].item() <= 1
        assert 0 <= st["attn_entropy_ratio"].item() <= 1 + 1e-6
        # post-norm: LayerNorm output with unit gain has norm sqrt(D)
        assert math.isclose(st["resid_norm"].item(), math.sqrt(32), rel_tol=1e-3)
    # the stats are the real weights: zero query/key maps make every score 0, i.e. uniform rows
    with torch.no_grad():
        model.blocks[0].attn.k.weight.zero_()
        model.blocks[0].attn.q.weight.zero_()
        model.blocks[0].attn.q.bias.zero_()
    _, stats = model(x, return_attention_stats=True)
    assert stats[0]["attn_max_weight"].item() == pytest.approx(1 / 40, rel=1e-5)  # uniform weights
    assert stats[0]["attn_entropy_ratio"].item() == pytest.approx(1.0, abs=1e-5)


def test_rejects_bad_input_shape():
    model = MeasureTransformer(model_config(backend="dense", **SMALL))
    with pytest.raises(ValueError, match=r"\(B, N, 2\)"):
        model(torch.randn(10, 2))
