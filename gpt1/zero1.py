"""ZeRO-1: the AdamW state sharded by parameter over the DDP ranks (pretrain.zero1).

Each parameter has one owner rank (greedy by size, the same on every rank for a given world
size); a rank keeps the Adam moments and step count of the parameters it owns only, so the
optimizer state per rank is about 1/N of the whole (`state_bytes_per_rank`). The gradients are
still all-reduced in full by DDP, clipped over all of them as before, then each rank updates its
own parameters and broadcasts them to the others.

Why the project's own class rather than torch's `ZeroRedundancyOptimizer`: `ShardedAdamW` IS the
fused `torch.optim.AdamW` of `gpt1.optim.build_optimizer`, with the same two param groups over
every parameter; it only hides the gradients of the parameters other ranks own before the
fused kernel runs (the kernel skips a parameter without a gradient). So the update of a
parameter is the same kernel on the same numbers as without sharding, `train_step`'s device-side
skip (`found_inf`), the lr written into `param_groups` and the weight-decay groups work
unchanged, and `state_dict()` has the plain optimizer's format (state keyed by the index of the
parameter in the full groups): checkpoints stay in ONE format. `consolidate_state_dict()` (a
collective: every rank calls it) sends the shards to rank 0, whose next `state_dict()` is then
the whole state, as one unsharded process would save it; `load_state_dict` takes a whole state
(written with or without zero1, by any number of ranks) and keeps this rank's shard. torch's
class would need `found_inf` passed through its wrapper to the optimizer it holds, and it
consolidates by serialising each shard with torch.save (pickle) and broadcasting it to every
rank; here rank 0 receives plain tensors (two point-to-point messages a rank).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gpt1.optim import param_groups

STATE_KEYS = ("step", "exp_avg", "exp_avg_sq")
"""What AdamW (amsgrad off) keeps per parameter."""


def owners(numels: list[int], world: int) -> list[int]:
    """The owner rank of each parameter: largest first, each to the least-loaded rank (ties:
    the lowest rank). Deterministic, so every rank computes the same split."""
    load = [0] * world
    out = [0] * len(numels)
    for i in sorted(range(len(numels)), key=lambda i: -numels[i]):
        rank = min(range(world), key=lambda r: (load[r], r))
        out[i] = rank
        load[rank] += numels[i]
    return out


def state_bytes_per_rank(model: nn.Module, world: int) -> list[int]:
    """Bytes of Adam state (two moments in the parameter's dtype, a 4-byte step count) each of
    `world` ranks holds under ZeRO-1; world 1 = the unsharded optimizer."""
    params = [p for group in param_groups(model, 0.0) for p in group["params"]]
    per_rank = [0] * world
    for p, rank in zip(params, owners([p.numel() for p in params], world), strict=True):
        per_rank[rank] += 2 * p.numel() * p.element_size() + 4
    return per_rank


class ShardedAdamW(torch.optim.AdamW):
    """AdamW whose state lives on the parameter's owner rank only (module docstring). Needs an
    initialised process group; every rank must call `step` and `consolidate_state_dict`."""

    def __init__(self, params: Iterable[Any], **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        flat = [p for group in self.param_groups for p in group["params"]]
        self.owner = dict(zip(flat, owners([p.numel() for p in flat], self.world),
                              strict=True))
        self._gathered: dict[int, dict[str, torch.Tensor]] | None = None

    def owns(self, p: torch.Tensor) -> bool:
        return self.owner[p] == self.rank

    def _by_owner(self) -> list[list[torch.Tensor]]:
        out: list[list[torch.Tensor]] = [[] for _ in range(self.world)]
        for group in self.param_groups:
            for p in group["params"]:
                out[self.owner[p]].append(p)
        return out

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        """Update this rank's parameters (the others' gradients are dropped first), then
        broadcast every parameter from its owner (one flat tensor per rank, asynchronous:
        stream-ordered on CUDA, no host sync)."""
        if closure is not None:
            raise ValueError("ShardedAdamW.step takes no closure")
        for group in self.param_groups:
            for p in group["params"]:
                if not self.owns(p):
                    p.grad = None
        super().step()
        pending = []
        for rank, params in enumerate(self._by_owner()):
            if not params:
                continue
            if rank == self.rank:
                flat = torch.cat([p.detach().reshape(-1) for p in params])
            else:
                flat = torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype,
                                   device=params[0].device)
            work = dist.broadcast(flat, src=rank, async_op=True)
            pending.append((rank, params, flat, work))
        for rank, params, flat, work in pending:
            work.wait()
            if rank != self.rank:
                offset = 0
                for p in params:
                    p.copy_(flat[offset: offset + p.numel()].view_as(p))
                    offset += p.numel()
        return None

    @torch.no_grad()
    def consolidate_state_dict(self) -> None:
        """Collective (every rank calls it): each rank sends its shard of the state to rank 0,
        whose next `state_dict()` is the whole state. Per rank: which of its parameters have
        state yet (one small tensor; rank 0 reads it, at a checkpoint, a sync point anyway),
        then the state of all of them as one flat fp32 tensor (zeros where none yet)."""
        gathered: dict[int, dict[str, torch.Tensor]] = {}
        index = {p: i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        for rank, params in enumerate(self._by_owner()):
            if rank == 0 or not params or self.rank not in (0, rank):
                continue
            device = params[0].device
            # gloo's send/recv take CPU tensors only (a GPU tensor fails in its transport:
            # "writev: Bad address", seen on CUDA); nccl's take the GPU's
            wire = torch.device("cpu") if dist.get_backend() == "gloo" else device
            sizes = [1 + 2 * p.numel() for p in params]  # step, exp_avg, exp_avg_sq
            if self.rank == rank:
                has = torch.tensor([p in self.state for p in params], dtype=torch.int32,
                                   device=device)
                flat = torch.zeros(sum(sizes), dtype=torch.float32, device=device)
                offset = 0
                for p, size in zip(params, sizes, strict=True):
                    if p in self.state:
                        state = self.state[p]
                        if set(state) != set(STATE_KEYS):
                            raise ValueError(f"ShardedAdamW: unexpected state {sorted(state)}")
                        flat[offset: offset + size] = torch.cat(
                            [state[k].detach().reshape(-1).float() for k in STATE_KEYS])
                    offset += size
                dist.send(has.to(wire), dst=0)
                dist.send(flat.to(wire), dst=0)
                continue
            has = torch.empty(len(params), dtype=torch.int32, device=wire)
            flat = torch.empty(sum(sizes), dtype=torch.float32, device=wire)
            dist.recv(has, src=rank)
            dist.recv(flat, src=rank)
            flat = flat.to(device)
            offset = 0
            for p, size, present in zip(params, sizes, has.tolist(), strict=True):
                if present:
                    n = p.numel()
                    gathered[index[p]] = {
                        "step": flat[offset].clone(),
                        "exp_avg": flat[offset + 1: offset + 1 + n].view_as(p).to(
                            p.dtype, copy=True),  # own storage: safetensors refuses shared
                        "exp_avg_sq": flat[offset + 1 + n: offset + size].view_as(p).to(
                            p.dtype, copy=True)}
                offset += size
        self._gathered = gathered if self.rank == 0 else None

    def state_dict(self) -> dict[str, Any]:
        """The whole state on rank 0 after `consolidate_state_dict` (once per consolidation),
        in the unsharded optimizer's format; on one rank, the plain state."""
        sd = super().state_dict()
        if self.world == 1:
            return sd
        if self._gathered is None:
            raise RuntimeError("ShardedAdamW.state_dict: call consolidate_state_dict() on every "
                               "rank first; rank 0 then holds the whole state")
        sd["state"] = dict(sorted({**sd["state"], **self._gathered}.items()))
        self._gathered = None
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a whole state (from any run, sharded or not, any rank count); keep this rank's
        shard."""
        super().load_state_dict(state_dict)
        for p in list(self.state):
            if not self.owns(p):
                del self.state[p]


def sharded_optimizer(model: nn.Module, lr: float, betas: tuple[float, float], eps: float,
                      weight_decay: float) -> ShardedAdamW:
    """`gpt1.optim.build_optimizer`'s AdamW (same groups, fused), its state sharded over the
    ranks of the initialised process group."""
    return ShardedAdamW(param_groups(model, weight_decay), lr=lr, betas=betas, eps=eps,
                        fused=True)
