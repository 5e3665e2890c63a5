"""ONE supervised fine-tuning loop for every TaskSpec (spec §2, parity notes spec §5).

Loss: mean(classifier loss) + lm_coef * mean(LM loss) with the LM loss masked to real tokens,
averaged per sequence, then over the batch. Adam(W) with warm-up then linear decay, gradient
clipping, bf16 autocast: gpt1.optim / gpt1.step.train_step, the same step as pre-training.
Per seed: train for the task's epochs on that seed's training set, keep the last epoch
(`select: final`, the paper) or the epoch with the best dev score (`select: dev`), score the
test split with it and save its predictions. The dev split only ever chooses; it is never a
reported split. Any body with forward(idx) -> (B, T, C) and
lm_logits(h) works (GPT, or the LSTM baseline of the ablations).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import torch
from torch import nn

from gpt1 import atomic, runtime
from gpt1.backends import backend_of
from gpt1.batching import epoch_batches, example_lengths
from gpt1.config import Params
from gpt1.heads import TaskModel
from gpt1.interrupt import StopRequest, stop_on_signals
from gpt1.model import GPT, transfer_weights
from gpt1.optim import build_optimizer, lr_at
from gpt1.progress import MetricsSink, progress
from gpt1.runtime import autocast_for, resolve_precision
from gpt1.scoring import aggregate, baselines, head_predictions, score_split
from gpt1.step import NonFiniteWatch, train_step
from gpt1.task_losses import make_loss_fn, new_tally, read_tally
from gpt1.tasks.formats import Encoded
from gpt1.tasks.registry import FRESH, TaskSpec

log = logging.getLogger(__name__)

BodyFactory = Callable[[int], nn.Module]
BestSink = Callable[[TaskModel, Path], None]
"""Gets the selected model of the first seed and the folder being written (the stage's
output, still under its temp name)."""
"""seed -> a fresh body (pre-trained weights copied in, or randomly initialised)."""
PAD_ID = 0
"""Padding token id; padded positions are masked out of every loss and never attended to
by real tokens (causal attention, right padding)."""


@dataclass(frozen=True, kw_only=True)
class Hparams:
    """The fine-tuning hyper-parameters of one task (params.finetune + per-task overrides)."""

    lr: float
    batch_size: int
    epochs: int
    warmup_frac: float
    lm_coef: float
    clf_pdrop: float
    seeds: tuple[int, ...]
    max_train_examples: int | None
    max_eval_examples: int | None
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    grad_clip: float
    precision: str
    init_std: float
    data_seed: int
    select: str
    """final = score the last epoch; dev = the epoch best on the dev split (never reported)."""
    bucket_pool_batches: int | None
    """Length buckets: batches per length-sorted pool (gpt1/batching.py); None = random."""
    device: str
    """params.device (auto | cpu | cuda): where finetune_task runs unless told otherwise."""
    log_interval_steps: int
    """Train loss read from the device (and logged) every this many updates and at each
    epoch's end: the steps between run without a host sync."""
    compile: bool
    """torch.compile the task model (finetune.compile)."""


def resolve_hparams(params: Params, task: str) -> Hparams:
    """params.finetune with the task's overrides; optimiser settings reused from pre-training
    (spec §2: "every pre-training hyper-parameter carries over unless the table says
    otherwise")."""
    ft, pt = params.finetune, params.pretrain
    over = ft.overrides.get(task)

    def pick(name: str) -> Any:
        value = getattr(over, name) if over is not None else None
        return getattr(ft, name) if value is None else value

    return Hparams(
        lr=pick("lr"), batch_size=pick("batch_size"), epochs=pick("epochs"),
        warmup_frac=ft.warmup_frac, lm_coef=ft.lm_coef, clf_pdrop=ft.clf_pdrop,
        seeds=tuple(ft.seeds), max_train_examples=pick("max_train_examples"),
        max_eval_examples=pick("max_eval_examples"), betas=(pt.adam_beta1, pt.adam_beta2),
        eps=pt.adam_eps, weight_decay=pt.weight_decay, grad_clip=pt.grad_clip,
        precision=pt.precision, init_std=params.model.initializer_range, data_seed=params.seed,
        select=ft.select, bucket_pool_batches=ft.bucket_pool_batches,
        device=params.device, log_interval_steps=ft.log_interval_steps, compile=ft.compile,
    )


def train_subset_seed(data_seed: int, seed: int) -> int:
    """Seed of fine-tuning seed `seed`'s training subset of a capped pool: a run's data sample
    varies with its seed (and is the same for every arm and pre-training run at that seed)."""
    return int(np.random.SeedSequence([data_seed, seed]).generate_state(1)[0])


def warmup_steps(warmup_frac: float, total: int) -> int:
    """Warm-up updates: warmup_frac of them, at least one wherever warmup_frac > 0 (the
    paper's 0.2 % of a short run rounds to 0 otherwise)."""
    return max(1, round(warmup_frac * total)) if warmup_frac > 0 else 0


DEGENERATE_SHARE = 0.95
"""An epoch whose dev predictions are at least this share one class ranks below every other
in `select: dev` (a constant predictor is never chosen over a model that learned)."""


def selection_key(spec: TaskSpec, dev: dict[str, float], pred: np.ndarray, epoch: int
                  ) -> tuple[bool, float, int]:
    """Sort key of one epoch under `select: dev` (max wins): not degenerate, then the dev score
    (accuracy for an F1 task, which an always-positive model maximises), then the later epoch
    (ties never go back to a less-trained model)."""
    metric = "acc" if spec.metric == "f1" else spec.metric
    degenerate = False
    if not spec.regression and len(pred):
        share = np.unique(pred, return_counts=True)[1].max() / len(pred)
        degenerate = bool(share >= DEGENERATE_SHARE)
    return (not degenerate, float(dev[metric]), epoch)


def pilot_key(spec: TaskSpec, scores: dict[str, float], pred: np.ndarray,
              log_loss: float | None, lr: float) -> tuple[bool, float, float, float]:
    """Sort key of one pilot configuration (max wins): not degenerate, then the score
    (accuracy for an F1 task), then the lower log-loss, then the larger lr (a tie never goes
    to the configuration that moved the weights least)."""
    not_degenerate, score, _ = selection_key(spec, scores, pred, 0)
    return (not_degenerate, score, -math.inf if log_loss is None else -log_loss, lr)


def log_loss(spec: TaskSpec, out: np.ndarray, labels: np.ndarray) -> float | None:
    """Mean negative log-likelihood of the true labels under the head's softmax (a choice
    task: over its answers); None for a regression task."""
    if spec.regression or not len(labels):
        return None
    # copies (torch.tensor): a table's arrays may be read-only, which as_tensor warns about
    logp = torch.log_softmax(torch.tensor(np.asarray(out, dtype=np.float32)), dim=-1)
    return float(-logp[torch.arange(len(labels)), torch.tensor(np.asarray(labels))].mean())


def body_factory(init: str, layers_transferred: int | None, pretrained: nn.Module | None,
                 fresh: Callable[[], nn.Module], *, n_special: int) -> BodyFactory:
    """seed -> body: `scratch` = fresh(); `pretrained` = a seeded fresh copy of the pre-trained
    architecture with its embeddings + first `layers_transferred` blocks copied (None = all;
    Figure 2 left), the rest left at their random init. An LSTM body is copied whole.

    The embedding rows of the `n_special` special tokens (the last ids) keep this seed's fresh
    N(0, initializer_range) init instead of the pre-trained rows: the original release adds
    them at fine-tuning (`np.random.randn(n_special, n_embd) * 0.02`), they are not
    pre-trained there (spec §5).
    """

    def make(seed: int) -> nn.Module:
        torch.manual_seed(seed)
        if init == "scratch":
            return fresh()
        if pretrained is None:
            raise ValueError("init=pretrained needs the pre-trained model")
        body = copy.deepcopy(pretrained).train()
        reset = cast(Callable[[], None], body.reset_parameters)
        reset()  # the blocks not transferred start from this seed's random init
        specials = _special_rows(body, n_special)
        fresh_rows = specials.detach().clone()
        state = pretrained.state_dict()
        if isinstance(body, GPT):
            transfer_weights(state, body, layers_transferred)
        else:
            if layers_transferred is not None:
                raise ValueError("layers_transferred applies to the Transformer only")
            body.load_state_dict(state)
        with torch.no_grad():
            specials.copy_(fresh_rows)
        return body

    return make


def _special_rows(body: nn.Module, n_special: int) -> torch.Tensor:
    """The last `n_special` rows of the body's (tied) token embedding's real vocabulary (the
    padded rows after them aside), as a view."""
    embed = cast(nn.Module, body.tokens_embed)
    weight, n_real = cast(torch.Tensor, embed.weight), int(cast(int, embed.n_real))
    if not 0 <= n_special < n_real:
        raise ValueError(f"n_special={n_special} outside 0..{n_real - 1}")
    return weight[n_real - n_special : n_real]


def collate(seqs: Sequence[list[list[int]]], device: torch.device
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Examples of K sequences -> idx (B, K, T) right-padded with PAD_ID, lengths (B, K)."""
    K = len(seqs[0])
    T = max(len(s) for ex in seqs for s in ex)
    idx = np.full((len(seqs), K, T), PAD_ID, dtype=np.int64)
    lengths = np.zeros((len(seqs), K), dtype=np.int64)
    for b, ex in enumerate(seqs):
        for k, s in enumerate(ex):
            idx[b, k, : len(s)] = s
            lengths[b, k] = len(s)
    return (runtime.to_device(torch.from_numpy(idx), device),  # pinned, asynchronous
            runtime.to_device(torch.from_numpy(lengths), device))


def _labels(spec: TaskSpec, data: Encoded, rows: Sequence[int], device: torch.device
            ) -> torch.Tensor:
    y = data.labels[np.asarray(rows, dtype=int)]
    labels = torch.as_tensor(y, dtype=torch.float32 if spec.regression else torch.long)
    return runtime.to_device(labels, device)


@torch.no_grad()
def infer(model: TaskModel, data: Encoded, batch_size: int, precision: str,
          device: torch.device, desc: str) -> np.ndarray:
    """Head outputs for every example (eval mode; examples batched by length)."""
    model.eval()
    order = np.argsort([max(len(s) for s in ex) for ex in data.seqs], kind="stable")
    outs: list[np.ndarray] = [np.empty(0)] * len(order)
    bar = progress(range(0, len(order), batch_size), desc=desc, unit="batch", nested=True)
    for start in bar:
        rows = order[start : start + batch_size]
        idx, lengths = collate([data.seqs[i] for i in rows], device)
        with autocast_for(precision, device):
            out, _ = model(idx, lengths)
        for i, o in zip(rows, out.float().cpu().numpy(), strict=True):
            outs[i] = o
    return np.stack(outs)


def train_one_seed(spec: TaskSpec, hp: Hparams, seed: int, data: dict[str, Encoded],
                   make_body: BodyFactory, on_metrics: MetricsSink, out_dir: Path,
                   device: torch.device, step0: int, stop: StopRequest,
                   on_best: BestSink | None = None) -> dict[str, Any]:
    """Fine-tune one model on data["train"]; keep the last epoch (hp.select = final) or the
    best on data["dev"] (dev); score and save the test predictions.

    Writes predictions_seed<seed>.parquet (test), train_ids_seed<seed>.parquet (the training
    rows, in file order), fresh_predictions_seed<seed>.parquet where data has the fresh split
    (scored like test, `score_fresh`) and, under `dev`, selection_predictions_seed<seed>.parquet.
    `on_best(model, out_dir)` gets the kept model (e.g. to save it under out_dir).
    Raises StoppedError after the step during which `stop` was set (SIGINT / SIGTERM).
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    precision = resolve_precision(hp.precision, device)
    model = TaskModel(make_body(seed), spec, hp.clf_pdrop, hp.init_std).to(device)
    if hp.compile:  # in place: state_dict keys, on_best and infer unchanged
        runtime.compile_or_eager(model, "finetune.compile")
    opt = build_optimizer(model, hp.lr, hp.betas, hp.eps, hp.weight_decay)
    watch = NonFiniteWatch(device)
    tally = new_tally(device)
    loss_fn = make_loss_fn(spec, hp.lm_coef, tally)
    train = data["train"]
    steps_per_epoch = math.ceil(len(train) / hp.batch_size)
    total = hp.epochs * steps_per_epoch
    warmup = warmup_steps(hp.warmup_frac, total)
    best: tuple[tuple[bool, float, int], dict[str, torch.Tensor] | None, np.ndarray] | None = None
    history, train_history = [], []
    step, t0, seen = 0, time.perf_counter(), 0
    example_lens = example_lengths(train.seqs)
    order_rng = np.random.default_rng([seed, 1])  # batch order only: `rng` draws as before
    bar = progress(total=total, desc=f"{spec.name} seed {seed}", unit="step")
    for epoch in range(hp.epochs):
        model.train()
        perm = rng.permutation(len(train))
        batches = epoch_batches(perm, example_lens, hp.batch_size, hp.bucket_pool_batches,
                                order_rng)
        for b_i, batch_rows in enumerate(batches):
            rows = batch_rows.tolist()
            idx, lengths = collate([train.seqs[i] for i in rows], device)
            batch = (idx, lengths, _labels(spec, train, rows, device))
            lr = lr_at(step, total, warmup, hp.lr, "linear")  # t before its increment (optim)
            loss, norm, finite = train_step(model, opt, [batch], loss_fn, lr, hp.grad_clip,
                                            precision, watch.halted)
            watch.record(step, loss, norm, finite)
            step += 1
            seen += len(rows)
            bar.update(1)
            if step % hp.log_interval_steps == 0 or b_i == len(batches) - 1:
                watch.check()  # the loop's only host reads: log points, epoch ends
                stats = {"loss": loss.item(), "grad_norm": norm.item(), "lr": lr}
                bar.set_postfix(loss=f"{stats['loss']:.3f}")
                on_metrics(step0 + step, {f"train/{k}": float(v) for k, v in stats.items()})
            if stop:  # a run is minutes: restarting beats checkpointing every seed's state
                bar.close()
                raise stop.stop(f"stopped at step {step} of seed {seed}; fine-tuning keeps "
                                "nothing, re-run to start it again")
        train_history.append({"epoch": epoch + 1, **read_tally(spec, tally, hp.lm_coef)})
        if hp.select != "dev":
            continue
        dev_out = infer(model, data["dev"], hp.batch_size * 2, precision, device, "dev")
        dev_pred = head_predictions(spec, dev_out)
        dev = score_split(spec, data["dev"].labels, dev_pred, data["dev"].groups)
        history.append({"epoch": epoch + 1, **dev})
        on_metrics(step0 + step, {f"dev/{k}": v for k, v in dev.items()})
        log.info("%s seed %d epoch %d dev %s", spec.name, seed, epoch + 1, dev)
        key = selection_key(spec, dev, dev_pred, epoch + 1)
        if best is None or key > best[0]:
            state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            best = (key, state, dev_pred)
    bar.close()
    train_s = time.perf_counter() - t0
    if best is not None and best[1] is not None:
        model.load_state_dict(best[1])
    if on_best is not None:
        on_best(model, out_dir)
    test = data["test"]
    t1 = time.perf_counter()
    test_out = infer(model, test, hp.batch_size * 2, precision, device, "test")
    eval_s = time.perf_counter() - t1
    pred = head_predictions(spec, test_out)
    scores = score_split(spec, test.labels, pred, test.groups)
    test_log_loss = log_loss(spec, test_out, test.labels)
    on_metrics(step0 + step, {f"test/{k}": v for k, v in scores.items()})
    _write_predictions(out_dir / f"predictions_seed{seed}.parquet", test, pred,
                       probabilities(spec, test_out))
    fresh = ({} if FRESH not in data else
             score_fresh(spec, hp, model, data[FRESH], precision, device,
                         out_dir / f"{FRESH}_predictions_seed{seed}.parquet"))
    if fresh:
        on_metrics(step0 + step, {f"{FRESH}/{k}": v for k, v in fresh["scores"].items()})
    atomic.write_bytes(out_dir / f"train_ids_seed{seed}.parquet",
                       pd.DataFrame({"id": train.ids}).to_parquet(index=False) or b"")
    if best is not None:
        _write_predictions(out_dir / f"selection_predictions_seed{seed}.parquet", data["dev"],
                           best[2])
    return {"seed": seed, "scores": scores, "kept_epoch": best[0][2] if best else hp.epochs,
            "dev_history": history, "train_history": train_history, "steps": step,
            "warmup_steps": warmup,
            "log_loss": test_log_loss, **{f"{FRESH}_{k}": v for k, v in fresh.items()},
            "n_train": len(train), "backend": backend_of(model),
            "train_examples_per_s": seen / train_s, "eval_examples_per_s": len(test) / eval_s}


def score_fresh(spec: TaskSpec, hp: Hparams, model: TaskModel, split: Encoded, precision: str,
                device: torch.device, path: Path) -> dict[str, Any]:
    """Score the kept model on the fresh split (gpt1.tasks.load.carve_fresh) as on test:
    {"scores", "log_loss"}; its predictions (with the head's probabilities) go to `path`."""
    out = infer(model, split, hp.batch_size * 2, precision, device, FRESH)
    pred = head_predictions(spec, out)
    _write_predictions(path, split, pred, probabilities(spec, out))
    return {"scores": score_split(spec, split.labels, pred, split.groups),
            "log_loss": log_loss(spec, out, split.labels)}


def probabilities(spec: TaskSpec, out: np.ndarray) -> list[list[float]] | None:
    """Per example, the head's softmax over its classes (a choice task: over its answers);
    None for a regression task (its output is the prediction)."""
    if spec.regression:
        return None
    probs = torch.softmax(torch.from_numpy(np.array(out, dtype=np.float32)), dim=-1)
    return [[round(float(p), 6) for p in row] for row in probs.numpy()]


def _write_predictions(path: Path, split: Encoded, pred: np.ndarray,
                       probs: list[list[float]] | None = None) -> None:
    """Per-example predictions of one seed (the report's bootstrap resamples these rows) and,
    where given, the head's probabilities (column `probability`)."""
    frame = pd.DataFrame({"id": split.ids, "group": split.groups, "label": split.labels,
                          "prediction": pred})
    if probs is not None:
        frame["probability"] = probs
    atomic.write_bytes(path, frame.to_parquet(index=False) or b"")


def n_choices(spec: TaskSpec, split: Encoded) -> np.ndarray:
    """Per example, how many answers a random guess picks from (choice: its sequences)."""
    if spec.fmt == "choice":
        return np.array([len(ex) for ex in split.seqs])
    return np.full(len(split), spec.n_outputs)


def finetune_task(spec: TaskSpec, hp: Hparams, data: dict[str, Encoded],
                  make_body: BodyFactory, out_dir: str | Path, on_metrics: MetricsSink,
                  on_best: BestSink | None = None, device: torch.device | None = None,
                  train_sets: Mapping[int, Encoded] | None = None) -> dict[str, Any]:
    """Fine-tune every seed, keep its last epoch or select on data["dev"] (hp.select), score
    data["test"] (the same examples, in the same order, for every seed), and data["fresh"]
    where given (the result's `fresh`: its scores, baselines, log-losses and size).

    `train_sets`: seed -> that seed's training set (its own seeded subset of the pool); None =
    data["train"] for every seed. Returns the result (scores aggregated over seeds, per-seed
    details, sizes). `on_best` gets the first seed's kept model; `device` defaults to the
    params' (hp.device), the device the body factory's models were built for.
    """
    device = runtime.device(hp.device) if device is None else device
    if hp.select == "dev" and "dev" not in data:
        raise ValueError("select: dev needs a dev split")
    runs: list[dict[str, Any]] = []
    # out_dir appears whole or not at all: a stopped or failed run leaves no seed's predictions.
    with stop_on_signals() as stop, atomic.atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for i, seed in enumerate(hp.seeds):
            steps_before = sum(r["steps"] for r in runs) + i
            seed_data = {**data, "train": data["train"] if train_sets is None
                         else train_sets[seed]}
            runs.append(train_one_seed(spec, hp, seed, seed_data, make_body, on_metrics, tmp,
                                       device, steps_before, stop, on_best if i == 0 else None))
    first_train = data["train"] if train_sets is None else train_sets[hp.seeds[0]]
    fresh = {} if FRESH not in data else {FRESH: {
        "scores": aggregate([r[f"{FRESH}_scores"] for r in runs]),
        "baselines": baselines(spec, first_train.labels, data[FRESH].labels,
                               n_choices(spec, data[FRESH]), data[FRESH].groups),
        "log_loss": [r[f"{FRESH}_log_loss"] for r in runs], "n_eval": len(data[FRESH])}}
    return {
        "scores": aggregate([r["scores"] for r in runs]),
        "baselines": baselines(spec, first_train.labels, data["test"].labels,
                               n_choices(spec, data["test"]), data["test"].groups),
        **fresh,
        "seeds": runs, "backend": runs[0]["backend"],
        "n_train": runs[0]["n_train"], "n_dev": len(data["dev"]) if "dev" in data else 0,
        "n_eval": len(data["test"]),
        "truncated": {s: data[s].n_truncated for s in data},
    }
