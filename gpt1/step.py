"""One optimiser update, shared by pre-training and fine-tuning, and its non-finite guard.

`train_step` accumulates gradients over micro-batches, clips and steps without a host sync;
`seeded_loss` draws a micro-batch's dropout masks from `micro_batch_seed` (eager or graphed);
`WholeUpdate` replays the whole update as one recorded CUDA graph, the same rule kept;
the update is skipped on the device when the loss or the gradient norm is not finite.
Both loops read only at their sync points (log points; pre-training also evaluation and
checkpoints) and keep the first bad step in a `NonFiniteWatch`; `step_values` reads one step.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpt1.errors import Gpt1Error
from gpt1.runtime import autocast_for


def micro_batch_seed(seed: int, step: int, micro: int) -> int:
    """A 63-bit dropout seed for one global micro-batch: a pure function of (run seed, step,
    micro-batch), independent of the rank count and of CUDA graphs."""
    blob = hashlib.sha256(f"{seed}/{step}/{micro}".encode()).digest()
    return int.from_bytes(blob[:8], "little") >> 1


def seeded_loss(model: nn.Module, batch: tuple[int, torch.Tensor]) -> torch.Tensor:
    """The loss of one (seed, windows) micro-batch, its dropout masks drawn from `seed`: the
    default generator is reseeded before the forward, which a CUDA graph reads at replay."""
    seed, windows = batch
    torch.manual_seed(seed)  # dropout masks depend on (run seed, step, micro-batch) only
    loss: torch.Tensor = model(windows)
    return loss


class NonFiniteLossError(Gpt1Error):
    """Loss or gradient norm became NaN/inf; the step was not applied."""


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: list[Any],
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    lr: float | torch.Tensor,
    grad_clip: float,
    precision: str,
    halted: torch.Tensor | None = None,
    fused_clip: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One update without a host sync: (mean loss, grad norm, finite) as device tensors.

    Accumulates loss/len(micro_batches) gradients, clips the norm, steps. Under DDP, gradients
    are all-reduced on the last micro-batch only and the loss is the mean over ranks. The
    update is applied only when loss and norm are finite and `halted` (a device flag: an
    earlier step was not) is unset: the fused AdamW kernel reads `found_inf` on the device and
    then leaves weights, moments and step count as they were (the flag torch's GradScaler
    sets), so no step waits for the GPU to decide; `optimizer` must be a fused one
    (gpt1.optim.build_optimizer). `fused_clip` (pretrain.fused_clip): the clip folded into that
    kernel (clip_scale), not a pass of its own over the gradients. `lr` a device tensor: the
    kernel reads it when it runs (a captured update, WholeUpdate). step_values
    reads the result.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    device = next(model.parameters()).device
    ddp = isinstance(model, DistributedDataParallel)
    total = torch.zeros((), dtype=torch.float64, device=device)
    for i, batch in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        sync = (contextlib.nullcontext() if (last or not ddp)
                else cast(DistributedDataParallel, model).no_sync())
        with sync:
            with autocast_for(precision, device):
                loss = loss_fn(model, batch)
            (loss / len(micro_batches)).backward()
        total += loss.detach().double()
    mean_loss = total / len(micro_batches)
    if ddp:
        dist.all_reduce(mean_loss)
        mean_loss /= dist.get_world_size()
    if fused_clip:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        grad_norm = torch.nn.utils.get_total_norm(grads, 2.0)  # clip_grad_norm_'s own norm
        optimizer.grad_scale = clip_scale(grad_norm, grad_clip)  # type: ignore[attr-defined]
    else:
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    finite = torch.isfinite(mean_loss) & torch.isfinite(grad_norm)
    skip = ~finite if halted is None else ~finite | halted
    optimizer.found_inf = skip.float()  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf  # type: ignore[attr-defined]
        if fused_clip:
            del optimizer.grad_scale  # type: ignore[attr-defined]
    optimizer.zero_grad(set_to_none=True)
    return mean_loss, grad_norm, finite


def clip_scale(grad_norm: torch.Tensor, grad_clip: float) -> torch.Tensor:
    """The divisor of every gradient that clips their norm to `grad_clip`: the fused AdamW
    kernel divides each gradient by it as it reads it (its `grad_scale`, how GradScaler
    unscales), so the clip costs no pass of its own. clip_grad_norm_ multiplies by
    min(grad_clip / (norm + 1e-6), 1); this is the reciprocal, max((norm + 1e-6) / grad_clip,
    1): the same update up to fp32 rounding. fp32, on the norm's device."""
    return torch.clamp((grad_norm.float() + 1e-6) / grad_clip, min=1.0)


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
    step) as one CUDA graph (pretrain.cuda_graph_scope: update): the first `warmup_steps` - 1
    updates run eager (compilation, then warm-up, on a side stream as CUDA graph capture
    wants), the next is recorded (`on_record` called), then every update replays it.

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
                 precision: str, fused_clip: bool, warmup_steps: int,
                 on_record: Callable[[], None],
                 record: Callable[[Callable[[], tuple[torch.Tensor, ...]], Any], Replay]
                 | None = None) -> None:
        self.module, self.optimizer, self.grad_clip = module, optimizer, grad_clip
        self.precision, self.fused_clip, self.warmup_steps = precision, fused_clip, warmup_steps
        self.on_record, self.record = on_record, record or record_cuda_graph
        self.eager_updates = 0
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
        if self.replay is None and self.eager_updates < self.warmup_steps - 1:
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
        self.on_record()
        return replay


def step_values(step: tuple[torch.Tensor, torch.Tensor, torch.Tensor], lr: float
                ) -> dict[str, float]:
    """Read a train_step's loss and norm (one host sync), as fine-tuning does every step.

    Raises NonFiniteLossError on NaN/inf (the update was not applied).
    """
    loss_value, norm_value = step[0].item(), step[1].item()
    if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
        raise NonFiniteLossError(f"non-finite loss {loss_value} / grad norm {norm_value}")
    return {"loss": loss_value, "grad_norm": norm_value, "lr": lr}


class NonFiniteWatch:
    """The first non-finite update of a run, tracked on the device and read only at the loop's
    sync points (logging, evaluation, checkpoints): no per-step host sync.

    Trade-off: a NaN/inf is reported up to log_interval_steps - 1 steps after it happened. No
    update is applied from that step on (`halted` is sticky and train_step skips the update),
    so the weights are those before the bad step, and every checkpoint write is preceded by
    `check`: no checkpoint ever holds a state after it; the last good one is kept.
    """

    def __init__(self, device: torch.device) -> None:
        self.first = torch.full((), -1, dtype=torch.int64, device=device)
        self.values = torch.zeros(2, dtype=torch.float64, device=device)

    @property
    def halted(self) -> torch.Tensor:
        return self.first >= 0

    def record(self, step: int, loss: torch.Tensor, norm: torch.Tensor,
               finite: torch.Tensor) -> None:
        new = (self.first < 0) & ~finite
        self.first = torch.where(new, step, self.first)
        self.values = torch.where(new, torch.stack([loss.double(), norm.double()]), self.values)

    def check(self, run_dir: Path | None = None) -> None:
        """Raise NonFiniteLossError naming the first bad step (0-based), if there was one, and
        the last good checkpoint of `run_dir` (pre-training; fine-tuning keeps none)."""
        first = int(self.first.item())
        if first >= 0:
            loss, norm = self.values.tolist()
            message = f"non-finite loss {loss} / grad norm {norm} at step {first}; stopped"
            if run_dir is None:
                raise NonFiniteLossError(message)
            from gpt1 import checkpoint  # here: one optimiser update needs no checkpoint code

            kept = checkpoint.latest_checkpoint(run_dir)
            raise NonFiniteLossError(f"{message}, last good checkpoint kept: {kept}", run_dir)
