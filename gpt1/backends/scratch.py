"""Scratch memory and mask seeds shared by the fused ops (gpt1/backends/ops.py).

Large intermediates of the eager fused ops live in a `ScratchPool` per module (`pool` is its
index in `POOLS`, -1 = fresh tensors, as under compile), lent to one pending autograd node at
a time. Dropout masks are regenerated in backward from an int64 seed drawn from torch's
generator (`new_seed`), so no mask is kept.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
from torch import Tensor

SEED_BITS = 0xFFFFFFFFFFFFFFFF


class ScratchPool:
    """A module's large intermediates (by slot name) kept across training steps.

    A fresh multi-MB tensor per step is fresh pages, and faulting them in costs as much as the
    work written into them: the output-layer GEMM ran 1.7x slower into a fresh 67 MB logits
    tensor than into warm memory, and the page faults of fresh activations were ~15% of a bf16
    training step (bench config). The buffers are lent to one pending autograd node at a time:
    its forward `lend`s them, its `setup_context` `hold`s them (by a weak reference to the
    node), its backward reuses and `release`s them; any other node gets fresh tensors meanwhile
    (or until the holder is gone). A node that used pooled buffers can be backpropagated once.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype, torch.device], Tensor] = {}
        self._holder: Any = None  # weakref to the autograd ctx that holds the buffers
        self._pending = False  # lent by a forward whose node is not set up yet

    def lend(self) -> bool:
        """True (and the buffers are this forward's) when no live node holds them."""
        holder = self._holder() if self._holder is not None else None
        if holder is not None or self._pending:
            return False
        self._pending = True
        return True

    def hold(self, ctx: Any) -> None:
        self._pending, self._holder = False, weakref.ref(ctx)

    def holds(self, ctx: Any) -> bool:
        return self._holder is not None and self._holder() is ctx

    def release(self) -> None:
        self._holder, self._pending = None, False

    def take(self, key: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
             ) -> Tensor:
        numel = math.prod(shape)
        slot = (key, dtype, torch.device(device))  # fp32 and bf16 steps keep their own
        buf = self._buffers.get(slot)
        if buf is None or buf.numel() < numel:
            buf = self._buffers[slot] = torch.empty(numel, dtype=dtype, device=device)
        return buf[:numel].view(shape)


POOLS: list[ScratchPool] = []


def new_pool() -> int:
    """Index of a fresh ScratchPool in POOLS (a module keeps the index, the ops take it)."""
    POOLS.append(ScratchPool())
    return len(POOLS) - 1


def buffer(pool: int, key: str, like: Tensor, shape: tuple[int, ...]) -> Tensor:
    if pool < 0:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    return POOLS[pool].take(key, shape, like.dtype, like.device)


def lend(pool: int, *inputs: Tensor) -> int:
    """`pool` when this forward may use it, else -1: it builds an autograd node (whose
    setup_context holds the pool), runs eagerly (compiled graphs manage their own memory), and
    no pending node holds the pool."""
    if (pool < 0 or torch.compiler.is_compiling() or not torch.is_grad_enabled()
            or not any(t.requires_grad for t in inputs)):
        return -1
    return pool if POOLS[pool].lend() else -1


def hold(ctx: Any, pool: int) -> None:
    ctx.pool = pool
    if pool >= 0:
        POOLS[pool].hold(ctx)


def backward_once(ctx: Any, what: str) -> None:
    """Nodes that keep activations in a ScratchPool can be backpropagated once: after their
    backward released the pool, a later forward may have reused the buffers."""
    if getattr(ctx, "backpropagated", False):
        raise RuntimeError(f"{what}: backward through the same graph twice")
    ctx.backpropagated = True


def no_zero_grads(ctx: Any) -> None:
    """Outputs kept only for backward (probabilities, activations, statistics) get no gradient:
    pass None for them, not a zero-filled tensor of their size (the (N, V) softmax alone is
    67 MB per step at the bench config)."""
    ctx.set_materialize_grads(False)


def release(ctx: Any) -> None:
    if ctx.pool >= 0:
        POOLS[ctx.pool].release()


def mask_seed(seed: Tensor) -> int:
    return int(seed) & SEED_BITS


def new_seed() -> Tensor:
    """An int64 mask seed drawn from torch's CPU generator (so manual_seed governs it)."""
    return torch.randint(-(2**63), 2**63 - 1, (), dtype=torch.int64)
