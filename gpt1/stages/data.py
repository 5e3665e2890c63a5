"""The data stages: the mirror's fingerprints, the corpus (download, clean, gate, BPE, shards),
one Data Docs home, and each task's validated tables (prepare_task)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from gpt1 import atomic, bpe, hf_import, tracking
from gpt1.config import Params
from gpt1.data import checks, clean, read_parquet_artifact, shards, sources
from gpt1.errors import Gpt1Error
from gpt1.recording import record, record_in_own_run
from gpt1.records import StageContext
from gpt1.stage_table import StageRun
from gpt1.tasks import load
from gpt1.tasks.registry import FRESH, TASKS

log = logging.getLogger(__name__)


def _read_corpus(params: Params) -> Any:
    """The cleaned corpus parquet as a DataFrame (Gpt1Error when missing or unreadable)."""
    return read_parquet_artifact(params.paths.clean_corpus, "clean_corpus")


def scan_mirror(params: Params, *, context: StageContext | None = None) -> dict[str, int]:
    """Fingerprint the mirror's corpus and task folders (what DVC tracks of the mirror)."""
    folders = {name: spec.mirror_dir for name, spec in TASKS.items() if spec.custom is None}
    files = {name: spec.custom.file for name, spec in TASKS.items() if spec.custom is not None}
    settings = {name: params.tasks.custom[name].model_dump(mode="json") for name in files}
    counts = sources.scan_mirror(params.paths.mirror_dir, params.data.source, folders,
                                 params.paths.mirror_scan, files, settings)
    # and the checkpoint pretrain.import_hf names (no source when it is null); no torch
    atomic.write_json(Path(params.paths.mirror_scan) / hf_import.SCAN_FILE,
                      hf_import.scan(params.pretrain.import_hf))
    log.info("mirror %s: %s", params.paths.mirror_dir or "none (hub)", counts)
    return counts


def download_corpus(params: Params, *, context: StageContext | None = None) -> dict[str, Any]:
    """Resolve the raw corpus (mirror read in place, or the hub) and write its manifest."""
    manifest = sources.download_corpus(params.data, params.paths.mirror_dir, params.paths.raw)
    metrics = {"source": manifest["source"], "files": len(manifest["files"]),
               "bytes": sum(f["bytes"] for f in manifest["files"]),
               "skipped": sources.skipped_counts(manifest)}
    record_in_own_run(params, "download_corpus", metrics, ("files",), context=context)
    return metrics


def clean_corpus(params: Params, *, context: StageContext | None = None) -> dict[str, Any]:
    """Raw documents -> cleaned, standardized corpus parquet; stats as the stage metrics."""
    docs = sources.raw_documents(sources.read_manifest(params.paths.raw))
    kept, stats = clean.clean_documents(docs, params.clean)
    if not kept:
        raise Gpt1Error(f"no document left after cleaning (dropped: {stats['dropped']})",
                        params.paths.raw)
    with atomic.atomic_path(params.paths.clean_corpus) as tmp:
        clean.documents_frame(kept).to_parquet(tmp, index=False)
    record_in_own_run(params, "clean_corpus", stats, ("documents",), context=context)
    log.info("clean: %d documents, %d characters, dropped %s", stats["documents"],
             stats["characters"], {k: v for k, v in stats["dropped"].items() if v})
    return stats


def check_corpus(params: Params, *, context: StageContext | None = None) -> dict[str, Any]:
    """great-expectations gate over the cleaned corpus (Data Docs HTML in paths.data_docs,
    logged to MLflow); fails the stage on any violation."""
    with tracking.start_run("check_corpus", params, context=context):
        corpus = _read_corpus(params)
        tracking.log_datasets("corpus", {"checked": (corpus, params.paths.clean_corpus)})
        report = checks.check_corpus(corpus, params.checks,
                                     Path(params.paths.data_docs) / "corpus")
        atomic.write_json(params.paths.corpus_checks, report)
        tracking.log_artifact(Path(params.paths.data_docs) / "corpus", "data_docs")
        metrics = {k: report[k] for k in ("success", "n_rows", "evaluated", "failed",
                                          "data_docs")}
        record(params, "check_corpus", metrics, ("failed",), context=context)
    if not report["success"]:
        raise Gpt1Error(f"{checks.summarize(report)} (Data Docs {report['data_docs']})",
                        params.paths.corpus_checks)
    return metrics


def data_docs(params: Params, *, context: StageContext | None = None) -> dict[str, Any]:
    """One Data Docs home page over every data gate's site (readable offline)."""
    gates: dict[str, str | Path] = {"corpus": params.paths.corpus_checks}
    gates.update({t: Path(params.paths.tasks) / t / "checks.json" for t in params.finetune.tasks})
    return {"home": str(checks.write_home(params.paths.data_docs, gates))}


def train_bpe(params: Params, *, context: StageContext | None = None) -> dict[str, Any]:
    """Learn the BPE vocabulary on the cleaned corpus (spec §1, 5)."""
    if params.pretrain.import_hf is not None:  # convert the checkpoint's tokenizer instead
        from gpt1 import hf_stand_in  # torch: only on this path

        return hf_stand_in.train_bpe(params, context=context)
    texts = _read_corpus(params)["text"].tolist()
    start = time.perf_counter()
    tok = bpe.train_bpe(texts, params.bpe, params.paths.tokenizer)
    metrics = {"vocab_size": tok.vocab_size, "n_merges": params.bpe.n_merges,
               "tokenizer_hash": tok.hash, "seconds": round(time.perf_counter() - start, 2)}
    record_in_own_run(params, "train_bpe", metrics, ("vocab_size",), context=context)
    return metrics


def shard_corpus(params: Params, *, context: StageContext | None = None) -> dict[str, Any]:
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
    record_in_own_run(params, "shard_corpus", metrics, ("tokens",), context=context)
    log.info("shards: %s documents, %s tokens", metrics["documents"], metrics["tokens"])
    return metrics


def prepare_task(params: Params, task: str, *, context: StageContext | None = None
                 ) -> dict[str, Any]:
    """Mirror (or hub) files -> validated canonical train/dev/test tables of one task, and its
    fresh split carved from train where tasks.fresh_examples names the task (outside the rows
    tasks.scored_ids lists for it)."""
    spec = load.task_spec(params, task)
    mirror = params.paths.mirror_dir
    fresh = params.tasks.fresh_examples.get(task)
    scored_file = params.tasks.scored_ids.get(task)
    scored = frozenset() if scored_file is None else load.read_scored_ids(scored_file)
    tables = load.carve_fresh(load.load_task(spec, params.tasks, mirror), fresh,
                              params.tasks.carve_seed, scored)
    docs = Path(params.paths.data_docs) / "tasks" / task
    stem = StageRun.of("prepare_task", task=task).stem
    with tracking.start_run(stem, params, context=context):
        report = load.validate_tables(tables, spec, Path(mirror) / "tasks"
                                      if mirror and spec.custom is None else "", docs)
        tracking.log_artifact(docs, "data_docs")
        own = ({"settings": params.tasks.custom[task].model_dump(mode="json")}
               if spec.custom else {})  # an own task's settings reach its fine-tuning stages
        about = ({FRESH: {"source": load.fresh_source(spec, len(tables[FRESH]),
                                                      params.tasks.carve_seed, len(scored))}}
                 if fresh else {})  # its origin in words, for every record that scores it
        load.write_tables(tables, Path(params.paths.tasks) / task,
                          {"checks": report, **own, **about})
        metrics = {"task": task,
                   "source": "custom" if spec.custom else "mirror" if mirror else "hub",
                   "rows": {s: len(t) for s, t in tables.items()},
                   "splits": {**spec.sources, **{s: a["source"] for s, a in about.items()}},
                   "checks_passed": all(r["success"] for r in report.values())}
        record(params, stem, metrics, ("rows",), context=context)
    log.info("%s: %s", task, metrics["rows"])
    return metrics

