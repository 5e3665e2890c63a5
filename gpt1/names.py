"""The words artifacts use for one thing everywhere, and the one reader of older words.

- **The network body**: `transformer` (the paper's decoder) or `lstm` (the baseline), as
  params say it (`ablations.presets.*.body`), and as networks, checkpoints (`kind` in
  model.json), stage records (`body`) and reports carry it.
- **The pre-training run**: its seed is `pretrain_seed` in code and records; `run_tag` is
  the one place that spells it `p<pretrain_seed>`, the folder of the run's outputs and the
  suffix of its records' stems (`record_stem`).

Artifacts written before the body had one word said `"gpt"` for the transformer (checkpoints'
`kind`, pre-training and fine-tuning records) and keyed it `kind` (pre-training records) or
`model` (zero-shot records). `body` and `record_body` read those too, so committed records
and finished checkpoints stay readable; nothing else in the package knows the old words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRANSFORMER = "transformer"
"""The paper's Transformer decoder (gpt1.model.GPT)."""
LSTM = "lstm"
"""The LSTM baseline of Table 5 (gpt1.lstm.LSTMLM)."""
BODIES = (TRANSFORMER, LSTM)

_OLD_WORDS = {"gpt": TRANSFORMER}
"""Old artifacts' word -> the body's one word."""
_OLD_KEYS = ("kind", "model")
"""Where old records kept the body: pre-training records `kind`, zero-shot records `model`."""
RESUME_WORDS = {TRANSFORMER: "gpt", LSTM: LSTM}
"""The body as the resume key of a pre-training checkpoint hashes it: the key checkpoints were
written with before the rename, so a run in progress resumes across it (gpt1.pretraining)."""


def body(word: str) -> str:
    """`word` as the body's one word (`transformer` | `lstm`), old artifacts' `gpt` read as
    the transformer; ValueError naming the word for anything else."""
    word = _OLD_WORDS.get(word, word)
    if word not in BODIES:
        raise ValueError(f"unknown network body {word!r}; known: {', '.join(BODIES)}")
    return word


def record_body(record: Mapping[str, Any]) -> str | None:
    """The network body a stage record is about: its `body` (old words read as `body` does;
    a word of no network, the bag-of-words floor's `bow`, as it is), else an old record's
    `kind` or `model` when that holds a body word; None for a record of no network."""
    if "body" in record:
        return _OLD_WORDS.get(record["body"], record["body"])
    for key in _OLD_KEYS:
        value = record.get(key)
        word = _OLD_WORDS.get(value, value) if isinstance(value, str) else None
        if word in BODIES:
            return word
    return None


def run_tag(pretrain_seed: int) -> str:
    """`p<pretrain_seed>`: the folder of one pre-training run's outputs under
    paths.checkpoints / paths.finetuned, and its records' stem suffix."""
    return f"p{pretrain_seed}"


def record_stem(stem: str, pretrain_seed: int) -> str:
    """The record stem of stage `stem` (`finetune_cola`) for one pre-training run:
    `finetune_cola_p1234`."""
    return f"{stem}_{run_tag(pretrain_seed)}"
