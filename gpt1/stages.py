"""One function per DVC stage: (params) -> metrics dict. Paths in, paths + metrics JSON out.

Each stage loads its inputs, calls the library, writes its outputs atomically plus
`<paths.metrics>/<stage>.json`, and logs. Stage names match dvc.yaml, gpt1.__main__.STAGES
and the Prefect flow.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from gpt1 import (
    atomic,
    bpe,
    checkpoint,
    networks,
    predict,
    pretraining,
    records,
    runtime,
    tracking,
)
from gpt1 import zeroshot as zs
from gpt1.backends import backend_of
from gpt1.config import Params, parse_params
from gpt1.data import checks, clean, read_parquet_artifact, shards, sources
from gpt1.errors import Gpt1Error
from gpt1.finetune import body_factory, finetune_task, resolve_hparams
from gpt1.lstm import lstm_flops_per_token
from gpt1.model import flops_per_token
from gpt1.progress import progress
from gpt1.report import document
from gpt1.runtime import autocast_for, resolve_precision
from gpt1.scoring import aggregate
from gpt1.tasks import formats, load
from gpt1.tasks.registry import TASKS

log = logging.getLogger(__name__)


def record(params: Params, stage: str, metrics: dict[str, Any], scores: tuple[str, ...],
           summary: Mapping[str, Any] | None = None) -> None:
    """Write the stage's record (gpt1.records) and log it on the open MLflow run: `summary`
    (default: the scores) and both files of the record."""
    paths = records.write_metrics(params, stage, metrics, scores)
    tracking.log_summary({k: metrics[k] for k in scores} if summary is None else summary)
    for path in paths:
        tracking.log_artifact(path)


def _record(params: Params, stage: str, metrics: dict[str, Any], scores: tuple[str, ...]
            ) -> None:
    """`record` for a stage that logs nothing while it works, in its own MLflow run."""
    with tracking.start_run(stage, params):
        record(params, stage, metrics, scores)


def _read_corpus(params: Params) -> Any:
    """The cleaned corpus parquet as a DataFrame (Gpt1Error when missing or unreadable)."""
    return read_parquet_artifact(params.paths.clean_corpus, "clean_corpus")


def scan_mirror(params: Params) -> dict[str, int]:
    """Fingerprint the mirror's corpus and task folders (what DVC tracks of the mirror)."""
    folders = {name: spec.mirror_dir for name, spec in TASKS.items()}
    counts = sources.scan_mirror(params.paths.mirror_dir, params.data.source, folders,
                                 params.paths.mirror_scan)
    log.info("mirror %s: %s", params.paths.mirror_dir or "none (hub)", counts)
    return counts


def download_corpus(params: Params) -> dict[str, Any]:
    """Resolve the raw corpus (mirror read in place, or the hub) and write its manifest."""
    manifest = sources.download_corpus(params.data, params.paths.mirror_dir, params.paths.raw)
    metrics = {"source": manifest["source"], "files": len(manifest["files"]),
               "bytes": sum(f["bytes"] for f in manifest["files"]),
               "skipped": sources.skipped_counts(manifest)}
    _record(params, "download_corpus", metrics, ("files",))
    return metrics


def clean_corpus(params: Params) -> dict[str, Any]:
    """Raw documents -> cleaned, standardized corpus parquet; stats as the stage metrics."""
    docs = sources.raw_documents(sources.read_manifest(params.paths.raw))
    kept, stats = clean.clean_documents(docs, params.clean)
    if not kept:
        raise Gpt1Error(f"no document left after cleaning (dropped: {stats['dropped']})",
                        params.paths.raw)
    with atomic.atomic_path(params.paths.clean_corpus) as tmp:
        clean.documents_frame(kept).to_parquet(tmp, index=False)
    _record(params, "clean_corpus", stats, ("documents",))
    log.info("clean: %d documents, %d characters, dropped %s", stats["documents"],
             stats["characters"], {k: v for k, v in stats["dropped"].items() if v})
    return stats


def check_corpus(params: Params) -> dict[str, Any]:
    """great-expectations gate over the cleaned corpus (Data Docs HTML in paths.data_docs,
    logged to MLflow); fails the stage on any violation."""
    with tracking.start_run("check_corpus", params):
        corpus = _read_corpus(params)
        tracking.log_datasets("corpus", {"checked": (corpus, params.paths.clean_corpus)})
        report = checks.check_corpus(corpus, params.checks,
                                     Path(params.paths.data_docs) / "corpus")
        atomic.write_json(params.paths.corpus_checks, report)
        tracking.log_artifact(Path(params.paths.data_docs) / "corpus", "data_docs")
        metrics = {k: report[k] for k in ("success", "n_rows", "evaluated", "failed",
                                          "data_docs")}
        records.write_metrics(params, "check_corpus", metrics, ("failed",))
    if not report["success"]:
        raise Gpt1Error(f"{checks.summarize(report)} (Data Docs {report['data_docs']})",
                        params.paths.corpus_checks)
    return metrics


def train_bpe(params: Params) -> dict[str, Any]:
    """Learn the BPE vocabulary on the cleaned corpus (spec §1, 5)."""
    texts = _read_corpus(params)["text"].tolist()
    start = time.perf_counter()
    tok = bpe.train_bpe(texts, params.bpe, params.paths.tokenizer)
    metrics = {"vocab_size": tok.vocab_size, "n_merges": params.bpe.n_merges,
               "tokenizer_hash": tok.hash, "seconds": round(time.perf_counter() - start, 2)}
    _record(params, "train_bpe", metrics, ("vocab_size",))
    return metrics


def shard_corpus(params: Params) -> dict[str, Any]:
    """Encode the cleaned corpus into train/val token shards, split by document."""
    corpus = _read_corpus(params)
    tok = bpe.load_bpe(params.paths.tokenizer)
    start = time.perf_counter()
    index = shards.write_shards(corpus["doc_id"].tolist(), corpus["text"].tolist(), tok,
                                params.shard, params.seed, params.paths.shards)
    seconds = time.perf_counter() - start
    splits = index["splits"]
    metrics = {
        "documents": {s: len(v["documents"]) for s, v in splits.items()},
        "tokens": {s: v["tokens"] for s, v in splits.items()},
        "shards": {s: len(v["shards"]) for s, v in splits.items()},
        "tokens_per_second": round(sum(v["tokens"] for v in splits.values()) / seconds),
        "tokenizer_hash": tok.hash,
    }
    _record(params, "shard_corpus", metrics, ("tokens",))
    log.info("shards: %s documents, %s tokens", metrics["documents"], metrics["tokens"])
    return metrics


def pretrain(params: Params) -> dict[str, Any]:
    """Pre-train the Transformer LM on the token shards (spec §1); resumes if interrupted."""
    return _pretrain(params, "pretrain", "gpt", params.paths.checkpoints)


def pretrain_lstm(params: Params) -> dict[str, Any]:
    """Pre-train the LSTM LM baseline (Table 5 / Figure 2) with the same loop and data."""
    return _pretrain(params, "pretrain_lstm", "lstm", params.paths.lstm_checkpoints)


def _pretrain(params: Params, stage: str, kind: str, run_dir: str) -> dict[str, Any]:
    tok = bpe.load_bpe(params.paths.tokenizer)
    train_tokens = shards.read_shards(params.paths.shards, "train", tok.hash)
    val_tokens = shards.read_shards(params.paths.shards, "val", tok.hash)
    torch.manual_seed(params.seed)  # the initial weights are part of the run's trajectory
    model = networks.build_model(kind, params, tok.vocab_size)
    flops = (flops_per_token(params.model, tok.vocab_size, params.pretrain.seq_len)
             if kind == "gpt" else lstm_flops_per_token(params.lstm, tok.vocab_size))
    meta = {"kind": kind, "vocab_size": tok.vocab_size, "tokenizer_hash": tok.hash,
            "backend": backend_of(model)}
    is_rank0 = os.environ.get("RANK", "0") == "0"  # torchrun: only rank 0 records
    run = tracking.start_run(stage, params) if is_rank0 else contextlib.nullcontext(None)
    with run as on_metrics:
        metrics = pretraining.pretrain(model, train_tokens, val_tokens, params, run_dir, meta,
                                       flops, on_metrics or (lambda step, m: None))
        history = metrics.pop("history")
        metrics["backend"] = meta["backend"]
        if is_rank0:
            atomic.write_json(Path(params.paths.metrics) / f"{stage}_val.json", history)
            _log_model(params, run_dir, kind, None)
            record(params, stage, metrics, ("val_loss", "val_ppl"), summary={})
    return metrics


MODEL_EXAMPLE = "it was a bright cold day in april, and the clocks were striking thirteen."
"""Input example of the MLflow models (raw text, standardised by the model)."""


def _log_model(params: Params, model_dir: str | Path, kind: str, spec: Any,
               table: pd.DataFrame | None = None) -> None:
    """The run's model as a registered MLflow pyfunc model (gpt1-pretrain, gpt1-<task>), its
    input example the first rows of the task's dev `table` in the task's input columns; the
    LSTM baseline keeps its raw files as artifacts (no pyfunc flavour for it)."""
    if kind != "gpt":
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


# ---------------------------------------------------------------- fine-tuning


def _task_spec(params: Params, task: str) -> Any:
    if task not in params.finetune.tasks or task not in TASKS:
        raise Gpt1Error(f"unknown task {task!r}; finetune.tasks = {list(params.finetune.tasks)}")
    return TASKS[task]


def prepare_task(params: Params, task: str) -> dict[str, Any]:
    """Mirror (or hub) files -> validated canonical train/dev/test tables of one task."""
    spec = _task_spec(params, task)
    mirror = params.paths.mirror_dir
    tables = load.load_task(spec, params.tasks, mirror)
    docs = Path(params.paths.data_docs) / "tasks" / task
    with tracking.start_run(f"prepare_task_{task}", params):
        report = load.validate_tables(tables, spec, Path(mirror) / "tasks" if mirror else "",
                                      docs)
        tracking.log_artifact(docs, "data_docs")
    load.write_tables(tables, Path(params.paths.tasks) / task, {"checks": report})
    metrics = {"task": task, "source": "mirror" if mirror else "hub",
               "rows": {s: len(t) for s, t in tables.items()}, "splits": spec.sources,
               "checks_passed": all(r["success"] for r in report.values())}
    records.write_metrics(params, f"prepare_task_{task}", metrics, ("rows",))
    log.info("%s: %s", task, metrics["rows"])
    return metrics


def task_truncation(params: Params, task: str) -> formats.Truncation:
    """The truncation of one task: tasks.truncation unless tasks.truncation_overrides names it."""
    rule = params.tasks.truncation_overrides.get(task, params.tasks.truncation)
    return formats.Truncation(params.model.n_positions, rule, params.tasks.truncate_keep)


def finetune(params: Params, task: str) -> dict[str, Any]:
    """Fine-tune the pre-trained Transformer on one task (the `full` row of every table)."""
    return finetune_variant(params, task, "full", "gpt")


def finetune_variant(params: Params, task: str, variant: str, kind: str) -> dict[str, Any]:
    """Fine-tune a `kind` body ("gpt" | "lstm") on `task`; the ablations reuse this with their
    own params (e.g. finetune.lm_coef=0, init=scratch) and variant name. Writes predictions to
    <paths.finetuned>[/<variant>]/<task> and the metrics JSON finetune[_<variant>]_<task>.json.
    """
    spec = _task_spec(params, task)
    if params.finetune.init == "pretrained":
        checkpoint.check_model_shape(
            params.paths.checkpoints if kind == "gpt" else params.paths.lstm_checkpoints, params)
    tok = bpe.load_bpe(params.paths.tokenizer)
    hp = resolve_hparams(params, task)
    tables = load.read_tables(Path(params.paths.tasks) / task)
    limits = {"train": hp.max_train_examples, "dev": hp.max_eval_examples,
              "test": hp.max_eval_examples}
    capped = {s: load.cap_table(t, limits[s], hp.data_seed) for s, t in tables.items()}
    ft = params.finetune
    pretrained = None
    if ft.init == "pretrained":
        run_dir = params.paths.checkpoints if kind == "gpt" else params.paths.lstm_checkpoints
        pretrained, _ = checkpoint.load_model(run_dir, tok.hash)
    make_body = body_factory(ft.init, ft.layers_transferred, pretrained,
                             lambda: networks.build_model(kind, params, tok.vocab_size),
                             n_special=len(params.bpe.special_tokens))
    tr = task_truncation(params, task)
    encode = formats.text_encoder(tok)
    data = {s: formats.encode_table(t, spec, encode, formats.specials_of(tok), tr)
            for s, t in capped.items()}
    suffix = task if variant == "full" else f"{variant}_{task}"
    out_dir = Path(params.paths.finetuned) / (task if variant == "full" else f"{variant}/{task}")
    sample = {s: (f" (seeded random {len(capped[s])} of {len(tables[s])})"
                  if len(capped[s]) < len(tables[s]) else f" (all {len(tables[s])})")
              for s in tables}
    model_dir = out_dir / predict.MODEL_DIR  # the `full` row only: what `gpt1 predict` uses
    save = (None if variant != "full" else lambda m, d: predict.save_task_model(
        d / predict.MODEL_DIR, m, params, task, kind, tok))
    with tracking.start_run(f"finetune_{suffix}", params) as on_metrics:
        tracking.log_datasets(task, {s: (t, Path(params.paths.tasks) / task / f"{s}.parquet")
                                     for s, t in capped.items()})
        result = finetune_task(spec, hp, data, make_body, out_dir, on_metrics, save,
                               runtime.device(params.device))
        if save is not None:
            _log_model(params, model_dir, kind, spec, capped["dev"])
        atomic.write_json(out_dir / "result.json", result)
        metrics = records.finetune_record(params, spec, hp, kind, variant, result, sample,
                                           out_dir)
        record(params, f"finetune_{suffix}", metrics, ("scores",), summary=metrics)
    log.info("%s %s: %s = %.4f", variant, task, spec.metric,
             result["scores"][spec.metric]["mean"])
    return metrics


# ------------------------------------- ablations, Figure 2 and the report


def _override(params: Params, **sections: dict[str, Any]) -> Params:
    """params with some keys of some sections replaced, validated again like a params file."""
    raw = params.as_dict()
    for section, values in sections.items():
        raw[section] = {**raw[section], **values}
    return parse_params(raw, "<override>")


def ablation_params(params: Params, variant: str) -> Params:
    """The finetune params of one Table 5 row (ablations.presets[variant])."""
    preset = params.ablations.presets.get(variant)
    if preset is None:
        raise Gpt1Error(f"unknown ablation variant {variant!r}; ablations.presets = "
                        f"{list(params.ablations.presets)}")
    lm_coef = params.finetune.lm_coef if preset.lm_coef is None else preset.lm_coef
    return _override(params, finetune={"init": preset.init, "lm_coef": lm_coef})


def ablation(params: Params, task: str, variant: str) -> dict[str, Any]:
    """Table 5: the finetune stage on `task` with the overrides of `variant` (same loop)."""
    if task not in params.ablations.tasks:
        raise Gpt1Error(f"task {task!r} not in ablations.tasks {list(params.ablations.tasks)}")
    variant_params = ablation_params(params, variant)  # an unknown variant: one line, listed
    kind = "gpt" if params.ablations.presets[variant].body == "transformer" else "lstm"
    return finetune_variant(variant_params, task, variant, kind)


def _layers_caps(params: Params, task: str) -> Params:
    """params whose fine-tuning caps are the study's (layers.max_*), when it sets them."""
    caps = {k: v for k, v in (("max_train_examples", params.layers.max_train_examples),
                              ("max_eval_examples", params.layers.max_eval_examples))
            if v is not None}
    if not caps:
        return params
    overrides = params.as_dict()["finetune"]["overrides"]
    if task in overrides:
        overrides[task] = {**overrides[task], **dict.fromkeys(caps)}
    return _override(params, finetune={**caps, "overrides": overrides})


def transfer_layers(params: Params, task: str, layers: int) -> dict[str, Any]:
    """Figure 2 left: the finetune stage with the embeddings + first `layers` blocks transferred.

    The selected epoch's dev accuracy, and its train accuracy on a seeded sample of the very
    rows it was trained on (scored as the run's `test` split: tables derived in the run dir).
    """
    if task not in params.layers.tasks or not 0 <= layers <= params.model.n_layer:
        raise Gpt1Error(f"{task!r} / {layers} layers: not in layers.tasks "
                        f"{list(params.layers.tasks)} or outside 0..{params.model.n_layer}")
    study = _layers_caps(params, task)
    spec, hp = _task_spec(params, task), resolve_hparams(study, task)
    base = Path(params.paths.finetuned) / "layers" / f"{task}_{layers}"
    tables = load.read_tables(Path(params.paths.tasks) / task)
    train = load.cap_table(tables["train"], hp.max_train_examples, hp.data_seed)
    load.write_tables({"train": train, "dev": tables["dev"],
                       "test": load.cap_table(train, hp.max_eval_examples, hp.data_seed)},
                      base / "tables" / task)
    run = _override(study, finetune={"layers_transferred": layers, "init": "pretrained"},
                    paths={"tasks": str(base / "tables"), "metrics": str(base / "metrics"),
                           "finetuned": str(base)})
    variant = f"layers_{layers}"
    inner = finetune_variant(run, task, variant, "gpt")
    result = json.loads((base / variant / task / "result.json").read_text(encoding="utf-8"))
    dev = [{"dev_acc": s["dev_history"][s["best_epoch"] - 1][spec.metric]}
           for s in result["seeds"]]
    metrics = {
        "task": task, "variant": variant, "layers_transferred": layers, "metric": spec.metric,
        "scores": {**aggregate(dev), "train_acc": result["scores"][spec.metric]},
        "eval_split": (f"dev = {spec.sources['dev']} (selected epoch); train = seeded sample "
                       f"of {inner['n_eval']} of the {inner['n_train']} training rows"),
        "n_train": inner["n_train"], "n_eval": inner["n_dev"], "seeds": inner["seeds"],
        "predictions": {"dev": inner["predictions"]["dev"]},
    }
    records.write_metrics(params, f"layers_{task}_{layers}", metrics, ("scores",))
    return metrics


def zeroshot(params: Params) -> dict[str, Any]:
    """Figure 2 right: zero-shot heuristics on the Transformer's log-spaced checkpoints."""
    return _zeroshot(params, "zeroshot", "transformer", params.paths.checkpoints)


def zeroshot_lstm(params: Params) -> dict[str, Any]:
    """Figure 2 right: the same heuristics on the LSTM's checkpoints."""
    return _zeroshot(params, "zeroshot_lstm", "lstm", params.paths.lstm_checkpoints)


def _zeroshot(params: Params, stage: str, model_name: str, run_dir: str) -> dict[str, Any]:
    checkpoint.check_model_shape(run_dir, params)
    cfg = params.zeroshot
    tok = bpe.load_bpe(params.paths.tokenizer)
    tables = {t: load.read_tables(Path(params.paths.tasks) / t) for t in cfg.tasks if t != "dprd"}
    dprd_file = Path(params.paths.mirror_dir or "") / "tasks" / "DPRD" / f"{cfg.dprd_split}.c.txt"
    dprd = zs.read_dprd(dprd_file) if "dprd" in cfg.tasks else []
    data, counts = zs.build_data(cfg, tables, dprd, formats.text_encoder(tok), params.seed)
    steps = sorted(int(s) for s in checkpoint.read_model_meta(Path(run_dir))["zeroshot"])
    device = runtime.device(params.device)
    precision = resolve_precision(params.pretrain.precision, device)
    n_ctx = params.model.n_positions
    rows, frames = [], []
    with tracking.start_run(stage, params) as on_metrics:
        for step in progress(steps, desc=f"{stage} checkpoints", unit="ckpt"):
            model, _ = checkpoint.load_model(run_dir, tok.hash, step=step)
            scorer = zs.ModelScorer(model.to(device), n_ctx, cfg.batch_size,
                                    lambda: autocast_for(precision, device))
            preds, threshold = zs.predict_tasks(scorer, data, n_ctx)
            raw = zs.scores_of(preds, threshold)
            frames += [pd.DataFrame({"step": step, "task": t, "example": range(len(y)),
                                     "label": y, "prediction": p}) for t, (y, p) in preds.items()]
            norm = {t: zs.normalise(raw[t], cfg.norm[t]) for t in cfg.tasks}
            rows.append({"step": step, "scores": raw, "normalised": norm})
            on_metrics(step, {f"zeroshot/{t}": v for t, v in norm.items()})
            log.info("%s step %d: %s", stage, step, {t: round(v, 3) for t, v in norm.items()})
    pred_path = Path(params.paths.finetuned) / "zeroshot" / f"{model_name}.parquet"
    table = pd.concat(frames) if frames else pd.DataFrame(
        columns=["step", "task", "example", "label", "prediction"])
    atomic.write_bytes(pred_path, table.to_parquet(index=False) or b"")
    metrics = {
        "model": model_name, "checkpoints": rows, "n_examples": counts,
        "predictions": str(pred_path),
        "eval_split": (f"canonical test splits of {', '.join(t for t in cfg.tasks if t != 'dprd')}"
                       f" (seeded sample, at most {cfg.max_examples}); CoLA threshold fitted on "
                       f"{cfg.cola_threshold_split}; DPRD {dprd_file.name}"),
        "norm": {t: n.model_dump() for t, n in cfg.norm.items()},
        "final": rows[-1]["normalised"],  # the last checkpoint's: the stage's one score row
        "backend": backend_of(model),
    }
    records.write_metrics(params, stage, metrics, ("final",))
    return metrics


def report(params: Params) -> dict[str, Any]:
    """Tables 2-5 and Figure 2 from every metrics file (reports/), logged to MLflow."""
    metrics = records.read_metrics(params.paths.metrics)
    expected = {f"finetune_{v}_{t}": ablation_params(params, v).digest()
                for v in params.ablations.presets for t in params.ablations.tasks}
    paths = document.write_outputs(params, metrics, expected)
    with tracking.start_run("report", params):
        for path in paths.values():
            tracking.log_artifact(path, "report")
    log.info("report: %s from %d metrics files", paths["report"], len(metrics))
    return {"metrics_files": len(metrics), "outputs": {k: str(v) for k, v in paths.items()}}
