"""One function per DVC stage: (params) -> metrics dict. Paths in, paths + metrics JSON out.

Each stage loads its inputs, calls the library, writes its outputs atomically plus
`<paths.metrics>/<stage>.json`, and logs. Stage names match dvc.yaml, gpt1.__main__.STAGES
and the Prefect flow.
"""

from __future__ import annotations

import contextlib
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
    freshness,
    hf_stages,
    logged_models,
    networks,
    predict,
    pretraining,
    records,
    runtime,
    tracking,
    zeroshot_stage,
)
from gpt1.backends import backend_of
from gpt1.config import Params
from gpt1.data import checks, clean, read_parquet_artifact, shards, sources
from gpt1.errors import Gpt1Error
from gpt1.finetune import (
    body_factory,
    finetune_task,
    pilot_key,
    resolve_hparams,
    train_subset_seed,
)
from gpt1.floor import floor_stage  # noqa: F401 (the `floor` stage, dispatched by name)
from gpt1.lstm import lstm_flops_per_token
from gpt1.model import flops_per_token
from gpt1.report import document
from gpt1.tasks import formats, load
from gpt1.tasks.registry import TASKS
from gpt1.variants import ablation_params, layers_caps, lm_params, override, pilot_lr

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
    folders = {name: spec.mirror_dir for name, spec in TASKS.items() if spec.custom is None}
    files = {name: spec.custom.file for name, spec in TASKS.items() if spec.custom is not None}
    counts = sources.scan_mirror(params.paths.mirror_dir, params.data.source, folders,
                                 params.paths.mirror_scan, files)
    hf_stages.scan(params)  # and the checkpoint pretrain.import_hf names (gpt1/hf_stages.py)
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


def data_docs(params: Params) -> dict[str, Any]:
    """One Data Docs home page over every data gate's site (readable offline)."""
    gates: dict[str, str | Path] = {"corpus": params.paths.corpus_checks}
    gates.update({t: Path(params.paths.tasks) / t / "checks.json" for t in params.finetune.tasks})
    return {"home": str(checks.write_home(params.paths.data_docs, gates))}


def train_bpe(params: Params) -> dict[str, Any]:
    """Learn the BPE vocabulary on the cleaned corpus (spec §1, 5)."""
    if params.pretrain.import_hf is not None:  # convert the checkpoint's (gpt1/hf_stages.py)
        return hf_stages.train_bpe(params, _record)
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


def resolve_pretrain_seed(params: Params, seed: int | None) -> int:
    """The pre-training seed a stage runs for: `seed`, a value of pretrain.seeds (None = the
    first)."""
    if seed is None:
        return params.pretrain.seeds[0]
    if seed not in params.pretrain.seeds:
        raise Gpt1Error(f"pre-training seed {seed} not in pretrain.seeds "
                        f"{list(params.pretrain.seeds)}")
    return seed


def pretrain(params: Params, pretrain_seed: int | None = None) -> dict[str, Any]:
    """Pre-train the Transformer LM on the token shards (spec §1); resumes if interrupted."""
    return _pretrain(params, "pretrain", "gpt", pretrain_seed)


def pretrain_lstm(params: Params, pretrain_seed: int | None = None) -> dict[str, Any]:
    """Pre-train the LSTM LM baseline (Table 5 / Figure 2) with the same loop and data."""
    return _pretrain(params, "pretrain_lstm", "lstm", pretrain_seed)


def _pretrain(params: Params, name: str, kind: str, seed: int | None) -> dict[str, Any]:
    seed = resolve_pretrain_seed(params, seed)
    run_dir = str(checkpoint.pretrain_dir(params, kind, seed))
    stage = f"{name}_p{seed}"
    if params.pretrain.import_hf is not None:  # import instead (gpt1/hf_stages.py)
        return hf_stages.pretrain(params, stage, kind, seed, Path(run_dir), record)
    record_params, params = params, lm_params(params, kind, seed)
    tok = bpe.load_bpe(params.paths.tokenizer)
    train_tokens = shards.read_shards(params.paths.shards, "train", tok.hash)
    val_tokens = shards.read_shards(params.paths.shards, "val", tok.hash)
    torch.manual_seed(params.seed)  # the initial weights are part of the run's trajectory
    model = networks.build_model(kind, params, tok.vocab_size)
    flops = (flops_per_token(params.model, tok.vocab_size, params.pretrain.seq_len)
             if kind == "gpt" else lstm_flops_per_token(params.lstm, tok.vocab_size))
    meta = {"kind": kind, "vocab_size": tok.vocab_size, "tokenizer_hash": tok.hash,
            "backend": backend_of(model), "pretrain_seed": seed}
    is_rank0 = os.environ.get("RANK", "0") == "0"  # torchrun: only rank 0 records
    run = (tracking.start_run(stage, record_params) if is_rank0  # the user's params, logged
           else contextlib.nullcontext(None))
    with run as on_metrics:
        metrics = pretraining.pretrain(model, train_tokens, val_tokens, params, run_dir, meta,
                                       flops, on_metrics or (lambda step, m: None))
        history = metrics.pop("history")
        metrics.update(backend=meta["backend"], pretrain_seed=seed, kind=kind)
        if is_rank0:
            atomic.write_json(Path(params.paths.metrics) / f"{stage}_val.json", history)
            logged_models.log_model(params, run_dir, kind, None)
            record(record_params, stage, metrics, ("val_loss", "val_ppl"), summary={})
    return metrics


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
        report = load.validate_tables(tables, spec, Path(mirror) / "tasks"
                                      if mirror and spec.custom is None else "", docs)
        tracking.log_artifact(docs, "data_docs")
    load.write_tables(tables, Path(params.paths.tasks) / task, {"checks": report})
    metrics = {"task": task, "source": "custom" if spec.custom else "mirror" if mirror else "hub",
               "rows": {s: len(t) for s, t in tables.items()}, "splits": spec.sources,
               "checks_passed": all(r["success"] for r in report.values())}
    records.write_metrics(params, f"prepare_task_{task}", metrics, ("rows",))
    log.info("%s: %s", task, metrics["rows"])
    return metrics


def task_truncation(params: Params, task: str) -> formats.Truncation:
    """The truncation of one task: tasks.truncation unless tasks.truncation_overrides names it."""
    rule = params.tasks.truncation_overrides.get(task, params.tasks.truncation)
    return formats.Truncation(params.model.n_positions, rule, params.tasks.truncate_keep)


def finetune(params: Params, task: str, pretrain_seed: int | None = None) -> dict[str, Any]:
    """Fine-tune the pre-trained Transformer on one task (the `full` row of every table)."""
    return finetune_variant(params, task, "full", "gpt", pretrain_seed)


def finetune_variant(params: Params, task: str, variant: str, kind: str,
                     seed: int | None = None, out: str = "", stem: str = "",
                     record_params: Params | None = None) -> dict[str, Any]:
    """Fine-tune a `kind` body ("gpt" | "lstm") of pre-training run `seed` on `task`; the
    ablations and Figure 2 left reuse this with their own params and variant name. Writes to
    <paths.finetuned>/p<seed>/<out> (default <task> or <variant>/<task>) and the record
    <stem>_p<seed> (default finetune[_<variant>]_<task>); record_params = the params whose
    digest the record carries (default params).

    Fine-tuning seed f trains on its own seeded subset of the training pool (when capped) in
    its own order; every seed and every pre-training run is scored on the same test examples.
    """
    spec, seed = _task_spec(params, task), resolve_pretrain_seed(params, seed)
    run_dir = checkpoint.pretrain_dir(params, kind, seed)
    if params.finetune.init == "pretrained":
        checkpoint.check_model_shape(run_dir, params)
    tok = bpe.load_bpe(params.paths.tokenizer)
    hp = resolve_hparams(params, task)
    tables = load.read_tables(Path(params.paths.tasks) / task)
    splits = ("dev", "test") if hp.select == "dev" else ("test",)
    capped = {s: load.cap_table(tables[s], hp.max_eval_examples, hp.data_seed) for s in splits}
    trains = {f: load.cap_table(tables["train"], hp.max_train_examples,
                                train_subset_seed(hp.data_seed, f)) for f in hp.seeds}
    ft = params.finetune
    pretrained = checkpoint.load_model(run_dir, tok.hash)[0] if ft.init == "pretrained" else None
    make_body = body_factory(ft.init, ft.layers_transferred, pretrained,
                             lambda: networks.build_model(kind, params, tok.vocab_size),
                             n_special=len(params.bpe.special_tokens))
    tr = task_truncation(params, task)
    encode = formats.text_encoder(tok)

    def encoded(table: pd.DataFrame) -> formats.Encoded:
        return formats.encode_table(table, spec, encode, formats.specials_of(tok), tr)

    data = {s: encoded(t) for s, t in capped.items()}
    train_sets = {f: encoded(t) for f, t in trains.items()}
    data["train"] = train_sets[hp.seeds[0]]
    out = out or (task if variant == "full" else f"{variant}/{task}")
    out_dir = Path(params.paths.finetuned) / f"p{seed}" / out
    default = f"finetune_{task}" if variant == "full" else f"finetune_{variant}_{task}"
    stem = f"{stem or default}_p{seed}"
    n_train = len(trains[hp.seeds[0]])
    sample = {s: (f" (seeded random {len(capped[s])} of {len(tables[s])})"
                  if len(capped[s]) < len(tables[s]) else f" (all {len(tables[s])})")
              for s in splits}
    sample["train"] = (f" (seeded random {n_train} of {len(tables['train'])} per fine-tuning "
                       "seed)" if n_train < len(tables["train"]) else f" (all {n_train})")
    model_dir = out_dir / predict.MODEL_DIR  # the `full` row only: what `gpt1 predict` uses
    save = (None if variant != "full" else lambda m, d: predict.save_task_model(
        d / predict.MODEL_DIR, m, params, task, kind, tok, seed))
    with tracking.start_run(stem, params) as on_metrics:
        used = {**capped, "train": trains[hp.seeds[0]]}  # the first seed's training sample
        tracking.log_datasets(task, {s: (t, Path(params.paths.tasks) / task / f"{s}.parquet")
                                     for s, t in used.items()})
        result = finetune_task(spec, hp, data, make_body, out_dir, on_metrics, save,
                               runtime.device(params.device), train_sets)
        if save is not None:
            logged_models.log_model(params, model_dir, kind, spec, used["train"])
        atomic.write_json(out_dir / "result.json", result)
        metrics = records.finetune_record(params, spec, hp, kind, variant, result, sample,
                                           out_dir, seed)
        record(record_params or params, stem, metrics, ("scores",), summary=metrics)
    log.info("%s %s p%d: %s = %.4f", variant, task, seed, spec.metric,
             result["scores"][spec.metric]["mean"])
    return metrics


# ------------------------------------- ablations, Figure 2 and the report


def ablation(params: Params, task: str, variant: str, pretrain_seed: int | None = None
             ) -> dict[str, Any]:
    """Table 5: the finetune stage on `task` with the overrides of `variant` (same loop), at
    the lr its pilot chose where ablations.pilot tunes it."""
    if task not in params.ablations.tasks:
        raise Gpt1Error(f"task {task!r} not in ablations.tasks {list(params.ablations.tasks)}")
    ablation_params(params, variant)  # an unknown variant: one line, listed
    variant_params = ablation_params(params, variant, pilot_lr(params, variant, task))
    kind = "gpt" if params.ablations.presets[variant].body == "transformer" else "lstm"
    return finetune_variant(variant_params, task, variant, kind, pretrain_seed)


def lr_pilot(params: Params, task: str, variant: str) -> dict[str, Any]:
    """The lr pilot of a Table 5 baseline: every lr of ablations.pilot.lr_grid fine-tunes on
    the training pool minus a carved dev split (seeded, ablations.pilot.dev_examples) and is
    scored on that split; the best (one class last, then score, log-loss, the larger lr) is the
    ablation's lr. Runs on the first pre-training seed. No scored split is touched."""
    cfg = params.ablations.pilot
    abl = params.ablations
    if variant not in abl.variants or task not in abl.tasks:
        raise Gpt1Error(f"{variant!r} / {task!r}: not in ablations.variants "
                        f"{list(abl.variants)} x ablations.tasks {list(abl.tasks)}")
    spec, seed = _task_spec(params, task), params.pretrain.seeds[0]
    base = Path(params.paths.finetuned) / "lr_pilot" / f"{variant}_{task}"
    if variant not in cfg.variants:  # a row the pilot does not tune runs at the recipe's lr
        why = {"variant": variant, "task": task,
               "not_piloted": "not in ablations.pilot.variants: the fine-tuning recipe's lr"}
        atomic.write_json(base / "not_piloted.json", why)
        _record(params, f"lr_pilot_{variant}_{task}", why, ())
        return why
    pool = load.read_tables(Path(params.paths.tasks) / task)["train"]
    if len(pool) < 2 * cfg.dev_examples:
        raise Gpt1Error(f"{task}: training pool of {len(pool)} is too small to carve "
                        f"ablations.pilot.dev_examples={cfg.dev_examples} from it")
    train, dev = load.carve(pool, cfg.dev_examples, cfg.seed)
    # the pilot's runs score (as their `test`) the carved dev split; they select nothing
    load.write_tables({"train": train, "dev": dev, "test": dev}, base / "tables" / task)
    keys, scores = {}, {}
    for lr in cfg.lr_grid:
        run = ablation_params(params, variant, lr)
        run = override(run, finetune={"seeds": [cfg.seed], "select": "final"},
                        paths={"tasks": str(base / "tables"), "metrics": str(base / "metrics"),
                               "finetuned": str(base / "runs")})
        kind = "gpt" if params.ablations.presets[variant].body == "transformer" else "lstm"
        with tracking.child_scope(f"lr={lr:g}", run, {"gpt1.lr_candidate": f"{lr:g}"}):
            m = finetune_variant(run, task, variant, kind, seed, out=f"lr_{lr:g}",
                                 stem=f"lr_{lr:g}")
        pred = pd.read_parquet(m["predictions"]["test"][0])["prediction"].to_numpy()
        flat = {k: v["mean"] for k, v in m["scores"].items()}
        scores[f"{lr:g}"] = flat[spec.metric]
        keys[lr] = pilot_key(spec, flat, pred, m["log_loss"][0], lr)
    chosen = max(keys, key=keys.__getitem__)
    metrics = {"variant": variant, "task": task, "metric": spec.metric,
               "grid": list(cfg.lr_grid), "dev_scores": scores, "chosen_lr": chosen,
               "dev_split": (f"{len(dev)} examples carved (seed {cfg.seed}) from the "
                             f"{len(pool)}-example training pool ({spec.sources['train']}); "
                             "trained on the rest, capped as the task's fine-tuning"),
               "chosen_by": ("dev " + ("accuracy" if spec.metric == "f1" else spec.metric)
                             + "; >= 95 % one class last, lower log-loss next, larger lr on ties"),
               "pretrain_seed": seed, "seed": cfg.seed}
    with tracking.start_run(f"lr_pilot_{variant}_{task}", params):  # the stage's own run
        record(params, f"lr_pilot_{variant}_{task}", metrics, ("dev_scores", "chosen_lr"),
               summary={"chosen_lr": chosen, f"chosen_dev_{spec.metric}": scores[f"{chosen:g}"],
                        "dev_scores": scores})
    return metrics


def transfer_layers(params: Params, task: str, layers: int, pretrain_seed: int | None = None
                    ) -> dict[str, Any]:
    """Figure 2 left: the finetune stage with the embeddings + first `layers` blocks
    transferred, scored like every fine-tune on the task's test split (disjoint from its
    training rows and from the dev split that `select: dev` chooses on)."""
    if task not in params.layers.tasks or not 0 <= layers <= params.model.n_layer:
        raise Gpt1Error(f"{task!r} / {layers} layers: not in layers.tasks "
                        f"{list(params.layers.tasks)} or outside 0..{params.model.n_layer}")
    run = override(layers_caps(params, task),
                    finetune={"layers_transferred": layers, "init": "pretrained"})
    return finetune_variant(run, task, f"layers_{layers}", "gpt", pretrain_seed,
                            out=f"layers/{task}_{layers}", stem=f"layers_{task}_{layers}",
                            record_params=params)


def zeroshot(params: Params, pretrain_seed: int | None = None) -> dict[str, Any]:
    """Figure 2 right: zero-shot heuristics on the Transformer's log-spaced checkpoints."""
    return _zeroshot(params, "zeroshot", "gpt", pretrain_seed)


def zeroshot_lstm(params: Params, pretrain_seed: int | None = None) -> dict[str, Any]:
    """Figure 2 right: the same heuristics on the LSTM's checkpoints."""
    return _zeroshot(params, "zeroshot_lstm", "lstm", pretrain_seed)


def _zeroshot(params: Params, name: str, kind: str, seed: int | None) -> dict[str, Any]:
    seed = resolve_pretrain_seed(params, seed)
    if params.pretrain.import_hf is not None:  # no intermediate checkpoints to score
        return hf_stages.not_run(params, f"{name}_p{seed}", _record,
                                 zeroshot_file=zeroshot_stage.predictions_path(params, kind, seed))
    return zeroshot_stage.run(params, name, kind, seed)


def report(params: Params) -> dict[str, Any]:
    """Tables 2-5 and Figure 2 from every metrics file (reports/), logged to MLflow."""
    # the current stages' records only: another config's leftovers are not this run's
    metrics = freshness.current_records(params, records.read_metrics(params.paths.metrics))
    expected = {f"finetune_{v}_{t}_p{p}": ablation_params(
                    params, v, lr=metrics.get(f"lr_pilot_{v}_{t}", {}).get("chosen_lr")).digest()
                for v in params.ablations.presets for t in params.ablations.tasks
                for p in params.pretrain.seeds}
    paths = document.write_outputs(params, metrics, expected)
    with tracking.start_run("report", params):
        for path in paths.values():
            tracking.log_artifact(path, "report")
    log.info("report: %s from %d metrics files", paths["report"], len(metrics))
    return {"metrics_files": len(metrics), "outputs": {k: str(v) for k, v in paths.items()}}
