"""The measure transformer of Section 3.3 and App. E.1 (eq. 30, Table 3).

    X --sigma--> R^{N x 2} --W_in--> R^{N x D} --n_blocks blocks--> R^{N x D} --W_out--> R^{N x 2} --sigma^-1--> Y

``sigma`` is symlog (eq. 8) when ``symlog=True``, else the identity. Each block is an attention
sublayer (eq. 7 with kernel ``g``, ``heavytail.science.attention``) and a feed-forward sublayer
(``D -> d_ff -> D``, GELU), both residual:

- ``norm="post"`` (Section 3.3.2, the main experiments): ``x -> LN(alpha_RS x + f(x))``, alpha_RS = 4.899;
- ``norm="pre"`` (App. G): ``x -> x + f(LN(x))``.

No positional encoding, no dropout, no causal mask: the model is permutation equivariant in the
N points, as a map between empirical measures should be.

Parameter count: with Table 3's settings (D = 256, 6 blocks, d_ff = 512, 1 head, biases on the
Q, K, V, O projections, two LayerNorms per block) the count is exactly 3,163,906, the value in
Table 3, and eq. 30 has no LayerNorm after the last block. A pre-norm model by eq. 30 therefore
feeds the un-normalized residual stream to W_out; ``final_norm=True`` (pre-norm only) adds the
customary final LayerNorm, +2 D parameters (3,164,418 at the defaults). It is off by default to
follow eq. 30 and Table 3 literally.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from heavytail import names
from heavytail.names import NORMS
from heavytail.science.attention import DEFAULT_TILE_ELEMENTS, attention_weights, kernel_attention, max_abs_score
from heavytail.science.kernels import Kernel, get_kernel
from heavytail.science.transforms import symexp, symlog

__all__ = ["ModelConfig", "MeasureTransformer", "count_parameters", "NORMS", "TABLE3_PARAMETERS"]

TABLE3_PARAMETERS = 3_163_906


@dataclass(frozen=True)
class ModelConfig:
    """Model settings. The ones a run states have no default here: they come from the validated run
    configuration (``heavytail.harness.config.RunConfig.model_kwargs``, whose defaults are Table 3), so
    Table 3 is written once. The rest are the model's own: d_in = 2 (the benchmarks' points, Section 3.2),
    no final LayerNorm (eq. 30), the tile size and the statistics rows."""

    d_model: int
    n_blocks: int
    d_ff: int
    n_heads: int
    kernel: Kernel | str
    norm: str
    alpha_rs: float
    symlog: bool
    backend: str
    split_kernel: Kernel | str | None  # eq. 7's kernel in block ``split_block`` only (an intervention; None: none)
    split_block: int | None
    qk_norm: bool  # LayerNorm on each head's queries and keys before the score of eq. 1 (an intervention)
    d_in: int = 2
    final_norm: bool = False
    tile_elements: int = DEFAULT_TILE_ELEMENTS
    stats_rows: int = 8

    def __post_init__(self) -> None:
        for name in ("d_in", "d_model", "n_blocks", "d_ff", "n_heads", "tile_elements", "stats_rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ModelConfig.{name}={value!r}; must be a positive integer")
        if not isinstance(self.kernel, Kernel):  # a name, from a caller that did not go through RunConfig
            object.__setattr__(self, "kernel", get_kernel(self.kernel))
        for name, allowed in (("norm", NORMS), ("backend", names.BACKENDS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"ModelConfig.{name}={getattr(self, name)!r}; allowed: {', '.join(allowed)}")
        refusal = names.backend_refusal(self.backend, self.kernel.name)
        if refusal is not None:
            raise ValueError(f"ModelConfig.backend={self.backend!r} {refusal}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"ModelConfig.n_heads={self.n_heads} must divide d_model={self.d_model}"
            )
        if not (isinstance(self.alpha_rs, (int, float)) and math.isfinite(self.alpha_rs) and self.alpha_rs > 0):
            raise ValueError(f"ModelConfig.alpha_rs={self.alpha_rs!r}; must be a finite positive number")
        if (self.split_kernel is None) != (self.split_block is None):
            raise ValueError("ModelConfig.split_kernel and split_block go together: set both or neither")
        if self.split_kernel is not None:
            if not isinstance(self.split_kernel, Kernel):
                object.__setattr__(self, "split_kernel", get_kernel(self.split_kernel))
            if self.n_blocks < 2 or not 0 <= self.split_block < self.n_blocks:
                raise ValueError(f"ModelConfig.split_block={self.split_block!r} is not a block of a model of "
                                 f"{self.n_blocks} blocks that can be split (two or more)")
        if self.final_norm and self.norm != "pre":
            raise ValueError(
                "ModelConfig.final_norm=True is for norm='pre' only; post-norm blocks already end in a LayerNorm"
            )


def block_config(cfg: ModelConfig, index: int) -> ModelConfig:
    """Block ``index``'s configuration: ``cfg`` itself, or for the split block ``cfg.split_kernel`` in place of the
    kernel, on ``cfg.backend`` where that backend computes it, else on "auto" (SDPA computes softmax only)."""
    if cfg.split_kernel is None or index != cfg.split_block:
        return cfg
    backend = cfg.backend if names.backend_refusal(cfg.backend, cfg.split_kernel.name) is None else "auto"
    return dataclasses.replace(cfg, kernel=cfg.split_kernel, backend=backend, split_kernel=None, split_block=None)


class KernelSelfAttention(nn.Module):
    """Multi-head self-attention with kernel ``g`` (eq. 7), biases on Q, K, V and O. ``(B, N, D) -> (B, N, D)``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model)
        self.v = nn.Linear(cfg.d_model, cfg.d_model)
        self.o = nn.Linear(cfg.d_model, cfg.d_model)
        self.kernel = cfg.kernel  # resolved: attention receives the Kernel, not its name
        d_head = cfg.d_model // cfg.n_heads
        self.q_norm = nn.LayerNorm(d_head) if cfg.qk_norm else None
        self.k_norm = nn.LayerNorm(d_head) if cfg.qk_norm else None

    def _heads(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.cfg.n_heads, -1).transpose(1, 2)  # (B, H, N, D/H)

    @torch.no_grad()
    def score_form_norm(self) -> Tensor:
        """The spectral norm of the score form W_Q^h W_K^h^T / sqrt(d_h) of eq. 1, largest over heads (0-d)."""
        h = self.cfg.n_heads
        d_head = self.cfg.d_model // h
        wq = self.q.weight.float().view(h, d_head, -1)
        wk = self.k.weight.float().view(h, d_head, -1)
        form = wq.transpose(-1, -2) @ wk / math.sqrt(d_head)  # (H, D, D)
        return torch.linalg.matrix_norm(form, ord=2).amax()

    def forward(self, x: Tensor, stats: dict | None = None) -> Tensor:
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        if self.q_norm is not None:  # QK-norm: |S| of eq. 1 is bounded by d_head / sqrt(d_head) times the LN gains
            q, k = self.q_norm(q), self.k_norm(k)
        out = kernel_attention(q, k, v, self.kernel, backend=self.cfg.backend, tile_elements=self.cfg.tile_elements)
        if stats is not None:
            # Outside autocast: under bf16 autocast the score matmul would drop back to bf16, a poor
            # diagnostic when heavy-tailed scores reach ~1e6 (the attention itself runs in float32).
            with torch.no_grad(), torch.autocast(device_type=q.device.type, enabled=False):
                # Points are exchangeable (no positional encoding), so the first rows are as
                # good a sample of query rows as any. (B, H, r, L); cheap: r x L, not N x L.
                w = attention_weights(q[..., : self.cfg.stats_rows, :].float(), k.float(), self.kernel)
                entropy = -(w * torch.log(w.clamp_min(torch.finfo(w.dtype).tiny))).sum(-1)
                stats["attn_max_weight"] = w.amax(-1).mean()
                # Absorption: rows whose largest weight rounds to exactly 1 in the precision attention received
                # (bf16 under autocast), i.e. every other point's weight is lost to rounding (float absorption).
                stats["attn_absorbed"] = (w.amax(-1).to(q.dtype) == 1).double().mean()
                stats["attn_entropy_ratio"] = (entropy / math.log(k.shape[-2])).mean() if k.shape[-2] > 1 else entropy.mean()
                # Collapse precursors (App. I): the largest |S| of eq. 1 over every query row (the
                # quantity that breaks flash-style softmax backwards), and the spectral norm of the
                # score form W_Q^h W_K^h^T / sqrt(d_h), largest over heads, which bounds |S| / (|x| |x'|).
                stats["max_abs_score"] = max_abs_score(q.float(), k.float(), self.cfg.tile_elements)
                stats["qk_spectral_norm"] = self.score_form_norm()
        b, h, n, dh = out.shape
        return self.o(out.transpose(1, 2).reshape(b, n, h * dh))


class Block(nn.Module):
    """Attention + feed-forward sublayers with post- or pre-norm residuals (Section 3.3.2, App. E.1)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.attn = KernelSelfAttention(cfg)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.ln_ff = nn.LayerNorm(cfg.d_model)

    def forward(self, x: Tensor, stats: dict | None = None) -> Tensor:
        if self.cfg.norm == "post":
            a = self.cfg.alpha_rs
            x = self.ln_attn(a * x + self.attn(x, stats))
            x = self.ln_ff(a * x + self.ff(x))
        else:
            x = x + self.attn(self.ln_attn(x), stats)
            x = x + self.ff(self.ln_ff(x))
        if stats is not None:
            stats["resid_norm"] = x.detach().float().norm(dim=-1).mean()
        return x


class MeasureTransformer(nn.Module):
    """The predictor sigma^-1 o f_theta o sigma of Section 3.4.1 / eq. 30. ``(B, N, d_in) -> (B, N, d_in)``.

    ``forward(x, return_attention_stats=True)`` also returns one dict per block of detached 0-d
    tensors for collapse diagnostics: ``attn_max_weight`` (mean over sampled query rows of the
    largest attention weight; 1 = a row attends to a single point), ``attn_entropy_ratio`` (row
    entropy / log L; 0 = collapsed, 1 = uniform) from the first ``cfg.stats_rows`` query rows, and
    ``attn_absorbed`` (share of those rows whose largest weight is 1 in the precision attention received),
    ``resid_norm`` (mean L2 norm of the residual stream after the block), ``max_abs_score`` (largest
    scaled score |S| of eq. 1 over all query rows) and ``qk_spectral_norm`` (spectral norm of
    W_Q W_K^T / sqrt(d_h), largest over heads). Off by default: it
    costs one ``stats_rows x N`` weight matrix per block.

    With ``symlog=True`` the output passes through ``symexp`` in at least float32, which clamps
    and warns (``SymexpOverflowWarning``) rather than overflow to inf beyond |y| ~ 88.7.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.w_in = nn.Linear(cfg.d_in, cfg.d_model)
        self.blocks = nn.ModuleList(Block(block_config(cfg, i)) for i in range(cfg.n_blocks))
        self.final_ln = nn.LayerNorm(cfg.d_model) if cfg.final_norm else None
        self.w_out = nn.Linear(cfg.d_model, cfg.d_in)

    def forward(self, x: Tensor, return_attention_stats: bool = False):
        if x.ndim != 3 or x.shape[-1] != self.cfg.d_in:
            raise ValueError(f"expected input of shape (B, N, {self.cfg.d_in}), got {tuple(x.shape)}")
        stats = [dict() for _ in self.blocks] if return_attention_stats else [None] * len(self.blocks)
        h = self.w_in(symlog(x) if self.cfg.symlog else x)
        for block, st in zip(self.blocks, stats):
            h = block(h, st)
        if self.final_ln is not None:
            h = self.final_ln(h)
        y = self.w_out(h)
        if self.cfg.symlog:
            y = symexp(y.to(torch.promote_types(y.dtype, torch.float32)))
        return (y, stats) if return_attention_stats else y


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters (Table 3 reports 3,163,906 for the defaults)."""
    return sum(p.numel() for p in model.parameters())
