"""The fine-tuning loss (spec §2, §5): mean(classifier loss) + lm_coef * mean(auxiliary LM loss).

Built for a GPU step with no host sync: the LM loss covers every position of the padded batch
and masks the padding out by weight (no `nonzero`, whose size the host would have to read), and
its cross-entropy runs over chunks of `LM_CHUNK_TOKENS` positions, each chunk's logits
recomputed in backward (activation checkpointing), so the fp32 logits over the whole
vocabulary are never held for the whole batch: a RACE batch at the paper's shape (32 x 4 x 512
positions x 40,481 words) would need 10.6 GB for them alone, and as much again for their
gradient. Imports torch and the task head only (benchmarks/gpu_check.py runs it bare).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from gpt1.heads import TaskModel
from gpt1.tasks.registry import TaskSpec

LM_CHUNK_TOKENS = 4096
"""Positions per chunk of the LM loss: 4096 x 40,512 fp32 logits = 0.66 GB at a time. Fewer
positions than this (every CPU demo batch) run as one chunk, without recomputation."""


def chunked_lm_losses(model: TaskModel, h: torch.Tensor, targets: torch.Tensor,
                      chunk: int | None = None) -> torch.Tensor:
    """(N, C) hidden states, (N,) next tokens -> (N,) fp32 cross-entropies through the tied
    output layer, `chunk` (default LM_CHUNK_TOKENS) positions at a time; in training each
    chunk's logits are recomputed in backward instead of kept."""
    chunk = LM_CHUNK_TOKENS if chunk is None else chunk
    if h.size(0) <= chunk:
        return model.lm_losses(h, targets)
    parts = []
    for start in range(0, h.size(0), chunk):
        part_h, part_t = h[start : start + chunk], targets[start : start + chunk]
        if torch.is_grad_enabled():
            parts.append(checkpoint(model.lm_losses, part_h, part_t, use_reentrant=False))
        else:
            parts.append(model.lm_losses(part_h, part_t))
    return torch.cat(parts)


def lm_loss(model: TaskModel, h: torch.Tensor, idx: torch.Tensor, lengths: torch.Tensor
            ) -> torch.Tensor:
    """Next-token loss on real tokens only, averaged per sequence, then over sequences: every
    position is scored, padding weighs 0 (shapes fixed by the batch, no host sync)."""
    BK, T = h.shape[0], h.shape[1]
    flat_len = lengths.reshape(BK)
    pos = torch.arange(T - 1, device=h.device)
    mask = pos[None, :] < (flat_len[:, None] - 1)  # (BK, T-1): predict token t+1 from t
    targets = idx.reshape(BK, T)[:, 1:]
    tok = chunked_lm_losses(model, h[:, :-1].reshape(-1, h.size(-1)), targets.reshape(-1))
    per_seq = (tok.view(BK, T - 1) * mask).sum(1)
    n_tok = (flat_len - 1).clamp(min=1)
    return (per_seq / n_tok).mean()


def clf_loss(spec: TaskSpec, out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    if spec.regression:
        return F.mse_loss(out.float(), labels.float())
    return F.cross_entropy(out.float(), labels)  # choice: softmax over the K answers


TALLY_KEYS = ("examples", "correct", "clf_loss", "lm_loss")
"""What `make_loss_fn`'s tally sums over the training batches (device tensors, no host sync):
examples seen, correct head answers (not for a regression task), and the example-weighted
classifier and LM losses apart."""


def new_tally(device: torch.device | None = None) -> dict[str, torch.Tensor]:
    """An empty tally for `make_loss_fn` (zeros on `device`)."""
    return {k: torch.zeros((), dtype=torch.float64, device=device) for k in TALLY_KEYS}


def make_loss_fn(spec: TaskSpec, lm_coef: float, tally: dict[str, torch.Tensor] | None = None
                 ) -> Callable[[nn.Module, Any], torch.Tensor]:
    """loss_fn(model, (idx, lengths, labels)) for train_step (which adds autocast):
    mean(clf) + lm_coef * mean(lm) (spec §5; lm_coef = 0 disables the auxiliary LM loss).
    `tally` (new_tally), when given, accumulates each batch's examples, correct answers and
    the two losses apart, on the device (read it where the host reads anyway)."""

    def loss_fn(model: nn.Module, batch: Any) -> torch.Tensor:
        idx, lengths, labels = batch
        out, h = model(idx, lengths)
        clf = clf_loss(spec, out, labels)
        loss = clf
        lm = None
        if lm_coef > 0:
            lm = lm_loss(_task_model(model), h, idx, lengths)
            loss = loss + lm_coef * lm
        if tally is not None:
            with torch.no_grad():
                n = labels.shape[0]
                tally["examples"] += n
                tally["clf_loss"] += clf.detach().double() * n
                if lm is not None:
                    tally["lm_loss"] += lm.detach().double() * n
                if not spec.regression:
                    tally["correct"] += (out.detach().argmax(-1) == labels).sum()
        return loss

    return loss_fn


def read_tally(spec: TaskSpec, tally: dict[str, torch.Tensor], lm_coef: float
               ) -> dict[str, float | None]:
    """The tally as means (train_acc, train_clf_loss, train_lm_loss; None where not computed),
    then zeroed for the next epoch."""
    n = max(float(tally["examples"].item()), 1.0)
    out = {"train_acc": None if spec.regression else float(tally["correct"].item()) / n,
           "train_clf_loss": float(tally["clf_loss"].item()) / n,
           "train_lm_loss": float(tally["lm_loss"].item()) / n if lm_coef > 0 else None}
    for value in tally.values():
        value.zero_()
    return out


def _task_model(model: nn.Module) -> TaskModel:
    """The TaskModel itself (torch.compile in place keeps the module's type)."""
    if not isinstance(model, TaskModel):
        raise TypeError(f"the fine-tuning loss needs a TaskModel, got {type(model).__name__}")
    return model
