"""A learnable token stream and a tiny pre-training on it: the training-loop tests' inputs."""

from __future__ import annotations

import numpy as np
import torch

from gpt1.model import GPT
from gpt1.pretraining import pretrain

VOCAB = 64


def token_stream(n: int, seed: int) -> np.ndarray:
    """A learnable stream: a repeated random phrase with some noise tokens."""
    phrase = np.random.default_rng(0).integers(0, VOCAB, 40)
    rng = np.random.default_rng(seed)
    stream = np.tile(phrase, n // 40 + 1)[:n]
    noise = rng.random(n) < 0.05
    stream[noise] = rng.integers(0, VOCAB, noise.sum())
    return stream.astype(np.uint16)


def pretrain_tiny(params, run_dir, on_metrics=lambda s, m: None):
    torch.manual_seed(params.seed)
    model = GPT(params.model, VOCAB)
    meta = {"kind": "transformer", "vocab_size": VOCAB, "tokenizer_hash": "h" * 64,
            "pretrain_seed": params.seed}
    train = [token_stream(3000, 1), token_stream(2000, 2)]
    val = [token_stream(1000, 3)]
    return pretrain(model, train, val, params, run_dir, meta, 1.0, on_metrics)


class CrashError(Exception):
    pass


def crash_at_12(step, metrics):
    if step == 12:
        raise CrashError
