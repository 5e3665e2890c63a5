"""The pre-training loop (spec §1): resumable, data-parallel, native bf16.

`pretrain` runs `for step in range(start, total_steps)` over seeded windows of the token
shards. Each step is one `train_step`; then three components, each deciding when it is due,
read the step: the `Meter` (train loss and throughput every log_interval_steps, the cost
projection after the first timed steps), the `Evaluator` (validation loss every
eval_interval_steps) and the `Checkpointer` (a checkpoint every checkpoint_interval_steps and
at a stop, log-spaced zero-shot weights). The loss stays on the device between their sync
points. A run killed at any moment and re-run ends bit-identical to one never stopped: the
data order is a pure function of (pre-training seed, sequence index) and every micro-batch
reseeds the dropout generator from (pre-training seed, step, micro-batch), so no hidden state
outlives a step.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from gpt1 import checkpoint, graphs, micro_batch, names
from gpt1.config import Params
from gpt1.data.loader import WindowSampler, eval_windows
from gpt1.errors import Gpt1Error
from gpt1.interrupt import stop_on_signals
from gpt1.lstm import LSTMLM
from gpt1.model import GPT, keep_norms_low_precision, next_token_loss
from gpt1.optim import build_optimizer, lr_at
from gpt1.progress import MetricsSink, progress
from gpt1.runtime import (
    Stopwatch,
    autocast_for,
    c_compiler,
    check_shared_dir,
    compile_or_eager,
    data_parallel,
    distributed,
    resolve_precision,
    stop_agreed,
    to_device,
)
from gpt1.runtime import device as run_device
from gpt1.snapshot import BackgroundWriter, HostCopier
from gpt1.step import NonFiniteWatch, WholeUpdate, micro_batch_seed, seeded_loss, train_step
from gpt1.zero1 import ShardedAdamW, sharded_optimizer

log = logging.getLogger(__name__)

# Fields that change what is logged, how fast, or how the global batch is split (micro-batch
# size; the rank count is in no params), or only the rounding of the same sums (the fused
# loss, the clip in the optimizer kernel, bf16 LayerNorm outputs; as `compile` does): a run
# may resume from a checkpoint written with other values of these. The data order and the
# global batch stay the same; dropout masks are drawn per micro-batch, so after a
# micro_batch_seqs change they follow the new split.
_NOT_TRAJECTORY = ("eval_interval_steps", "eval_batches", "log_interval_steps",
                   "checkpoint_interval_steps", "compile", "cuda_graphs", "micro_batch_seqs",
                   "nproc", "zero1", "loss_chunk_tokens", "fused_clip", "bf16_norms",
                   "cuda_graph_scope")
PROJECTION_STEPS = 3
"""Steps timed (after the first, which pays for warm-up and compilation) for the projection."""


class CausalLM(nn.Module):
    """Wraps a language model so one forward returns the mean next-token loss (what DDP and
    torch.compile wrap). Input: (B, T + 1) windows. `loss_chunk_tokens`
    (pretrain.loss_chunk_tokens): the output layer and loss fused over chunks of that many
    tokens (gpt1.model.next_token_loss); None: the per-token losses' mean."""

    def __init__(self, lm: GPT | LSTMLM, loss_chunk_tokens: int | None = None) -> None:
        super().__init__()
        self.lm, self.loss_chunk_tokens = lm, loss_chunk_tokens

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        return next_token_loss(self.lm, windows, self.loss_chunk_tokens)


def step_micro_batches(sampler: WindowSampler, pretrain_seed: int, step: int, rank: int,
                       accum: int, size: int, batch_seqs: int, device: torch.device
                       ) -> list[tuple[int, torch.Tensor]]:
    """This rank's (dropout seed, windows) micro-batches of update `step`: global micro-batch
    m holds windows step x batch_seqs + m x size onward and its seed is
    micro_batch_seed(pretrain_seed, step, m), with or without CUDA graphs."""
    return [(micro_batch_seed(pretrain_seed, step, m),
             to_device(sampler.batch(step * batch_seqs + m * size, size), device))
            for m in range(rank * accum, (rank + 1) * accum)]


def zero_shot_steps(total_steps: int, count: int, warmup_steps: int = 0) -> list[int]:
    """Figure 2 right: step 0 (the random init), then `count - 1` update counts log-spaced from
    the end of warm-up (at least update 1) to total_steps, deduplicated."""
    if count <= 1:
        return [total_steps] * count
    first = min(max(1, warmup_steps), total_steps)
    spaced = np.geomspace(first, total_steps, count - 1) if count > 2 else [total_steps]
    return [0, *sorted({int(round(s)) for s in spaced})]


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


def cost_projection(n_params: int, flops_per_token: float, tokens: int,
                    tokens_per_s: float | None = None) -> dict[str, float]:
    """Parameters, FLOPs per token, planned tokens, total FLOPs and, given a training rate,
    the hours they take (matmul FLOPs, as flops_per_token counts them)."""
    out = {"params": float(n_params), "flops_per_token": flops_per_token,
           "tokens": float(tokens), "flops": flops_per_token * tokens}
    if tokens_per_s:
        out["hours"] = tokens / tokens_per_s / 3600.0
    return out


def resume_key(params: Params, body: str, pretrain_seed: int, tokenizer_hash: str,
               precision: str) -> str:
    """Digest of everything that determines the trained weights (the body as checkpoints
    were always keyed: gpt1.names.RESUME_WORDS; the pre-training seed where params.seed stood
    when each run's params carried it, so a run in progress still resumes)."""
    pretrain = {k: v for k, v in params.pretrain.model_dump(mode="json").items()
                if k not in _NOT_TRAJECTORY}
    body = names.body(body)
    arch = params.model if body == names.TRANSFORMER else params.lstm
    blob = json.dumps([names.RESUME_WORDS[body], arch.model_dump(mode="json"), pretrain,
                       pretrain_seed, tokenizer_hash, precision], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def validation_loss(
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


class Cadence:
    """A part of the loop due every `every` updates and after the last (`total`)."""

    every: int
    total: int

    def due(self, done: int) -> bool:
        return done % self.every == 0 or done == self.total


class Meter(Cadence):
    """Train loss and throughput every log_interval_steps and at the end (rank 0 logs), and
    the cost projection: steps start+2 .. start+1+PROJECTION_STEPS timed on the device (no
    host sync), the hours logged at the next log point."""

    def __init__(self, cfg: Any, total_steps: int, start: int, flops_per_token: float,
                 device: torch.device, rank: int, kind: str, on_metrics: MetricsSink) -> None:
        self.every, self.total, self.device, self.rank = (cfg.log_interval_steps, total_steps,
                                                          device, rank)
        self.tokens_per_step = cfg.batch_seqs * cfg.seq_len
        self.flops_per_token, self.on_metrics = flops_per_token, on_metrics
        self.timed_from = start + 1 if total_steps - start > PROJECTION_STEPS + 1 else None
        self.stopwatch = Stopwatch(device)
        self.marks: list[Any] | None = [] if self.timed_from else None
        self.planned_tokens = total_steps * self.tokens_per_step
        self.bar = progress(total=total_steps, initial=start, unit="step", disable=rank != 0,
                            desc=f"pretrain {kind}", mininterval=2.0, dynamic_ncols=True)
        self.window_t, self.window_steps, self.tokens_per_s = time.perf_counter(), 0, 0.0

    def start_step(self, step: int) -> None:
        if step == self.timed_from and self.marks is not None:
            self.marks.append(self.stopwatch.mark())

    def end_step(self, done: int) -> None:
        self.window_steps += 1
        self.bar.update(1)
        if self.timed_from is not None and done == self.timed_from + PROJECTION_STEPS:
            cast(list[Any], self.marks).append(self.stopwatch.mark())

    def project(self, done: int) -> None:
        """Log the projection once its steps are timed (called at a log point)."""
        if self.marks is None or len(self.marks) < 2:
            return
        seconds = self.stopwatch.seconds(*self.marks)
        self.marks = None
        rate = PROJECTION_STEPS * self.tokens_per_step / seconds
        hours = cost_projection(0, self.flops_per_token, self.planned_tokens, rate)["hours"]
        first = cast(int, self.timed_from) + 1
        log.info("cost: %.0f tokens/s (%.4g FLOP/s) over steps %d-%d: %.2f h in all, "
                 "%.2f h left", rate, rate * self.flops_per_token, first,
                 first + PROJECTION_STEPS - 1, hours, hours * (self.total - done) / self.total)

    def log(self, done: int, last: dict[str, float]) -> None:
        self.project(done)
        elapsed = time.perf_counter() - self.window_t
        self.tokens_per_s = self.window_steps * self.tokens_per_step / elapsed
        self.window_t, self.window_steps = time.perf_counter(), 0
        self.bar.set_postfix(loss=f"{last['loss']:.3f}", tok_s=f"{self.tokens_per_s:,.0f}")
        if self.rank == 0:
            self.on_metrics(done, {**last, "tokens_per_s": self.tokens_per_s,
                                   "flops_per_s": self.tokens_per_s * self.flops_per_token,
                                   "tokens": float(done * self.tokens_per_step)})


class Evaluator(Cadence):
    """Validation loss every eval_interval_steps and at the end, appended to the history."""

    def __init__(self, cfg: Any, total_steps: int, loss_module: nn.Module, windows: torch.Tensor,
                 micro: int, precision: str, rank: int, world: int,
                 history: list[dict[str, Any]], on_metrics: MetricsSink) -> None:
        self.every, self.total, self.module, self.windows = (cfg.eval_interval_steps,
                                                             total_steps, loss_module, windows)
        self.micro, self.precision, self.rank, self.world = micro, precision, rank, world
        self.tokens_per_step = cfg.batch_seqs * cfg.seq_len
        self.history, self.on_metrics = history, on_metrics

    def run(self, done: int, last: dict[str, float]) -> None:
        ev = validation_loss(self.module, self.windows, self.micro, self.precision, self.rank,
                             self.world)
        self.history.append({"step": done, "tokens": done * self.tokens_per_step,
                             "train_loss": last["loss"], **ev})
        log.info("step %d: train loss %.4f, val loss %.4f, val ppl %.2f",
                 done, last["loss"], ev["val_loss"], ev["val_ppl"])
        if self.rank == 0:
            self.on_metrics(done, ev)


class Checkpointer(Cadence):
    """A checkpoint every checkpoint_interval_steps, at the end and when stopping, and the
    zero-shot weights at log-spaced steps: rank 0 queues a host copy and `writer` writes it in
    the background (gpt1.snapshot); no rank waits for the write."""

    def __init__(self, cfg: Any, total_steps: int, run_dir: Path, lm: nn.Module,
                 optimizer: torch.optim.Optimizer, key: str, meta: dict[str, Any],
                 params: dict[str, Any], rank: int, writer: BackgroundWriter) -> None:
        self.every, self.total, self.run_dir, self.lm = (cfg.checkpoint_interval_steps,
                                                         total_steps, run_dir, lm)
        self.optimizer, self.rank, self.writer = optimizer, rank, writer
        self.key, self.meta, self.params = key, meta, params
        self.batch_seqs, self.copier = cfg.batch_seqs, HostCopier()
        self.zero_shot = set(zero_shot_steps(total_steps, cfg.zero_shot_checkpoints,
                                             cfg.warmup_steps))

    def zero_shot_due(self, done: int) -> bool:
        return done in self.zero_shot

    def save_zero_shot(self, done: int) -> None:
        if self.rank == 0:
            path = checkpoint.zeroshot_path(self.run_dir, done)
            weights = {checkpoint.MODEL_FILE: dict(self.lm.state_dict())}
            self.writer.submit(lambda: self.copier.copy(weights), lambda host: (
                checkpoint.save_weights(path, host.groups[checkpoint.MODEL_FILE])))

    def save(self, done: int, history: list[dict[str, Any]]) -> None:
        if isinstance(self.optimizer, ShardedAdamW):  # ZeRO-1: every rank sends rank 0 its
            self.optimizer.consolidate_state_dict()  # shard; the file holds the whole state
        if self.rank == 0:
            tensors, groups = checkpoint.training_state(self.lm, self.optimizer)
            state = {"resume_key": self.key, "data_position": done * self.batch_seqs,
                     "history": list(history), **self.meta, "params": self.params}
            self.writer.submit(lambda: self.copier.copy(tensors), lambda host: (
                checkpoint.write_checkpoint(self.run_dir, done, host.groups, groups, state)))


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

    `meta` (kind, vocab_size, tokenizer_hash, pretrain_seed) is recorded with every checkpoint
    and the final model; meta["pretrain_seed"] seeds the run's data order and dropout masks and
    keys its resume (params.seed is not read). Returns the final metrics (val loss/perplexity,
    throughput).
    """
    cfg, run_dir = params.pretrain, Path(run_dir)
    pretrain_seed = int(meta["pretrain_seed"])
    meta = {**meta, "kind": names.body(meta["kind"])}
    device = run_device(params.device)
    precision = resolve_precision(cfg.precision, device)
    with (distributed(device.type) as (rank, world), stop_on_signals() as stop,
          BackgroundWriter() as writer):
        cfg.accumulation(world)
        cfg.refuse_graphs_with_ddp(world)
        if world > 1:
            check_shared_dir(run_dir, rank, world, device)
        sampler = WindowSampler(train_tokens, cfg.seq_len, pretrain_seed)
        val = eval_windows(val_tokens, cfg.seq_len, micro_batch.eval_window_count(cfg))
        total_steps = total_steps_for(cfg, sampler.windows_per_epoch)
        lm.to(device).train()
        make_optimizer = sharded_optimizer if cfg.zero1 and world > 1 else build_optimizer
        optimizer = make_optimizer(lm, cfg.lr_max, (cfg.adam_beta1, cfg.adam_beta2),
                                   cfg.adam_eps, cfg.weight_decay)
        key = resume_key(params, meta["kind"], pretrain_seed, meta["tokenizer_hash"], precision)
        start, history, split = _resume(run_dir, lm, optimizer, key, rank)
        loss_module = CausalLM(lm, cfg.loss_chunk_tokens)
        _keep_norms_bf16(lm, cfg.bf16_norms, precision)
        size = micro_batch.resolve(cfg, world, split, micro_batch.probe(
            loss_module, cfg.seq_len, meta["vocab_size"], precision, device,
            micro_batch.unallocated_bytes(lm, optimizer, world, bucket_view=True)),
            lambda: micro_batch.memory_limit(device, world), device)
        accum = cfg.accumulation(world, size)
        module: nn.Module = loss_module
        if world > 1:
            module = data_parallel(loss_module, device, cfg.ddp_bucket_mb, cfg.ddp_bf16_grads)
        # CUDA graphs: the updates through a graphed wrapper (or captured whole), evaluation
        # through the eager module (its no-grad shapes never enter the graphs); where they
        # cannot run, one line
        graphs_on = graphs.usable(cfg.cuda_graphs, device, accum, c_compiler() is not None)
        graphed = (graphs.graphed(module) if graphs_on
                   and cfg.cuda_graph_scope == "forward_backward" else None)
        if cfg.compile and graphed is None:  # DDP compiled as the wrapper: its gradient
            # all-reduce buckets then overlap backward (Dynamo's DDPOptimizer); in place, so
            # state_dict keys and the DDP type (no_sync) stay; one process: the loss module,
            # evaluation included
            compile_or_eager(module, "pretrain.compile")
        update_module = module if graphed is None else graphed
        recordings = graphs.Recordings(on=graphed is not None)
        whole = (WholeUpdate(module, optimizer, cfg.grad_clip, precision, cfg.fused_clip,
                             graphs.WARMUP_STEPS, recordings.recorded)
                 if graphs_on and graphed is None else None)
        warm_recordings = 0
        log.info("pretrain %s: %d updates of %d x %d tokens (%d micro x %d accum x %d ranks), "
                 "%s, from step %d", meta["kind"], total_steps, cfg.batch_seqs, cfg.seq_len,
                 size, accum, world, precision, start)
        plan = cost_projection(sum(p.numel() for p in lm.parameters()), flops_per_token,
                               total_steps * cfg.batch_seqs * cfg.seq_len)
        log.info("cost: %.4g parameters, %.4g FLOP/token, %.4g tokens planned, %.4g FLOP in all",
                 plan["params"], plan["flops_per_token"], plan["tokens"], plan["flops"])
        watch = NonFiniteWatch(device)
        meter = Meter(cfg, total_steps, start, flops_per_token, device, rank, meta["kind"],
                      on_metrics)
        evaluator = Evaluator(cfg, total_steps, loss_module, val, size, precision, rank, world,
                              history, on_metrics)
        split = {"micro_batch_seqs": size, "world_size": world}
        checkpointer = Checkpointer(cfg, total_steps, run_dir, lm, optimizer, key,
                                    {**meta, "split": split}, params.as_dict(), rank, writer)
        last: dict[str, float] = {}
        if start == 0 and checkpointer.zero_shot_due(0):
            checkpointer.save_zero_shot(0)  # the random init: Figure 2 right's first point
        for step in range(start, total_steps):
            meter.start_step(step)
            if step == start + graphs.WARMUP_STEPS:
                warm_recordings = recordings.count
            micro = step_micro_batches(sampler, pretrain_seed, step, rank, accum, size,
                                       cfg.batch_seqs, device)
            lr = lr_at(step, total_steps, cfg.warmup_steps, cfg.lr_max, cfg.lr_schedule)
            with recordings.counting():
                loss, norm, finite = (
                    whole(micro, lr, watch.halted) if whole is not None else
                    train_step(update_module, optimizer, micro, seeded_loss, lr, cfg.grad_clip,
                               precision, watch.halted, fused_clip=cfg.fused_clip))
            watch.record(step, loss, norm, finite)
            done = step + 1
            meter.end_step(done)
            sync_point = (meter.due(done) or evaluator.due(done) or checkpointer.due(done)
                          or checkpointer.zero_shot_due(done))
            if sync_point:
                watch.check(run_dir)  # the loop's only host syncs: log, eval, checkpoint, end
                last = {"loss": loss.item(), "grad_norm": norm.item(), "lr": lr}
            if meter.due(done):
                meter.log(done, last)
            if evaluator.due(done):
                evaluator.run(done, last)
            if checkpointer.zero_shot_due(done):
                checkpointer.save_zero_shot(done)
            # ranks agree on a stop at sync points only (one process: every step, no sync)
            stopping = (sync_point or world == 1) and stop_agreed(stop, world, device)
            if stopping:
                watch.check(run_dir)  # a stop between log intervals saves checked weights too
            if checkpointer.due(done) or stopping:
                checkpointer.save(done, history)
            if stopping and done < total_steps:
                meter.bar.close()
                writer.wait()  # the checkpoint is on disk (or its error raised) before the stop
                raise stop.stop(f"stopped at step {done}; re-run to resume")
        meter.bar.close()
        writer.wait()  # every checkpoint and zero-shot file written: model.json hashes them
        if rank == 0:
            checkpoint.write_model(run_dir, lm, {
                **meta, "params": params.as_dict(), "step": total_steps, "precision": precision,
                "arch": params.model.arch if meta["kind"] == names.TRANSFORMER else names.LSTM,
                "split": split,
            })
        final = history[-1] if history else {}
        return {
            "steps": total_steps, "tokens": total_steps * cfg.batch_seqs * cfg.seq_len,
            "val_loss": final.get("val_loss"), "val_ppl": final.get("val_ppl"),
            "tokens_per_s": meter.tokens_per_s,
            "flops_per_s": meter.tokens_per_s * flops_per_token,
            "precision": precision, "world_size": world, "micro_batch_seqs": size,
            "accumulation": accum, "cuda_graphs": graphs_on,
            "cuda_graph_recordings": recordings.count,  # after warm-up: none expected
            "cuda_graph_rerecordings": recordings.count - warm_recordings
            if total_steps - start > graphs.WARMUP_STEPS else 0,
            "checkpoint_blocking_s": writer.blocking_s,
            "checkpoint_writing_s": writer.writing_s, "history": history,
            "optimizer_state_bytes": sum(t.numel() * t.element_size()  # this rank's
                                         for st in optimizer.state.values() for t in st.values()
                                         if torch.is_tensor(t)),
        }


def _keep_norms_bf16(lm: nn.Module, on: bool, precision: str) -> None:
    """pretrain.bf16_norms: the LayerNorm outputs of `lm` kept in bf16 under autocast; in an
    fp32 run (no autocast) there is nothing to keep, one warning line says so."""
    if on and precision != "bf16":
        log.warning("pretrain.bf16_norms: precision is %s (no bf16 autocast): LayerNorm outputs "
                    "stay fp32", precision)
    keep_norms_low_precision(lm, on and precision == "bf16")


def _resume(
    run_dir: Path, lm: nn.Module, optimizer: torch.optim.Optimizer, key: str, rank: int
) -> tuple[int, list[dict[str, Any]], dict[str, Any] | None]:
    """(start step, eval history, the batch split recorded) from the latest checkpoint, or
    (0, [], None) for a fresh run.

    Checkpoints written with other trajectory-defining params are discarded (the run restarts),
    as DVC would have deleted a non-persistent output.
    """
    ckpt = checkpoint.latest_checkpoint(run_dir)
    state = checkpoint.read_checkpoint_state(ckpt) if ckpt is not None else {}
    resumes = ckpt is not None and state.get("resume_key") == key
    if resumes and ckpt is not None:
        state = checkpoint.load_checkpoint(ckpt, lm, optimizer)
    if dist.is_initialized():
        dist.barrier()  # every rank has read what it needs before rank 0 deletes anything
    if rank == 0:
        checkpoint.remove_partial_writes(run_dir)
    if state and not resumes:
        log.warning("%s: written with other params; starting a fresh run", ckpt)
        if rank == 0:
            shutil.rmtree(run_dir / checkpoint.CKPT_DIR, ignore_errors=True)
            shutil.rmtree(run_dir / checkpoint.ZEROSHOT_DIR, ignore_errors=True)
        if dist.is_initialized():
            dist.barrier()
    if not resumes:
        return 0, [], None
    log.info("resuming from %s (step %d)", ckpt, state["step"])
    return int(state["step"]), list(state["history"]), state.get("split")
