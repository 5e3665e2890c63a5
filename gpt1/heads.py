"""The one task head (spec §2): a linear layer on the final state at `_classify_`.

classify / entail: logits = W h;  similarity: logits = W (h_AB + h_BA) (both orders summed);
choice: one scalar W h_k per answer, softmax over the answers, with the classifier-dropout
mask shared across the answers of one example (spec §5). Works on any body with
forward(idx) -> (B, T, C) hidden states and lm_logits(h) (GPT or the LSTM baseline).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from gpt1.tasks.registry import TaskSpec


def hidden_width(body: nn.Module) -> int:
    """C of body(idx) -> (B, T, C), found by running one token (works for any body)."""
    was_training = body.training
    body.eval()
    with torch.no_grad():
        device = next(body.parameters()).device
        width = int(body(torch.zeros(1, 1, dtype=torch.long, device=device)).shape[-1])
    body.train(was_training)
    return width


class TaskHead(nn.Module):
    """Classifier on the `_classify_` states h: (B, K, C), K sequences per example."""

    def __init__(self, spec: TaskSpec, n_embd: int, pdrop: float, init_std: float) -> None:
        super().__init__()
        self.fmt = spec.fmt
        self.regression = spec.regression
        self.pdrop = pdrop
        self.linear = nn.Linear(n_embd, spec.n_outputs)
        nn.init.normal_(self.linear.weight, 0.0, init_std)  # spec §1: N(0, 0.02)
        nn.init.zeros_(self.linear.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(B, K, C) -> (B, n_labels) class logits, (B, K) choice logits or (B,) scores."""
        if self.fmt == "similarity":
            h = h.sum(dim=1, keepdim=True)  # spec §2: both orders added element-wise (B, 1, C)
        if self.training and self.pdrop > 0:
            # One mask per example, broadcast over its K sequences (spec §5).
            keep = torch.ones_like(h[:, :1, :])  # (B, 1, C)
            h = h * F.dropout(keep, self.pdrop, training=True)
        out = self.linear(h)  # (B, K, n_outputs)
        if self.fmt == "choice":
            return out.squeeze(-1)  # (B, K): one scalar per answer
        out = out[:, 0, :]  # (B, n_outputs)
        return out.squeeze(-1) if self.regression else out


class TaskModel(nn.Module):
    """Pre-trained (or fresh) body + TaskHead. forward(idx (B, K, T), lengths (B, K))."""

    def __init__(self, body: nn.Module, spec: TaskSpec, pdrop: float, init_std: float) -> None:
        super().__init__()
        self.body = body
        self.head = TaskHead(spec, hidden_width(body), pdrop, init_std)

    def forward(self, idx: torch.Tensor, lengths: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (head output, hidden states (B*K, T, C)) for the auxiliary LM loss."""
        B, K, T = idx.shape
        h = self.body(idx.reshape(B * K, T))  # (B*K, T, C)
        last = (lengths.reshape(B * K) - 1).clamp(min=0)  # position of `_classify_`
        h_clf = h[torch.arange(B * K, device=h.device), last]  # (B*K, C)
        return self.head(h_clf.reshape(B, K, -1)), h

    def lm_logits(self, h: torch.Tensor) -> torch.Tensor:
        """(..., C) -> (..., V) through the body's (tied) LM output layer."""
        lm = cast(Callable[[torch.Tensor], torch.Tensor], self.body.lm_logits)
        return lm(h)

    def lm_losses(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(N, C) hidden states, (N,) next tokens -> (N,) fp32 cross-entropies (fused head)."""
        losses = cast(Callable[[torch.Tensor, torch.Tensor], torch.Tensor], self.body.lm_losses)
        return losses(h, targets)
