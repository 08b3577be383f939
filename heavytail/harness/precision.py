"""The arithmetic a run computes in, set and read back: bf16 autocast (App. E.4), TF32 switches, subnormals
flushed, and the record of what a run's matmuls and attention really used."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from heavytail.harness import cpu_bf16
from heavytail.harness.config import RunConfig


def autocast(cfg: RunConfig, device: torch.device):
    if cfg.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def float32_matmuls(cfg: RunConfig, device: torch.device):
    """TF32 for CUDA float32 matmuls and cuDNN convolutions as ``cfg.tf32`` says, restored on exit.

    PyTorch's own defaults disagree (matmuls off, cuDNN on), so both are set explicitly. CPU runs are
    left alone: the flags are CUDA's, and touching them changes ``torch.get_float32_matmul_precision``.
    """
    if device.type != "cuda":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = cfg.tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@contextlib.contextmanager
def subnormals(cfg: RunConfig):
    """Subnormal floats flushed to zero inside the block when ``cfg.flush_subnormals`` (restored on exit).

    x86 computes with subnormal operands in microcode, up to ~20x slower per instruction; softmax weights
    e^(s - max) of heavy-tailed rows fall into that range in float32."""
    if not cfg.flush_subnormals:
        yield
        return
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def subnormals_flushed() -> bool:
    """Whether torch's arithmetic flushes subnormals now (a subnormal read back as 0)."""
    return bool(torch.tensor(1e-40, dtype=torch.float32).item() == 0.0)


def precision_record(device: torch.device, autocast_dtype: torch.dtype | None) -> dict[str, Any]:
    """What the matmuls of a run really used, read from torch at the time of the call (inside
    :func:`float32_matmuls`): the device, the autocast dtype and the TF32 switches."""
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "autocast_dtype": None if autocast_dtype is None else str(autocast_dtype).removeprefix("torch."),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "subnormals_flushed": subnormals_flushed(),
        # bf16 matmuls on a CPU without native support are emulated in float32 (heavytail.harness.cpu_bf16)
        "cpu_native_bf16": cpu_bf16.native() if device.type == "cpu" else None,
        "bf16_matmuls": cpu_bf16.path("bf16" if autocast_dtype == torch.bfloat16 else "float32", device),
    }


def backend_label(record: dict[str, dict[str, str]], phase: str = "train") -> str:
    """The attention backends a :func:`heavytail.science.attention.recording_backends` record saw in one phase
    (``"train"`` or ``"eval"``), ``+``-joined (``"sdpa"``, ``"flex"``, ``"flex+flash"``); ``""`` if none."""
    labels = [entry["backend"] for key, entry in record.items() if key.endswith(" " + phase)]
    return "+".join(dict.fromkeys(b for label in labels for b in label.split("+")))
