"""The stages' models as registered MLflow models: the pre-trained Transformer (gpt1-pretrain)
and each fine-tuned task model (gpt1-<task>), with an input example in the task's input
columns and a description (what the model reads and answers, as `gpt1 predict`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import checkpoint, names, predict, tracking
from gpt1.config import Params

MODEL_EXAMPLE = "it was a bright cold day in april, and the clocks were striking thirteen."
"""Input example of the MLflow models (raw text, standardised by the model)."""


def log_model(params: Params, model_dir: str | Path, kind: str, spec: Any,
              table: pd.DataFrame | None = None) -> None:
    """The run's model as a registered MLflow pyfunc model (gpt1-pretrain, gpt1-<task>), its
    input example the first rows of `table` (the task's training sample) in the task's input
    columns; the LSTM baseline keeps its raw files as artifacts (no pyfunc flavour for it)."""
    if names.body(kind) != names.TRANSFORMER:
        for name in (checkpoint.MODEL_META, checkpoint.MODEL_FILE):
            tracking.log_artifact(Path(model_dir) / name, "model")
        return
    if spec is None or table is None:
        example, name = [{"text": MODEL_EXAMPLE}], "gpt1-pretrain"
        about = ("GPT-1 pre-trained language model: input `text` (raw), output `loss`, its "
                 "mean next-token cross-entropy in nats.")
    else:
        example, name = predict.example_inputs(spec, table), f"gpt1-{spec.name}"
        about = predict.describe(spec)
    tracking.log_model(model_dir, params.paths.tokenizer, name, example, about)
