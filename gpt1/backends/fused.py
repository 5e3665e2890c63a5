"""The `cpu_fused` backend: the modules of gpt1/model.py with their forward running the fused
CPU kernels (gpt1/backends/ops.py), installed onto a built model by swapping each module's
class for its fused subclass (parameters, names and state_dict unchanged).

Same math as the modules they replace; the differences are dropout (a hash of (seed, element
index) instead of torch's Bernoulli sampling, so backward regenerates masks) and fusion: the
attention softmax + mask + dropout, GELU with its MLP, the tied output layer with the loss,
and in post-LN blocks the residual dropout + add + LayerNorm of each junction.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpt1.backends import kernels as K
from gpt1.backends import ops
from gpt1.model import MLP, Attention, Block, TiedEmbedding


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run a matmul on `t` in: its autocast dtype, else t's own."""
    device = t.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else t.dtype


class FusedDropout(nn.Dropout):
    """Inverted dropout whose mask is a hash of (seed, element index), p quantised to 2^-32
    (scale from the quantised value, so E[out] = x); the seed is drawn from torch's generator
    (manual_seed reproduces it). One fused pass on CPU where F.dropout's per-element Bernoulli
    sampling was a quarter of a training step (benchmarks/train_throughput.py), no stored mask.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        out: torch.Tensor = ops.dropout(x, ops.new_seed(), self.p)
        return out


class DeferredDropout(FusedDropout):
    """The residual dropout of a post-LN block's sublayer: applied by the block's fused
    add + LayerNorm (FusedBlock), so the sublayer returns its output undropped."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class FusedEmbedding(TiedEmbedding):
    """Under autocast, the fp32 lookup and the output layer's low-precision copy of We are one
    node (ops.tied_lookup); the output layer and the loss are one fused op (ops.head_losses)."""

    pool: int

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        self.pass_weight = None
        if self.mode == "matrix" and self.training:
            weight = self.pass_weight = self.drop(weight)  # spec §5: one mask on We per pass
        device = idx.device.type
        if (
            torch.is_grad_enabled() and weight.requires_grad and torch.is_autocast_enabled(device)
            and torch.get_autocast_dtype(device) != weight.dtype
        ):
            x, self.pass_weight = ops.tied_lookup(weight, idx, torch.get_autocast_dtype(device))
            return x
        return F.embedding(idx, weight)

    def row_losses(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        dtype = _compute_dtype(h)  # the output layer runs in the autocast dtype, as F.linear
        h = h.reshape(-1, h.size(-1)).to(dtype)
        weight = self.output_weight()[: self.n_real]  # padded rows take no part in the loss
        return ops.head_losses(h, weight.to(dtype), targets, self.pool)


class FusedAttention(Attention):
    """Training attention with dropout as one fused node (ops.causal_attention): on CPU, SDPA
    with dropout_p > 0 falls back to an unfused path about 3.5x slower (attention forward +
    backward, bench config). Without dropout SDPA's fused kernel runs, as in the model."""

    pool: int

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if not (self.training and self.attn_pdrop > 0):
            return super().attend(q, k, v)
        B, nh, T, hs = q.shape
        dtype = _compute_dtype(q)
        q, k, v = (t.to(dtype).reshape(B * nh, T, hs) for t in (q, k, v))  # (B*nh, T, hs)
        y = ops.attend(q, k, v, self.attn_pdrop, self.pool)
        return y.view(B, nh, T, hs)


class FusedMLP(MLP):
    """c_proj(gelu(c_fc(x))) as one node (ops.mlp) in the autocast dtype; its dropout is the
    module's own (a FusedDropout, or deferred to the block's fused LayerNorm)."""

    pool: int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled():
            y = self.c_proj(ops.gelu(self.c_fc(x)))
        elif not K.usable(x):
            return super().forward(x)
        else:
            dtype = _compute_dtype(x)
            params = (self.c_fc.weight, self.c_fc.bias, self.c_proj.weight, self.c_proj.bias)
            y = ops.mlp_core(x.reshape(-1, x.size(-1)).to(dtype),
                             [t.to(dtype) for t in params], self.pool).view(x.shape)
        out: torch.Tensor = self.drop(y)
        return out


class FusedBlock(Block):
    """Post-LN: each junction LN(x + dropout(f)) is one fused pass each way
    (ops.add_dropout_layer_norm_rows), the sublayers' residual dropouts deferred to it."""

    pools: tuple[int, int]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:
            out: torch.Tensor = super().forward(x)
            return out
        n = self._junction(x, self.attn(x), self.ln_1, self.attn.resid_drop, self.pools[0])
        return self._junction(n, self.mlp(n), self.ln_2, self.mlp.drop, self.pools[1])

    @staticmethod
    def _junction(x: torch.Tensor, f: torch.Tensor, ln: nn.LayerNorm, drop: nn.Module,
                  pool: int) -> torch.Tensor:
        """ln(x + drop(f)) for (B, T, C) x (spec §5: n = LN(x + attn(x)))."""
        assert isinstance(drop, nn.Dropout)
        p = drop.p if drop.training else 0.0
        if x.dtype != torch.float32 or not K.usable(x):
            return ln(x + (ops.dropout(f, ops.new_seed(), p) if p > 0 else f))
        C = x.size(-1)
        h = ops.add_dropout_layer_norm_rows(x.reshape(-1, C), f.reshape(-1, C), ln.weight,
                                            ln.bias, ln.eps, p, pool)
        return h.view(x.shape)


_FUSED: dict[type[nn.Module], type[nn.Module]] = {
    nn.Dropout: FusedDropout, TiedEmbedding: FusedEmbedding, Attention: FusedAttention,
    MLP: FusedMLP, Block: FusedBlock,
}


FUSED_TYPES = tuple(_FUSED.values())


def install(model: nn.Module) -> None:
    """Swap every plain module of gpt1/model.py (and nn.Dropout) in `model` for its fused
    subclass, in place; modules already fused are left as they are."""
    for module in model.modules():
        fused = _FUSED.get(type(module))
        if fused is None:
            continue
        module.__class__ = fused
        if isinstance(module, FusedBlock):
            module.pools = (ops.new_pool(), ops.new_pool())
            if not module.pre_ln:  # the junction kernel applies the sublayers' dropouts
                module.attn.resid_drop.__class__ = DeferredDropout
                module.mlp.drop.__class__ = DeferredDropout
        elif isinstance(module, FusedEmbedding | FusedAttention | FusedMLP):
            module.pool = ops.new_pool()
