"""bf16 autocast on a CPU without native bf16 matmuls: the bf16 matmuls and SDPA's backward computed in float32
and rounded as torch's own kernels round (heavytail.harness.cpu_bf16), compared here with those kernels element by
element; said once before anything trains (grid and train), and recorded per run."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

from heavytail.__main__ import main
from heavytail.harness import cpu_bf16
from heavytail.harness.config import RunConfig
from heavytail.harness.build import build_model, build_optimizer
from heavytail.harness.train import training_step
from heavytail.io import is_complete, load_json
from heavytail.pipeline import grid as G
from heavytail.science.metrics import energy_distance

from test_reliability_probes import _smoke_grid

BF16 = torch.bfloat16
# Only the order of each float32 sum differs from torch's kernels, so an element differs from theirs only where its
# float32 sum lies within that reordering's error (~2^-24 of its terms) of a bf16 rounding boundary (2^-8 apart):
# about 1e-4 of the elements measured here. A scheme that rounds differently (SDPA's backward computed in float32
# and rounded once) differs in about half, so 0.99 separates the two with room for another CPU's summation order.
SAME_SHARE = 0.99


def _agreement(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[float, float]:
    """Share of identical elements, and the largest difference over the largest |element| of ``theirs``."""
    a, b = ours.float(), theirs.float()
    assert a.shape == b.shape and ours.dtype == theirs.dtype == BF16
    return float((a == b).float().mean()), float((a - b).abs().max() / b.abs().max())


def _operands(*shapes, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [(scale * torch.randn(s, generator=g)).to(BF16) for s in shapes]


def test_native_is_what_onednn_reports():
    assert cpu_bf16.native() is bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def test_matmul_rates_are_rates_and_the_slowdown_is_their_ratio():
    r = cpu_bf16.matmul_rates(size=64, repeats=2)
    assert r["float32_gflops"] > 0 and r["bf16_gflops"] > 0
    assert r["slowdown"] == pytest.approx(r["float32_gflops"] / r["bf16_gflops"])


MATMULS = {
    "mm": (lambda a, b, c: a @ b, ((200, 96), (96, 130), (130,))),
    "addmm": (lambda a, b, c: torch.addmm(c, a, b), ((200, 96), (96, 130), (130,))),
    "addmm_scaled": (lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=3.0), ((200, 96), (96, 130), (130,))),
    "bmm": (lambda a, b, c: torch.bmm(a, b), ((3, 64, 96), (3, 96, 40), (3, 64, 40))),
    "baddbmm": (lambda a, b, c: torch.baddbmm(c, a, b, beta=2.0, alpha=0.25), ((3, 64, 96), (3, 96, 40), (3, 64, 40))),
    "linear_3d": (lambda a, b, c: F.linear(a.reshape(4, 50, 96), b.T, c), ((200, 96), (96, 130), (130,))),
}


@pytest.mark.parametrize("name", MATMULS)
def test_emulated_matmuls_round_as_torchs_bf16_kernels(name):
    fn, shapes = MATMULS[name]
    a, b, c = _operands(*shapes)
    theirs = fn(a, b, c)
    with cpu_bf16.Emulated():
        ours = fn(a, b, c)
    same, worst = _agreement(ours, theirs)
    assert same >= SAME_SHARE and worst <= 2.0**-7, (same, worst)


def test_emulated_matmuls_leave_other_dtypes_alone():
    a, b = (t.float() for t in _operands((50, 20), (20, 30)))
    with cpu_bf16.Emulated():
        assert torch.equal(a @ b, torch.mm(a, b)) and (a @ b).dtype == torch.float32
    assert torch.equal(a @ b, torch.mm(a, b))


def _sdpa_grads(q, k, v, go, mode):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with mode:
        F.scaled_dot_product_attention(*leaves).backward(go)
    return [t.grad for t in leaves]


# N = 100, 300, 1030: the CPU kernel's three query-block sizes (32, 64, 256), the last with a ragged key block
@pytest.mark.parametrize("n", [100, 300, 1030])
def test_emulated_sdpa_backward_rounds_as_torchs_bf16_kernel(n):
    # heavy-ish scores (queries x 3): weights spread over many orders of magnitude, as the ladder's softmax sees
    q, k, v, go = _operands((2, 2, n, 16), (2, 2, n, 16), (2, 2, n, 16), (2, 2, n, 16), seed=n)
    q = (3 * q.float()).to(BF16)
    theirs = _sdpa_grads(q, k, v, go, contextlib.nullcontext())
    ours = _sdpa_grads(q, k, v, go, cpu_bf16.Emulated())
    for name, a, b in zip(("dq", "dk", "dv"), ours, theirs):
        same, worst = _agreement(a, b)
        assert same >= SAME_SHARE and worst <= 2.0**-7, (name, same, worst)
    if n == 1030:  # the same gradients in float32, rounded once at the end: what the test must tell apart
        once = [g.to(BF16) for g in _sdpa_grads(*(t.float() for t in (q, k, v, go)), contextlib.nullcontext())]
        assert min(_agreement(a, b)[0] for a, b in zip(once, theirs)) < 0.9


def _step_grads(cfg):
    torch.manual_seed(0)
    model = build_model(cfg, torch.device("cpu"))
    optimizer, _ = build_optimizer(cfg, model)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, cfg.n_points, 2, generator=g), torch.randn(2, cfg.n_points, 2, generator=g)
    _, loss, _ = training_step(model, optimizer, x, y, cfg, torch.device("cpu"), energy_distance)
    return loss, torch.cat([p.grad.flatten() for p in model.parameters()])


def test_a_training_step_under_emulation_is_torchs_bf16_step_not_float32s():
    cfg = RunConfig.from_dict({"d_model": 32, "n_blocks": 2, "d_ff": 64, "n_points": 128, "trials_per_step": 2,
                               "kernel": "softmax", "attention_backend": "sdpa", "precision": "bf16", "device": "cpu"})
    with cpu_bf16.chosen("torch"):
        loss_torch, g_torch = _step_grads(cfg)
    with cpu_bf16.chosen("emulated"):
        loss_emu, g_emu = _step_grads(cfg)
    loss_f32, g_f32 = _step_grads(cfg.replace(precision="float32"))
    # bf16's own error (float32 against torch's bf16) is the scale: the emulation must sit far inside it
    assert abs(loss_emu - loss_torch) <= 0.05 * abs(loss_f32 - loss_torch)
    assert (g_emu - g_torch).norm() <= 0.05 * (g_f32 - g_torch).norm()


@pytest.mark.parametrize("native, precision, emulated", [(False, "bf16", True), (True, "bf16", False),
                                                          (None, "bf16", False), (False, "float32", False)])
def test_emulation_only_for_bf16_on_a_cpu_without_native_bf16(monkeypatch, native, precision, emulated):
    monkeypatch.setattr(cpu_bf16, "native", lambda: native)
    cpu = torch.device("cpu")
    assert cpu_bf16.emulates(precision, cpu) is emulated
    assert isinstance(cpu_bf16.emulation(precision, cpu), cpu_bf16.Emulated) is emulated
    assert cpu_bf16.path(precision, cpu) == (None if precision != "bf16" else "emulated" if emulated else "torch")
    assert not cpu_bf16.emulates(precision, torch.device("meta"))
    for forced in cpu_bf16.PATHS:  # a chosen path overrides what the CPU has, for bf16 on the CPU only
        with cpu_bf16.chosen(forced):
            assert cpu_bf16.emulates(precision, cpu) is (precision == "bf16" and forced == "emulated")
    assert cpu_bf16.emulates(precision, cpu) is emulated
    with pytest.raises(ValueError, match="not one of"):
        with cpu_bf16.chosen("native"):
            pass


@pytest.mark.parametrize("native, n, said", [(False, 2, True), (True, 2, False), (None, 2, False), (False, 0, False)])
def test_the_notice_comes_only_for_bf16_runs_on_a_cpu_without_native_bf16(monkeypatch, native, n, said):
    monkeypatch.setattr(cpu_bf16, "native", lambda: native)
    text = cpu_bf16.emulation_notice(n)
    assert (text is not None) is said
    if said:
        assert text.startswith("2 runs under bf16 autocast") and "emulated" in text


@pytest.mark.parametrize("precision, said", [("bf16", True), ("float32", False)])
def test_the_grid_says_once_that_its_bf16_runs_are_emulated(tmp_path, monkeypatch, capsys, precision, said):
    monkeypatch.setattr(cpu_bf16, "native", lambda: False)
    _, spec = _smoke_grid(tmp_path, precision=precision)
    G._note_cpu_bf16(spec, set(spec.names))
    err = capsys.readouterr().err.strip().splitlines()
    if said:
        assert len(err) == 1 and err[0].startswith(f"[grid] {len(spec.names)} runs under bf16 autocast"), err
    else:
        assert err == []


def test_train_says_so_before_an_emulated_run_and_records_the_path(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cpu_bf16, "native", lambda: False)
    out = tmp_path / "run"
    args = ["train", "--output", str(out), "--quiet", "--set", "precision=bf16", "device=cpu", "d_model=16",
            "n_blocks=1", "d_ff=32", "n_points=64", "trials_per_step=2", "steps=2", "warmup_steps=1",
            "eval_trials=4", "eval_n_points=64", "bootstrap_resamples=10"]
    assert main(args) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[train] ")]
    assert len(err) == 1 and "1 run under bf16 autocast" in err[0] and "emulated" in err[0], err
    assert is_complete(out)
    summary = load_json(out / "train_summary.json")
    assert summary["runtime"]["bf16_matmuls"] == "emulated"
    assert [entry["bf16_matmuls"] for entry in summary["provenance"]] == ["emulated"]


def test_every_provenance_entry_names_the_processors_arithmetic_features():
    from pathlib import Path

    from heavytail.harness import provenance

    flags = next(line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("flags"))
    entry = provenance.record()
    assert entry["cpu_features"] == [f for f in provenance.CPU_FEATURES if f in flags]
