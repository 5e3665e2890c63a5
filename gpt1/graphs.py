"""CUDA graphs for the pre-training update (`pretrain.cuda_graphs`): when they apply, the
graphed forward + backward or the whole update captured (`pretrain.cuda_graph_scope`), and a
count of the graphs recorded.

The graphs are torch.compile's mode `reduce-overhead` (Inductor's CUDA graph trees): each
micro-batch's forward and backward replay as one launch each, so the host no longer enqueues
every kernel (measured 1.74x at 8 x 512 on an H200, benchmarks/results/). Clipping and the
fused AdamW run outside them (a handful of launches). Dropout stays exact: the loop reseeds the
default generator from (pre-training seed, step, micro-batch) before each replay, through the
same `seeded_loss` as the eager path, and a captured graph reads the generator's seed and
offset at replay. Where they do not apply (a CPU, more than one micro-batch an update, no C
compiler) the loop says so in one warning line and runs without them; with several DDP ranks
the run is refused at start (PretrainCfg.refuse_graphs_with_ddp), before any rank is launched.

Scope `update` captures the whole update instead, forward, backward, clip and the fused AdamW
step, as one graph recorded by hand over the module compiled as without graphs
(gpt1.step.WholeUpdate): one launch an update, the dropout rule kept.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

KEY = "pretrain.cuda_graphs"
SCOPES = ("forward_backward", "update")
"""pretrain.cuda_graph_scope: what one graph holds (the forward and the backward, each its own
graph, through torch.compile; or the whole update, gpt1.step.WholeUpdate)."""
MODE = "reduce-overhead"
"""torch.compile's mode that records CUDA graphs (also what benchmarks/gpu_overhead.py times)."""
WARMUP_STEPS = 3
"""Updates after which no graph is recorded any more: the first compiles and warms up, the
next records, later ones replay (a recording after these is counted as a re-recording)."""


def unusable(device: torch.device, accumulation: int, compiler: bool = True) -> str | None:
    """Why CUDA graphs cannot run this update (a phrase for the warning line), or None;
    `compiler`: a C compiler was found (gpt1.runtime.c_compiler).

    Several micro-batches: one micro-batch's gradients stay held while the next replays into
    the same memory pool (scope update: a reseed between them cannot be recorded). Several
    DDP ranks: refused before (PretrainCfg.refuse_graphs_with_ddp)."""
    if device.type != "cuda":
        return f"the device is {device.type}, not a GPU"
    if accumulation > 1:
        return f"one micro-batch an update needed ({accumulation} accumulated)"
    if not compiler:
        return "no C compiler (torch.compile needs one)"
    return None


def graphed(module: nn.Module) -> nn.Module:
    """`module` compiled with CUDA graphs as a new wrapper (its state_dict keys and `module`
    itself unchanged: evaluation calls `module`, eager, so its shapes never enter the graphs)."""
    return torch.compile(module, mode=MODE)  # type: ignore[return-value]


def usable(on: bool, device: torch.device, accumulation: int, compiler: bool) -> bool:
    """Whether to run with CUDA graphs: `on` and they apply here (else, when `on`, one
    warning line naming the key and why)."""
    if not on:
        return False
    why = unusable(device, accumulation, compiler)
    if why is not None:
        log.warning("%s: %s: running without CUDA graphs", KEY, why)
    return why is None


class Recordings:
    """CUDA graphs recorded while counting (Dynamo's callbacks for CUDA-graph recording), so a
    check can read that none is recorded after warm-up."""

    def __init__(self, on: bool = True) -> None:
        self.count, self.on = 0, on

    def recorded(self) -> None:
        """Count a graph recorded by hand (gpt1.step.WholeUpdate's on_record)."""
        self.count += 1

    def _seen(self, args: Any) -> None:
        from torch._dynamo.callback import CallbackTrigger

        if args.callback_trigger == CallbackTrigger.CUDAGRAPH_RECORDING:
            self.count += 1

    @contextmanager
    def counting(self) -> Iterator[Recordings]:
        """Count inside the block (nothing when off: no Dynamo import for an eager run)."""
        if not self.on:
            yield self
            return
        from torch._dynamo.callback import callback_handler

        callback_handler.register_start_callback(self._seen)
        try:
            yield self
        finally:
            callback_handler.remove_start_callback(self._seen)
