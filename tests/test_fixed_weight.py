"""App. A's quantity at fixed weights: nested attention equals eq. 7 computed directly, and on a tiny untrained
measure transformer block 0's output at its own weights is the model's attention, its tokens carry the input's
tail while a post-norm block's LayerNorm leaves the next block bounded tokens."""

from __future__ import annotations

import math

import numpy as np
import torch

from heavytail.harness.config import RunConfig
from heavytail.science import model as model_module
from heavytail.science.kernels import get_kernel
from heavytail.science.operators import Benchmark
import heavytail.studies.phase.fixed_weight as F
import heavytail.studies.phase.moment_condition as M


def test_nested_attention_is_eq7_on_every_prefix_even_with_huge_softmax_scores():
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(300, generator=gen, dtype=torch.float64) * 50
    s[250] = 1e6  # a late key whose weight would underflow every earlier one under a single offset
    v = torch.randn(300, 3, generator=gen, dtype=torch.float64)
    ns = [5, 40, 249, 251, 300]
    for name in ("softmax", "linear_elu", "log_elu"):
        lg = get_kernel(name).log_g(s)
        got = M.nested_attention(lg, v, ns)
        for i, n in enumerate(ns):
            w = torch.softmax(lg[:n], 0)  # g / sum g, in log space by torch's own route
            assert torch.allclose(got[i], w @ v[:n], rtol=1e-10, atol=1e-12), (name, n)


def _tiny(kernel="linear_elu", norm="post"):
    torch.manual_seed(0)
    cfg = model_module.ModelConfig(**{**RunConfig().model_kwargs(), "d_model": 8, "n_blocks": 2, "d_ff": 8,
                                      "kernel": kernel, "norm": norm, "backend": "dense"})
    return model_module.MeasureTransformer(cfg).eval()


def _inputs(a, reps, n, seed=0):
    bench = Benchmark("sheared_swap", "mirrored_pareto")
    gen = torch.Generator().manual_seed(seed)
    trials = F.fixed_trials(bench, reps, a, 2.5, gen)
    assert (trials.marginal_params[:, 1] == a).all()
    return bench.sample_inputs(trials, n, generator=gen, dtype=torch.float64)


def test_block0_growth_is_the_models_own_attention_at_every_prefix():
    """(R, len(ns)) norms equal |sum_j w_j W_V h_j| for the first point, where the model's attention sublayer
    gives W_O (that + b_V) + b_O on the prefix."""
    model = _tiny()
    x = _inputs(1.5, 2, 512)
    ns = [16, 128, 512]
    norms = F.attention_growth(model, x, ns)
    assert norms.shape == (2, 3)
    m = model.double()
    attn = m.blocks[0].attn
    for r in range(2):
        for i, n in enumerate(ns):
            with torch.no_grad():
                h = m.w_in(x[r: r + 1, :n])
                out = attn(h)[0, 0]  # (D,) for the first point
                inner = torch.linalg.solve(attn.o.weight, out - attn.o.bias) - attn.v.bias
            assert math.isclose(float(inner.norm()), norms[r, i], rel_tol=1e-8), (r, n)


def test_block0_tokens_carry_the_input_tail_and_post_norm_bounds_the_next_blocks():
    a = 1.5
    x = _inputs(a, 8, 4096)
    hill = F.block_tail_indices(_tiny(), x)  # (8, 2)
    k = 409
    band = 1.96 / math.sqrt(k)  # eq. 38's asymptotic band at k = 0.1 N
    # block 0: the median over 8 ensembles within three bands of a (the lighter axis at 2.5 biases it upwards)
    assert abs(np.median(hill[:, 0]) - a) < 3 * band * a, hill[:, 0]
    # block 1 reads LayerNorm's output, whose norm is bounded: no heavy tail left to estimate
    assert np.median(hill[:, 1]) > 5 * a, hill[:, 1]


def test_a_tiny_models_exponent_follows_its_kernel_on_heavy_tails():
    """Softmax at fixed weights on a = 1.5 tokens grows like the largest of N draws (1/a), log-ELU's is bounded
    (a > 1); 16 ensembles, N = 256 .. 8192: the two intervals are disjoint."""
    ns = [2**k for k in range(8, 14)]
    x = _inputs(1.5, 16, max(ns), seed=1)
    soft = M.fit_exponent(ns, F.attention_growth(_tiny("softmax"), x, ns), n_boot=400)
    loge = M.fit_exponent(ns, F.attention_growth(_tiny("log_elu"), x, ns), n_boot=400)
    assert soft.low > loge.high, (soft, loge)
    assert loge.low < 0.1 < soft.high
