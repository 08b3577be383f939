"""The fused C++ flash loop (heavytail.science.flash_native): its weight chains against the kernels' own functions on
scores from -1e30 to 3e38, and eq. 7 through it against the float64 dense reference, as tests/test_attention.py does
for the other backends (same tolerances), on shapes that take several query blocks, several key blocks (online
rescaling) and ragged last blocks, on one and two threads.

The extension must build here: the suite does not skip it (CI has the C++ compiler torch.compile needs anyway).
"""

import math

import pytest
import torch

from heavytail import names
from heavytail.science import attention, flash_native
from heavytail.science.attention import kernel_attention
from heavytail.science.kernels import get_kernel

ALL = names.kernel_names()
TOL = 1e-5  # as tests/test_attention.py: ~100 float32 eps on O(1) convex combinations
EPS = torch.finfo(torch.float32).eps


@pytest.fixture(scope="module")
def ext():
    module = flash_native.extension()
    assert module is not None, "the native flash extension did not build (see the log)"
    return module


def test_every_kernel_with_a_native_chain_names_a_chain_the_extension_has():
    for name in ALL:
        native = get_kernel(name).native
        assert native is None or native[0] in flash_native.CHAINS, name
    assert {get_kernel(n).native[0] for n in ALL if get_kernel(n).native} == set(flash_native.CHAINS)


def _score_pool():
    mags = torch.logspace(-8, 38.4, 300, dtype=torch.float64).clamp(max=3e38)
    return torch.cat([-mags, torch.tensor([-1e30, -0.0, 0.0, 3e38], dtype=torch.float64), mags,
                      torch.linspace(-60, 60, 4001, dtype=torch.float64)]).float()


@pytest.mark.parametrize("name", ALL)
def test_chains_equal_the_kernel_functions_from_minus_1e30_to_3e38(ext, name):
    """g(s)/g(m) (forward's and backward's) and (log g)'(s) against Kernel.g_ratio / dlog_g in float32, for row
    maxima m from -1e30 to 3e38 and every pooled score below them. Bound: a power (1 + s)^q of a base that differs
    by an ulp (multiplying by 1 / (1 + m) instead of dividing) moves by q ulps, the rest by a few ulps, so
    (2q + 6) eps relative; plus the smallest denormal absolute, for weights that underflow there."""
    _check_chains(get_kernel(name))


# Power ELU orders the registry does not ship, one per compiled form of (1 + s)^q: exp(q log b) (2q not a whole
# number, or above 8), sqrt(b) times products (2q odd), products alone up to b^4.
NEW_ORDERS = (0.3, 2.5, 3.5, 4.0, 4.5, 7.0)


def _register_power(monkeypatch, q):
    name = f"test_pow{q}"
    monkeypatch.setitem(names.KERNEL_ROWS, name, names.KernelRow(name, "test", q, "tab:gray", form="power_elu"))
    assert get_kernel(name).native == ("power", q)
    return name


@pytest.mark.parametrize("q", NEW_ORDERS)
def test_chains_of_power_elu_orders_added_through_the_registry(ext, monkeypatch, q):
    _check_chains(get_kernel(_register_power(monkeypatch, q)))


@pytest.mark.parametrize("q", NEW_ORDERS)
def test_native_matches_float64_dense_for_power_elu_orders_added_through_the_registry(ext, monkeypatch, q):
    _check_dense(_register_power(monkeypatch, q), threads=1)


def _check_chains(kernel):
    name = kernel.name
    order = kernel.native[1] if kernel.native[0] == "power" else 1.0
    bound = (2 * order + 6) * EPS
    # Orders with 2q not a whole number up to 8 take b^q = exp(q log b) on both sides: y = q log b is rounded at
    # its own magnitude, and e^y turns that absolute error into a relative one, |y| eps per side, y = log(ref).
    generic = kernel.native[0] == "power" and not (float(2 * order).is_integer() and order <= 4)
    pool = _score_pool()
    for m in (-1e30, -1e4, -60.0, -1.0, 0.0, 0.5, 30.0, 1e4, 1e8, 3e38):
        row = torch.cat([pool[pool <= m], torch.tensor([m]).float()])
        fwd, bwd, dlog = (t[0] for t in flash_native.chain_terms(row[None].contiguous(), kernel))
        top = row.max().reshape(1)
        log_gm = kernel.log_g(top)
        want = kernel.g_ratio(row, log_gm, kernel.ratio_row(top, log_gm))
        want_dlog = kernel.dlog_g(row)
        for got, ref, what in ((fwd, want, "forward weights"), (bwd, want, "backward weights"),
                               (dlog, want_dlog, "d log g")):
            assert torch.isfinite(got).all(), (name, m, what)
            tol = bound + (2 * EPS * ref.double().clamp(min=1e-45).log().abs() if generic else 0.0)
            excess = (got.double() - ref.double()).abs() - tol * ref.double().abs() - 1.5e-45
            assert excess.max() <= 0, (name, m, what, row[excess.argmax()].item(), got[excess.argmax()].item(),
                                       ref[excess.argmax()].item())


def _inputs(shape, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=torch.float64) * scale for _ in range(3)]


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def _native_vs_dense(name, q, k, v, go):
    x64 = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = kernel_attention(*x64, name, backend="dense")
    gref = torch.autograd.grad(ref, x64, go)
    x = [t.float().requires_grad_() for t in (q, k, v)]
    out = kernel_attention(*x, name, backend="flash", native=True)
    grads = torch.autograd.grad(out, x, go.float())
    return out, ref, grads, gref


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", ALL)
def test_native_matches_float64_dense(ext, name, threads):
    _check_dense(name, threads)


def _check_dense(name, threads):
    # N = 150 (query blocks of 64: 64, 64, 22), L = 1100 (key blocks of 512: 512, 512, 76, online rescaling).
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        q = _inputs((2, 1, 150, 32))[0]
        k, v = _inputs((2, 1, 1100, 32), seed=1)[:2]
        go = torch.randn(2, 1, 150, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        out, ref, grads, gref = _native_vs_dense(name, q, k, v, go)
    finally:
        torch.set_num_threads(before)
    assert _rel(out, ref) < TOL
    for g, gr in zip(grads, gref):
        assert _rel(g, gr) < 10 * TOL


def test_two_threads_are_deterministic_and_agree_with_one(ext):
    q, k, v = (t.float() for t in _inputs((1, 1, 600, 32)))
    kernel = get_kernel("log_elu")
    before = torch.get_num_threads()

    def grads(threads):
        torch.set_num_threads(threads)
        x = [t.clone().requires_grad_() for t in (q, k, v)]
        out = flash_native.native_flash(*(t[0] for t in x), kernel)
        return [out.detach()] + list(torch.autograd.grad(out.sum(), x))

    try:
        one, two, again = grads(1), grads(2), grads(2)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(two, again))
    assert all(_rel(a, b.double()) < 10 * TOL for a, b in zip(two, one))


@pytest.mark.parametrize("name", ALL)
def test_native_rows_far_below_underflow_are_finite(ext, name):
    # tests/test_attention.py's all-underflow rows: every score of the first rows about -200.
    n, d = 64, 16
    g = torch.Generator().manual_seed(3)
    k = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64) * 0.1 + 4.0
    q = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    q[..., :8, :] = -12.5
    v = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    go = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    out, ref, grads, _ = _native_vs_dense(name, q, k, v, go)
    assert torch.isfinite(out).all() and all(torch.isfinite(gr).all() for gr in grads)
    assert _rel(out, ref) < 5e-4


def test_native_heavy_tail_gradients_of_the_elu_kernels(ext):
    """Pareto(1.1) tokens, d = 256, N = 1024, |S| ~ 1e7 (tests/test_attention.py::test_heavy_tail_gradients): the
    ELU kernels' gradients through the C++ loop stay within 1e-3 of float64, as on every other backend."""
    g = torch.Generator().manual_seed(0)
    n, d = 1024, 256

    def pareto(shape):
        u = torch.rand(shape, generator=g, dtype=torch.float64)
        return torch.where(torch.rand(shape, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0) * u.pow(-1 / 1.1)

    q, k = pareto((1, 1, n, d)), pareto((1, 1, n, d))
    v = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    go = torch.randn(1, 1, n, d, generator=g, dtype=torch.float64)
    assert (q @ k.transpose(-1, -2)).abs().max() / math.sqrt(d) > 1e6
    for name in ALL:
        if name == "softmax":
            continue
        out, ref, grads, gref = _native_vs_dense(name, q, k, v, go)
        assert _rel(out, ref) < TOL, name
        assert max(_rel(a, b) for a, b in zip(grads, gref)) < 1e-3, name


def test_switched_off_or_without_a_chain_the_compiled_passes_run(ext, monkeypatch):
    q, k, v = (t.float().requires_grad_() for t in _inputs((1, 1, 40, 16)))
    native = kernel_attention(q, k, v, "log_elu", backend="flash")
    assert "NativeFlash" in type(native.grad_fn).__name__ or "NativeFlash" in str(native.grad_fn.next_functions)
    monkeypatch.setenv(flash_native.ENV_SWITCH, "0")
    passes = kernel_attention(q, k, v, "log_elu", backend="flash")
    assert "NativeFlash" not in str(passes.grad_fn.next_functions) and _rel(passes, native.double()) < TOL
    with pytest.raises(RuntimeError, match="native flash attention cannot run kernel 'log_elu'.*switched on: False"):
        kernel_attention(q, k, v, "log_elu", backend="flash", native=True)
    monkeypatch.delenv(flash_native.ENV_SWITCH)
    # float64 has no native loop: the passes run, and asking for the loop says why not
    assert not flash_native.supports(get_kernel("log_elu"), q.double())
    with pytest.raises(RuntimeError, match="cannot run kernel 'log_elu' on cpu torch.float64"):
        kernel_attention(q.double(), k.double(), v.double(), "log_elu", backend="flash", native=True)


def test_auto_tries_the_native_loop_first_on_cpu_float32_and_records_it(ext):
    assert [c.label for c in attention.auto_candidates("log_elu", "cpu", torch.float32)][:2] == ["flash:native", "flash"]
    assert "flash:native" not in [c.label for c in attention.auto_candidates("log_elu", "cpu", torch.float64)]
    q, k, v = (t.float().requires_grad_() for t in _inputs((1, 1, 48, 16), seed=5))
    with attention.recording_backends() as record:
        kernel_attention(q, k, v, "squared_elu").sum().backward()
    assert record["squared_elu cpu float32 train"]["backend"] == "flash:native"


def test_the_loop_is_named_for_the_profiler(ext):
    # benchmarks/profile_step.py attributes the C++ loop's time by these names (it is no aten op of its own).
    from torch.profiler import ProfilerActivity, profile

    x = [t.float().requires_grad_() for t in _inputs((1, 100, 16))]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        flash_native.native_flash(*x, get_kernel("log_elu")).sum().backward()
    seen = {e.name for e in prof.events()}
    assert {flash_native.PROFILE_FORWARD, flash_native.PROFILE_BACKWARD} <= seen
