"""Raw corpus sources: a local mirror read in place, or the Hugging Face hub (spec §1).

`download_corpus` records every raw input (name, bytes, sha256) in a manifest; hub documents
are streamed (`datasets.load_dataset(..., streaming=True)`, capped by data.max_documents),
retried with exponential back-off on transient network errors, and written atomically, so a
re-run is idempotent and no partial file is ever left. `raw_documents` reads them back for
the clean stage, checking each file against its recorded sha256.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gpt1 import atomic
from gpt1.config import DataCfg
from gpt1.data import read_json_artifact
from gpt1.data.clean import RawDocument
from gpt1.errors import Gpt1Error
from gpt1.progress import progress

log = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"
HUB_FILE = "hub_corpus.jsonl"
RETRY_BASE_SECONDS = 2.0
"""Back-off before retry k is RETRY_BASE_SECONDS * 2**k (network politeness, not a result)."""

LoadDataset = Callable[..., Iterable[dict[str, Any]]]

HOW_TO_MIRROR = (
    "set paths.mirror_dir in params.yaml to a local mirror laid out like ../shared/data "
    "(corpus/*.txt) and data.source: mirror"
)


def _transient_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        import requests

        errors += [requests.exceptions.ConnectionError, requests.exceptions.Timeout]
    except ImportError:
        pass
    try:
        import httpx

        errors.append(httpx.TransportError)
    except ImportError:
        pass
    return tuple(errors)


def sha256_file(path: Path, bar: tqdm | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            if bar is not None:
                bar.update(len(chunk))
    return digest.hexdigest()


def mirror_corpus_dir(mirror_dir: str | None) -> Path:
    """paths.mirror_dir/corpus, or a one-line error saying how to set it."""
    if mirror_dir is None:
        raise Gpt1Error(f"data.source is mirror but paths.mirror_dir is null: {HOW_TO_MIRROR}")
    corpus = Path(mirror_dir) / "corpus"
    if not corpus.is_dir():
        raise Gpt1Error(
            f"no corpus directory in the mirror (paths.mirror_dir = {mirror_dir!r}); "
            f"{HOW_TO_MIRROR}, or data.source: hub with network access", corpus,
        )
    return corpus


def tree_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder` by relative path (empty when it does not exist)."""
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): sha256_file(p)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def scan_mirror(mirror_dir: str | None, source: str, task_dirs: dict[str, str],
                out_dir: str | Path, task_files: dict[str, str] | None = None,
                task_settings: dict[str, Any] | None = None) -> dict[str, int]:
    """Fingerprint the mirror's inputs into out_dir: corpus.json, <task>.json per entry of
    `task_dirs` (task name -> folder under tasks/) and of `task_files` (a custom task -> its
    own file, wherever it is, with its `task_settings`: a task's params are no DVC params key
    of paper tasks, so its own stages see a changed label or column through this file) and
    dprd.json; returns files per input.

    DVC tracks these files instead of the mirror itself: DVC checks a stage's dependencies
    before running it, so a missing mirror would be its bare `[Errno 2]` and `mirror_dir: null`
    a path ending in `None/corpus`. Here a missing mirror is one line saying what to set, and
    null (the hub) gives fingerprints that change only with the params.
    """
    inputs: dict[str, Any] = {}
    if mirror_dir is None:
        if source == "mirror":
            mirror_corpus_dir(mirror_dir)  # raises: which key to set
        inputs = {name: {"mirror_dir": None} for name in ("corpus", "dprd", *task_dirs)}
    else:
        root = Path(mirror_dir)
        if not root.is_dir():
            raise Gpt1Error(f"paths.mirror_dir is not a directory; {HOW_TO_MIRROR}, or "
                            "null to download from the hub", root)
        corpus = scan_corpus_dir(mirror_corpus_dir(mirror_dir)) if source == "mirror" else []
        inputs["corpus"] = {"source": source, "files": corpus}
        inputs["dprd"] = {"files": tree_digests(root / "tasks" / "DPRD")}
        for task, folder in task_dirs.items():
            inputs[task] = {"files": tree_digests(root / "tasks" / folder)}
    for task, file in (task_files or {}).items():
        if not Path(file).is_file():
            raise Gpt1Error(f"tasks.custom.{task}.file: no such file", file)
        inputs[task] = {"files": {file: sha256_file(Path(file))},
                        "settings": (task_settings or {}).get(task)}
    with atomic.atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for name, content in inputs.items():
            atomic.write_json(tmp / f"{name}.json", content)
    return {name: len(content.get("files", ())) for name, content in inputs.items()}


SKIP_REASONS = ("not_a_file", "dangling_symlink", "symlink_loop", "unreadable")
"""Why a corpus entry is not read; each is counted (zeros included) in the stage metrics."""


def _entry_problem(path: Path) -> str | None:
    """None for a regular file (symlinks followed), else a SKIP_REASONS entry."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "dangling_symlink"
    except OSError as err:
        return "symlink_loop" if err.errno == errno.ELOOP else "unreadable"
    return None if stat.S_ISREG(mode) else "not_a_file"


def scan_corpus(corpus: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(manifest entries: name, doc_id, bytes, sha256 of every readable regular non-hidden
    file, sorted; skipped entries: name and reason). A directory named like a book, a FIFO,
    a dangling or looping symlink or a file that cannot be read is skipped, with a warning."""
    names = sorted(p for p in corpus.iterdir() if not p.name.startswith("."))
    skipped = [{"name": p.name, "reason": r} for p in names if (r := _entry_problem(p))]
    files = [p for p in names if p.name not in {s["name"] for s in skipped}]
    entries = []
    with progress(total=sum(p.stat().st_size for p in files), unit="B", unit_scale=True,
                  desc="hash mirror", mininterval=1.0) as bar:
        for p in files:
            try:
                entries.append({"name": p.name, "doc_id": p.name, "bytes": p.stat().st_size,
                                "sha256": sha256_file(p, bar)})
            except OSError as err:
                skipped.append({"name": p.name, "reason": "unreadable",
                                "error": err.strerror or str(err)})
    for entry in skipped:
        log.warning("%s: skipped (%s)", corpus / entry["name"], entry["reason"])
    if not entries:
        raise Gpt1Error(f"corpus directory holds no readable files (skipped: "
                        f"{dict(Counter(s['reason'] for s in skipped))})", corpus)
    return entries, sorted(skipped, key=lambda s: s["name"])


def scan_corpus_dir(corpus: Path) -> list[dict[str, Any]]:
    """Manifest entries of every readable regular file (see `scan_corpus`)."""
    return scan_corpus(corpus)[0]


def skipped_counts(manifest: dict[str, Any]) -> dict[str, int]:
    """Skipped corpus entries by reason (every reason, zeros included)."""
    counts = Counter(s["reason"] for s in manifest.get("skipped", []))
    return {reason: counts[reason] for reason in SKIP_REASONS}


def _stream_hub(cfg: DataCfg, load_dataset: LoadDataset) -> list[str]:
    """One attempt: stream up to max_documents texts from the hub dataset."""
    rows = load_dataset(cfg.hub_dataset, split=cfg.hub_split, streaming=True)
    texts: list[str] = []
    with progress(total=cfg.max_documents, unit="doc", desc="download", mininterval=1.0) as bar:
        for row in rows:
            if cfg.max_documents is not None and len(texts) >= cfg.max_documents:
                break
            if cfg.hub_text_field not in row:
                raise Gpt1Error(
                    f"hub dataset {cfg.hub_dataset!r} has no column {cfg.hub_text_field!r} "
                    f"(data.hub_text_field); columns: {sorted(row)}"
                )
            texts.append(str(row[cfg.hub_text_field]))
            bar.update(1)
    return texts


def fetch_hub(
    cfg: DataCfg, load_dataset: LoadDataset, sleep: Callable[[float], None]
) -> list[str]:
    """Stream the hub corpus, retrying transient network errors with exponential back-off."""
    transient = _transient_errors()
    for attempt in range(cfg.download_retries + 1):
        try:
            return _stream_hub(cfg, load_dataset)
        except transient as err:
            offline = "OfflineModeIsEnabled" in str(err)
            if offline or attempt == cfg.download_retries:
                tries = 1 if offline else attempt + 1
                raise Gpt1Error(
                    f"cannot reach the hub for dataset {cfg.hub_dataset!r} after {tries} "
                    f"attempt(s) (no network?: {str(err).splitlines()[0]}) and no mirror is "
                    f"in use: {HOW_TO_MIRROR}"
                ) from None
            wait = RETRY_BASE_SECONDS * 2**attempt
            log.warning("hub download failed (%s); retry %d/%d in %.0f s", err, attempt + 1,
                        cfg.download_retries, wait)
            sleep(wait)
    raise AssertionError("unreachable")


def download_corpus(
    cfg: DataCfg,
    mirror_dir: str | None,
    raw_dir: str | Path,
    load_dataset: LoadDataset | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Resolve the raw corpus and write raw_dir/manifest.json (sha256 + size of every input).

    Mirror files are read in place; hub documents go to raw_dir/hub_corpus.jsonl. The whole
    raw_dir is replaced atomically. `load_dataset` defaults to datasets.load_dataset.
    """
    manifest: dict[str, Any] = {"source": cfg.source}
    with atomic.atomic_path(raw_dir) as tmp:
        tmp.mkdir()
        if cfg.source == "mirror":
            corpus = mirror_corpus_dir(mirror_dir)
            files, skipped = scan_corpus(corpus)
            if cfg.max_documents is not None:
                files = files[: cfg.max_documents]
            manifest.update(root=str(corpus), files=files, skipped=skipped)
        else:
            if load_dataset is None:
                from datasets import load_dataset as hf_load_dataset

                load_dataset = hf_load_dataset
            texts = fetch_hub(cfg, load_dataset, sleep)
            lines = [json.dumps({"doc_id": f"{cfg.hub_dataset}-{i:08d}", "text": t},
                                ensure_ascii=False) for i, t in enumerate(texts)]
            atomic.write_text(tmp / HUB_FILE, "".join(line + "\n" for line in lines))
            manifest.update(
                root=str(raw_dir), dataset=cfg.hub_dataset, split=cfg.hub_split,
                files=[{"name": HUB_FILE, "documents": len(texts),
                        "bytes": (tmp / HUB_FILE).stat().st_size,
                        "sha256": sha256_file(tmp / HUB_FILE)}],
            )
        atomic.write_json(tmp / MANIFEST_FILE, manifest)
    log.info("raw corpus: %d file(s), %d bytes", len(manifest["files"]),
             sum(f["bytes"] for f in manifest["files"]))
    return manifest


def read_manifest(raw_dir: str | Path) -> dict[str, Any]:
    return read_json_artifact(Path(raw_dir) / MANIFEST_FILE, "download_corpus")


def raw_documents(manifest: dict[str, Any]) -> list[RawDocument]:
    """The raw documents listed by a manifest (mirror files are read lazily, hash-checked)."""
    root = Path(manifest["root"])
    if manifest["source"] == "mirror":
        return [RawDocument(doc_id=f["doc_id"], source=f["name"], n_bytes=f["bytes"],
                            sha256=f["sha256"], path=str(root / f["name"]))
                for f in manifest["files"]]
    (entry,) = manifest["files"]
    path = root / entry["name"]
    if not path.is_file() or sha256_file(path) != entry["sha256"]:
        raise Gpt1Error("missing or changed since download_corpus; re-run `dvc repro`", path)
    docs = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            data = row["text"].encode("utf-8")
            docs.append(RawDocument(doc_id=row["doc_id"], source=row["doc_id"],
                                    n_bytes=len(data), sha256=hashlib.sha256(data).hexdigest(),
                                    data=data))
    return docs
