"""Flash-style eq. 7 on the CPU as one fused C++ loop (``flash_native.cpp``), for kernels with a native weight chain.

The compiled tile passes of :mod:`heavytail.science.flash_attention` leave each score tile between library calls:
a matmul writes it, one inductor graph turns it into weights, the next matmul reads it back, each call with its
dispatch cost. Here the whole loop is C++, the structure of torch's own CPU flash attention for softmax: per block of
``BLOCK_Q`` queries and ``BLOCK_K`` keys one BLAS call makes the scores, the kernel's weight chain runs over them
while they are in L2, and the next BLAS call consumes them. The algorithm and the three numbers kept per row are the
compiled path's; only its arithmetic order differs (key blocks of ``BLOCK_K`` with online rescaling).

A kernel takes this path when its :attr:`~heavytail.science.kernels.Kernel.native` names a chain written in C++
(softmax's ``"exp"``, the power ELU ``"power"`` with its order q, ``"log_elu"``); any other registered kernel runs on
the compiled passes. The extension is built once per machine on first use with torch's C++ toolchain (about a
minute; cached under ``~/.cache/torch_extensions``, or ``TORCH_EXTENSIONS_DIR``). Where it cannot be built, or with
``HEAVYTAIL_NATIVE_FLASH=0`` in the environment (then nothing is built), the compiled passes run instead and the reason
is logged once.

The loop can only help, never stop a run. Its build is keyed by a short hash of the source, torch's version and the
instruction set (:func:`build_name`), so checkouts with other sources or another torch never share, rebuild or replace
one build. Builds of one name take turns under an OS file lock (``heavytail.lock`` in the build folder), which the
kernel releases when a builder dies (killed, out of memory, a cancelled job), so the lock torch's own builder leaves
behind then is known to be stale and is removed; a build another live process holds for longer than
``HEAVYTAIL_NATIVE_BUILD_WAIT_S`` seconds (default 900) is not waited for, the compiled passes run. Without a C++
compiler (:func:`compiler`) nothing is built and :mod:`heavytail.science.attention` runs the passes eagerly.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import Tensor
from torch.autograd.profiler import record_function

from heavytail import cli
from heavytail.science.kernels import Kernel

_log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("flash_native.cpp")
ENV_SWITCH = "HEAVYTAIL_NATIVE_FLASH"
# torch.profiler's names for the C++ loop's two calls (benchmarks/profile_step.py attributes time by them).
PROFILE_FORWARD, PROFILE_BACKWARD = "heavytail::native_flash_forward", "heavytail::native_flash_backward"
# The C++ chains and their numbers in flash_native.cpp's ``enum Chain``.
CHAINS = {"exp": 0, "power": 1, "log_elu": 2}
# Queries and keys per block: a 64 x 512 score tile is 128 KiB of float32, in L2 with its partner tile in backward,
# and 64 rows keep the inner dimension of dV += A^T dO and dK += dS^T Q long enough for BLAS (the shape torch's
# CPU flash attention uses for softmax). Measured against 128 x 256 and 32 x 1024 at N = 4096, d = 32, one thread:
# see benchmarks/bench_flash_native.py.
BLOCK_Q, BLOCK_K = 64, 512
# Compiler flags per CPU capability torch dispatches to (its own kernels' flags), so at::vec uses the same ISA.
# -ffp-contract=off: the chains rely on q s - log g(m) <= 0 for s <= m, which holds when q s and log g(m) = q m are
# rounded alike; GCC's default contraction into one FMA rounds only the sum (at m = -1e30 it gave e^{+1e23}).
_ISA_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
}


def enabled() -> bool:
    """Whether the native path may be used at all (``HEAVYTAIL_NATIVE_FLASH`` 0/false/no/off or empty switches it
    off; a value that is none of those nor 1/true/yes/on is a ValueError naming them)."""
    return cli.env_flag(ENV_SWITCH, cli.ENV_FLAGS[ENV_SWITCH])


WAIT_SWITCH = "HEAVYTAIL_NATIVE_BUILD_WAIT_S"
LOCK_NAME = "heavytail.lock"


@functools.lru_cache(maxsize=None)
def compiler() -> str | None:
    """The C++ compiler torch's extension builder and inductor would call (``$CXX``, else ``c++`` / ``g++``), or None
    when none answers ``--version``: then neither the loop nor the compiled passes can be built."""
    for cxx in dict.fromkeys(c for c in (os.environ.get("CXX"), "c++", "g++") if c):
        found = shutil.which(cxx)
        if found is None:
            continue
        try:
            subprocess.run([found, "--version"], capture_output=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError):
            continue
        return found
    return None


@functools.lru_cache(maxsize=None)
def warn_no_compiler() -> None:
    """The one warning of a machine without a C++ compiler (the loop and the compiled passes both need one)."""
    _log.warning("no C++ compiler (CXX=%s, no c++ or g++ on PATH): attention runs eagerly, without the native loop "
                 "or compiled passes (same numbers, slower)", os.environ.get("CXX", "unset"))


def _flags(capability: str) -> list[str]:
    # -fopenmp: at::parallel_for is OpenMP in torch's CPU build; without it the loop runs on one thread.
    return ["-O3", "-ffp-contract=off", "-fopenmp", *_ISA_FLAGS.get(capability, []), f"-DCPU_CAPABILITY={capability}"]


def build_name(capability: str, source: bytes | None = None, torch_version: str | None = None) -> str:
    """The extension's name for one instruction set: a short hash of the source, torch's version and the flags, so
    a build is only ever reused by the same source under the same torch for the same ISA."""
    source = SOURCE.read_bytes() if source is None else source
    key = hashlib.sha256(b"\0".join([source, (torch_version or torch.__version__).encode(),
                                      " ".join(_flags(capability)).encode()])).hexdigest()[:12]
    return f"heavytail_flash_{capability.lower()}_{key}"


def _build_dir(name: str) -> Path:
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(name, verbose=False))


def _wait_s() -> float:
    return cli.env_seconds(WAIT_SWITCH, cli.ENV_SECONDS[WAIT_SWITCH])


def _take_turn(build_dir: Path):
    """An open file holding the build folder's OS lock, or None when another live builder held it past the wait."""
    handle = open(build_dir / LOCK_NAME, "a")  # noqa: SIM115  (closed by the caller, which releases the lock)
    deadline = time.monotonic() + _wait_s()
    said = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if not said and _wait_s() >= 5:  # said as it happens: a wait of minutes must not look like a hang
                _log.warning("native flash attention: another process is building %s; waiting up to %.0f s "
                             "(%s=seconds to change)", build_dir.name, _wait_s(), WAIT_SWITCH)
                said = True
            if time.monotonic() >= deadline:
                handle.close()
                return None
            time.sleep(0.2)


def _build_source(build_dir: Path) -> Path:
    """The source compiled, as a copy inside the build folder: the folder is keyed by the source's digest, so every
    checkout of one commit names the same file there and ninja finds the build up to date, where each checkout's
    own path would make it recompile (30-60 s) at every switch. Called under the build lock."""
    copy = build_dir / SOURCE.name
    data = SOURCE.read_bytes()
    if not copy.is_file() or copy.read_bytes() != data:
        tmp = copy.with_name(f".{copy.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, copy)
    return copy


def _clear_stale_baton(build_dir: Path) -> None:
    # Every build of this folder runs under the lock this process now holds, so torch's own lock file there was
    # left by a builder that died mid-build: torch would wait for it forever.
    baton = build_dir / "lock"
    if baton.exists():
        _log.warning("native flash attention: removing %s, left by a build that was killed half-way", baton)
        baton.unlink(missing_ok=True)


def extension(capability: str | None = None):
    """The compiled extension module for ``capability`` (default: the ISA torch dispatches to here; ``"AVX2"`` or
    ``"DEFAULT"`` force another), or None where it cannot or may not be built (the reason logged once). Switched
    off (``HEAVYTAIL_NATIVE_FLASH=0``) or without a compiler it builds nothing."""
    if not enabled():
        return None
    if compiler() is None:
        warn_no_compiler()
        return None
    return _load(capability or torch.backends.cpu.get_cpu_capability())


@functools.lru_cache(maxsize=None)
def _load(capability: str):
    name = build_name(capability)
    # The ninja of this environment (a dependency), also when its bin folder is not on PATH (python run by path).
    path = os.environ.get("PATH", "")
    here = str(Path(sys.executable).parent)
    if here not in path.split(os.pathsep):
        os.environ["PATH"] = here + os.pathsep + path
    try:
        from torch.utils.cpp_extension import load

        build_dir = _build_dir(name)
        turn = _take_turn(build_dir)
        if turn is None:
            _log.warning("native flash attention: another process has held the build of %s for over %.0f s (%s); "
                         "using the compiled tile passes", name, _wait_s(), build_dir / LOCK_NAME)
            return None
        with turn:
            _clear_stale_baton(build_dir)
            _log.info("loading native flash attention %s (built once per machine, about a minute)", name)
            return load(name, [str(_build_source(build_dir))], extra_cflags=_flags(capability),
                        extra_ldflags=["-fopenmp"], build_directory=str(build_dir), verbose=False)
    except Exception as exc:  # no headers, a failed build: the compiled passes stand in
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        _log.warning("native flash attention unavailable (%s: %s); using the compiled tile passes",
                     type(exc).__name__, first)
        return None


def supports(kernel: Kernel, q: Tensor) -> bool:
    """Whether the C++ loop computes this kernel for these inputs: a native chain, float32, CPU, non-empty."""
    return (kernel.native is not None and kernel.native[0] in CHAINS and q.dtype == torch.float32
            and q.device.type == "cpu" and q.numel() > 0)


class _NativeFlash(torch.autograd.Function):
    """Eq. 7 on contiguous ``(B, N, d), (B, L, d), (B, L, d_v)`` float32 tensors. Saved for backward: the inputs,
    the output and per row ``log g(m)``, the kernel's row term and ``1 / sum`` ``(B, N, 3)``."""

    @staticmethod
    def forward(ctx, q, k, v, chain: int, order: float, ext):  # noqa: D401
        with record_function(PROFILE_FORWARD):  # the C++ loop is no aten op: name it for torch.profiler
            out, rows = ext.forward(q, k, v, chain, order, BLOCK_Q, BLOCK_K)
        ctx.save_for_backward(q, k, v, out, rows)
        ctx.chain, ctx.order, ctx.ext = chain, order, ext
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, rows = ctx.saved_tensors
        with record_function(PROFILE_BACKWARD):
            dq, dk, dv = ctx.ext.backward(q, k, v, out, dout.contiguous(), rows, ctx.chain, ctx.order, BLOCK_Q,
                                          BLOCK_K)
        return dq, dk, dv, None, None, None


def native_flash(q: Tensor, k: Tensor, v: Tensor, kernel: Kernel) -> Tensor | None:
    """Eq. 7 for ``(B, N, d), (B, L, d), (B, L, d_v)`` through the C++ loop; None when this call cannot take it
    (see :func:`supports`, :func:`enabled`, :func:`extension`)."""
    if not (enabled() and supports(kernel, q)):
        return None
    ext = extension()
    if ext is None:
        return None
    chain, order = kernel.native
    return _NativeFlash.apply(q.contiguous(), k.contiguous(), v.contiguous(), CHAINS[chain], float(order), ext)


def chain_terms(scores: Tensor, kernel: Kernel) -> tuple[Tensor, Tensor, Tensor]:
    """The C++ chain alone on raw scores ``(R, L)`` float32 at scale 1: the forward's weights ``g(s)/g(m)`` per
    row, the backward's weights and ``(log g)'(s)``, each ``(R, L)`` (for comparing with the kernel's functions)."""
    ext = extension()
    if ext is None or kernel.native is None:
        raise RuntimeError(f"no native chain for kernel {kernel.name!r} on this machine")
    chain, order = kernel.native
    return tuple(ext.chain_terms(scores.contiguous(), CHAINS[chain], float(order)))
