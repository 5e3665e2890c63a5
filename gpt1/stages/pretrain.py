"""The pre-training stages: the Transformer LM and the LSTM baseline, one run per pre-training
seed, with the same loop and data (under pretrain.import_hf: gpt1/hf_stand_in.py), and the dose
curve's Transformer runs, one per budget of curves.dose_tokens and pre-training seed."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from gpt1 import (
    bpe,
    checkpoint,
    hf_stand_in,
    logged_models,
    names,
    networks,
    pretraining,
    records,
    tracking,
)
from gpt1.arms import dose_params
from gpt1.backends import backend_of
from gpt1.config import Params, override
from gpt1.data import shards
from gpt1.lstm import lstm_flops_per_token
from gpt1.model import flops_per_token
from gpt1.recording import record
from gpt1.records import StageContext
from gpt1.stage_table import PRETRAIN_SEED, StageRun, resolve_pretrain_seed


def lm_params(params: Params, kind: str) -> Params:
    """The params a `kind` (transformer | lstm) pre-training run trains with: for the LSTM its
    own peak lr, lstm.lr_max, where set (null: pretrain.lr_max); params otherwise. The run's
    seed is its pre-training seed, handed to the loop apart (gpt1.pretraining.pretrain)."""
    if kind != "lstm" or params.lstm.lr_max is None:
        return params
    return override(params, pretrain={"lr_max": params.lstm.lr_max})


def pretrain(params: Params, pretrain_seed: int | None = None, *,
             context: StageContext | None = None) -> dict[str, Any]:
    """Pre-train the Transformer LM on the token shards (spec §1); resumes if interrupted."""
    seed = resolve_pretrain_seed(params.pretrain.seeds, pretrain_seed)
    return _pretrain(params, StageRun.of("pretrain", pretrain_seed=seed), names.TRANSFORMER,
                     context)


def pretrain_lstm(params: Params, pretrain_seed: int | None = None, *,
                  context: StageContext | None = None) -> dict[str, Any]:
    """Pre-train the LSTM LM baseline (Table 5 / Figure 2) with the same loop and data."""
    seed = resolve_pretrain_seed(params.pretrain.seeds, pretrain_seed)
    return _pretrain(params, StageRun.of("pretrain_lstm", pretrain_seed=seed), "lstm", context)


def pretrain_dose(params: Params, tokens: int, pretrain_seed: int | None = None, *,
                  context: StageContext | None = None) -> dict[str, Any]:
    """Pre-train the Transformer LM on `tokens` tokens, a budget of the dose curve
    (curves.dose_tokens): a complete run with its own warm-up and decay to 0 at its own end,
    not a checkpoint of the main run; written under paths.dose_checkpoints/<tokens>."""
    seed = resolve_pretrain_seed(params.pretrain.seeds, pretrain_seed)
    return _pretrain(params, StageRun.of("pretrain_dose", tokens=tokens, pretrain_seed=seed),
                     names.TRANSFORMER, context, dose_params(params, tokens))


def _pretrain(params: Params, stage_run: StageRun, kind: str, context: StageContext | None,
              dose: Params | None = None) -> dict[str, Any]:
    """Pre-train a `kind` LM as `stage_run` on params (the main run) or `dose` (a dose curve's
    budget: gpt1.arms.dose_params), recorded with params; only the main Transformer run becomes
    the registered model."""
    pretrain_seed, stage = stage_run.kwargs[PRETRAIN_SEED], stage_run.stem
    run_dir = str(checkpoint.pretrain_dir(dose or params, kind, pretrain_seed))
    if params.pretrain.import_hf is not None:  # import instead (gpt1/hf_stand_in.py)
        return hf_stand_in.pretrain(params, stage, kind, pretrain_seed, Path(run_dir),
                                    context=context)
    record_params, params = params, lm_params(dose or params, kind)
    tok = bpe.load_bpe(params.paths.tokenizer)
    train_tokens = shards.read_shards(params.paths.shards, "train", tok.hash)
    val_tokens = shards.read_shards(params.paths.shards, "val", tok.hash)
    torch.manual_seed(pretrain_seed)  # the initial weights are part of the run's trajectory
    model = networks.build_model(kind, params, tok.vocab_size)
    flops = (flops_per_token(params.model, tok.vocab_size, params.pretrain.seq_len)
             if kind == names.TRANSFORMER else lstm_flops_per_token(params.lstm, tok.vocab_size))
    meta = {"kind": kind, "vocab_size": tok.vocab_size, "tokenizer_hash": tok.hash,
            "backend": backend_of(model), "pretrain_seed": pretrain_seed}
    is_rank0 = context is None or context.records  # launched ranks: only rank 0 records
    run = (tracking.start_run(stage, record_params, context=context)  # the user's params
           if is_rank0 else contextlib.nullcontext(None))
    with run as on_metrics:
        metrics = pretraining.pretrain(model, train_tokens, val_tokens, params, run_dir, meta,
                                       flops, on_metrics or (lambda step, m: None))
        history = metrics.pop("history")
        metrics.update(backend=meta["backend"], pretrain_seed=pretrain_seed, body=kind)
        if is_rank0:
            records.write_curve(params, stage, history)
            if dose is None:  # a dose budget is not the model `gpt1 predict` serves
                logged_models.log_model(params, run_dir, kind, None)
            record(record_params, stage, metrics, ("val_loss", "val_ppl"), summary={},
                   context=context)
    return metrics

