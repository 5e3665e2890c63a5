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
the run is refused at start (`refuse_with_ddp`), before any rank is launched.

Scope `update` (`WholeUpdate`) captures the whole update instead, forward, backward, clip and
the fused AdamW step, as one graph recorded by hand (torch.cuda.graph) over the module compiled
as without graphs: one launch an update. The batch, the lr and the halt flag are copied into
the captured inputs before each replay and the generator is reseeded from the micro-batch's
seed, so the dropout rule is the eager one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from gpt1.errors import Gpt1Error
from gpt1.step import seeded_loss, train_step

log = logging.getLogger(__name__)

KEY = "pretrain.cuda_graphs"
SCOPES = ("forward_backward", "update")
"""pretrain.cuda_graph_scope: what one graph holds (the forward and the backward, each its own
graph, through torch.compile; or the whole update, WholeUpdate)."""
MODE = "reduce-overhead"
"""torch.compile's mode that records CUDA graphs (also what benchmarks/gpu_overhead.py times)."""
WARMUP_STEPS = 3
"""Updates after which no graph is recorded any more: the first compiles and warms up, the
next records, later ones replay (a recording after these is counted as a re-recording)."""


def refuse_with_ddp(on: bool, world: int) -> None:
    """Stop (Gpt1Error: one line, exit 2) when the key is on with several DDP ranks: DDP's
    all-reduce hooks fire from inside the graphed backward (its gradient buckets are views the
    graphs' memory pool would have to keep apart), which is neither built nor measured. A
    refusal, not a quiet fallback, so a multi-GPU run never runs without the graphs it asked
    for (the launcher calls this before launching ranks, each rank again at start)."""
    if on and world > 1:
        raise Gpt1Error(f"{KEY}: true with {world} DDP ranks: CUDA graphs under DDP are not "
                        f"supported yet (its all-reduce hooks); set {KEY}: false, or "
                        "pretrain.nproc: 1")


def unusable(device: torch.device, accumulation: int, compiler: bool = True) -> str | None:
    """Why CUDA graphs cannot run this update (a phrase for the warning line), or None;
    `compiler`: a C compiler was found (gpt1.runtime.c_compiler).

    Several micro-batches: one micro-batch's gradients stay held while the next replays into
    the same memory pool. (Several DDP ranks: refused before, refuse_with_ddp.)"""
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


Replay = Callable[[], tuple[torch.Tensor, ...]]
"""Runs the recorded update once; returns its (loss, grad norm, finite) tensors."""


def record_cuda_graph(run: Callable[[], tuple[torch.Tensor, ...]], stream: Any) -> Replay:
    """`run` captured as one CUDA graph on `stream` (the side stream its warm-up ran on):
    nothing runs now; each call of the answer replays it and returns the captured outputs
    (overwritten by the next replay)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = run()

    def replay() -> tuple[torch.Tensor, ...]:
        graph.replay()
        return out

    return replay


def _windows_loss(model: nn.Module, windows: torch.Tensor) -> torch.Tensor:
    """The loss of one micro-batch as captured: no reseed inside the graph (the generator is
    reseeded before each replay; a seed cannot be set while capturing)."""
    loss: torch.Tensor = model(windows)
    return loss


class WholeUpdate:
    """The whole update of one micro-batch (train_step: forward, backward, clip, fused AdamW
    step) as one CUDA graph: the first WARMUP_STEPS - 1 updates run eager (compilation, then
    warm-up, on a side stream as CUDA graph capture wants), the next is recorded, then every
    update replays it.

    Before each replay the micro-batch is copied into the captured input, the lr and the halt
    flag into theirs, and the default generator is reseeded with the micro-batch's seed
    (micro_batch_seed(run seed, step, micro-batch), as seeded_loss does): the graph's dropout
    kernels read the generator's seed and offset at replay, so the same (seed, step,
    micro-batch) gives the same masks, another seed others. While recording, the param
    groups carry the lr tensor (the fused kernel reads it at replay) and `capturable`; after,
    their floats again, so a checkpoint's optimizer state is the eager one's. `record` turns
    the update into its replay (default record_cuda_graph; the CPU tests stand in for it with
    one that runs the update at each replay).
    """

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float,
                 precision: str, fused_clip: bool, recordings: Recordings,
                 record: Callable[[Callable[[], tuple[torch.Tensor, ...]], Any], Replay]
                 | None = None) -> None:
        self.module, self.optimizer, self.grad_clip = module, optimizer, grad_clip
        self.precision, self.fused_clip, self.recordings = precision, fused_clip, recordings
        self.record, self.eager_updates = record or record_cuda_graph, 0
        self.replay: Replay | None = None
        self.inputs: dict[str, torch.Tensor] = {}
        self.stream: Any = None

    @contextmanager
    def _side_stream(self, device: torch.device) -> Iterator[None]:
        """Run the block on a side stream (CUDA), ordered after and before the current one."""
        if device.type != "cuda":
            yield
            return
        if self.stream is None:
            self.stream = torch.cuda.Stream(device)
        self.stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(self.stream):
            yield
        torch.cuda.current_stream(device).wait_stream(self.stream)

    def __call__(self, micro_batches: list[tuple[int, torch.Tensor]], lr: float,
                 halted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One update as train_step(module, optimizer, micro_batches, seeded_loss, lr, ...)
        makes it: (mean loss, grad norm, finite), copies the next update cannot overwrite."""
        ((seed, windows),) = micro_batches  # one micro-batch an update (unusable says so)
        if self.replay is None and self.eager_updates < WARMUP_STEPS - 1:
            self.eager_updates += 1
            with self._side_stream(windows.device):
                return train_step(self.module, self.optimizer, micro_batches, seeded_loss, lr,
                                  self.grad_clip, self.precision, halted, self.fused_clip)
        if self.replay is None:
            self.replay = self._capture(windows)
        self.inputs["windows"].copy_(windows)
        self.inputs["lr"].fill_(lr)
        self.inputs["halted"].copy_(halted)
        torch.manual_seed(seed)  # dropout masks of (run seed, step, micro-batch), read at replay
        loss, norm, finite = self.replay()
        for group in self.optimizer.param_groups:
            group["lr"] = lr  # what the state records (the graph reads the lr tensor)
        return loss.clone(), norm.clone(), finite.clone()

    def _capture(self, windows: torch.Tensor) -> Replay:
        device = windows.device
        # the CUDA kernel reads the lr tensor as a float; the CPU one takes its value
        lr_dtype = torch.float32 if device.type == "cuda" else torch.float64
        self.inputs = {"windows": windows.clone(),
                       "lr": torch.zeros((), dtype=lr_dtype, device=device),
                       "halted": torch.zeros((), dtype=torch.bool, device=device)}
        groups = self.optimizer.param_groups
        kept = [(g["lr"], g.get("capturable", False)) for g in groups]
        for g in groups:
            g["lr"], g["capturable"] = self.inputs["lr"], True

        def run() -> tuple[torch.Tensor, ...]:
            return train_step(self.module, self.optimizer, [self.inputs["windows"]],
                              _windows_loss, self.inputs["lr"], self.grad_clip, self.precision,
                              self.inputs["halted"], self.fused_clip)

        if device.type == "cuda" and self.stream is None:
            self.stream = torch.cuda.Stream(device)
        try:
            replay = self.record(run, self.stream)
        finally:
            for g, (lr, capturable) in zip(groups, kept, strict=True):
                g["lr"], g["capturable"] = lr, capturable
        self.recordings.count += 1
        return replay


class Recordings:
    """CUDA graphs recorded while counting (Dynamo's callbacks for CUDA-graph recording), so a
    check can read that none is recorded after warm-up."""

    def __init__(self, on: bool = True) -> None:
        self.count, self.on = 0, on

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
