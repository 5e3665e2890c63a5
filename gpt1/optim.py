"""Adam with decoupled weight decay on rank > 1 tensors, and the learning-rate schedules.

spec §1 and 5: Adam (beta, eps from params), modified L2 (Loshchilov & Hutter) w = 0.01 on
all non-bias, non-gain weights; linear warm-up then cosine annealing to 0 (pre-training) or
linear decay to 0 (fine-tuning, `warmup_linear` of the original release).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups: tensors of rank > 1 decay; biases and LayerNorm gains (rank 1) do not."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() > 1 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(
    model: nn.Module,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
) -> torch.optim.AdamW:
    """AdamW (decoupled decay, p -= lr * wd * p, as the original `adam` with `vector_l2`).

    The fused kernel is used where torch has one (CPU and CUDA); it gives the same update as the
    per-tensor loop, several times faster on CPU.
    """
    return torch.optim.AdamW(
        param_groups(model, weight_decay), lr=lr, betas=betas, eps=eps, fused=True
    )


def lr_at(
    step: int,
    total_steps: int,
    warmup_steps: int,
    lr_max: float,
    schedule: Literal["cosine", "linear"],
) -> float:
    """Learning rate at `step` in [0, total_steps]: 0 at 0, lr_max at warmup_steps, 0 at the end.

    The training loops apply lr_at(t) to update t (0-based), as the original release does: its
    `adam` computes `schedule(t / t_total)` from the counter t before the same step's
    `t.assign(t + 1)` (only the bias correction uses t + 1). So the first update runs at lr 0
    when there is a warm-up, and the last one at the small lr of step total_steps - 1.
    """
    if not 0 <= step <= total_steps:
        raise ValueError(f"step {step} outside 0..{total_steps}")
    if step < warmup_steps:
        return lr_max * step / warmup_steps
    if total_steps == warmup_steps:
        return lr_max if step < total_steps else 0.0
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    if schedule == "cosine":
        return lr_max * 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "linear":
        return lr_max * (1.0 - progress)
    raise ValueError(f"unknown schedule {schedule!r}")
