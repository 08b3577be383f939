"""The fused C++ flash loop (heavytail.science.flash_native): its weight chains against the kernels' own functions on
scores from -1e30 to 3e38, and eq. 7 through it against the float64 dense reference, as tests/test_attention.py does
for the other backends (same tolerances), on shapes that take several query blocks, several key blocks (online
rescaling) and ragged last blocks, on one and two threads.

The extension must build here: the suite does not skip it (CI has the C++ compiler torch.compile needs anyway).
"""

import math
from pathlib import Path

import pytest
import torch

from heavytail import names
from heavytail.science import attention, flash_native
from heavytail.science.attention import kernel_attention
from heavytail.science.kernels import get_kernel

ALL = names.kernel_names()
# the kernels the C++ loop computes (a kernel without a native chain, StableMax, runs on the compiled passes)
NATIVE = tuple(n for n in ALL if get_kernel(n).native is not None)
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


@pytest.mark.parametrize("name", NATIVE)
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
@pytest.mark.parametrize("name", NATIVE)
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


@pytest.mark.parametrize("name", NATIVE)
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
    for name in NATIVE:
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


# ------------------------------------------------------------------------- the loop can only help, never stop a run
def _cpu_flags() -> set[str]:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


@pytest.mark.parametrize("capability", ["AVX2", "DEFAULT"])
def test_the_avx2_and_generic_builds_agree_with_the_dispatched_one(ext, capability):
    """A machine without AVX-512 builds the AVX2 or the generic loop: forced here, one small shape each (two query
    and two key blocks), against float64 dense and against the build this CPU dispatches to."""
    if capability == "AVX2" and "avx2" not in _cpu_flags():
        pytest.skip("this CPU has no AVX2")
    forced = flash_native.extension(capability)
    assert forced is not None, f"the {capability} build failed (see the log)"
    assert forced is not ext or capability == torch.backends.cpu.get_cpu_capability()
    q = _inputs((1, 100, 16))[0]
    k, v = _inputs((1, 600, 16), seed=1)[:2]
    go = torch.randn(1, 100, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for name in ("softmax", "squared_elu", "log_elu", "elu_pow0.5"):
        chain, order = get_kernel(name).native
        x64 = [t.clone().requires_grad_() for t in (q, k, v)]
        ref = kernel_attention(*(t[None] for t in x64), name, backend="dense")[0]
        gref = torch.autograd.grad(ref, x64, go)
        results = []
        for module in (forced, ext):
            x = [t.float().requires_grad_() for t in (q, k, v)]
            out = flash_native._NativeFlash.apply(*x, flash_native.CHAINS[chain], float(order), module)
            results.append((out, torch.autograd.grad(out, x, go.float())))
        (out, grads), (out_here, grads_here) = results
        assert _rel(out, ref) < TOL and _rel(out, out_here.double()) < TOL, (capability, name)
        for g, gr, gh in zip(grads, gref, grads_here):
            assert _rel(g, gr) < 10 * TOL and _rel(g, gh.double()) < 10 * TOL, (capability, name)


def test_the_build_is_keyed_by_source_torch_version_and_instruction_set():
    """Checkouts with another source, or another torch, never load, rebuild or replace one another's build."""
    here = torch.backends.cpu.get_cpu_capability()
    name = flash_native.build_name(here)
    assert name == flash_native.build_name(here)  # stable
    source = flash_native.SOURCE.read_bytes()
    others = {flash_native.build_name(here, source + b"// edited\n"), flash_native.build_name(here, torch_version="9.9"),
              flash_native.build_name("AVX2" if here != "AVX2" else "DEFAULT")}
    assert name not in others and len(others) == 3
    assert name.startswith(f"heavytail_flash_{here.lower()}_")


def test_switched_off_nothing_is_built_not_even_under_auto(monkeypatch):
    calls = []
    monkeypatch.setattr(flash_native, "extension", lambda *a: calls.append(a))
    monkeypatch.setenv(flash_native.ENV_SWITCH, "0")
    assert "flash:native" not in [c.label for c in attention.auto_candidates("log_elu", "cpu", torch.float32)]
    q, k, v = (t.float().requires_grad_() for t in _inputs((1, 1, 40, 16), seed=7))
    kernel_attention(q, k, v, "linear_elu").sum().backward()
    kernel_attention(q, k, v, "log_elu", backend="flash").sum().backward()
    with pytest.raises(RuntimeError, match="switched on: False; built: False"):
        kernel_attention(q, k, v, "log_elu", backend="flash", native=True)
    assert calls == []


def test_a_lock_left_by_a_killed_build_is_cleared_not_waited_for(ext, tmp_path):
    """torch's builder leaves ``lock`` behind when it is killed half-way, and every later build would wait for it
    forever: the next build (in a fresh process) removes it, with one warning, and loads."""
    import subprocess
    import sys

    code = ("import logging, torch; logging.basicConfig()\n"
            "from heavytail.science import flash_native as f\n"
            "d = f._build_dir(f.build_name(torch.backends.cpu.get_cpu_capability()))\n"
            "(d / 'lock').touch()\n"
            "print(f.extension() is not None, (d / 'lock').exists())\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("the build waited for a lock no live process holds")
    assert done.stdout.split() == ["True", "False"], done.stderr
    assert "left by a build that was killed half-way" in done.stderr


def test_a_build_held_by_another_live_process_past_the_wait_falls_back_with_one_warning(ext, monkeypatch, caplog):
    import fcntl

    capability = torch.backends.cpu.get_cpu_capability()
    build_dir = flash_native._build_dir(flash_native.build_name(capability))
    monkeypatch.setenv(flash_native.WAIT_SWITCH, "0.5")
    with open(build_dir / flash_native.LOCK_NAME, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another open file: the builder below must wait for this one
        with caplog.at_level("WARNING", logger=flash_native.__name__):
            assert flash_native._load.__wrapped__(capability) is None
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "for over 0 s" in warned[0].getMessage(), [r.getMessage() for r in warned]


def test_a_wait_of_seconds_for_another_builder_is_said_when_it_starts(ext, monkeypatch, caplog):
    """A wait long enough to look like a hang (5 s and more) is said when it starts, before the fallback."""
    import fcntl

    capability = torch.backends.cpu.get_cpu_capability()
    build_dir = flash_native._build_dir(flash_native.build_name(capability))
    monkeypatch.setenv(flash_native.WAIT_SWITCH, "5")
    with open(build_dir / flash_native.LOCK_NAME, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with caplog.at_level("WARNING", logger=flash_native.__name__):
            assert flash_native._load.__wrapped__(capability) is None
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 2 and "waiting up to 5 s" in said[0] and "for over 5 s" in said[1], said


def test_without_a_compiler_every_backend_that_validates_runs_eagerly_with_one_warning(tmp_path):
    """No C++ compiler: nothing is built, flash and compiled tiled run their eager passes (one warning for the
    machine), and a short training run on attention_backend=flash completes."""
    import os
    import subprocess
    import sys

    code = (
        "import logging, torch\nlogging.basicConfig()\n"
        "from heavytail.science.attention import kernel_attention\n"
        "g = torch.Generator().manual_seed(0)\n"
        "q, k, v = (torch.randn(1, 1, 40, 16, generator=g, requires_grad=True) for _ in range(3))\n"
        "for backend, compiled in (('flash', None), ('tiled', True), ('auto', None), ('dense', None)):\n"
        "    kernel_attention(q, k, v, 'log_elu', backend=backend, compiled=compiled).sum().backward()\n"
        "from heavytail.harness.config import RunConfig\nfrom heavytail.harness.train import train\n"
        "cfg = RunConfig.from_dict(dict(d_model=16, n_blocks=1, d_ff=32, n_points=32, trials_per_step=2, steps=2, "
        "warmup_steps=1, checkpoint_every=2, log_every=1, kernel='log_elu', attention_backend='flash', device='cpu'))\n"
        f"train(cfg, {str(tmp_path / 'run')!r}, quiet=True)\nprint('trained')\n")
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "PATH": str(Path(sys.executable).parent),
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "trained", done.stderr[-3000:]
    assert done.stderr.count("no C++ compiler") == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "ext").exists()


def test_two_checkouts_of_one_source_share_one_build_without_recompiling(ext, tmp_path):
    """The build folder is keyed by the source's digest; compiling a copy kept inside it (not each checkout's own file)
    is what lets a second checkout of the same commit find the build up to date instead of recompiling it."""
    import shutil
    import subprocess
    import sys

    code = ("import sys, torch\nfrom pathlib import Path\n"
            "from heavytail.science import flash_native as f\n"
            "f.SOURCE = Path(sys.argv[1])\n"
            "d = f._build_dir(f.build_name(torch.backends.cpu.get_cpu_capability()))\n"
            "so = next(d.glob('*.so'))\nbefore = so.stat().st_mtime_ns\n"
            "assert f.extension() is not None\nprint(so.stat().st_mtime_ns == before)\n")
    for checkout in ("a", "b", "a"):
        source = tmp_path / checkout / "heavytail" / "science" / flash_native.SOURCE.name
        source.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(flash_native.SOURCE, source)
        done = subprocess.run([sys.executable, "-c", code, str(source)], capture_output=True, text=True, timeout=300)
        assert done.stdout.split() == ["True"], f"checkout {checkout} recompiled the extension: {done.stderr[-2000:]}"
