"""GPT-1 decoder-only Transformer in pure torch (PAPER.md 1 and 5).

Post-LN blocks, tanh-GELU, learned positions, output layer tied to the token embedding,
N(0, 0.02) init with zero biases. `model.arch: gpt2` switches to pre-LN blocks plus a final
LayerNorm (PAPER.md 4). Parameter names follow transformers' OpenAIGPTModel so export is a
rename-free transpose (gpt1/export.py).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gpt1.config import ModelCfg


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout with a mask drawn from 16-bit random integers.

    Same distribution as F.dropout up to the keep probability being quantised to 1/65536 (the
    scale uses the exact quantised value, so E[out] = x), but about 4x faster on CPU, where
    F.dropout's per-element Bernoulli sampling was a quarter of a training step (profiled with
    benchmarks/train_throughput.py). Draws from torch's default generator, so manual_seed
    reproduces it.
    """
    if not training or p == 0.0:
        return x
    drop_units = round(p * 65536)
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device)
    words.random_(-(2**63), 2**63 - 1)  # all 64 bits random (plain random_() leaves the top 0)
    uniform16 = words.view(torch.int16)[: x.numel()].view(x.shape)  # uniform in [-32768, 32767]
    scale = torch.tensor(65536 / (65536 - drop_units), dtype=x.dtype, device=x.device)
    mask = torch.where(uniform16 >= drop_units - 32768, scale, torch.zeros_like(scale))
    return x * mask  # the mask needs no grad: autograd keeps only the mask for backward


class Dropout(nn.Module):
    """nn.Dropout with the fast mask of `dropout`."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class _TiedLookup(torch.autograd.Function):
    """The two uses of the tied We under autocast as one node: the fp32 lookup and the
    low-precision copy for the output layer.

    Separately, backward builds a zero-filled fp32 (V, C) gradient for the lookup, an fp32
    upcast of the output layer's (V, C) gradient, and their sum: three passes over fresh
    memory. Here the lookup gradient is added in place into the upcast output-layer gradient.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, weight: torch.Tensor, idx: torch.Tensor, head_dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(idx)
        ctx.weight_shape, ctx.weight_dtype = weight.shape, weight.dtype
        return F.embedding(idx, weight), weight.to(head_dtype)

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_x: torch.Tensor | None, grad_head: torch.Tensor | None
    ) -> tuple[torch.Tensor, None, None]:
        (idx,) = ctx.saved_tensors
        if grad_head is None:  # the output layer was not used (e.g. no auxiliary LM loss)
            grad = torch.zeros(ctx.weight_shape, dtype=ctx.weight_dtype, device=idx.device)
        else:
            grad = grad_head.to(ctx.weight_dtype)  # a fresh tensor: the dtypes differ
        if grad_x is not None:
            grad.index_add_(0, idx.reshape(-1), grad_x.reshape(-1, grad.size(1)).to(grad.dtype))
        return grad, None, None


class TiedEmbedding(nn.Module):
    """Token embedding We shared by the input lookup and the output layer (PAPER.md 1).

    `embd_dropout = "matrix"` drops entries of We itself (the original TF release), so the
    tied output layer sees the same dropped matrix as the lookup in that forward pass;
    `"activations"` leaves We alone (the caller drops the summed embeddings).
    """

    def __init__(self, vocab_size: int, n_embd: int, pdrop: float, mode: str) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, n_embd))
        self.mode = mode
        self.drop = Dropout(pdrop)
        self._head_weight: torch.Tensor | None = None
        self._logits_pool = LogitsPool()

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, C); also fixes We for the next `logits` / `row_losses`."""
        weight = self.weight
        self._head_weight = None
        if self.mode == "matrix" and self.training:
            weight = self.drop(weight)  # PAPER.md 5: one mask on We per forward pass
            self._head_weight = weight
        device = idx.device.type
        if (
            torch.is_grad_enabled() and weight.requires_grad and torch.is_autocast_enabled(device)
            and torch.get_autocast_dtype(device) != weight.dtype
        ):
            x, self._head_weight = _TiedLookup.apply(weight, idx, torch.get_autocast_dtype(device))
            return x
        return F.embedding(idx, weight)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(B, T, C) hidden states -> (B, T, V) logits: softmax(h We^T) (PAPER.md 1)."""
        weight = self._head_weight if self._head_weight is not None else self.weight
        return F.linear(h, weight)

    def row_losses(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(..., C) hidden states, (...) next tokens -> (N,) fp32 cross-entropies of
        softmax(h We^T), N = targets.numel().

        The output layer and the loss are one fused step (`head_cross_entropy`), run in the
        autocast dtype when autocast is on, like F.linear would be.
        """
        weight = self._head_weight if self._head_weight is not None else self.weight
        device = h.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else h.dtype
        h = h.reshape(-1, h.size(-1)).to(dtype)
        return head_cross_entropy(h, weight.to(dtype), targets, self._logits_pool)


class Attention(nn.Module):
    """Masked multi-head self-attention, scaled by 1/sqrt(d_head) (PAPER.md 5)."""

    def __init__(self, cfg: ModelCfg) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_pdrop = cfg.attn_pdrop
        self.resid_drop = Dropout(cfg.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.training and self.attn_pdrop > 0:
            y = self._attend_with_dropout(q, k, v)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, nh, T, hs) -> (B, T, C)
        return self.resid_drop(self.c_proj(y))

    def _attend_with_dropout(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """Explicit softmax + dropout on the attention probabilities (PAPER.md 1).

        On CPU, SDPA with dropout_p > 0 falls back to an unfused path about 3.5x slower than
        this (attention forward + backward, bench config); the matmuls run in the autocast dtype.
        """
        B, nh, T, hs = q.shape
        # causal mask as an additive bias fused into the scaled q k^T GEMM (one pass fewer)
        causal = torch.full((T, T), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
        att = torch.baddbmm(
            causal, q.reshape(B * nh, T, hs), k.reshape(B * nh, T, hs).transpose(1, 2),
            alpha=1.0 / math.sqrt(hs),
        ).view(B, nh, T, T)  # (B*nh, T, T) -> (B, nh, T, T)
        # softmax in fp32 (autocast), then the dropout mask and its backward run in the matmul
        # dtype: half the memory traffic of dropping fp32 probabilities under bf16 autocast
        att = torch.softmax(att, dim=-1).to(v.dtype)
        return dropout(att, self.attn_pdrop, training=True) @ v  # (B, nh, T, hs)


class MLP(nn.Module):
    """Position-wise feed-forward network with tanh-approximated GELU (PAPER.md 5)."""

    def __init__(self, cfg: ModelCfg) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.n_inner)
        self.c_proj = nn.Linear(cfg.n_inner, cfg.n_embd)
        self.drop = Dropout(cfg.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    """One decoder block. gpt1: post-LN (PAPER.md 5), unlike nanoGPT's pre-LN; gpt2: pre-LN."""

    def __init__(self, cfg: ModelCfg) -> None:
        super().__init__()
        self.pre_ln = cfg.arch == "gpt2"
        self.attn = Attention(cfg)
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:  # PAPER.md 4 (GPT-2): x + f(LN(x))
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))
        n = self.ln_1(x + self.attn(x))  # PAPER.md 5: n = LN(x + attn(x))
        return self.ln_2(n + self.mlp(n))  # h = LN(n + mlp(n))


class GPT(nn.Module):
    """GPT-1 language model. `vocab_size` includes the 3 special tokens appended after the BPE
    vocabulary (PAPER.md 5)."""

    def __init__(self, cfg: ModelCfg, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.n_embd = cfg.n_embd
        self.tokens_embed = TiedEmbedding(vocab_size, cfg.n_embd, cfg.embd_pdrop, cfg.embd_dropout)
        # PAPER.md 1: learned position embeddings (h0 = U We + Wp), not sinusoidal
        self.positions_embed = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.drop = Dropout(cfg.embd_pdrop)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        # PAPER.md 4: GPT-2 adds a final LayerNorm after the last (pre-LN) block
        self.ln_f: nn.LayerNorm | None = None
        if cfg.arch == "gpt2":
            self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PAPER.md 1: every weight N(0, initializer_range), biases 0, LayerNorm gains 1."""
        std = self.cfg.initializer_range
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, std)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding | TiedEmbedding):
                nn.init.normal_(module.weight, 0.0, std)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, C) final hidden states."""
        T = idx.size(1)
        if T > self.cfg.n_positions:
            raise ValueError(f"sequence of {T} tokens exceeds n_positions={self.cfg.n_positions}")
        pos = self.positions_embed.weight[:T]
        if self.tokens_embed.mode == "matrix":
            # PAPER.md 5: the original keeps positions in the same (dropped) matrix as We
            pos = self.tokens_embed.drop(pos)
            x = self.tokens_embed.embed(idx) + pos  # (B, T, C)
        else:
            x = self.drop(self.tokens_embed.embed(idx) + pos)  # (B, T, C)
        for block in self.h:
            x = block(x)
        return self.ln_f(x) if self.ln_f is not None else x

    def lm_logits(self, h: torch.Tensor) -> torch.Tensor:
        """(B, T, C) -> (B, T, V) next-token logits through the tied output layer."""
        return self.tokens_embed.logits(h)

    def lm_losses(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(..., C) hidden states, (...) next tokens -> (N,) fp32 per-token cross-entropies."""
        return self.tokens_embed.row_losses(h, targets)


class LogitsPool:
    """One (N, V) logits buffer kept across training steps by the fused output layer.

    A fresh 67 MB logits tensor per step (bench config) is fresh pages, and faulting them in
    made the output-layer GEMM 1.7x slower than the same GEMM into warm memory. The buffer is
    lent to one pending backward at a time; a second forward before that backward (or after a
    graph that was never backpropagated) gets a fresh tensor instead.
    """

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None
        self._holder: Any = None  # weakref to the autograd ctx that holds the buffer

    def __deepcopy__(self, memo: dict[int, Any]) -> LogitsPool:
        return LogitsPool()  # a copied model gets its own (empty) buffer

    def take(self, ctx: Any, rows: int, cols: int, like: torch.Tensor) -> torch.Tensor:
        if self._holder is not None and self._holder() is not None:
            return torch.empty(rows, cols, dtype=like.dtype, device=like.device)
        buf = self._buffer
        if buf is None or buf.numel() < rows * cols or buf.dtype != like.dtype or (
            buf.device != like.device
        ):
            buf = self._buffer = torch.empty(rows * cols, dtype=like.dtype, device=like.device)
        self._holder = weakref.ref(ctx)
        return buf[: rows * cols].view(rows, cols)

    def release(self) -> None:
        self._holder = None


class _HeadCrossEntropy(torch.autograd.Function):
    """Per-row cross-entropy of softmax(h W^T): output-layer GEMM and loss fused.

    F.linear + F.cross_entropy under autocast upcast the whole (N, V) logits to fp32 and
    materialise the log-softmax and its gradient, all memory traffic. Here the logits are
    written into a reused buffer, each cache-sized chunk of rows is upcast to fp32,
    exponentiated once and overwritten in place by its softmax; backward scales that softmax
    in place into dL/dlogits and runs the two GEMMs. The target entries of the gradient,
    p_t - 1, come from fp32 p_t saved separately, so a bf16 softmax near 1 loses nothing there.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, rows: int,
        pool: LogitsPool | None,
    ) -> torch.Tensor:
        n, vocab = h.size(0), weight.size(0)
        training = any(ctx.needs_input_grad[:2])  # (apply() runs forward with grad mode off)
        logits = (
            pool.take(ctx, n, vocab, h) if pool is not None and training
            else torch.empty(n, vocab, dtype=h.dtype, device=h.device)
        )
        torch.mm(h, weight.t(), out=logits)
        target_logit = logits.gather(1, targets.unsqueeze(1)).squeeze(1).float()
        lse = torch.empty(n, dtype=torch.float32, device=h.device)
        for start in range(0, n, rows):
            x = logits[start : start + rows].to(torch.float32, copy=True)  # (r, V): fits in L2
            peak = x.amax(-1, keepdim=True)
            total = x.sub_(peak).exp_().sum(-1, keepdim=True)
            lse[start : start + rows] = (peak + total.log()).squeeze(1)
            if training:
                logits[start : start + rows] = x.div_(total)  # softmax rows, in place
        losses = lse - target_logit  # (N,)
        if training:
            ctx.save_for_backward(h, weight, targets, torch.exp(-losses))  # p_t in fp32
            ctx.probs, ctx.pool, ctx.rows = logits, pool, rows
        return losses

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_rows: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        if ctx.probs is None:  # the softmax buffer became the gradient, in place
            raise RuntimeError("head cross-entropy: backward through the same graph twice")
        h, weight, targets, p_target = ctx.saved_tensors
        grad, ctx.probs = ctx.probs, None
        g = grad_rows.float()
        if bool((g == g[0]).all()):  # a mean loss: one scalar (a mixed-dtype mul_ is 5x slower)
            grad.mul_(float(g[0]))
        else:
            for start in range(0, grad.size(0), ctx.rows):
                chunk = grad[start : start + ctx.rows]
                chunk.copy_(chunk.float().mul_(g[start : start + ctx.rows, None]))
        rows = torch.arange(grad.size(0), device=grad.device)
        grad[rows, targets] = ((p_target - 1.0) * g).to(grad.dtype)  # d/dz_t = p_t - 1
        grad_h = grad @ weight if ctx.needs_input_grad[0] else None  # (N, C)
        grad_w = grad.t() @ h if ctx.needs_input_grad[1] else None  # (V, C)
        if ctx.pool is not None:
            ctx.pool.release()
        return grad_h, grad_w, None, None, None


def head_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, pool: LogitsPool | None = None
) -> torch.Tensor:
    """(N, C) hidden, (V, C) output weights, (N,) targets -> (N,) fp32 losses.

    Equals F.cross_entropy(h @ weight.T, targets, reduction="none") with fp32 softmax math;
    see `_HeadCrossEntropy`.
    """
    rows = max(1, (1 << 18) // weight.size(0))  # ~1 MB of fp32 per chunk: stays in L2
    out: torch.Tensor = _HeadCrossEntropy.apply(h, weight, targets.reshape(-1), rows, pool)
    return out


def count_parameters(model: nn.Module) -> int:
    """Unique parameters (the tied output layer is counted once)."""
    return sum(p.numel() for p in model.parameters())


def flops_per_token(cfg: ModelCfg, vocab_size: int, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward = 3x forward), matmuls only.

    6 x (block weights + tied output layer) plus attention scores and weighted sum
    (12 x n_layer x seq_len x n_embd, counting the full T x T product).
    """
    block = 4 * cfg.n_embd * cfg.n_embd + 2 * cfg.n_embd * cfg.n_inner
    dense = cfg.n_layer * block + vocab_size * cfg.n_embd
    return 6.0 * dense + 12.0 * cfg.n_layer * seq_len * cfg.n_embd


def transfer_weights(
    src_state: dict[str, torch.Tensor], dst: GPT, layers_transferred: int | None
) -> list[str]:
    """Copy the embeddings (tokens + positions) and the first k blocks (None = all) into dst.

    Figure 2 left (PAPER.md 3): the remaining blocks keep their random init. With every block
    transferred the final LayerNorm (gpt2 arch) is copied too. Returns the copied keys.
    """
    n_layer = len(dst.h)
    k = n_layer if layers_transferred is None else layers_transferred
    if not 0 <= k <= n_layer:
        raise ValueError(f"layers_transferred={k} outside 0..{n_layer}")
    wanted = {"tokens_embed.weight", "positions_embed.weight"}
    if k == n_layer:
        wanted |= {name for name in dst.state_dict() if name.startswith("ln_f.")}
    dst_state = dst.state_dict()
    wanted |= {name for name in dst_state if name.startswith("h.") and int(name.split(".")[1]) < k}
    copied = []
    with torch.no_grad():
        for name in sorted(wanted):
            if name not in src_state:
                raise KeyError(f"pre-trained state has no {name!r}")
            src, tgt = src_state[name], dst_state[name]
            if src.shape != tgt.shape:
                shapes = f"{tuple(src.shape)} != {tuple(tgt.shape)}"
                raise ValueError(f"{name}: pre-trained shape {shapes}")
            tgt.copy_(src)
            copied.append(name)
    return copied
