"""Tiny runs on disk: tokenizer and shards for a pre-training, a random pre-trained checkpoint,
stand-in pre-trained LMs for the fine-tuning stages, a fine-tuned task model and its export-hf
folder."""

from __future__ import annotations

import random
from pathlib import Path

import torch
import yaml

from gpt1 import bpe, checkpoint, networks
from gpt1.config import parse_params
from gpt1.data import shards
from gpt1.data.clean import standardize_texts
from gpt1.export import export_hf
from gpt1.model import GPT
from tests.helpers.params import make_params_dict

# Long enough (96 updates, a checkpoint every 8) that a kill lands inside a checkpoint write.
# device: cpu: resumes are bit-identical on the CPU only (CUDA's kernels do not promise it).
RUN = {"device": "cpu", "bpe": {"n_merges": 40},
       "pretrain": {"max_tokens": 96 * 4 * 32, "checkpoint_interval_steps": 8,
                    "eval_interval_steps": 32, "zero_shot_checkpoints": 4}}


WORDS = ("the of and to in was he she it that his her had with for as at on by said but "
         "house river night morning door window letter garden ship king queen").split()


def random_texts(n_docs: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(600)) for _ in range(n_docs)]


def prepare_run(tmp_path: Path, name: str, overrides: dict, tok_seed: int = 0
                ) -> tuple[Path, object]:
    """params file + tokenizer + shards for one run directory under tmp_path/name."""
    raw = make_params_dict(tmp_path / name, {**RUN, **overrides})
    params = parse_params(raw, "tiny")
    texts = random_texts(8, tok_seed)
    tok = bpe.train_bpe(texts, params.bpe, params.paths.tokenizer)
    shards.write_shards([f"d{i}" for i in range(8)], texts, tok, params.shard, params.seed,
                        params.paths.shards)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, params


def stand_in_lms(params, texts: list[str]) -> None:
    """A tokenizer learnt on `texts` and random Transformer and LSTM LMs saved as pre-training
    seed p<first>'s runs: what the fine-tuning stages load, without a pre-training."""
    tok = bpe.train_bpe(standardize_texts([" ".join(texts)] * 3), params.bpe,
                        params.paths.tokenizer)
    for kind in ("transformer", "lstm"):
        model = networks.build_model(kind, params, tok.vocab_size)
        checkpoint.write_model(checkpoint.pretrain_dir(params, kind), model, {
            "kind": kind, "vocab_size": tok.vocab_size, "tokenizer_hash": tok.hash,
            "params": params.as_dict(), "step": 0})


def random_run(params, run_dir: Path, tok_hash: str, vocab: int) -> GPT:
    model = GPT(params.model, vocab)
    with torch.no_grad():  # non-trivial LayerNorm gains and biases too
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    checkpoint.write_model(run_dir, model, {"kind": "transformer", "vocab_size": vocab,
                                            "tokenizer_hash": tok_hash, "params": params.as_dict(),
                                            "step": 0})
    return model


def tiny_run(tiny_params, tmp_path):
    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(random_texts(4, 0), params.bpe, tmp_path / "tok")
    random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    return params


def task_export(tiny_params, tmp_path, task: str):
    """A fine-tuned `task` model (head with non-trivial weights) and its export-hf folder."""
    from gpt1.heads import TaskModel
    from gpt1.predict import save_task_model
    from gpt1.tasks.registry import TASKS

    params = tiny_run(tiny_params, tmp_path)
    tok = bpe.load_bpe(tmp_path / "tok")
    body, _ = checkpoint.load_model(tmp_path / "run", tok.hash)
    task_model = TaskModel(body, TASKS[task], 0.1, 0.02)
    with torch.no_grad():
        torch.nn.init.normal_(task_model.head.linear.weight, std=1.0)
        task_model.head.linear.bias.fill_(0.3)
    save_task_model(tmp_path / "ft", task_model, params, task, "transformer", tok)
    export_hf(tmp_path / "ft", tmp_path / "hf", tmp_path / "tok")
    return params, task_model.eval(), tok
