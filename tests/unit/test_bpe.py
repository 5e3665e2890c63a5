"""BPE (spec §1, 5): exactly n_merges merges, </w>, lower-case, specials last, reproducible."""

from __future__ import annotations

import json

import pytest

from gpt1 import bpe
from gpt1.data.clean import standardize_texts
from gpt1.errors import Gpt1Error
from tests.helpers.corpus import make_text


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return standardize_texts([make_text(seed, 30) for seed in range(4)])


def test_exact_merges_and_specials_appended(texts, tiny_params, tmp_path) -> None:
    cfg = tiny_params.bpe
    tok = bpe.train_bpe(texts, cfg, tmp_path / "tok")
    model = json.loads((tmp_path / "tok" / bpe.TOKENIZER_FILE).read_text())["model"]
    assert len(model["merges"]) == cfg.n_merges
    meta = json.loads((tmp_path / "tok" / bpe.META_FILE).read_text())
    assert len(model["vocab"]) == meta["n_base_symbols"] + cfg.n_merges
    assert tok.vocab_size == len(model["vocab"]) + 3
    assert [tok.start_id, tok.delimiter_id, tok.classify_id] == [
        tok.vocab_size - 3, tok.vocab_size - 2, tok.vocab_size - 1]
    assert [tok.id_to_token(i) for i in (tok.start_id, tok.delimiter_id, tok.classify_id)] == [
        "_start_", "_delimiter_", "_classify_"]
    assert all(t.endswith("</w>") for t in model["vocab"] if t.endswith("</w>"))
    assert tok.token_to_id("the</w>") is not None and tok.token_to_id("nonexistent</w>") is None


def test_lowercase_end_of_word_and_newline_tokens(texts, tiny_params, tmp_path) -> None:
    tok = bpe.train_bpe(texts, tiny_params.bpe, tmp_path / "tok")
    upper, lower = tok.encode_batch(["The HOUSE \n the house", "the house \n the house"])
    assert upper == lower
    assert tok.id_to_token(upper[0]) == "the</w>"
    assert "\n</w>" in {tok.id_to_token(i) for i in upper}
    assert tok.decode(lower).split() == ["the", "house", "the", "house"]


def test_same_input_gives_byte_identical_file(texts, tiny_params, tmp_path) -> None:
    a = bpe.train_bpe(texts, tiny_params.bpe, tmp_path / "a")
    b = bpe.train_bpe(list(texts), tiny_params.bpe, tmp_path / "b")
    file_a = (tmp_path / "a" / bpe.TOKENIZER_FILE).read_bytes()
    assert file_a == (tmp_path / "b" / bpe.TOKENIZER_FILE).read_bytes()
    assert a.hash == b.hash and len(a.hash) == 64


def test_too_many_merges_is_a_clear_error(texts, tiny_params, tmp_path) -> None:
    cfg = tiny_params.bpe.model_copy(update={"n_merges": 100_000, "min_frequency": 2})
    with pytest.raises(Gpt1Error, match="lower bpe.n_merges"):
        bpe.train_bpe(texts, cfg, tmp_path / "tok")
    assert not (tmp_path / "tok").exists()


def test_load_bpe_refuses_missing_or_corrupt(texts, tiny_params, tmp_path) -> None:
    with pytest.raises(Gpt1Error, match="run the train_bpe stage"):
        bpe.load_bpe(tmp_path / "none")
    bpe.train_bpe(texts, tiny_params.bpe, tmp_path / "tok")
    (tmp_path / "tok" / bpe.TOKENIZER_FILE).write_text("{broken")
    with pytest.raises(Gpt1Error, match="not a valid tokenizer file"):
        bpe.load_bpe(tmp_path / "tok")
