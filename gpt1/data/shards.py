"""Versioned binary token shards (the pre-training input, spec §1).

Each shard is a fixed 128-byte header (magic, format version, dtype, token count, sha256 of
the tokenizer file) followed by the token ids, little-endian uint16 when the vocabulary fits,
else uint32. Documents are split train/val by document (seeded), encoded in parallel
(tokenizers' encode_batch), concatenated in order, and cut into shards of
`shard.tokens_per_shard` tokens; `index.json` lists the shards and where each document lies.
The reader memory-maps shards read-only and refuses any whose header does not match.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gpt1 import atomic
from gpt1.bpe import Bpe
from gpt1.config import ShardCfg
from gpt1.data import read_json_artifact
from gpt1.errors import Gpt1Error
from gpt1.progress import progress

log = logging.getLogger(__name__)

MAGIC = b"GPT1TOKS"
VERSION = 1
HEADER = struct.Struct("<8sIIQ64s")  # magic, version, bytes per token, n_tokens, hash (hex)
HEADER_BYTES = 128
DTYPES: dict[int, np.dtype[Any]] = {2: np.dtype("<u2"), 4: np.dtype("<u4")}
INDEX_FILE = "index.json"
Split = Literal["train", "val"]


def split_documents(doc_ids: Sequence[str], val_frac: float, seed: int) -> dict[str, Split]:
    """Assign whole documents to train or val (seeded; independent of input order)."""
    ids = sorted(set(doc_ids))
    if len(ids) != len(doc_ids):
        raise Gpt1Error("document ids are not unique")
    if len(ids) < 2:
        raise Gpt1Error(f"need at least 2 documents to split train/val, got {len(ids)}")
    n_val = min(max(1, round(val_frac * len(ids))), len(ids) - 1)
    order = np.random.default_rng(seed).permutation(len(ids))
    val = {ids[i] for i in order[:n_val]}
    return {d: ("val" if d in val else "train") for d in doc_ids}


def _dtype_for(vocab_size: int) -> np.dtype[Any]:
    return DTYPES[2] if vocab_size <= 2**16 else DTYPES[4]


def _write_shard(path: Path, tokens: np.ndarray, tokenizer_hash: str) -> None:
    header = HEADER.pack(MAGIC, VERSION, tokens.dtype.itemsize, len(tokens),
                         tokenizer_hash.encode("ascii"))
    with open(path, "wb") as fh:
        fh.write(header.ljust(HEADER_BYTES, b"\0"))
        fh.write(tokens.tobytes())


def _encoded(
    texts: Sequence[str], bpe: Bpe, batch_docs: int, dtype: np.dtype[Any]
) -> Iterator[np.ndarray]:
    """Token arrays of texts, in order, encoded batch by batch (parallel within a batch)."""
    with progress(total=sum(map(len, texts)), unit="char", unit_scale=True, desc="encode",
                  mininterval=1.0) as bar:
        for start in range(0, len(texts), batch_docs):
            batch = list(texts[start:start + batch_docs])
            for ids in bpe.encode_batch(batch):
                yield np.asarray(ids, dtype=dtype)
            bar.update(sum(map(len, batch)))


def write_shards(
    doc_ids: Sequence[str], texts: Sequence[str], bpe: Bpe, cfg: ShardCfg, seed: int,
    out_dir: str | Path,
) -> dict[str, Any]:
    """Encode standardized documents and write train/val shards plus index.json atomically.

    Returns the index (shards, token counts, document placement, tokenizer hash).
    """
    split = split_documents(doc_ids, cfg.val_frac, seed)
    dtype = _dtype_for(bpe.vocab_size)
    index: dict[str, Any] = {
        "format_version": VERSION, "dtype": dtype.name, "tokenizer_hash": bpe.hash,
        "vocab_size": bpe.vocab_size, "splits": {},
    }
    with atomic.atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for name in ("train", "val"):
            picked = [i for i, d in enumerate(doc_ids) if split[d] == name]
            index["splits"][name] = _write_split(
                tmp, name, [doc_ids[i] for i in picked], [texts[i] for i in picked], bpe, cfg,
                dtype,
            )
        atomic.write_json(tmp / INDEX_FILE, index)
    return index


def _write_split(
    out: Path, name: str, doc_ids: list[str], texts: list[str], bpe: Bpe, cfg: ShardCfg,
    dtype: np.dtype[Any],
) -> dict[str, Any]:
    shards: list[dict[str, Any]] = []
    documents: list[dict[str, Any]] = []
    buf: list[np.ndarray] = []
    buffered = 0

    def flush(limit: int) -> None:
        nonlocal buf, buffered
        if buffered < limit or buffered == 0:
            return
        flat, pos = np.concatenate(buf), 0
        while len(flat) - pos >= limit and len(flat) > pos:
            n = min(cfg.tokens_per_shard, len(flat) - pos)
            file = f"{name}_{len(shards):05d}.bin"
            _write_shard(out / file, flat[pos:pos + n], bpe.hash)
            shards.append({"file": file, "tokens": n})
            pos += n
        buf, buffered = [flat[pos:]], len(flat) - pos

    for doc_id, tokens in zip(doc_ids, _encoded(texts, bpe, cfg.encode_batch_docs, dtype),
                              strict=True):
        start = sum(s["tokens"] for s in shards) + buffered
        documents.append({"doc_id": doc_id, "start": start, "tokens": len(tokens)})
        buf.append(tokens)
        buffered += len(tokens)
        flush(cfg.tokens_per_shard)
    flush(1)
    total = sum(s["tokens"] for s in shards)
    log.info("%s: %d documents, %d tokens, %d shards", name, len(documents), total, len(shards))
    return {"documents": documents, "shards": shards, "tokens": total}


def read_index(shard_dir: str | Path) -> dict[str, Any]:
    return read_json_artifact(Path(shard_dir) / INDEX_FILE, "shard_corpus")


def open_shard(path: str | Path, expected_tokenizer_hash: str) -> np.ndarray:
    """Memory-map one shard read-only after checking its header and size."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            raw = fh.read(HEADER.size)
    except FileNotFoundError:
        raise Gpt1Error("shard file missing", path) from None
    if len(raw) < HEADER.size:
        raise Gpt1Error("truncated shard header", path)
    magic, version, itemsize, n_tokens, digest = HEADER.unpack(raw)
    if magic != MAGIC:
        raise Gpt1Error(f"not a gpt1 token shard (magic {magic!r})", path)
    if version != VERSION:
        raise Gpt1Error(f"shard format version {version}, this code reads {VERSION}", path)
    if itemsize not in DTYPES:
        raise Gpt1Error(f"unknown token width {itemsize} bytes", path)
    found = digest.decode("ascii", "replace")
    if found != expected_tokenizer_hash:
        raise Gpt1Error(
            f"written with tokenizer {found[:12]}, expected {expected_tokenizer_hash[:12]}; "
            "re-run shard_corpus with the current tokenizer", path,
        )
    if size != HEADER_BYTES + n_tokens * itemsize:
        raise Gpt1Error(f"size {size} bytes does not match its header ({n_tokens} tokens)", path)
    return np.memmap(path, dtype=DTYPES[itemsize], mode="r", offset=HEADER_BYTES,
                     shape=(n_tokens,))


def _split_entries(index: dict[str, Any], split: Split, where: Path) -> list[dict[str, Any]]:
    """index.json's shard list of one split, each entry checked: {file: name, tokens: int}."""
    splits = index.get("splits")
    if not isinstance(splits, dict) or split not in splits:
        raise Gpt1Error(f"no {split!r} split; re-run shard_corpus", where)
    entries = splits[split].get("shards") if isinstance(splits[split], dict) else None
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("file"), str) and "/" not in e["file"]
            and isinstance(e.get("tokens"), int) for e in entries):
        raise Gpt1Error(f"damaged: splits.{split}.shards is not a list of {{file, tokens}} "
                        "entries; re-run shard_corpus", where)
    return entries


def read_shards(
    shard_dir: str | Path, split: Split, expected_tokenizer_hash: str
) -> list[np.ndarray]:
    """Read-only memmaps of one split's shards, in order; Gpt1Error on any mismatch."""
    index = read_index(shard_dir)
    where = Path(shard_dir) / INDEX_FILE
    if index.get("format_version") != VERSION:
        raise Gpt1Error(f"format_version {index.get('format_version')} != {VERSION}", where)
    if index.get("tokenizer_hash") != expected_tokenizer_hash:
        raise Gpt1Error(
            f"shards were written with tokenizer {str(index.get('tokenizer_hash'))[:12]}, "
            f"expected {expected_tokenizer_hash[:12]}; re-run shard_corpus", where,
        )
    arrays = []
    for entry in _split_entries(index, split, where):
        arr = open_shard(Path(shard_dir) / entry["file"], expected_tokenizer_hash)
        if len(arr) != entry["tokens"]:
            raise Gpt1Error(f"{len(arr)} tokens, index.json says {entry['tokens']}",
                            Path(shard_dir) / entry["file"])
        arrays.append(arr)
    return arrays
