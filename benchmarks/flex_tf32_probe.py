"""Why flex ran 86 s per training step at the paper's shape (gpu_check-20261204): flex attention forward and
backward of the squared ELU (eq. 7) in float32 at (B, 1, 16384, 256), with TF32 off and on, against SDPA in
float32 and bf16 on the same tensors. Prints seconds per call (median of 3 after one warm-up); GPU only.

    python benchmarks/flex_tf32_probe.py [--batch 8]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from heavytail.science.attention import kernel_attention  # noqa: E402


def timed(fn, reps=3):
    out = []
    for _ in range(reps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out[0], statistics.median(out[1:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--n", type=int, default=16384)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("error: needs a CUDA device", file=sys.stderr)
        return 2
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(a.batch, 1, a.n, 256, device="cuda", generator=g) for _ in range(3))
    print(f"torch {torch.__version__}, shape {tuple(q.shape)}", flush=True)

    def step(kernel, backend, dtype):
        x = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        out = kernel_attention(*x, kernel, backend=backend)
        out.float().square().mean().backward()

    for tf32 in (True, False):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        for kernel, backend, dtype in (("squared_elu", "flex", torch.float32), ("softmax", "sdpa", torch.float32),
                                       ("softmax", "sdpa", torch.bfloat16)):
            first, med = timed(lambda k=kernel, b=backend, t=dtype: step(k, b, t))
            print(f"tf32={tf32!s:<5} {kernel:<12} {backend:<5} {str(dtype):<15} first {first:7.2f} s  "
                  f"then {med:.3f} s per forward+backward", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
