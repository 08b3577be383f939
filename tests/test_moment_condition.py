"""App. A's moment condition, statically: the predicted growth exponent of one query's attention output, and
the measurement on nested heavy-tailed ensembles (float64, log-space sums) agreeing with it where the
asymptotics are reached within the N tested."""

from __future__ import annotations

import math

import pytest

from heavytail.science.kernels import get_kernel
import heavytail.studies.phase.moment_condition as M


def test_the_predicted_exponent_is_piecewise_and_continuous():
    assert M.predicted_exponent(0.0, 1.5) == 0.0  # log-ELU: bounded for every a > 1
    assert M.predicted_exponent(1.0, 2.5) == 0.0  # a > q + 1: the output converges
    assert M.predicted_exponent(1.0, 1.5) == pytest.approx(2 / 1.5 - 1)  # q < a <= q + 1
    assert M.predicted_exponent(math.inf, 2.0) == 0.5  # softmax: the largest of N draws, N^(1/a)
    for q in (0.5, 1.0, 2.0, 3.0):
        eps = 1e-9
        assert M.predicted_exponent(q, q + 1 + eps) == pytest.approx(M.predicted_exponent(q, q + 1 - eps), abs=1e-6)
        assert M.predicted_exponent(q, q + eps) == pytest.approx(M.predicted_exponent(q, q - eps), abs=1e-6)
    with pytest.raises(ValueError):
        M.predicted_exponent(1.0, 0.0)


@pytest.fixture(scope="module")
def growth():
    ns = [2**k for k in range(8, 17, 2)]
    kernels = {k: get_kernel(k).log_g for k in ("log_elu", "squared_elu")}
    return ns, {a: M.output_growth(kernels, a, ns, reps=24, seed=3) for a in (1.5, 4.0)}


def test_a_bounded_output_and_a_growing_one_are_measured_as_predicted(growth):
    ns, norms = growth
    # log-ELU on a = 4: bounded (beta = 0); squared ELU on a = 1.5 <= q = 2: the largest draw, beta = 1/a
    for kernel, q, a in (("log_elu", 0.0, 4.0), ("squared_elu", 2.0, 1.5)):
        e = M.fit_exponent(ns, norms[a][kernel], n_boot=400)
        assert e.low <= M.predicted_exponent(q, a) <= e.high, (kernel, a, e)
    # and the measurement separates them: the growing one's interval lies above the bounded one's
    bounded = M.fit_exponent(ns, norms[4.0]["log_elu"], n_boot=400)
    grows = M.fit_exponent(ns, norms[1.5]["squared_elu"], n_boot=400)
    assert grows.low > bounded.high


def test_softmax_in_log_space_does_not_overflow():
    ns = [2**8, 2**12]
    out = M.output_growth({"softmax": get_kernel("softmax").log_g}, 1.2, ns, reps=3, seed=0)["softmax"]
    assert (out > 0).all() and math.isfinite(float(out.max()))
