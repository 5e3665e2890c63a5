"""`gpt1 predict [--model MODEL] [--task T] TEXT...`: score text with a fine-tuned model.

The finetune stage saves the first seed's kept model in <paths.finetuned>/p<pre-training
seed>/<task>/model
(`save_task_model`: weights + model.json with the params, task and tokenizer hash, digest-
checked like a pre-training run). Inputs take the task's own layout: TEXT is text_a (the
sentence, premise or context), `--text-b` the second sentence or question, `--choices` the
answers of a multiple-choice task; they are standardised and encoded as in training.

The model decides what it answers: `--task` must be the task it was fine-tuned on (omitted,
that task is used), and each example must carry what the task reads (`check_inputs`: the
second text of a pair task, exactly n answers of an n-way choice task, nothing more).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from gpt1 import bpe, checkpoint, names, networks
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.finetune import infer
from gpt1.heads import TaskModel
from gpt1.tasks import formats
from gpt1.tasks.registry import TASKS, TaskSpec

log = logging.getLogger(__name__)

MODEL_DIR = "model"
"""Sub-directory of a fine-tuning output holding the saved model."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", help="a fine-tuned task (finetune.tasks); must be the "
                        "model's own; default: the task --model was fine-tuned on")
    parser.add_argument("texts", nargs="+", metavar="TEXT", help="text_a of each example")
    parser.add_argument("--text-b", default="", help="second text (pair tasks), for every TEXT")
    parser.add_argument("--choices", nargs="*", default=[], help="answers (multiple choice)")
    parser.add_argument("--model", "--model-dir", "--run-dir", dest="model",
                        help="a fine-tuned model folder, an export-hf folder or "
                             "models:/name/version (default: <paths.finetuned>/p<first of "
                             "pretrain.seeds>/<task>/model)")


def run(args: argparse.Namespace, params: Params) -> None:
    """Entry point of `gpt1 predict`: one JSON line per text (label, probabilities)."""
    if args.model is None and args.task is None:
        raise Gpt1Error("--task: name the task (or --model, a model that records its task)")
    if args.model is None and args.task not in params.finetune.tasks:
        raise Gpt1Error(f"--task: unknown task {args.task!r}; finetune.tasks = "
                        f"{list(params.finetune.tasks)}")
    run = names.run_tag(params.pretrain.seeds[0])
    model_dir = args.model or Path(params.paths.finetuned) / run / args.task / MODEL_DIR
    model, tok, spec, saved = load_task_model(
        model_dir, getattr(args, "tokenizer", None) or params.paths.tokenizer)
    if args.task is not None and args.task != spec.name:
        raise Gpt1Error(f"--task {args.task}: this model was fine-tuned on {spec.name}; pass "
                        f"--task {spec.name} or leave --task out",
                        Path(model_dir) / checkpoint.MODEL_META)
    rows = [{"text_a": t, "text_b": args.text_b, "choices": list(args.choices)}
            for t in args.texts]
    for text, pred in zip(args.texts, classify(model, tok, spec, saved, rows), strict=True):
        print(json.dumps({"text": text, **pred}, ensure_ascii=False))


def check_inputs(spec: TaskSpec, rows: Sequence[dict[str, Any]]) -> None:
    """Gpt1Error naming the flag (and column) unless every row holds what `spec` reads: the
    second text of a pair task, exactly n answers of an n-way choice task, and no input the
    task would ignore."""
    pair = spec.fmt in ("entail", "similarity")
    for row in rows:
        text_b, n = str(row.get("text_b") or ""), len(row.get("choices") or [])
        if pair and not text_b.strip():
            raise Gpt1Error(f"--text-b (column text_b): {spec.name} compares two texts; give "
                            "the second one")
        if spec.fmt == "classify" and text_b:
            raise Gpt1Error(f"--text-b (column text_b): {spec.name} reads one text; leave it out")
        if spec.fmt == "choice" and n != spec.n_choices:
            raise Gpt1Error(f"--choices (column choices): {spec.name} needs {spec.n_choices} "
                            f"answers per example, got {n}")
        if spec.fmt != "choice" and n:
            raise Gpt1Error(f"--choices (column choices): {spec.name} is not a multiple-choice "
                            "task; leave it out")


def input_columns(spec: TaskSpec) -> dict[str, bool]:
    """The input columns a task reads (its pyfunc signature) -> whether each is required, as
    `check_inputs` demands: `text_b` for a pair task, `choices` (+ an optional `text_b`, the
    question of RACE) for a multiple-choice task."""
    if spec.fmt == "choice":
        return {"text": True, "text_b": False, "choices": True}
    if spec.fmt in ("entail", "similarity"):
        return {"text": True, "text_b": True}
    return {"text": True}


def describe(spec: TaskSpec) -> str:
    """What a task's model reads and answers (its registered MLflow model's description)."""
    columns = ", ".join(f"`{c}`" + ("" if need else " (optional)")
                        for c, need in input_columns(spec).items())
    return (f"GPT-1 fine-tuned on {spec.title}: inputs {columns} (raw text), the same answers "
            "as `gpt1 predict`: " + ("`score`." if spec.regression else
                                     "`label` and `probabilities`, one per label in the "
                                     f"order {', '.join(map(str, spec.labels))}."))


def example_inputs(spec: TaskSpec, table: pd.DataFrame, n: int = 2) -> list[dict[str, Any]]:
    """The first `n` rows of a canonical task table in the task's input columns: the input
    example of its MLflow model (an empty optional text_b is left out as None)."""
    cols = input_columns(spec)
    rows = []
    for _, row in table.head(n).iterrows():
        out: dict[str, Any] = {"text": str(row["text_a"])}
        if "text_b" in cols:
            out["text_b"] = str(row["text_b"]) or (None if not cols["text_b"] else "")
        if "choices" in cols:
            out["choices"] = [str(c) for c in row["choices"]]
        rows.append(out)
    return rows


def frame_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Pyfunc input (columns text, text_b, choices: a list or a JSON list) -> classify rows;
    a missing text_b (None, NaN) is empty."""

    def text(value: Any) -> str:
        return "" if value is None or (isinstance(value, float) and value != value) else str(value)

    def answers(value: Any) -> list[str]:
        if value is None or (isinstance(value, float) and value != value):
            return []
        return [str(c) for c in (json.loads(value) if isinstance(value, str) else value)]

    n = len(frame)
    column = {c: list(frame[c]) if c in frame else [None] * n for c in ("text_b", "choices")}
    return [{"text_a": text(t), "text_b": text(column["text_b"][i]),
             "choices": answers(column["choices"][i])} for i, t in enumerate(frame["text"])]


def save_task_model(out_dir: str | Path, model: torch.nn.Module, params: Params, task: str,
                    body: str, tok: Any, pretrain_seed: int | None = None) -> None:
    """Write a fine-tuned TaskModel of `body` (gpt1.names) with what `load_task_model` needs to
    rebuild it (and the pre-training run it came from)."""

    meta = {"kind": names.body(body), "task": task, "vocab_size": tok.vocab_size,
            "tokenizer_hash": tok.hash, "params": params.as_dict(),
            **({} if pretrain_seed is None else {"pretrain_seed": pretrain_seed})}
    checkpoint.write_model(Path(out_dir), model, meta)


def load_task_model(model_dir: str | Path, tokenizer_dir: str | Path
                    ) -> tuple[Any, Any, Any, Params]:
    """(TaskModel in eval mode, tokenizer, task spec, the params it was trained with)."""

    tok = bpe.load_bpe(tokenizer_dir)
    meta_path = Path(model_dir) / checkpoint.MODEL_META
    if not meta_path.is_file():
        raise Gpt1Error("no fine-tuned model here; run the finetune stage first", meta_path)
    meta = checkpoint.read_model_meta(Path(model_dir))
    if not meta.get("task"):
        raise Gpt1Error("a pre-trained language model, not a fine-tuned one (it records no "
                        "task); predict needs a fine-tuned model (<paths.finetuned>/p<seed>/"
                        "<task>/model, its export-hf folder or models:/gpt1-<task>/N); "
                        "`gpt1 generate --model` samples from this one", meta_path)
    if meta["tokenizer_hash"] != tok.hash:
        raise Gpt1Error("fine-tuned with another tokenizer; re-run finetune", meta_path)
    # the recorded params make the model's own tasks (tasks.custom) known: a model of one
    # answers in any process, whatever params were loaded before (a pre-training run's lack it)
    params = checkpoint.recorded_params(meta, meta_path)
    if meta["task"] not in TASKS:
        raise Gpt1Error(f"task {meta['task']!r} is neither one of this project's tasks nor a "
                        "tasks.custom task of the model's params", meta_path)
    spec = TASKS[meta["task"]]
    body = networks.build_model(meta["kind"], params, meta["vocab_size"])
    model = TaskModel(body, spec, params.finetune.clf_pdrop, params.model.initializer_range)
    checkpoint.load_weights(model, model_dir, meta)
    return model, tok, spec, params


def classify(model: Any, tok: Any, spec: TaskSpec, params: Params,
             rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of text_a / text_b / choices -> [{"label", "probabilities"}] (regression tasks:
    {"score"}), laid out and truncated exactly as in fine-tuning."""

    check_inputs(spec, rows)
    table = pd.DataFrame({
        "id": [str(i) for i in range(len(rows))], "group": [""] * len(rows),
        "text_a": [r["text_a"] for r in rows], "text_b": [r.get("text_b", "") for r in rows],
        "choices": [list(r.get("choices", [])) for r in rows],
        "label": [0] * len(rows),
    })
    tr = formats.Truncation(params.model.n_positions, params.tasks.truncation,
                            params.tasks.truncate_keep)
    data = formats.encode_table(table, spec, formats.text_encoder(tok),
                                formats.specials_of(tok), tr)
    out = infer(model, data, 16, "fp32", torch.device("cpu"), "predict")
    if spec.regression:
        return [{"score": float(o)} for o in out]
    probs = torch.softmax(torch.from_numpy(np.asarray(out, dtype=np.float32)), -1).numpy()

    def name(i: int) -> str:
        return str(spec.labels[i]) if i < len(spec.labels) else str(i)

    return [{"label": name(int(p.argmax())),
             "probabilities": {name(i): round(float(v), 6) for i, v in enumerate(p)}}
            for p in probs]
