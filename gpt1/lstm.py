"""LSTM language model for the Table 5 / Figure 2 ablation (spec §3: one layer, 2048 units).

Same contract as gpt1.model.GPT (`forward(idx) -> (B, T, C)`, `lm_logits(h) -> (B, T, V)`) and
the same tied embedding / output layer code, so pre-training, fine-tuning and the zero-shot
study treat both models alike. When the LSTM is wider than the embedding, a linear projection
maps its states back to n_embd before the tied output layer.

Under bf16 autocast on a CPU whose oneDNN has no bf16 LSTM (x86-64 without AVX-512, e.g. an
AVX2-only chip, or oneDNN capped by ONEDNN_MAX_CPU_ISA), the LSTM layer alone runs in fp32
(said once in the log); every other layer keeps bf16. `cpu_bf16_lstm` probes this once.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import torch
from torch import nn

from gpt1.model import TiedEmbedding

if TYPE_CHECKING:  # annotations only: no schema import (benchmarks/gpu_check.py times the LSTM)
    from gpt1.config import LstmCfg

log = logging.getLogger(__name__)


@functools.cache
def cpu_bf16_lstm() -> bool:
    """True when this CPU's oneDNN runs an LSTM under bf16 autocast (a tiny probe, once)."""
    probe = nn.LSTM(2, 2, batch_first=True)
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            probe(torch.zeros(1, 1, 2))
    except RuntimeError as err:
        log.warning("this CPU's oneDNN has no bf16 LSTM (%s); under bf16 the LSTM layer runs "
                    "in fp32, every other layer in bf16", str(err).split(".")[0])
        return False
    return True


class LSTMLM(nn.Module):
    """Embedding -> dropout -> LSTM -> projection to n_embd -> dropout -> tied output layer."""

    def __init__(self, cfg: LstmCfg, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.n_embd = cfg.n_embd
        self.tokens_embed = TiedEmbedding(vocab_size, cfg.n_embd, cfg.dropout, "activations")
        self.drop = nn.Dropout(cfg.dropout)
        self.rnn = nn.LSTM(cfg.n_embd, cfg.hidden_size, num_layers=cfg.n_layer, batch_first=True)
        self.proj: nn.Linear | None = None
        if cfg.hidden_size != cfg.n_embd:
            self.proj = nn.Linear(cfg.hidden_size, cfg.n_embd)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Embedding and projection N(0, initializer_range) as the Transformer; the LSTM keeps
        torch's uniform init with the forget-gate bias at 1 (common practice; paper silent)."""
        std = self.cfg.initializer_range
        nn.init.normal_(self.tokens_embed.weight, 0.0, std)
        if self.proj is not None:
            nn.init.normal_(self.proj.weight, 0.0, std)
            nn.init.zeros_(self.proj.bias)
        H = self.cfg.hidden_size
        for name, p in self.rnn.named_parameters():
            if name.startswith("bias_ih"):
                with torch.no_grad():
                    p.zero_()
                    p[H : 2 * H] = 1.0  # gate order i, f, g, o
            elif name.startswith("bias_hh"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, n_embd) hidden states."""
        x = self.drop(self.tokens_embed.embed(idx))  # (B, T, C)
        if (x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
                and torch.get_autocast_dtype("cpu") == torch.bfloat16 and not cpu_bf16_lstm()):
            with torch.autocast("cpu", enabled=False):
                h, _ = self.rnn(x.float())  # (B, T, H) fp32: see the module docstring
        else:
            h, _ = self.rnn(x)  # (B, T, H)
        if self.proj is not None:
            h = self.proj(h)  # (B, T, C)
        return self.drop(h)

    def lm_logits(self, h: torch.Tensor) -> torch.Tensor:
        """(B, T, C) -> (B, T, V) through the tied output layer."""
        return self.tokens_embed.logits(h)

    def lm_losses(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(..., C) hidden states, (...) next tokens -> (N,) fp32 per-token cross-entropies."""
        return self.tokens_embed.row_losses(h, targets)


def lstm_flops_per_token(cfg: LstmCfg, vocab_size: int) -> float:
    """Training FLOPs per token (3 x forward): LSTM gates, projection and tied output layer."""
    H = cfg.hidden_size
    gates = 4 * H * (cfg.n_embd + H) + (cfg.n_layer - 1) * 4 * H * (2 * H)
    proj = H * cfg.n_embd if H != cfg.n_embd else 0
    return 6.0 * (gates + proj + vocab_size * cfg.n_embd)
