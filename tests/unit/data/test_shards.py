"""Shards: split by document, header checks and tokenizer mismatch refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.helpers.corpus import make_text

from gpt1 import bpe
from gpt1.data import shards
from gpt1.data.clean import standardize_texts
from gpt1.errors import Gpt1Error


@pytest.fixture
def corpus(tiny_params, tmp_path):
    texts = standardize_texts([make_text(seed, 12) for seed in range(10)])
    doc_ids = [f"book_{i}" for i in range(10)]
    tok = bpe.train_bpe(texts, tiny_params.bpe, tmp_path / "tok")
    cfg = tiny_params.shard.model_copy(update={"val_frac": 0.2, "tokens_per_shard": 1000,
                                                "encode_batch_docs": 3})
    index = shards.write_shards(doc_ids, texts, tok, cfg, 7, tmp_path / "shards")
    return doc_ids, texts, tok, index, tmp_path / "shards"


def test_no_document_in_both_splits(corpus) -> None:
    """No document has tokens in both the train and the val shards."""
    doc_ids, _, _, index, _ = corpus
    train = {d["doc_id"] for d in index["splits"]["train"]["documents"]}
    val = {d["doc_id"] for d in index["splits"]["val"]["documents"]}
    assert not train & val and train | val == set(doc_ids) and len(val) == 2


def test_split_is_seeded_and_order_independent() -> None:
    ids = [f"d{i}" for i in range(50)]
    a = shards.split_documents(ids, 0.1, seed=3)
    assert a == shards.split_documents(list(reversed(ids)), 0.1, seed=3)
    assert a != shards.split_documents(ids, 0.1, seed=4)
    assert sum(v == "val" for v in a.values()) == 5


def test_shards_hold_every_document_contiguously(corpus) -> None:
    doc_ids, texts, tok, index, out = corpus
    assert index["dtype"] == "uint16"
    for split in ("train", "val"):
        arrays = shards.read_shards(out, split, tok.hash)
        assert all(a.dtype == np.uint16 and not a.flags.writeable for a in arrays)
        stream = np.concatenate(arrays)
        assert len(stream) == index["splits"][split]["tokens"]
        for doc in index["splits"][split]["documents"]:
            expected = tok.encode_batch([texts[doc_ids.index(doc["doc_id"])]])[0]
            assert stream[doc["start"]:doc["start"] + doc["tokens"]].tolist() == expected
        assert all(s["tokens"] <= 1000 for s in index["splits"][split]["shards"])


def test_reader_refuses_another_tokenizer(corpus) -> None:
    """A shard whose tokenizer hash differs from data/tokenizer is refused."""
    *_, out = corpus
    with pytest.raises(Gpt1Error, match="written with tokenizer"):
        shards.read_shards(out, "train", "0" * 64)


def test_reader_refuses_a_shard_with_a_foreign_header(corpus) -> None:
    """index.json matches but the shard's own header names another tokenizer."""
    _, _, tok, index, out = corpus
    first = out / index["splits"]["train"]["shards"][0]["file"]
    data = bytearray(first.read_bytes())
    data[24:88] = b"f" * 64
    first.write_bytes(bytes(data))
    with pytest.raises(Gpt1Error, match=f"{first.name}: written with tokenizer ffffffffffff"):
        shards.read_shards(out, "train", tok.hash)


@pytest.mark.parametrize("damage,message", [
    (lambda b: b"NOTASHRD" + b[8:], "not a gpt1 token shard"),
    (lambda b: b[:8] + (9).to_bytes(4, "little") + b[12:], "format version 9"),
    (lambda b: b[:-2], "does not match its header"),
    (lambda b: b[:10], "truncated shard header"),
])
def test_reader_refuses_damaged_shards(corpus, damage, message) -> None:
    _, _, tok, index, out = corpus
    first = out / index["splits"]["val"]["shards"][0]["file"]
    first.write_bytes(damage(first.read_bytes()))
    with pytest.raises(Gpt1Error, match=message):
        shards.read_shards(out, "val", tok.hash)


def test_index_mismatch_and_missing(corpus, tmp_path) -> None:
    _, _, tok, index, out = corpus
    index["splits"]["val"]["shards"][0]["tokens"] += 1
    (out / shards.INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(Gpt1Error, match="index.json says"):
        shards.read_shards(out, "val", tok.hash)
    with pytest.raises(Gpt1Error, match="run the shard_corpus stage"):
        shards.read_shards(tmp_path / "nowhere", "val", tok.hash)


def test_uint32_when_vocab_does_not_fit() -> None:
    assert shards._dtype_for(65_536) == np.uint16 and shards._dtype_for(65_537) == np.uint32
