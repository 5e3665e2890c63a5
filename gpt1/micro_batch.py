"""How a pre-training update is split: micro-batches per rank (pretrain.micro_batch_seqs), fixed
or sized from this device's memory (`auto`).

`auto` runs a memory probe once per run, before the first update: a forward and backward of the
loss module at 1 and 2 sequences (peak bytes; a line through them predicts larger sizes), then
the largest divisor of the per-rank batch (batch_seqs / ranks: no accumulation when it fits)
whose predicted peak is within `HEADROOM` of the memory this process may use, confirmed by a
probe at that size (stepping down when it does not fit). On CUDA a probe reads the allocator's
peak (`torch.cuda.max_memory_allocated`); on the CPU it counts the bytes autograd saves for
backward plus the weights, gradients and Adam moments, against the host's memory shared by the
ranks. The choice is recorded in every checkpoint and the final model.json; a resume with as
many ranks reuses it (so the dropout masks, drawn per micro-batch, are those of the run never
stopped), a resume with another rank count probes again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gpt1.errors import Gpt1Error
from gpt1.runtime import autocast_for
from gpt1.zero1 import ShardedAdamW

log = logging.getLogger(__name__)

HEADROOM = 0.85
"""Share of the memory a process may use that the probe plans to fill: the rest is for what a
probe at one size does not see (DDP's gradient buckets, compiled kernels' workspaces, allocator
fragmentation)."""
Measure = Callable[[int], float]
"""micro-batch sequences -> peak bytes of one forward + backward (inf: did not fit)."""


def accumulation(cfg: Any, world: int, micro: int | None = None) -> int:
    """Micro-batches per rank and update: batch_seqs = micro x this x ranks (micro: the
    resolved size, default the configured one), else a Gpt1Error naming the keys (checked
    before ranks are launched, and by each rank). For `auto` before its probe: the batch must
    split over the ranks (returns 1)."""
    size = cfg.micro_batch_seqs if micro is None else micro
    if size == "auto":
        if cfg.batch_seqs % world:
            raise Gpt1Error(f"pretrain.batch_seqs={cfg.batch_seqs} does not split over "
                            f"{world} ranks (micro_batch_seqs: auto)")
        return 1
    accum, rem = divmod(cfg.batch_seqs, size * world)
    if rem or accum < 1:
        raise Gpt1Error(f"pretrain.batch_seqs={cfg.batch_seqs} is not micro_batch_seqs="
                        f"{size} x accumulation x {world} ranks")
    return accum


def eval_window_count(cfg: Any) -> int:
    """Validation windows: eval_batches micro-batches of micro_batch_seqs, or with `auto`
    eval_batches global batches (batch_seqs), so the validation set never depends on the
    device the probe ran on."""
    size = cfg.batch_seqs if cfg.micro_batch_seqs == "auto" else cfg.micro_batch_seqs
    return int(cfg.eval_batches * size)


def choose(per_rank: int, measure: Measure, limit: float) -> int:
    """The largest divisor of `per_rank` whose peak fits `HEADROOM * limit` bytes."""
    budget = HEADROOM * limit
    one = measure(1)
    if one > budget:
        raise Gpt1Error(f"pretrain.micro_batch_seqs: auto: one sequence needs {one / 2**20:,.0f} "
                        f"MiB, over the {budget / 2**20:,.0f} MiB this process may plan for; "
                        "use a smaller model or seq_len")
    if per_rank == 1:
        return 1
    per_seq = max(measure(2) - one, 0.0)
    for size in sorted((d for d in range(2, per_rank + 1) if per_rank % d == 0), reverse=True):
        if one + per_seq * (size - 1) <= budget and measure(size) <= budget:
            return size
    return 1


def memory_limit(device: torch.device, world: int) -> float:
    """Bytes this process may use: the GPU's memory less what other processes hold, or the
    host's physical memory shared by the ranks of this node."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        others = total - free - torch.cuda.memory_reserved(device)
        return float(total - others)
    return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")) / world


def unallocated_bytes(module: nn.Module, optimizer: torch.optim.Optimizer, world: int,
                      bucket_view: bool) -> int:
    """Memory training will hold that a probe does not allocate: the two Adam moments (fp32,
    until the first update or a resume allocates them; ZeRO-1: of this rank's parameters only)
    and, with several ranks, DDP's gradient buckets when they are not views of the gradients."""
    n = sum(p.numel() * p.element_size() for p in module.parameters())
    kept = (sum(p.numel() * p.element_size() for p in module.parameters() if optimizer.owns(p))
            if isinstance(optimizer, ShardedAdamW) else n)
    moments = 0 if optimizer.state else 2 * kept
    return moments + (n if world > 1 and not bucket_view else 0)


def probe(module: nn.Module, seq_len: int, vocab: int, precision: str, device: torch.device,
          extra: int) -> Measure:
    """measure(m): peak bytes of a forward + backward of `module` (windows -> loss) at m
    windows of seq_len + 1 random tokens, plus `extra` (unallocated_bytes). Leaves no gradient
    and no RNG draw behind."""
    weights = sum(p.numel() * p.element_size() for p in module.parameters())

    def measure(m: int) -> float:
        saved: dict[int, int] = {}
        params = {p.untyped_storage().data_ptr() for p in module.parameters()}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                saved[storage.data_ptr()] = storage.nbytes()
            return t

        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            windows = torch.randint(0, vocab, (m, seq_len + 1), device=device)
            try:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats(device)
                    with autocast_for(precision, device):
                        loss = module(windows)
                    loss.backward()
                    torch.cuda.synchronize(device)
                    peak = float(torch.cuda.max_memory_allocated(device))
                    return peak + extra
                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    with autocast_for(precision, device):
                        loss = module(windows)
                loss.backward()
                return float(2 * weights + extra + sum(saved.values()))  # + grads
            except torch.cuda.OutOfMemoryError:
                return float("inf")
            finally:
                module.zero_grad(set_to_none=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()

    return measure


def resolve(cfg: Any, world: int, recorded: dict[str, Any] | None, measure: Measure | None,
            limit: Callable[[], float], device: torch.device | None = None) -> int:
    """The micro-batch of this run: the configured size; with `auto`, the recorded one when
    resuming with as many ranks, else the probe's choice (logged), the smallest any rank's
    probe chose when there are several (every rank must run as many micro-batches)."""
    if cfg.micro_batch_seqs != "auto":
        return int(cfg.micro_batch_seqs)
    accumulation(cfg, world)
    if recorded and recorded.get("world_size") == world:
        size = int(recorded["micro_batch_seqs"])
        log.info("micro_batch_seqs: auto: %d, as recorded by the run resumed", size)
        return size
    if measure is None:
        raise ValueError("micro_batch_seqs: auto needs a memory probe")
    per_rank = cfg.batch_seqs // world
    budget = limit()
    size = choose(per_rank, measure, budget)
    if world > 1 and dist.is_initialized():
        agreed = torch.tensor([size], device=device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MIN)  # a divisor of per_rank, as each was
        size = int(agreed.item())
    log.info("micro_batch_seqs: auto: %d of %d sequences per rank fit (%.1f GiB usable, "
             "probe plans for %.0f %%): %d accumulation step(s)", size, per_rank, budget / 2**30,
             100 * HEADROOM, per_rank // size)
    return size
