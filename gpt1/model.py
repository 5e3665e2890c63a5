"""GPT-1 decoder-only Transformer in pure torch (spec §1 and 5).

Post-LN blocks, tanh-GELU, learned positions, output layer tied to the token embedding,
N(0, 0.02) init with zero biases. `model.arch: gpt2` switches to pre-LN blocks plus a final
LayerNorm (spec §4). Parameter names follow transformers' OpenAIGPTModel so export is a
rename-free transpose (gpt1/export.py).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gpt1 import cpu_kernels
from gpt1.config import ModelCfg


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run a matmul on `t` in: its autocast dtype, else t's own."""
    device = t.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else t.dtype


def _backward_once(ctx: Any, what: str) -> None:
    """Nodes that keep activations in a ScratchPool can be backpropagated once: after their
    backward released the pool, a later forward may have reused the buffers."""
    if getattr(ctx, "backpropagated", False):
        raise RuntimeError(f"{what}: backward through the same graph twice")
    ctx.backpropagated = True


class _HashDropout(torch.autograd.Function):
    """Dropout whose mask is a hash of (seed, element index): backward regenerates the mask
    from the seed instead of keeping it (gpt1/cpu_kernels.py)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: float) -> torch.Tensor:  # type: ignore[override]
        ctx.seed, ctx.p = cpu_kernels.new_seed(), p
        return cpu_kernels.dropout(x, ctx.seed, p)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return cpu_kernels.dropout(grad, ctx.seed, ctx.p), None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, drop probability p (quantised to 2^-32, scale from the quantised
    value so E[out] = x). The mask is a hash of a seed drawn from torch's default generator
    (manual_seed reproduces it) and the element index: one fused pass on CPU where F.dropout's
    per-element Bernoulli sampling was a quarter of a training step (profiled with
    benchmarks/train_throughput.py), and no stored mask.
    """
    if not training or p == 0.0:
        return x
    out: torch.Tensor = _HashDropout.apply(x, p)
    return out


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
    """Token embedding We shared by the input lookup and the output layer (spec §1).

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
        self._logits_pool = ScratchPool()

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, C); also fixes We for the next `logits` / `row_losses`."""
        weight = self.weight
        self._head_weight = None
        if self.mode == "matrix" and self.training:
            weight = self.drop(weight)  # spec §5: one mask on We per forward pass
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
        """(B, T, C) hidden states -> (B, T, V) logits: softmax(h We^T) (spec §1)."""
        weight = self._head_weight if self._head_weight is not None else self.weight
        return F.linear(h, weight)

    def row_losses(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(..., C) hidden states, (...) next tokens -> (N,) fp32 cross-entropies of
        softmax(h We^T), N = targets.numel().

        The output layer and the loss are one fused step (`head_cross_entropy`), run in the
        autocast dtype when autocast is on, like F.linear would be.
        """
        weight = self._head_weight if self._head_weight is not None else self.weight
        dtype = _compute_dtype(h)
        h = h.reshape(-1, h.size(-1)).to(dtype)
        return head_cross_entropy(h, weight.to(dtype), targets, self._logits_pool)


class Attention(nn.Module):
    """Masked multi-head self-attention, scaled by 1/sqrt(d_head) (spec §5)."""

    def __init__(self, cfg: ModelCfg) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_pdrop = cfg.attn_pdrop
        self.resid_drop = Dropout(cfg.resid_pdrop)
        self._pool = ScratchPool()

    def forward(self, x: torch.Tensor, drop: bool = True) -> torch.Tensor:
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
        y = self.c_proj(y)
        return self.resid_drop(y) if drop else y  # drop=False: the caller fuses the dropout

    def _attend_with_dropout(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """Causal softmax attention with dropout on the probabilities (spec §1).

        On CPU, SDPA with dropout_p > 0 falls back to an unfused path about 3.5x slower than
        this (attention forward + backward, bench config); the matmuls run in the autocast
        dtype, the masking, softmax and dropout are one fused pass each way.
        """
        B, nh, T, hs = q.shape
        dtype = _compute_dtype(q)
        y: torch.Tensor = _CausalAttention.apply(
            *(t.to(dtype).reshape(B * nh, T, hs) for t in (q, k, v)), self.attn_pdrop, self._pool
        )
        return y.view(B, nh, T, hs)


class _CausalAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(d) + causal mask) with dropout, times v, on (B*nh, T, hs) inputs.

    Saves q, k, v, the probabilities and the dropped probabilities (in the module's
    ScratchPool, with the scores / their gradient); the dropout mask is regenerated from its
    seed in backward (gpt1/cpu_kernels.py).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: float, pool: ScratchPool
    ) -> torch.Tensor:
        n, T, hs = q.shape
        alpha = 1.0 / math.sqrt(hs)
        seed = cpu_kernels.new_seed()
        scores = torch.bmm(q, k.transpose(1, 2), out=pool.take(ctx, "scratch", (n, T, T),
                                                               q.dtype, q.device))
        probs, dropped = cpu_kernels.causal_attention_probs(
            scores.view(n * T, T), alpha, seed, p,
            out=(pool.take(ctx, "probs", (n * T, T), q.dtype, q.device),
                 pool.take(ctx, "dropped", (n * T, T), q.dtype, q.device)),
        )
        probs, dropped = probs.view(n, T, T), dropped.view(n, T, T)
        ctx.save_for_backward(q, k, v, probs, dropped)
        ctx.alpha, ctx.seed, ctx.p, ctx.pool = alpha, seed, p, pool
        return torch.bmm(dropped, v)

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None, None]:
        _backward_once(ctx, "attention")
        q, k, v, probs, dropped = ctx.saved_tensors
        n, T, _ = q.shape
        grad_y = grad_y.to(v.dtype)
        grad_v = torch.bmm(dropped.transpose(1, 2), grad_y)
        grad_dropped = torch.bmm(grad_y, v.transpose(1, 2), out=ctx.pool.take(
            ctx, "scratch", (n, T, T), v.dtype, v.device))
        grad_scores = cpu_kernels.causal_attention_probs_backward(
            probs.view(n * T, T), grad_dropped.view(n * T, T), ctx.alpha, ctx.seed, ctx.p
        ).view(n, T, T)  # includes the 1/sqrt(d) scale
        grad_q = torch.bmm(grad_scores, k)
        grad_k = torch.bmm(grad_scores.transpose(1, 2), q)
        ctx.pool.release()
        return grad_q, grad_k, grad_v, None, None


class MLP(nn.Module):
    """Position-wise feed-forward network with tanh-approximated GELU (spec §5)."""

    def __init__(self, cfg: ModelCfg) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.n_inner)
        self.c_proj = nn.Linear(cfg.n_inner, cfg.n_embd)
        self.drop = Dropout(cfg.resid_pdrop)
        self._pool = ScratchPool()

    def forward(self, x: torch.Tensor, drop: bool = True) -> torch.Tensor:
        if not (torch.is_grad_enabled() and cpu_kernels.usable(x)):
            # no autograd through the kernel here: either no grad, or torch's F.gelu path
            y = self.c_proj(cpu_kernels.gelu(self.c_fc(x)))
        else:
            dtype = _compute_dtype(x)
            params = (self.c_fc.weight, self.c_fc.bias, self.c_proj.weight, self.c_proj.bias)
            y = _MLPCore.apply(
                x.reshape(-1, x.size(-1)).to(dtype), *(t.to(dtype) for t in params), self._pool
            ).view(x.shape)
        return self.drop(y) if drop else y  # drop=False: the caller fuses the dropout


class _MLPCore(torch.autograd.Function):
    """c_proj(gelu(c_fc(x))) on (N, C) rows, all in one dtype, with the two (N, 4C)
    intermediates and their gradient in the module's ScratchPool (a fresh 6 MB tensor each
    per layer and step was mostly page faults)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: torch.Tensor, w_fc: torch.Tensor, b_fc: torch.Tensor, w_proj: torch.Tensor,
        b_proj: torch.Tensor, pool: ScratchPool,
    ) -> torch.Tensor:
        shape = (x.size(0), w_fc.size(0))
        u = torch.addmm(b_fc, x, w_fc.t(), out=pool.take(ctx, "u", shape, x.dtype, x.device))
        a = cpu_kernels.gelu(u, out=pool.take(ctx, "a", shape, x.dtype, x.device))
        ctx.save_for_backward(x, w_fc, w_proj, u, a)
        ctx.pool = pool
        return torch.addmm(b_proj, a, w_proj.t())

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        _backward_once(ctx, "MLP")
        x, w_fc, w_proj, u, a = ctx.saved_tensors
        grad_y = grad_y.to(a.dtype)
        grad_w_proj = grad_y.t() @ a
        grad_b_proj = grad_y.sum(0)  # fp32 accumulation inside (a dtype= would upcast a copy)
        grad_a = torch.mm(grad_y, w_proj, out=ctx.pool.take(ctx, "grad", u.shape, u.dtype,
                                                               u.device))
        grad_u = cpu_kernels.gelu_backward(u, grad_a, out=grad_a)  # in place
        grad_w_fc = grad_u.t() @ x
        grad_b_fc = grad_u.sum(0)
        grad_x = grad_u @ w_fc
        ctx.pool.release()
        return grad_x, grad_w_fc, grad_b_fc, grad_w_proj, grad_b_proj, None


class Block(nn.Module):
    """One decoder block. gpt1: post-LN (spec §5), unlike nanoGPT's pre-LN; gpt2: pre-LN."""

    def __init__(self, cfg: ModelCfg) -> None:
        super().__init__()
        self.pre_ln = cfg.arch == "gpt2"
        self.attn = Attention(cfg)
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self._pools = (ScratchPool(), ScratchPool())  # one per fused add + LayerNorm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:  # spec §4 (GPT-2): x + f(LN(x))
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))
        if x.dtype == torch.float32 and cpu_kernels.usable(x):  # one fused pass per junction
            n = add_dropout_layer_norm(x, self.attn(x, drop=False), self.ln_1,
                                       self.attn.resid_drop, self._pools[0])
            return add_dropout_layer_norm(n, self.mlp(n, drop=False), self.ln_2, self.mlp.drop,
                                          self._pools[1])
        n = self.ln_1(x + self.attn(x))  # spec §5: n = LN(x + attn(x))
        return self.ln_2(n + self.mlp(n))  # h = LN(n + mlp(n))


def add_dropout_layer_norm(
    x: torch.Tensor, f: torch.Tensor, ln: nn.LayerNorm, drop: Dropout, pool: ScratchPool
) -> torch.Tensor:
    """ln(x + drop(f)) for (B, T, C) fp32 x, as one fused pass each way (cpu_kernels); the
    saved pre-norm sum lives in `pool`."""
    p = drop.p if drop.training else 0.0
    C = x.size(-1)
    h: torch.Tensor = _AddDropoutLayerNorm.apply(
        x.reshape(-1, C), f.reshape(-1, C), ln.weight, ln.bias, ln.eps, p, pool
    )
    return h.view(x.shape)


class _AddDropoutLayerNorm(torch.autograd.Function):
    """LayerNorm(x + dropout(f)) over (N, C) rows; saves the sum, row mean and 1/std, and
    regenerates the dropout mask from its seed in backward (gpt1/cpu_kernels.py)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: torch.Tensor, f: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
        eps: float, p: float, pool: ScratchPool,
    ) -> torch.Tensor:
        seed = cpu_kernels.new_seed() if p > 0 else 0
        grad = any(ctx.needs_input_grad[:4])
        h, s, mean, rstd = cpu_kernels.add_dropout_layer_norm(
            x, f, gamma, beta, eps, seed, p, save_sum=grad,
            sum_out=pool.take(ctx, "sum", tuple(x.shape), x.dtype, x.device) if grad else None,
        )
        ctx.save_for_backward(s, gamma, mean, rstd)
        ctx.seed, ctx.p, ctx.f_dtype, ctx.pool = seed, p, f.dtype, pool
        return h

    @staticmethod
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        _backward_once(ctx, "LayerNorm")
        s, gamma, mean, rstd = ctx.saved_tensors
        dx, df, dgamma, dbeta = cpu_kernels.add_dropout_layer_norm_backward(
            grad_h, s, gamma, mean, rstd, ctx.seed, ctx.p, ctx.f_dtype
        )
        ctx.pool.release()
        return dx, df, dgamma, dbeta, None, None, None


class GPT(nn.Module):
    """GPT-1 language model. `vocab_size` includes the 3 special tokens appended after the BPE
    vocabulary (spec §5)."""

    def __init__(self, cfg: ModelCfg, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.n_embd = cfg.n_embd
        self.tokens_embed = TiedEmbedding(vocab_size, cfg.n_embd, cfg.embd_pdrop, cfg.embd_dropout)
        # spec §1: learned position embeddings (h0 = U We + Wp), not sinusoidal
        self.positions_embed = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.drop = Dropout(cfg.embd_pdrop)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        # spec §4: GPT-2 adds a final LayerNorm after the last (pre-LN) block
        self.ln_f: nn.LayerNorm | None = None
        if cfg.arch == "gpt2":
            self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """spec §1: every weight N(0, initializer_range), biases 0, LayerNorm gains 1."""
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
            # spec §5: the original keeps positions in the same (dropped) matrix as We
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


class ScratchPool:
    """A module's large intermediates (by slot name) kept across training steps.

    A fresh multi-MB tensor per step is fresh pages, and faulting them in costs as much as the
    work written into them: the output-layer GEMM ran 1.7x slower into a fresh 67 MB logits
    tensor than into warm memory, and the page faults of fresh activations were ~15% of a bf16
    training step (bench config). The buffers are lent to one pending autograd node at a time:
    that node's forward and backward reuse them, any other node gets fresh tensors until the
    holder's backward `release`s them (or the holder is gone). A node that used pooled buffers
    can be backpropagated once.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}
        self._holder: Any = None  # weakref to the autograd ctx that holds the buffers

    def __deepcopy__(self, memo: dict[int, Any]) -> ScratchPool:
        return ScratchPool()  # a copied model gets its own (empty) buffers

    def take(
        self, ctx: Any, key: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        holder = self._holder() if self._holder is not None else None
        if holder is not None and holder is not ctx:
            return torch.empty(shape, dtype=dtype, device=device)
        numel = math.prod(shape)
        slot = (key, dtype, torch.device(device))  # fp32 and bf16 steps keep their own
        buf = self._buffers.get(slot)
        if buf is None or buf.numel() < numel:
            buf = self._buffers[slot] = torch.empty(numel, dtype=dtype, device=device)
        self._holder = weakref.ref(ctx)
        return buf[:numel].view(shape)

    def release(self) -> None:
        self._holder = None


class _HeadCrossEntropy(torch.autograd.Function):
    """Per-row cross-entropy of softmax(h W^T): output-layer GEMM and loss fused.

    F.linear + F.cross_entropy under autocast upcast the whole (N, V) logits to fp32 and
    materialise the log-softmax and its gradient, all memory traffic. Here the logits are
    written into a reused buffer and each row is overwritten in place by its softmax, computed
    in fp32 (`cpu_kernels.softmax_rows_`: one fused pass on CPU); backward scales that softmax
    in place into dL/dlogits and runs the two GEMMs. The target entries of the gradient,
    p_t - 1, come from fp32 p_t saved separately, so a bf16 softmax near 1 loses nothing there.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, rows: int,
        pool: ScratchPool | None,
    ) -> torch.Tensor:
        n, vocab = h.size(0), weight.size(0)
        training = any(ctx.needs_input_grad[:2])  # (apply() runs forward with grad mode off)
        logits = (
            pool.take(ctx, "logits", (n, vocab), h.dtype, h.device)
            if pool is not None and training
            else torch.empty(n, vocab, dtype=h.dtype, device=h.device)
        )
        torch.mm(h, weight.t(), out=logits)
        target_logit = logits.gather(1, targets.unsqueeze(1)).squeeze(1).float()
        lse = cpu_kernels.softmax_rows_(logits)  # logits -> softmax rows, in place
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
        rows = torch.arange(grad.size(0), device=grad.device)
        alpha = 1.0
        if bool((g == g[0]).all()):  # a mean loss: one scalar, applied by the GEMMs (alpha)
            alpha = float(g[0])
            grad[rows, targets] = (p_target - 1.0).to(grad.dtype)  # d/dz_t = p_t - 1
        else:
            for start in range(0, grad.size(0), ctx.rows):
                chunk = grad[start : start + ctx.rows]
                chunk.copy_(chunk.float().mul_(g[start : start + ctx.rows, None]))
            grad[rows, targets] = ((p_target - 1.0) * g).to(grad.dtype)
        zero = grad.new_zeros(())  # beta = 0: only alpha * (A @ B)
        grad_h = (
            torch.addmm(zero, grad, weight, beta=0, alpha=alpha)  # (N, C)
            if ctx.needs_input_grad[0] else None
        )
        grad_w = (
            torch.addmm(zero, grad.t(), h, beta=0, alpha=alpha)  # (V, C)
            if ctx.needs_input_grad[1] else None
        )
        if ctx.pool is not None:
            ctx.pool.release()
        return grad_h, grad_w, None, None, None


def head_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, pool: ScratchPool | None = None
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

    Figure 2 left (spec §3): the remaining blocks keep their random init. With every block
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
