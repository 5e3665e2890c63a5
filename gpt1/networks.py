"""The configured networks: the GPT-1 Transformer or the LSTM baseline, built from params with
the compute backend of `model.backend` installed (gpt1/backends) for the device the stages run
on. Every stage, the checkpoint loader and `predict` build their model here."""

from __future__ import annotations

from gpt1 import names, runtime
from gpt1.backends import apply_backend
from gpt1.config import Params
from gpt1.lstm import LSTMLM
from gpt1.model import GPT


def build_model(body: str, params: Params, vocab_size: int) -> GPT | LSTMLM:
    """A fresh language model of `body` (`transformer`: GPT, `lstm`: LSTMLM; gpt1.names) from
    params, with the kernel backend of `model.backend` installed for the device the stages run
    on (gpt1/backends)."""
    model: GPT | LSTMLM = (GPT(params.model, vocab_size) if names.body(body) == names.TRANSFORMER
                           else LSTMLM(params.lstm, vocab_size))
    apply_backend(model, params.model.backend, runtime.device(params.device))
    return model
