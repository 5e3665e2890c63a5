"""Corpus cleaning and the original text standardisation (spec §1 and 5).

`standardize_text` is the original encoder's front end (ftfy -> punctuation/whitespace
standardisation -> spaCy tokens) and is shared by the corpus and the task texts; a text in
the repository's table of standardised texts (a one-shot run's carry) is read from there.
`clean_documents` turns raw book files into one cleaned document per book: Gutenberg
boilerplate stripped, BOM/CRLF normalised, hard wraps undone, duplicates dropped, and every
unusable file skipped and counted by reason (never a traceback).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import multiprocessing
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ftfy

from gpt1.config import CleanCfg
from gpt1.errors import Gpt1Error
from gpt1.progress import progress
from gpt1.repo import repo_root

log = logging.getLogger(__name__)

# spec §5, from the original release's text_standardize().
_DASHES = str.maketrans({"—": "-", "–": "-", "―": "-", "´": "'"})
_PUNCT = re.compile(r"""(-+|~+|!+|"+|;+|\?+|\++|,+|\)+|\(+|\\+|/+|\*+|\[+|\]+|}+|{+|\|+|_+)""")
_NEWLINE = re.compile(r"\s*\n\s*")
_SPACES = re.compile(r"[^\S\n]+")

_START = re.compile(r"^\W*\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.I | re.M)
_END = re.compile(r"^\W*\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.I | re.M)
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")

# Reasons a raw document is dropped; every one is counted in the stats (zeros included).
DROP_REASONS = (
    "binary", "not_utf8", "empty", "whitespace_only", "too_large", "line_too_long",
    "too_short", "duplicate",
)


STANDARDIZED_TEXTS = "standardized_texts.parquet"
"""At a repository's root, texts with their standardisation (columns `text`, `standardized`),
answered from there instead of recomputed: a one-shot run's carry holds its tasks' texts so
(gpt1/gpu_carry.py), for a GPU host without spaCy. None in a workspace."""


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Any:
    """spaCy's rule-based English tokenizer (no model download: spacy.blank). Imported here:
    spaCy costs 1-3 s of start-up that every other stage (they import this module through
    gpt1.stages) would pay for nothing."""
    try:
        import spacy
    except ImportError:
        raise Gpt1Error("texts to standardise and no spaCy in this Python (a one-shot run's "
                        f"carry holds its tasks' texts standardised in {STANDARDIZED_TEXTS}: "
                        "run `gpt1 one-shot prepare` again)") from None
    return spacy.blank("en").tokenizer


@functools.lru_cache(maxsize=2)
def _table(path: Path, mtime_ns: int) -> dict[str, str]:
    import pandas as pd

    df = pd.read_parquet(path)
    return dict(zip(df["text"].tolist(), df["standardized"].tolist(), strict=True))


def known_standardizations() -> dict[str, str]:
    """The repository's table of standardised texts (STANDARDIZED_TEXTS); empty without one."""
    path = repo_root() / STANDARDIZED_TEXTS
    return _table(path, path.stat().st_mtime_ns) if path.is_file() else {}


def _standardize_punct(text: str) -> str:
    """ftfy, then the original punctuation and whitespace standardisation (spec §5)."""
    text = ftfy.fix_text(text).translate(_DASHES).replace("…", "...")
    text = _PUNCT.sub(r" \1 ", text)
    text = _NEWLINE.sub(" \n ", text)
    return _SPACES.sub(" ", text).strip()


def standardize_texts(texts: Sequence[str]) -> list[str]:
    """Batched `standardize_text`: spaCy runs once over every line of every distinct text not
    in the repository's table of standardised texts (STANDARDIZED_TEXTS)."""
    known = known_standardizations()
    todo = [t for t in dict.fromkeys(texts) if t not in known]
    fresh = dict(zip(todo, _standardize_all(todo), strict=True)) if todo else {}
    return [known[t] if t in known else fresh[t] for t in texts]


def _standardize_all(texts: Sequence[str]) -> list[str]:
    lines_per_text = [_standardize_punct(t).split("\n") for t in texts]
    flat = [line.strip() for lines in lines_per_text for line in lines]
    tokenized = iter(
        " ".join(tok.text for tok in doc if not tok.is_space)
        for doc in _tokenizer().pipe(flat, batch_size=256)
    )
    out = []
    for lines in lines_per_text:
        toks = [next(tokenized) for _ in lines]
        out.append(" \n ".join(t for t in toks if t))
    return out


def standardize_text(text: str) -> str:
    """ftfy -> spec §5 standardisation -> spaCy tokens joined by single spaces.

    Newlines survive as "\\n" tokens. Lower-casing is left to the BPE tokenizer.
    """
    return standardize_texts([text])[0]


@dataclass(frozen=True)
class RawDocument:
    """One raw input document: a file read lazily from `path`, or inline `data` (hub rows)."""

    doc_id: str
    source: str
    n_bytes: int
    sha256: str
    path: str | None = None
    data: bytes | None = None

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.path is not None
        try:
            data = Path(self.path).read_bytes()
        except OSError as err:
            raise Gpt1Error(f"cannot read raw input ({err.strerror})", self.path) from None
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise Gpt1Error(
                "changed since download_corpus recorded its sha256; re-run `dvc repro`", self.path
            )
        return data


@dataclass(frozen=True)
class CleanedDocument:
    doc_id: str
    source: str
    raw_sha256: str
    text: str | None
    """None when dropped (see `reason`)."""
    reason: str | None
    flags: tuple[str, ...]
    """Notes counted in the stats: gutenberg_stripped, no_start_marker, no_end_marker."""


def decode_raw(data: bytes, cfg: CleanCfg) -> tuple[str | None, str | None]:
    """Bytes -> text with LF newlines and no BOM, or (None, reason) for an unusable file."""
    if not data:
        return None, "empty"
    if b"\x00" in data:
        return None, "binary"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not_utf8"
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return None, "whitespace_only"
    if max(map(len, text.split("\n"))) > cfg.max_line_chars:
        return None, "line_too_long"
    return text, None


def strip_gutenberg(text: str) -> tuple[str, tuple[str, ...]]:
    """Keep what lies between the `*** START OF` and `*** END OF` marker lines.

    A missing END marker keeps everything to the end of the file (flagged `no_end_marker`);
    a missing START marker keeps the text whole (flagged `no_start_marker`).
    """
    start = _START.search(text)
    if start is None:
        return text, ("no_start_marker",)
    end = _END.search(text, start.end())
    if end is None:
        return text[start.end():], ("gutenberg_stripped", "no_end_marker")
    return text[start.end():end.start()], ("gutenberg_stripped",)


def unwrap_paragraphs(text: str) -> str:
    """Join hard-wrapped lines inside each paragraph; one paragraph per line."""
    paragraphs = (" ".join(p.split()) for p in _PARAGRAPH_BREAK.split(text))
    return "\n".join(p for p in paragraphs if p)


def clean_document(doc: RawDocument, cfg: CleanCfg) -> CleanedDocument:
    """One raw document -> cleaned, standardized text, or a counted drop reason."""

    def dropped(reason: str, flags: tuple[str, ...] = ()) -> CleanedDocument:
        return CleanedDocument(doc.doc_id, doc.source, doc.sha256, None, reason, flags)

    if doc.n_bytes > cfg.max_file_bytes:
        return dropped("too_large")
    text, reason = decode_raw(doc.read(), cfg)
    if text is None:
        return dropped(reason or "empty")
    flags: tuple[str, ...] = ()
    if cfg.strip_gutenberg:
        text, flags = strip_gutenberg(text)
    if cfg.unwrap_lines:
        text = unwrap_paragraphs(text)
    text = standardize_text(text)
    if len(text) < cfg.min_document_chars:
        return dropped("too_short", flags)
    return CleanedDocument(doc.doc_id, doc.source, doc.sha256, text, None, flags)


def _clean_job(job: tuple[RawDocument, CleanCfg]) -> CleanedDocument:
    return clean_document(*job)


def _is_broken(pool: ProcessPoolExecutor) -> bool:
    """Whether a worker of `pool` died: the pool then refuses any new job."""
    try:
        pool.submit(int).cancel()
    except BrokenProcessPool:
        return True
    return False


def _map_ordered(docs: Iterable[RawDocument], cfg: CleanCfg) -> Iterator[CleanedDocument]:
    """clean_document over docs, in input order; `cfg.workers` processes (spawned, so safe
    inside Prefect); order and output do not depend on the worker count. A worker that dies
    (killed, out of memory) stops the stage in one line: a multiprocessing.Pool would wait for
    its lost document forever."""
    jobs = ((doc, cfg) for doc in docs)
    if cfg.workers <= 1:
        yield from map(_clean_job, jobs)
        return
    context = multiprocessing.get_context("spawn")
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(cfg.workers, mp_context=context)
    try:
        try:
            results = pool.map(_clean_job, jobs)  # submits every job; spawns the workers
        except OSError:
            # A worker that died while the pool spawned the next one leaves the pool's queues
            # closed, and that spawn fails on them: the pool is broken, say so below.
            if not _is_broken(pool):
                raise
            raise BrokenProcessPool from None
        yield from results
    except BrokenProcessPool:
        # A worker the pool started as (or after) the other died waits on the call queue
        # forever, and the pool's shutdown would wait for it: stop the pool's workers first.
        for worker in set(multiprocessing.active_children()) - before:
            worker.kill()
        raise Gpt1Error("a cleaning worker process died (killed or out of memory); "
                        "nothing was written, re-run the stage", "clean.workers") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def clean_documents(
    docs: Sequence[RawDocument], cfg: CleanCfg
) -> tuple[list[CleanedDocument], dict[str, Any]]:
    """Clean every document; return the kept ones (input order, duplicates dropped) and stats.

    Stats: documents, characters, input documents and bytes, dropped by reason, the skipped
    sources with their reason, and Gutenberg marker counts.
    """
    dropped: Counter[str] = Counter({r: 0 for r in DROP_REASONS})
    flags: Counter[str] = Counter()
    kept: list[CleanedDocument] = []
    seen: set[str] = set()
    skipped: list[str] = []
    total = sum(d.n_bytes for d in docs)
    with progress(total=total, unit="B", unit_scale=True, desc="clean", mininterval=1.0) as bar:
        for doc, out in zip(docs, _map_ordered(docs, cfg), strict=True):
            bar.update(doc.n_bytes)
            flags.update(out.flags)
            if "no_end_marker" in out.flags:
                log.info("%s: no Gutenberg END marker; kept to the end of the file", out.source)
            reason = out.reason
            if out.text is not None:
                digest = hashlib.sha256(out.text.encode("utf-8")).hexdigest()
                reason = "duplicate" if digest in seen else None
                seen.add(digest)
            if reason is not None:
                dropped[reason] += 1
                skipped.append(f"{out.source}: {reason}")
                log.warning("%s: skipped (%s)", out.source, reason)
                continue
            kept.append(out)
    stats = {
        "input_documents": len(docs),
        "input_bytes": total,
        "documents": len(kept),
        "characters": sum(len(d.text or "") for d in kept),
        "dropped": dict(sorted(dropped.items())),
        "skipped_files": skipped,
        "gutenberg": {k: flags[k] for k in ("gutenberg_stripped", "no_start_marker",
                                            "no_end_marker")},
    }
    return kept, stats


def documents_frame(docs: Sequence[CleanedDocument]) -> Any:
    """The cleaned corpus table: doc_id, source, raw_sha256, sha256 (of text), n_chars, text."""
    import pandas as pd

    return pd.DataFrame({
        "doc_id": [d.doc_id for d in docs],
        "source": [d.source for d in docs],
        "raw_sha256": [d.raw_sha256 for d in docs],
        "sha256": [hashlib.sha256((d.text or "").encode("utf-8")).hexdigest() for d in docs],
        "n_chars": [len(d.text or "") for d in docs],
        "text": [d.text for d in docs],
    })
