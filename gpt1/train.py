"""Training step and the pre-training loop (spec §1): resumable, data-parallel, native bf16.

`train_step` (accumulate, clip, step; no host sync) is shared with fine-tuning. `pretrain` runs
`for step in range(start, total_steps)` over seeded windows of the token shards, evaluates,
checkpoints (atomically; the latest one plus log-spaced zero-shot weights) and resumes from the
latest checkpoint so that a run killed at any moment ends bit-identical to one never stopped:
the data order is a pure function of (seed, sequence index) and every micro-batch reseeds the
dropout generator from (seed, step, micro-batch), so no hidden state outlives a step.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpt1 import checkpoint
from gpt1.config import Params
from gpt1.data.loader import WindowSampler, eval_windows
from gpt1.errors import Gpt1Error
from gpt1.interrupt import StopRequest, stop_on_signals
from gpt1.lstm import LSTMLM
from gpt1.model import GPT
from gpt1.optim import build_optimizer, lr_at
from gpt1.progress import progress

log = logging.getLogger(__name__)

MetricsSink = Callable[[int, dict[str, float]], None]
# Fields that change what is logged or how fast, never the trained weights: a run may resume
# from a checkpoint written with other values of these.
_NOT_TRAJECTORY = ("eval_interval_steps", "eval_batches", "log_interval_steps",
                   "checkpoint_interval_steps", "compile")


class NonFiniteLossError(Gpt1Error):
    """Loss or gradient norm became NaN/inf; the step was not applied."""


BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of CPUs with native bf16 dot products: AMX tiles (Intel Sapphire Rapids
and later) or AVX512-BF16 (Intel Cooper Lake, AMD Zen 4 and later). Measured here: bf16 linear
layers 2.5-5x (AMX) and 3.3x (AVX512-BF16, AMD EPYC) faster than fp32."""


def has_fast_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True on a CPU with native bf16 matmul instructions (BF16_CPU_FLAGS) that oneDNN may
    use: ONEDNN_MAX_CPU_ISA capped below them (e.g. AVX2) means emulated bf16, so False."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if cap not in ("ALL", "DEFAULT") and not any(k in cap for k in ("BF16", "AMX", "AVX10")):
        return False
    if "AMX" in torch.backends.cpu.get_cpu_capability().upper():
        return True
    with contextlib.suppress(OSError):
        with open(cpuinfo, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return any(flag in line.split() for flag in BF16_CPU_FLAGS)
    return False


def resolve_precision(precision: str, device: torch.device) -> Literal["fp32", "bf16"]:
    """`auto` -> bf16 on CUDA with bf16 support or on a CPU with native bf16, else fp32."""
    if precision == "bf16" and device.type == "cpu" and not has_fast_bf16():
        log.warning("precision bf16 on a CPU without native bf16 (no AVX512-BF16 / AMX, or "
                    "ONEDNN_MAX_CPU_ISA below them): bf16 is emulated, many times slower than "
                    "fp32 (precision: auto picks fp32 here)")
    if precision in ("fp32", "bf16"):
        return "fp32" if precision == "fp32" else "bf16"
    if precision != "auto":
        raise ValueError(f"unknown precision {precision!r}")
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if has_fast_bf16() else "fp32"


def autocast_for(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast (weights and grads stay fp32) or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: list[Any],
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    lr: float,
    grad_clip: float,
    precision: str,
    halted: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One update without a host sync: (mean loss, grad norm, finite) as device tensors.

    Accumulates loss/len(micro_batches) gradients, clips the norm, steps. Under DDP, gradients
    are all-reduced on the last micro-batch only and the loss is the mean over ranks. The
    update is applied only when loss and norm are finite and `halted` (a device flag: an
    earlier step was not) is unset: the fused AdamW kernel reads `found_inf` on the device and
    then leaves weights, moments and step count as they were (the flag torch's GradScaler
    sets), so no step waits for the GPU to decide; `optimizer` must be a fused one
    (gpt1.optim.build_optimizer). step_values reads the result.
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
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    finite = torch.isfinite(mean_loss) & torch.isfinite(grad_norm)
    skip = ~finite if halted is None else ~finite | halted
    optimizer.found_inf = skip.float()  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf  # type: ignore[attr-defined]
    optimizer.zero_grad(set_to_none=True)
    return mean_loss, grad_norm, finite


def step_values(step: tuple[torch.Tensor, torch.Tensor, torch.Tensor], lr: float
                ) -> dict[str, float]:
    """Read a train_step's loss and norm (one host sync), as fine-tuning does every step.

    Raises NonFiniteLossError on NaN/inf (the update was not applied).
    """
    loss_value, norm_value = step[0].item(), step[1].item()
    if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
        raise NonFiniteLossError(f"non-finite loss {loss_value} / grad norm {norm_value}")
    return {"loss": loss_value, "grad_norm": norm_value, "lr": lr}


def training_device() -> torch.device:
    """cuda:LOCAL_RANK when CUDA is available (torchrun: one GPU per process), else the CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    index = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host batch on `device`. To CUDA through page-locked memory, asynchronously: the copy
    is queued behind the running step instead of waiting for it."""
    if device.type == "cuda":
        return batch.pin_memory().to(device, non_blocking=True)
    return batch.to(device)


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

    def check(self, run_dir: Path) -> None:
        """Raise NonFiniteLossError naming the first bad step (0-based), if there was one."""
        first = int(self.first.item())
        if first >= 0:
            loss, norm = self.values.tolist()
            kept = checkpoint.latest_checkpoint(run_dir)
            raise NonFiniteLossError(
                f"non-finite loss {loss} / grad norm {norm} at step {first}; stopped, last good "
                f"checkpoint kept: {kept}", run_dir)


def cost_projection(n_params: int, flops_per_token: float, tokens: int,
                    tokens_per_s: float | None = None) -> dict[str, float]:
    """Parameters, FLOPs per token, planned tokens, total FLOPs and, given a training rate,
    the hours they take (matmul FLOPs, as flops_per_token counts them)."""
    out = {"params": float(n_params), "flops_per_token": flops_per_token,
           "tokens": float(tokens), "flops": flops_per_token * tokens}
    if tokens_per_s:
        out["hours"] = tokens / tokens_per_s / 3600.0
    return out


PROJECTION_STEPS = 3
"""Steps timed (after the first, which pays for warm-up and compilation) for the projection."""


class CausalLM(nn.Module):
    """Wraps a language model so one forward returns the mean next-token loss (what DDP and
    torch.compile wrap). Input: (B, T + 1) windows."""

    def __init__(self, lm: GPT | LSTMLM) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        h = self.lm(windows[:, :-1])  # (B, T, C)
        return self.lm.lm_losses(h, windows[:, 1:]).mean()  # fused output layer + loss


def _seeded_loss(model: nn.Module, batch: tuple[int, torch.Tensor]) -> torch.Tensor:
    seed, windows = batch
    torch.manual_seed(seed)  # dropout masks depend on (run seed, step, micro-batch) only
    loss: torch.Tensor = model(windows)
    return loss


def micro_batch_seed(seed: int, step: int, micro: int) -> int:
    """A 63-bit seed for one global micro-batch (independent of rank count)."""
    blob = hashlib.sha256(f"{seed}/{step}/{micro}".encode()).digest()
    return int.from_bytes(blob[:8], "little") >> 1


def zero_shot_steps(total_steps: int, count: int) -> list[int]:
    """`count` log-spaced update counts in [1, total_steps] (Figure 2 right), deduplicated."""
    if count == 0:
        return []
    return sorted({int(round(s)) for s in np.geomspace(1, total_steps, count)})


def total_steps_for(cfg: Any, windows_per_epoch: int) -> int:
    """Updates in the run from the token or epoch budget (exactly one is set)."""
    tokens_per_step = cfg.batch_seqs * cfg.seq_len
    if cfg.max_tokens is not None:
        steps = cfg.max_tokens // tokens_per_step
    else:
        steps = int(cfg.epochs * windows_per_epoch // cfg.batch_seqs)
    if steps < 1:
        raise Gpt1Error(f"pretrain budget is less than one update of {tokens_per_step} tokens")
    return int(steps)


def resume_key(params: Params, kind: str, tokenizer_hash: str, precision: str) -> str:
    """Digest of everything that determines the trained weights."""
    pretrain = {k: v for k, v in params.pretrain.model_dump(mode="json").items()
                if k not in _NOT_TRAJECTORY}
    arch = params.model if kind == "gpt" else params.lstm
    blob = json.dumps([kind, arch.model_dump(mode="json"), pretrain, params.seed,
                       tokenizer_hash, precision], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@contextlib.contextmanager
def distributed(device_type: str) -> Iterator[tuple[int, int]]:
    """(rank, world size); joins the torchrun process group when WORLD_SIZE > 1 (gloo on CPU,
    nccl on CUDA) and leaves it afterwards."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        yield 0, 1
        return
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    try:
        yield dist.get_rank(), dist.get_world_size()
    finally:
        if owned:
            dist.destroy_process_group()


def evaluate(
    model: nn.Module, windows: torch.Tensor, micro_batch_seqs: int, precision: str,
    rank: int, world: int,
) -> dict[str, float]:
    """Mean validation loss over the fixed windows and its perplexity (token level)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)
    with torch.no_grad(), autocast_for(precision, device):
        for i, start in enumerate(range(0, len(windows), micro_batch_seqs)):
            if i % world == rank:
                batch = to_device(windows[start : start + micro_batch_seqs], device)
                total[0] += model(batch).double() * len(batch)
                total[1] += len(batch)
    if world > 1:
        dist.all_reduce(total)
    model.train(was_training)
    loss = (total[0] / total[1]).item()
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50.0))}


def pretrain(
    lm: GPT | LSTMLM,
    train_tokens: Sequence[np.ndarray],
    val_tokens: Sequence[np.ndarray],
    params: Params,
    run_dir: str | Path,
    meta: dict[str, Any],
    flops_per_token: float,
    on_metrics: MetricsSink,
) -> dict[str, Any]:
    """Pre-train `lm` to params.pretrain's budget in run_dir, resuming from its latest checkpoint.

    `meta` (kind, vocab_size, tokenizer_hash) is recorded with every checkpoint and the final
    model. Returns the final metrics (val loss/perplexity, throughput).
    """
    cfg, run_dir = params.pretrain, Path(run_dir)
    device = training_device()
    precision = resolve_precision(cfg.precision, device)
    with distributed(device.type) as (rank, world), stop_on_signals() as stop:
        accum, rem = divmod(cfg.batch_seqs, cfg.micro_batch_seqs * world)
        if rem or accum < 1:
            raise Gpt1Error(
                f"pretrain.batch_seqs={cfg.batch_seqs} is not micro_batch_seqs="
                f"{cfg.micro_batch_seqs} x accumulation x {world} ranks"
            )
        assert accum * cfg.micro_batch_seqs * world == cfg.batch_seqs
        sampler = WindowSampler(train_tokens, cfg.seq_len, params.seed)
        val = eval_windows(val_tokens, cfg.seq_len, cfg.eval_batches * cfg.micro_batch_seqs)
        total_steps = total_steps_for(cfg, sampler.windows_per_epoch)
        lm.to(device).train()
        optimizer = build_optimizer(lm, cfg.lr_max, (cfg.adam_beta1, cfg.adam_beta2),
                                    cfg.adam_eps, cfg.weight_decay)
        key = resume_key(params, meta["kind"], meta["tokenizer_hash"], precision)
        start, history = _resume(run_dir, lm, optimizer, key, rank)
        loss_module = CausalLM(lm)
        if cfg.compile:
            loss_module.compile()  # in place: state_dict keys and DDP wrapping unchanged
        module: nn.Module = loss_module
        if world > 1:
            module = DistributedDataParallel(
                loss_module, device_ids=[device.index] if device.type == "cuda" else None)
        zs_steps = set(zero_shot_steps(total_steps, cfg.zero_shot_checkpoints))
        log.info("pretrain %s: %d updates of %d x %d tokens (%d micro x %d accum x %d ranks), "
                 "%s, from step %d", meta["kind"], total_steps, cfg.batch_seqs, cfg.seq_len,
                 cfg.micro_batch_seqs, accum, world, precision, start)
        tokens_per_step = cfg.batch_seqs * cfg.seq_len
        plan = cost_projection(sum(p.numel() for p in lm.parameters()), flops_per_token,
                               total_steps * tokens_per_step)
        log.info("cost: %.4g parameters, %.4g FLOP/token, %.4g tokens planned, %.4g FLOP in all",
                 plan["params"], plan["flops_per_token"], plan["tokens"], plan["flops"])
        watch = NonFiniteWatch(device)
        timed_from = start + 1 if total_steps - start > PROJECTION_STEPS + 1 else None
        bar = progress(total=total_steps, initial=start, unit="step", disable=rank != 0,
                       desc=f"pretrain {meta['kind']}", mininterval=2.0, dynamic_ncols=True)
        window_t, window_steps, tokens_per_s = time.perf_counter(), 0, 0.0
        last: dict[str, float] = {}
        for step in range(start, total_steps):
            if step == timed_from:
                _sync(device)
                timed_t = time.perf_counter()
            micro = [
                (micro_batch_seed(params.seed, step, m),
                 to_device(sampler.batch(step * cfg.batch_seqs + m * cfg.micro_batch_seqs,
                                         cfg.micro_batch_seqs), device))
                for m in range(rank * accum, (rank + 1) * accum)
            ]
            lr = lr_at(step, total_steps, cfg.warmup_steps, cfg.lr_max, cfg.lr_schedule)
            loss, norm, finite = train_step(module, optimizer, micro, _seeded_loss, lr,
                                             cfg.grad_clip, precision, watch.halted)
            watch.record(step, loss, norm, finite)
            done, window_steps = step + 1, window_steps + 1
            bar.update(1)
            if timed_from is not None and done == timed_from + PROJECTION_STEPS:
                _sync(device)
                rate = PROJECTION_STEPS * tokens_per_step / (time.perf_counter() - timed_t)
                hours = cost_projection(0, flops_per_token, int(plan["tokens"]), rate)["hours"]
                log.info("cost: %.0f tokens/s (%.4g FLOP/s) over steps %d-%d: %.2f h in all, "
                         "%.2f h left", rate, rate * flops_per_token, timed_from + 1, done,
                         hours, hours * (total_steps - done) / total_steps)
            if any(done % every == 0 for every in (cfg.log_interval_steps,
                                                    cfg.eval_interval_steps,
                                                    cfg.checkpoint_interval_steps)) \
                    or done == total_steps or done in zs_steps:
                watch.check(run_dir)  # the loop's only host syncs: log, eval, checkpoint, end
                last = {"loss": loss.item(), "grad_norm": norm.item(), "lr": lr}
            if done % cfg.log_interval_steps == 0 or done == total_steps:
                elapsed = time.perf_counter() - window_t
                tokens_per_s = window_steps * tokens_per_step / elapsed
                window_t, window_steps = time.perf_counter(), 0
                flops = tokens_per_s * flops_per_token
                bar.set_postfix(loss=f"{last['loss']:.3f}", tok_s=f"{tokens_per_s:,.0f}")
                if rank == 0:
                    on_metrics(done, {**last, "tokens_per_s": tokens_per_s, "flops_per_s": flops,
                                      "tokens": float(done * tokens_per_step)})
            if done % cfg.eval_interval_steps == 0 or done == total_steps:
                ev = evaluate(loss_module, val, cfg.micro_batch_seqs, precision, rank, world)
                history.append({"step": done, "tokens": done * tokens_per_step,
                                "train_loss": last["loss"], **ev})
                log.info("step %d: train loss %.4f, val loss %.4f, val ppl %.2f",
                         done, last["loss"], ev["val_loss"], ev["val_ppl"])
                if rank == 0:
                    on_metrics(done, ev)
            if rank == 0 and done in zs_steps:
                checkpoint.save_weights(checkpoint.zeroshot_path(run_dir, done), lm)
            stopping = _stop_agreed(stop, world, device)
            if stopping:
                watch.check(run_dir)  # a stop between log intervals saves checked weights too
            if done % cfg.checkpoint_interval_steps == 0 or done == total_steps or stopping:
                if rank == 0:
                    checkpoint.save_checkpoint(run_dir, done, lm, optimizer, {
                        "resume_key": key, "data_position": done * cfg.batch_seqs,
                        "history": history, **meta, "params": params.as_dict(),
                    })
                if world > 1:
                    dist.barrier()
            if stopping and done < total_steps:
                bar.close()
                raise stop.stop(f"stopped at step {done}; re-run to resume")
        bar.close()
        if rank == 0:
            checkpoint.write_model(run_dir, lm, {
                **meta, "params": params.as_dict(), "step": total_steps, "precision": precision,
                "arch": params.model.arch if meta["kind"] == "gpt" else "lstm",
            })
        final = history[-1] if history else {}
        return {
            "steps": total_steps, "tokens": total_steps * tokens_per_step,
            "val_loss": final.get("val_loss"), "val_ppl": final.get("val_ppl"),
            "tokens_per_s": tokens_per_s, "flops_per_s": tokens_per_s * flops_per_token,
            "precision": precision, "world_size": world, "history": history,
        }


def _stop_agreed(stop: StopRequest, world: int, device: torch.device) -> bool:
    """Whether to stop after this step: the local request, or any rank's under DDP (all ranks
    must save and leave at the same step)."""
    if world == 1:
        return bool(stop)
    signum = torch.tensor([stop.signum or 0], device=device)
    dist.all_reduce(signum, op=dist.ReduceOp.MAX)
    stop.signum = int(signum.item()) or None
    return bool(stop)


def _sync(device: torch.device) -> None:
    """Wait for the device's queued work (timing only; CPU work is synchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _resume(
    run_dir: Path, lm: nn.Module, optimizer: torch.optim.Optimizer, key: str, rank: int
) -> tuple[int, list[dict[str, Any]]]:
    """(start step, eval history) from the latest checkpoint, or (0, []) for a fresh run.

    Checkpoints written with other trajectory-defining params are discarded (the run restarts),
    as DVC would have deleted a non-persistent output.
    """
    if rank == 0:
        checkpoint.remove_partial_writes(run_dir)
    ckpt = checkpoint.latest_checkpoint(run_dir)
    if ckpt is None:
        return 0, []
    state = checkpoint.read_checkpoint_state(ckpt)
    if state.get("resume_key") != key:
        log.warning("%s: written with other params; starting a fresh run", ckpt)
        if rank == 0:
            shutil.rmtree(run_dir / checkpoint.CKPT_DIR, ignore_errors=True)
            shutil.rmtree(run_dir / checkpoint.ZEROSHOT_DIR, ignore_errors=True)
        if dist.is_initialized():
            dist.barrier()
        return 0, []
    state = checkpoint.load_checkpoint(ckpt, lm, optimizer)
    log.info("resuming from %s (step %d)", ckpt, state["step"])
    return int(state["step"]), list(state["history"])
