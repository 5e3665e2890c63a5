"""GPT-1: a decoder-only Transformer language model in plain torch (spec §1 and 5).

Read top to bottom: the tied token embedding, masked multi-head self-attention, the
position-wise MLP, the post-LN block, and the model. `model.arch: gpt2` switches to pre-LN
blocks plus a final LayerNorm (spec §4). Parameter names follow transformers'
OpenAIGPTModel so export is a rename-free transpose (gpt1/export.py). This file is only the
math: faster implementations of the same modules (the fused CPU kernels) are installed onto a
built model by gpt1/backends (`model.backend`), which this file does not know about.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:  # annotations only: the model imports no schema (benchmarks/gpu_check.py)
    from gpt1.config import ModelCfg


class TiedEmbedding(nn.Module):
    """Token embedding We shared by the input lookup and the output layer (spec §1).

    `embd_dropout = "matrix"` drops entries of We itself (the original TF release, spec §5), so
    the tied output layer sees the same dropped matrix as the lookup in that forward pass;
    `"activations"` leaves We alone (the caller drops the summed embeddings). `padded_rows`
    (>= vocab_size) pads We for aligned output-layer GEMMs: the rows past vocab_size are never
    looked up, and their logits are cut before softmax and loss (`logits`), so they get no
    gradient and the real vocabulary's logits are those of the unpadded model.
    """

    def __init__(self, vocab_size: int, n_embd: int, pdrop: float, mode: str,
                 padded_rows: int | None = None) -> None:
        super().__init__()
        self.n_real = vocab_size
        self.weight = nn.Parameter(torch.empty(max(padded_rows or 0, vocab_size), n_embd))
        self.mode = mode
        self.drop = nn.Dropout(pdrop)
        # We as this forward pass's output layer uses it, when not the parameter itself
        self.pass_weight: torch.Tensor | None = None

    def output_weight(self) -> torch.Tensor:
        """We as the output layer uses it (matrix mode: the matrix dropped for this pass)."""
        return self.pass_weight if self.pass_weight is not None else self.weight

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, C) rows of We (U We in spec §1)."""
        self.pass_weight = None
        if self.mode == "matrix" and self.training:
            self.pass_weight = self.drop(self.weight)  # spec §5: one mask on We per pass
        return F.embedding(idx, self.output_weight())

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(B, T, C) hidden states -> (B, T, V) logits h We^T (spec §1: softmax(h We^T)); the
        GEMM runs over the padded rows, the padded logits are cut (a view, no copy)."""
        out = F.linear(h, self.output_weight())
        return out if out.size(-1) == self.n_real else out[..., : self.n_real]

    def reset_parameters(self, std: float) -> None:
        """Real rows N(0, std) (the random draws of the unpadded matrix), padded rows 0."""
        with torch.no_grad():
            nn.init.normal_(self.weight[: self.n_real], 0.0, std)
            self.weight[self.n_real :].zero_()

    def row_losses(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(..., C) hidden states, (...) next tokens -> (N,) fp32 cross-entropies of
        softmax(h We^T), N = targets.numel() (spec §1, L1)."""
        logits = self.logits(h.reshape(-1, h.size(-1))).float()  # (N, V)
        return F.cross_entropy(logits, targets.reshape(-1), reduction="none")

    def mean_loss(self, h: torch.Tensor, targets: torch.Tensor, chunk_tokens: int
                  ) -> torch.Tensor:
        """row_losses(h, targets).mean(), `chunk_tokens` positions at a time: the (N, V)
        logits are never held whole (LinearCrossEntropy; pretrain.loss_chunk_tokens)."""
        h2, t = h.reshape(-1, h.size(-1)), targets.reshape(-1)  # (N, C), (N,)
        w = self.output_weight()
        if torch.is_grad_enabled() and (h2.requires_grad or w.requires_grad):
            loss: torch.Tensor = LinearCrossEntropy.apply(h2, w, t, self.n_real, chunk_tokens)
            return loss
        return linear_cross_entropy(h2, w, t, self.n_real, chunk_tokens, grads=False)[0]


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         n_real: int, chunk_tokens: int, grads: bool
                         ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(mean loss, dL/dh, dL/dW) of the mean cross-entropy of softmax(h W^T) over the first
    n_real of W's rows, `chunk_tokens` rows of h at a time; h (N, C), W (V, C), targets (N,).

    Each chunk's fp32 logits (chunk x V) are made, reduced to the loss and, with `grads`, turned
    into the chunk's softmax - one-hot in place, which gives dL/dh and adds to dL/dW at once,
    so no (N, V) tensor ever exists (forward or backward). The GEMMs run as F.linear would:
    under autocast in its dtype (bf16), with fp32 logits, as row_losses does. The padded rows
    of W (past n_real) get logit -inf: probability 0, so no gradient, as row_losses cuts them.
    """
    N = h.size(0)
    total = torch.zeros((), dtype=torch.float32, device=h.device)
    grad_h = torch.empty_like(h) if grads else None
    grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=h.device) if grads else None
    for start in range(0, N, chunk_tokens):
        hc, tc = h[start : start + chunk_tokens], targets[start : start + chunk_tokens]
        z = F.linear(hc, weight).float()  # (n, V) fp32 logits of this chunk only
        if n_real < z.size(1):
            z[:, n_real:] = float("-inf")  # padded rows: outside the softmax
        lse = torch.logsumexp(z, dim=1)  # (n,)
        total += (lse - z.gather(1, tc[:, None]).squeeze(1)).sum()
        if grad_h is not None and grad_w is not None:
            p = z.sub_(lse[:, None]).exp_()  # softmax, in place: (n, V)
            p.scatter_add_(1, tc[:, None], torch.full_like(lse[:, None], -1.0)).div_(N)
            grad_h[start : start + chunk_tokens] = p.matmul(weight).to(h.dtype)  # (n, C)
            grad_w += p.t().matmul(hc).float()  # (V, C)
    return total / N, grad_h, grad_w


class LinearCrossEntropy(torch.autograd.Function):
    """mean cross-entropy of softmax(h W^T) whose forward also computes the gradients
    (linear_cross_entropy) and whose backward scales them by the incoming gradient: the output
    layer and the loss fused, chunk by chunk, with no recomputation (the loss is a mean, so
    its gradient is a scalar times what the forward made)."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                n_real: int, chunk_tokens: int) -> torch.Tensor:
        loss, grad_h, grad_w = linear_cross_entropy(h, weight, targets, n_real, chunk_tokens,
                                                    grads=True)
        ctx.save_for_backward(grad_h, grad_w)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_h, grad_w = ctx.saved_tensors  # dL/dW in fp32, the weights' dtype (autocast)
        return grad_h * grad_out.to(grad_h.dtype), grad_w * grad_out, None, None, None


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm whose output, with `keep_low_precision` (pretrain.bf16_norms) and under
    autocast, stays in the autocast dtype (bf16) instead of fp32 (autocast runs layer_norm in
    fp32). The statistics are still accumulated in fp32 (torch's kernels do for bf16 input).
    In a post-LN block the output is the residual stream, so the next residual sum and its
    dropout run in bf16 too, at half the memory traffic; the rounding added is the one the
    next linear layer's bf16 input makes anyway, plus that of the residual sum before the next
    LayerNorm. Off, or without autocast, it is nn.LayerNorm."""

    keep_low_precision = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kind = x.device.type
        if not (self.keep_low_precision and torch.is_autocast_enabled(kind)):
            return super().forward(x)
        low = torch.get_autocast_dtype(kind)
        with torch.autocast(kind, enabled=False):
            w, b = self.weight.to(x.dtype), self.bias.to(x.dtype)
            return F.layer_norm(x, self.normalized_shape, w, b, self.eps).to(low)


def keep_norms_low_precision(model: nn.Module, on: bool) -> int:
    """Set every LayerNorm of `model` to keep its output in the autocast dtype (or not);
    returns how many were set."""
    norms = [m for m in model.modules() if isinstance(m, LayerNorm)]
    for m in norms:
        m.keep_low_precision = on
    return len(norms)


class Attention(nn.Module):
    """Masked multi-head self-attention, scaled by 1/sqrt(d_head), with dropout on the
    attention probabilities and on the output (spec §1 and 5)."""

    def __init__(self, cfg: ModelCfg) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_pdrop = cfg.attn_pdrop
        self.resid_drop = nn.Dropout(cfg.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # (B, nh, T, hs)
        y = self.attend(q, k, v)  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C): heads side by side
        return self.resid_drop(self.c_proj(y))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(hs) + causal mask), dropped, times v; (B, nh, T, hs) each."""
        p = self.attn_pdrop if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)


class MLP(nn.Module):
    """Position-wise feed-forward network with tanh-approximated GELU (spec §5)."""

    def __init__(self, cfg: ModelCfg) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.n_inner)
        self.c_proj = nn.Linear(cfg.n_inner, cfg.n_embd)
        self.drop = nn.Dropout(cfg.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.c_fc(x)  # (B, T, 4C)
        return self.drop(self.c_proj(F.gelu(u, approximate="tanh")))  # (B, T, C)


class Block(nn.Module):
    """One decoder block. gpt1: post-LN (spec §5), unlike nanoGPT's pre-LN; gpt2: pre-LN."""

    def __init__(self, cfg: ModelCfg) -> None:
        super().__init__()
        self.pre_ln = cfg.arch == "gpt2"
        self.attn = Attention(cfg)
        self.ln_1 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:  # spec §4 (GPT-2): x + f(LN(x))
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))
        n = self.ln_1(x + self.attn(x))  # spec §5: n = LN(x + attn(x))
        return self.ln_2(n + self.mlp(n))  # h = LN(n + mlp(n))


class GPT(nn.Module):
    """GPT-1 language model. `vocab_size` includes the 3 special tokens appended after the BPE
    vocabulary (spec §5)."""

    def __init__(self, cfg: ModelCfg, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.n_embd = cfg.n_embd
        self.tokens_embed = TiedEmbedding(vocab_size, cfg.n_embd, cfg.embd_pdrop, cfg.embd_dropout,
                                          padded_vocab(vocab_size, cfg.vocab_pad_multiple))
        # spec §1: learned position embeddings (h0 = U We + Wp), not sinusoidal
        self.positions_embed = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.drop = nn.Dropout(cfg.embd_pdrop)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        # spec §4: GPT-2 adds a final LayerNorm after the last (pre-LN) block
        self.ln_f: LayerNorm | None = None
        if cfg.arch == "gpt2":
            self.ln_f = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """spec §1: every weight N(0, initializer_range), biases 0, LayerNorm gains 1."""
        std = self.cfg.initializer_range
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, std)
                nn.init.zeros_(module.bias)
            elif isinstance(module, TiedEmbedding):
                module.reset_parameters(std)
            elif isinstance(module, nn.Embedding):
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


class TiedLM(Protocol):
    """A language model with a tied output layer: GPT, or the LSTM baseline (gpt1/lstm.py)."""

    tokens_embed: TiedEmbedding

    def __call__(self, idx: torch.Tensor) -> torch.Tensor: ...

    def lm_losses(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor: ...


def next_token_loss(lm: TiedLM, windows: torch.Tensor, chunk_tokens: int | None
                    ) -> torch.Tensor:
    """Mean next-token loss of (B, T + 1) windows through a language model with a tied output
    layer (GPT, or the LSTM baseline): its per-token losses' mean, or with `chunk_tokens`
    (pretrain.loss_chunk_tokens) the output layer and loss fused, that many tokens at a time."""
    h = lm(windows[:, :-1])  # (B, T, C)
    if chunk_tokens is None:
        return lm.lm_losses(h, windows[:, 1:]).mean()
    return lm.tokens_embed.mean_loss(h, windows[:, 1:], chunk_tokens)


def padded_vocab(vocab_size: int, multiple: int) -> int:
    """vocab_size rounded up to a multiple of `multiple` (model.vocab_pad_multiple)."""
    return -(-vocab_size // multiple) * multiple


def count_parameters(model: nn.Module) -> int:
    """Unique parameters (the tied output layer is counted once, its padded rows not at all)."""
    padding = sum((m.weight.shape[0] - m.n_real) * m.weight.shape[1]
                  for m in model.modules() if isinstance(m, TiedEmbedding))
    return sum(p.numel() for p in model.parameters()) - padding


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
            if name == "tokens_embed.weight":  # the real rows; padding (either side) stays 0
                n_real = dst.tokens_embed.n_real
                src, tgt = src[:n_real], tgt[:n_real]
            if src.shape != tgt.shape:
                shapes = f"{tuple(src.shape)} != {tuple(tgt.shape)}"
                raise ValueError(f"{name}: pre-trained shape {shapes}")
            tgt.copy_(src)
            copied.append(name)
    return copied
