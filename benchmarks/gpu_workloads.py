"""What the pipeline runs at the paper shape, measured by benchmarks/gpu_check.py on one device.

- `preset_split`: the paper preset's micro-batching (micro_batch_seqs: auto, gpt1/micro_batch.py)
  for N ranks: the probe's micro-batch of the per-rank batch 64 / N, then the updates
  train_step runs with it (micro x accumulation), timed on one GPU (no all-reduce);
- `pretrain_loop`: 20 updates of gpt1.pretraining.pretrain itself, on synthetic shards,
  checkpoints every 10 (written in the background), a log point every 5: tokens/s of each log
  window (the one after step 10 holds the first checkpoint's stall, the one before it the
  compiled loop alone), the seconds checkpoints held the loop and took to write, the host
  syncs (CUDA's sync debug mode). It needs the project's
  environment (the params schema); elsewhere it is reported as not run;
- `finetune_step`: one fine-tuning update of the task model (RACE: 32 examples x 4 answers x 512
  tokens; MNLI: 32 x 1 x 128) with the auxiliary LM loss (chunked cross-entropy), timed and its
  peak memory read;
- `transformers_rate`: transformers' OpenAIGPTLMHeadModel at the same shape, when installed.
Every function takes its device, so the CPU tests run the small shapes through the same code.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from gpt1 import graphs, micro_batch, names
from gpt1.heads import TaskModel
from gpt1.lstm import LSTMLM
from gpt1.model import GPT, keep_norms_low_precision, next_token_loss
from gpt1.optim import build_optimizer
from gpt1.runtime import Stopwatch, to_device
from gpt1.step import WholeUpdate, micro_batch_seed, seeded_loss, train_step
from gpt1.task_losses import make_loss_fn
from gpt1.tasks.registry import TASKS

ROOT = Path(__file__).resolve().parents[1]
PAPER_PRETRAIN: dict[str, Any] = {"batch_seqs": 64, "micro_batch_seqs": "auto",
                                  "seq_len": 512, "compile": True, "precision": "auto"}
"""configs/paper.yaml's pre-training batch split (tests/unit/benchmarks/test_gpu_check.py keeps
them equal)."""
PAPER_FINETUNE = {"batch_size": 32, "lm_coef": 0.5, "compile": True}
"""configs/paper.yaml's fine-tuning batch, auxiliary LM weight and compile (kept equal too)."""
FINETUNE_SHAPES = {"race": (4, 512), "mnli": (1, 128)}
"""task -> (sequences per example, tokens per sequence): RACE's 4 answers at the full context;
an MNLI batch padded to 128 tokens."""


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


@contextlib.contextmanager
def synchronizing_calls(device: torch.device) -> Iterator[list[traceback.StackSummary]]:
    """The synchronizing CUDA calls made inside the block, each as the Python stack that made
    it (torch's sync debug mode `warn`; none on the CPU). The mode is switched on before the
    warnings are caught: switching it on raised one warning of its own on an H200 (torch
    2.11), which a first count took for a sync (under mode `error` the same updates raised
    nothing). Other warnings inside the block are dropped."""
    calls: list[traceback.StackSummary] = []
    if device.type != "cuda":
        yield calls
        return

    def note(message: Any, *_: Any, **__: Any) -> None:
        if "synchroniz" in str(message):
            calls.append(traceback.StackSummary.from_list(traceback.extract_stack()[:-1]))

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():  # restores showwarning on exit
            warnings.simplefilter("always")
            warnings.showwarning = note
            yield calls
    finally:
        torch.cuda.set_sync_debug_mode("default")


def peak_gib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0


def compiled(module: nn.Module, on: bool) -> nn.Module:
    """`module` compiled in place after a Dynamo reset (each configuration compiles afresh)."""
    if on:
        torch._dynamo.reset()
        module.compile()
    return module


class CausalLoss(nn.Module):
    """(B, T + 1) windows -> mean next-token loss (as gpt1.pretraining.CausalLM, which needs
    the params schema): `loss_chunk_tokens` as pretrain.loss_chunk_tokens."""

    def __init__(self, lm: GPT, loss_chunk_tokens: int | None = None) -> None:
        super().__init__()
        self.lm, self.loss_chunk_tokens = lm, loss_chunk_tokens

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        return next_token_loss(self.lm, windows, self.loss_chunk_tokens)


def gpt(cfg: dict[str, Any], vocab: int, device: torch.device) -> GPT:
    torch.manual_seed(0)
    return GPT(SimpleNamespace(**cfg), vocab).to(device)  # type: ignore[arg-type]


def probe_micro(cfg: dict[str, Any], vocab: int, seq: int, per_rank: int, precision: str,
                device: torch.device, limit: float | None = None) -> int:
    """The micro-batch `micro_batch_seqs: auto` picks on this device for a per-rank batch of
    `per_rank` sequences (one rank's memory: the probe as pre-training runs it)."""
    lm = gpt(cfg, vocab, device).train()
    opt = build_optimizer(lm, 1e-4, (0.9, 0.999), 1e-8, 0.01)
    measure = micro_batch.probe(CausalLoss(lm), seq, vocab, precision, device,
                                micro_batch.unallocated_bytes(lm, opt, 1, bucket_view=True))
    budget = micro_batch.memory_limit(device, 1) if limit is None else limit
    return micro_batch.choose(per_rank, measure, budget)


WINDOWS, WINDOW_UPDATES = 5, 20
"""Every rate is the median of WINDOWS windows of WINDOW_UPDATES updates, with its spread."""


@dataclass(frozen=True)
class Rate:
    """tokens/s of each timed window (the device's clock: CUDA events) and the host's
    milliseconds to enqueue an update in each (the host clock, no sync)."""

    windows: tuple[float, ...]
    host_ms: tuple[float, ...]
    updates: int
    tokens_per_update: float

    @property
    def median(self) -> float:
        return statistics.median(self.windows)

    def text(self, update_ms: bool = True) -> str:
        gpu_ms = self.tokens_per_update / self.median * 1e3
        host = (f"; an update {gpu_ms:.1f} ms on the device, its host enqueue "
                f"{statistics.median(self.host_ms):.1f} ms" if update_ms else "")
        return (f"{self.median:,.0f} tokens/s (median of {len(self.windows)} windows of "
                f"{self.updates} updates, {min(self.windows):,.0f}-{max(self.windows):,.0f})"
                f"{host}")


def windowed_rate(update: Callable[[int], None], tokens_per_update: int, device: torch.device,
                  windows: int = WINDOWS, per_window: int = WINDOW_UPDATES, warmup: int = 3
                  ) -> Rate:
    """Rate of update(i) over `windows` windows of `per_window` updates after `warmup`: each
    window timed between two CUDA events (the host clock on the CPU), read after the last."""
    for i in range(warmup):
        update(i)
    sync(device)
    watch = Stopwatch(device)
    marks, host = [watch.mark()], []
    i = warmup
    for _ in range(windows):
        t = time.perf_counter()
        for _ in range(per_window):
            update(i)
            i += 1
        host.append((time.perf_counter() - t) / per_window * 1e3)
        marks.append(watch.mark())
    sync(device)
    rates = tuple(per_window * tokens_per_update / watch.seconds(a, b)
                  for a, b in zip(marks, marks[1:], strict=False))
    return Rate(rates, tuple(host), per_window, float(tokens_per_update))


def body(cfg: dict[str, Any], vocab: int, device: torch.device) -> nn.Module:
    """The network of `cfg`: an LSTM section (hidden_size) or a Transformer's."""
    if "hidden_size" in cfg:
        torch.manual_seed(0)
        return LSTMLM(SimpleNamespace(**cfg), vocab).to(device)  # type: ignore[arg-type]
    return gpt(cfg, vocab, device)


@dataclass(frozen=True)
class Cuts:
    """The memory-bound cuts of an update, as the pretrain keys of the same names set them:
    the output layer + loss fused over `loss_chunk_tokens` (None: unfused), the clip inside
    the fused AdamW, LayerNorm outputs kept bf16 under autocast."""

    loss_chunk_tokens: int | None = None
    fused_clip: bool = False
    bf16_norms: bool = False

    def text(self) -> str:
        on = [f"pretrain.loss_chunk_tokens {self.loss_chunk_tokens}"] * (
            self.loss_chunk_tokens is not None)
        on += ["pretrain.fused_clip"] * self.fused_clip + ["pretrain.bf16_norms"] * self.bf16_norms
        return ", ".join(on) or "no cuts"


NO_CUTS = Cuts()


def loss_module(cfg: dict[str, Any], vocab: int, device: torch.device, cuts: Cuts = NO_CUTS
                ) -> nn.Module:
    """The network of `cfg` as pre-training trains it (the loss module, `cuts` applied)."""
    lm = body(cfg, vocab, device)
    keep_norms_low_precision(lm, cuts.bf16_norms)
    return CausalLoss(lm, cuts.loss_chunk_tokens).train()  # type: ignore[arg-type]


def updater(module: nn.Module, opt: torch.optim.Optimizer, precision: str, compile_: bool,
            scope: str | None, fused_clip: bool, recordings: graphs.Recordings | None = None
            ) -> Callable[[list[tuple[int, torch.Tensor]], float], torch.Tensor]:
    """update(micro-batches, lr) -> loss, as pretraining runs it: `scope` None = train_step
    over the module compiled as `compile_` says; forward_backward = the module graphed as
    pretrain.cuda_graphs does; update = the whole update captured (gpt1.step.WholeUpdate)
    over the compiled module. Clip 1.0, never halted."""
    torch._dynamo.reset()
    recordings = recordings or graphs.Recordings(on=False)
    if scope == "forward_backward":
        module = graphs.graphed(module)
    else:
        compiled(module, compile_)
    whole = (WholeUpdate(module, opt, 1.0, precision, fused_clip, graphs.WARMUP_STEPS,
                         recordings.recorded) if scope == "update" else None)
    halted = torch.zeros((), dtype=torch.bool, device=next(module.parameters()).device)

    def update(batches: list[tuple[int, torch.Tensor]], lr: float) -> torch.Tensor:
        with recordings.counting():
            if whole is not None:
                return whole(batches, lr, halted)[0]
            return train_step(module, opt, batches, seeded_loss, lr, 1.0, precision, halted,
                              fused_clip)[0]

    return update


def update_rate(cfg: dict[str, Any], vocab: int, seq: int, micro: int, accum: int,
                precision: str, device: torch.device, compile_: bool, cuda_graphs: bool = False,
                windows: int = WINDOWS, per_window: int = WINDOW_UPDATES, cuts: Cuts = NO_CUTS,
                scope: str = "forward_backward") -> tuple[Rate, float]:
    """(rate, peak GiB) of updates of `accum` micro-batches of `micro` x seq tokens through
    train_step, as pre-training runs them (seeds from micro_batch_seed, seeded_loss);
    cuda_graphs: graphed as pretrain.cuda_graphs does, with pretrain.cuda_graph_scope `scope`
    (gpt1.graphs); `cuts`: the memory-bound cuts on (Cuts)."""
    reset_peak(device)
    module = loss_module(cfg, vocab, device, cuts)
    opt = build_optimizer(module, 2.5e-4, (0.9, 0.999), 1e-8, 0.01)
    step = updater(module, opt, precision, compile_, scope if cuda_graphs else None,
                   cuts.fused_clip)
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, vocab, (accum, micro, seq + 1), generator=gen)

    def update(i: int) -> None:
        batches = [(micro_batch_seed(0, i, m), to_device(data[m], device)) for m in range(accum)]
        step(batches, 2.5e-4)

    rate = windowed_rate(update, accum * micro * seq, device, windows, per_window)
    return rate, peak_gib(device)


def graph_reseeding(cfg: dict[str, Any], vocab: int, seq: int, rows: int, precision: str,
                    device: torch.device, cuda_graphs: bool, warmup: int = graphs.WARMUP_STEPS,
                    scope: str = "forward_backward", compile_: bool = True) -> dict[str, Any]:
    """The dropout rule under CUDA graphs (pretrain.cuda_graph_scope `scope`): at lr 0 (the
    weights never change) updates of one micro-batch seeded (run seed, step, 0) as
    pre-training seeds it: the same seed twice gives bitwise-equal losses, another seed another
    loss; the graphs recorded after warm-up (gpt1.graphs.Recordings). The whole update is
    captured over the module compiled as the pipeline compiles it (`compile_`). cuda_graphs
    False: the same through the eager module."""
    module = loss_module(cfg, vocab, device)
    opt = build_optimizer(module, 0.0, (0.9, 0.999), 1e-8, 0.0)
    recordings = graphs.Recordings(on=cuda_graphs and scope == "forward_backward")
    step_of = updater(module, opt, precision, compile_ and cuda_graphs and scope == "update",
                      scope if cuda_graphs else None, False, recordings)
    windows = to_device(torch.randint(0, vocab, (rows, seq + 1),
                                      generator=torch.Generator().manual_seed(0)), device)

    def loss(seed: int, step: int) -> torch.Tensor:
        return step_of([(micro_batch_seed(seed, step, 0), windows)], 0.0).clone()

    for step in range(warmup):
        loss(1234, step)
    warm = recordings.count
    again = [loss(1234, 7), loss(1234, 7), loss(1235, 7)]
    sync(device)
    first, same, other = (float(x) for x in again)
    return {"same_seed_equal": bool(torch.equal(again[0], again[1])),
            "other_seed_differs": not bool(torch.equal(again[0], again[2])),
            "loss": first, "other_loss": other, "same_loss": same,
            "recordings": warm, "rerecordings": recordings.count - warm}


def lost_per_checkpoint(windows: list[tuple[int, float]], tokens_per_update: int,
                        checkpoint_steps: list[int]) -> tuple[float, float]:
    """(seconds lost per checkpoint, the steady tokens/s) of the loop's log windows [(the
    update a window ends at, its tokens/s)]: every window's time beyond the median window's
    (the windows' rate median), summed over the run, over the checkpoints taken."""
    ends = [windows[0][0] - (windows[1][0] - windows[0][0]) if len(windows) > 1 else 0,
            *(step for step, _ in windows)]  # the first window as long as the second
    spans = [b - a for a, b in zip(ends[:-1], ends[1:], strict=True)]
    steady = statistics.median(rate for _, rate in windows)
    lost = sum(n * tokens_per_update * (1 / rate - 1 / steady)
               for n, (_, rate) in zip(spans, windows, strict=True))
    return max(lost, 0.0) / max(len(checkpoint_steps), 1), steady


def finetune_step(cfg: dict[str, Any], vocab: int, task: str, batch: int, k: int, seq: int,
                  precision: str, device: torch.device, compile_: bool,
                  windows: int = WINDOWS, per_window: int = WINDOW_UPDATES
                  ) -> tuple[Rate, float]:
    """(rate in tokens/s, peak GiB) of fine-tuning updates on `batch` examples of k sequences
    of seq tokens (every position real), the auxiliary LM loss at PAPER_FINETUNE's weight."""
    reset_peak(device)
    spec = TASKS[task]
    model = compiled(TaskModel(gpt(cfg, vocab, device), spec, 0.1, 0.02).to(device).train(),
                     compile_)
    opt = build_optimizer(model, 6.25e-5, (0.9, 0.999), 1e-8, 0.01)
    loss_fn = make_loss_fn(spec, float(PAPER_FINETUNE["lm_coef"]))
    gen = torch.Generator().manual_seed(0)
    idx = to_device(torch.randint(1, vocab, (batch, k, seq), generator=gen), device)
    lengths = to_device(torch.full((batch, k), seq), device)
    n_out = k if spec.fmt == "choice" else spec.n_outputs
    labels = to_device(torch.randint(0, n_out, (batch,), generator=gen), device)

    def update(i: int) -> None:
        train_step(model, opt, [(idx, lengths, labels)], loss_fn, 6.25e-5, 1.0, precision)

    rate = windowed_rate(update, batch * k * seq, device, windows, per_window, warmup=1)
    return rate, peak_gib(device)


def pretrain_loop(device: torch.device, steps: int = 20, overrides: dict[str, Any] | None = None,
                  checkpoint_every: int | None = None, log_every: int | None = None
                  ) -> dict[str, Any]:
    """`steps` updates of gpt1.pretraining.pretrain at configs/paper.yaml (plus `overrides`) on
    synthetic shards in a temp run directory, a checkpoint every `checkpoint_every` (default
    steps / 2), a log window every `log_every` (default steps / 4): its metrics and the
    synchronizing CUDA calls it made. ImportError where the project's environment is missing."""
    import numpy as np

    from gpt1 import networks
    from gpt1.config import load_params, parse_params
    from gpt1.model import flops_per_token
    from gpt1.pretraining import pretrain

    raw = load_params(ROOT / "configs" / "paper.yaml").as_dict()
    for section, values in (overrides or {}).items():
        raw[section].update(values)
    pre = raw["pretrain"]
    pre.update(max_tokens=steps * pre["batch_seqs"] * pre["seq_len"], epochs=None,
               warmup_steps=2, checkpoint_interval_steps=checkpoint_every or steps // 2,
               log_interval_steps=log_every or max(1, steps // 4),
               eval_interval_steps=steps, eval_batches=1, zero_shot_checkpoints=1, nproc=1)
    raw.update(device=device.type)
    raw["tracking"]["enabled"] = False
    raw["curves"]["checkpoints"] = [0]  # the compute curve's one point: the kept final step
    vocab = 40_481
    with tempfile.TemporaryDirectory() as tmp:
        raw["paths"]["checkpoints"] = str(Path(tmp) / "run")
        params = parse_params(raw, "configs/paper.yaml (gpu_check)")
        rng = np.random.default_rng(0)
        seq = params.pretrain.seq_len
        train = [rng.integers(0, vocab, (steps + 2) * params.pretrain.batch_seqs * (seq + 1),
                              dtype=np.uint16)]
        val = [rng.integers(0, vocab, 2 * params.pretrain.batch_seqs * (seq + 1), dtype=np.uint16)]
        torch.manual_seed(params.seed)
        model = networks.build_model(names.TRANSFORMER, params, vocab)
        fpt = flops_per_token(params.model, vocab, seq)
        meta = {"kind": names.TRANSFORMER, "vocab_size": vocab, "tokenizer_hash": "0" * 64,
                "pretrain_seed": params.seed}
        windows: list[tuple[int, float]] = []
        with synchronizing_calls(device) as calls:
            metrics = pretrain(model, train, val, params, Path(tmp) / "run", meta, fpt,
                               lambda step, m: windows.append((step, m["tokens_per_s"]))
                               if "tokens_per_s" in m else None)
        metrics["host_syncs"] = len(calls)
        metrics["windows"] = windows  # (step, tokens/s of the log window ending there)
        metrics["flops_per_token"] = fpt
    return metrics


def transformers_rate(device: torch.device, compile_: bool, rows: int, seq: int, vocab: int,
                      windows: int = WINDOWS, per_window: int = WINDOW_UPDATES) -> Rate | None:
    """tokens/s of transformers' OpenAIGPTLMHeadModel (bf16 autocast, fused AdamW) at one
    micro-batch of `rows`, or None where transformers is not installed."""
    try:
        from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel
    except ImportError:
        return None
    torch._dynamo.reset()
    cfg = OpenAIGPTConfig(vocab_size=vocab, n_positions=seq, n_embd=768, n_layer=12, n_head=12)
    model: Any = OpenAIGPTLMHeadModel(cfg)
    model = model.to(device).train()
    step_model: Any = torch.compile(model) if compile_ else model
    opt = torch.optim.AdamW(model.parameters(), lr=2.5e-4, fused=True)
    data = torch.randint(0, vocab, (rows, seq), device=device)

    def update(i: int) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = step_model(input_ids=data, labels=data).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return windowed_rate(update, rows * seq, device, windows, per_window, warmup=2)
