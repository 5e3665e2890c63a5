"""The pipeline's stages under params `pretrain.import_hf` (configs/paper-finetune.yaml): the
released GPT-1 weights, a transformers OpenAIGPTLMHeadModel directory, stand in for this
project's pre-training, so dvc.yaml keeps one graph (docs/import-hf.md says why).

- scan_mirror also fingerprints the checkpoint directory (what DVC tracks of it:
  gpt1.hf_import.scan, written by gpt1/stages/data.py without loading torch);
- train_bpe converts its vocab.json + merges.txt instead of learning merges;
- pretrain converts its weights instead of training, and scores them on our held-out books
  as a pre-training run is scored (validation loss and perplexity);
- pretrain_lstm, zeroshot and zeroshot_lstm need a pre-training run of this project (the LSTM;
  the intermediate checkpoints of Figure 2 right, which the release does not have): they do
  not run, each records why in one line and leaves its DVC outputs empty; the report says so.

gpt1/stages/data.py, pretrain.py, zeroshot.py and curves.py call these; the conversion itself is
gpt1/hf_import.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import (
    atomic,
    bpe,
    checkpoint,
    hf_import,
    micro_batch,
    names,
    pretraining,
    records,
    runtime,
    tracking,
)
from gpt1.config import Params
from gpt1.data import shards
from gpt1.data.loader import eval_windows
from gpt1.model import GPT
from gpt1.recording import record, record_in_own_run
from gpt1.records import StageContext
from gpt1.runtime import resolve_precision

log = logging.getLogger(__name__)


def train_bpe(params: Params, *, context: StageContext | None = None) -> dict[str, Any]:
    """The checkpoint's tokenizer at paths.tokenizer (the train_bpe stage's record)."""
    tok = hf_import.import_tokenizer(params)
    metrics = {"vocab_size": tok.vocab_size, "n_merges": params.bpe.n_merges,
               "tokenizer_hash": tok.hash, "imported_from": params.pretrain.import_hf}
    record_in_own_run(params, "train_bpe", metrics, ("vocab_size",), context=context)
    return metrics


def pretrain(params: Params, stage: str, kind: str, pretrain_seed: int, run_dir: Path, *,
             context: StageContext | None = None) -> dict[str, Any]:
    """The pretrain stage's import into `run_dir` (its record: validation loss on our held-out
    books); the LSTM's pre-training does not run (`not_run`)."""
    if names.body(kind) != names.TRANSFORMER:
        return not_run(params, stage, run_dir=run_dir, context=context)
    tok = bpe.load_bpe(params.paths.tokenizer)
    val_tokens = shards.read_shards(params.paths.shards, "val", tok.hash)
    cfg = params.pretrain
    with tracking.start_run(stage, params, context=context):
        meta = hf_import.import_run(params, tok, run_dir)
        model, _ = checkpoint.load_model(run_dir, tok.hash)
        assert isinstance(model, GPT)
        device = runtime.device(params.device)
        windows = eval_windows(val_tokens, cfg.seq_len, micro_batch.eval_window_count(cfg))
        micro = cfg.batch_seqs if cfg.micro_batch_seqs == "auto" else cfg.micro_batch_seqs
        val = pretraining.validation_loss(  # no gradients: a global batch at a time fits
            pretraining.CausalLM(model.to(device)), windows, micro,
            resolve_precision(cfg.precision, device), 0, 1)
        metrics = {**val, "backend": meta["backend"], "imported_from": meta["imported_from"],
                   "body": names.body(kind), "pretrain_seed": pretrain_seed}
        records.write_curve(params, stage, [{"step": 0, **val}])
        record(params, stage, metrics, ("val_loss", "val_ppl"), summary=val, context=context)
    log.info("%s: imported %s, validation perplexity %.2f on our held-out books", stage,
             params.pretrain.import_hf, val["val_ppl"])
    return metrics


def not_run(params: Params, stage: str, run_dir: Path | None = None,
            zeroshot_file: Path | None = None, *,
            context: StageContext | None = None) -> dict[str, Any]:
    """Record why `stage` does not run under pretrain.import_hf; its outputs stay empty."""
    why = (f"not run: pretrain.import_hf imports released final weights "
           f"({params.pretrain.import_hf}); this stage needs a pre-training run of this project")
    log.warning("%s %s", stage, why)
    if run_dir is not None:
        with atomic.atomic_path(run_dir) as tmp:
            tmp.mkdir()
        records.write_curve(params, stage, [])
    if zeroshot_file is not None:  # the zeroshot stage's per-example predictions
        predictions = zeroshot_file
        empty = pd.DataFrame(columns=["step", "task", "example", "label", "prediction"])
        atomic.write_bytes(predictions, empty.to_parquet(index=False) or b"")
    metrics = {"not_run": why}
    record_in_own_run(params, stage, metrics, (), context=context)
    return metrics
