"""Byte-pair encoding as in the original release (spec §1 "BPE vocabulary", 5).

Input is standardized text (gpt1.data.clean.standardize_text: tokens joined by single spaces,
newlines as "\\n" tokens). The tokenizer lower-cases, splits on spaces, marks each word's last
symbol with `</w>`, and applies exactly `bpe.n_merges` merges; the vocabulary is the base
symbols plus one entry per merge, then the special tokens appended in params order
(`_start_`, `_delimiter_`, `_classify_`). The only importer of `tokenizers`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from gpt1 import atomic
from gpt1.config import BpeCfg
from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
META_FILE = "bpe.json"


def _bare(model: models.BPE, cfg: BpeCfg) -> Tokenizer:
    tok = Tokenizer(model)
    if cfg.lowercase:
        tok.normalizer = normalizers.Lowercase()
    # Standardized text is space-separated tokens; "\n" stays a token of its own.
    tok.pre_tokenizer = pre_tokenizers.Split(" ", "removed")
    return tok


def _build(vocab: dict[str, int], merges: list[tuple[str, str]], cfg: BpeCfg,
           unk_token: str | None = None) -> Tokenizer:
    tok = _bare(models.BPE(vocab, merges, end_of_word_suffix=cfg.end_of_word_suffix,
                           unk_token=unk_token), cfg)
    tok.decoder = decoders.BPEDecoder(suffix=cfg.end_of_word_suffix)
    tok.add_special_tokens(list(cfg.special_tokens))
    return tok


def _final_symbols(texts: Iterable[str], normalize: Any, suffix: str) -> list[str]:
    """Every word-final symbol (`x</w>`) of the corpus, sorted."""
    last: set[str] = set()
    for text in texts:
        last.update(w[-1] for w in set(normalize(text).split(" ")) if w)
    return sorted(c + suffix for c in last)


def learn_merges(texts: Sequence[str], cfg: BpeCfg) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Learn exactly cfg.n_merges merges; return (vocab, merges), vocab = base + merge products.

    tokenizers' trainer numbers the word-final symbols in hash-map order, which changes how
    ties between equally frequent pairs are broken from run to run; declaring those symbols
    up front (as trainer special tokens, dropped afterwards) makes training deterministic.
    """
    normalize = normalizers.Lowercase().normalize_str if cfg.lowercase else (lambda s: s)
    finals = _final_symbols(texts, normalize, cfg.end_of_word_suffix)
    probe = _bare(models.BPE(end_of_word_suffix=cfg.end_of_word_suffix), cfg)
    chars = {c for f in finals for c in f[: -len(cfg.end_of_word_suffix)]}
    for text in texts:
        chars.update(normalize(text))
    chars.discard(" ")
    n_base = len(chars) + len(finals)
    trainer = trainers.BpeTrainer(
        vocab_size=n_base + cfg.n_merges + 64,  # slack; truncated to n_merges below
        min_frequency=cfg.min_frequency,
        special_tokens=finals,
        end_of_word_suffix=cfg.end_of_word_suffix,
        show_progress=False,
    )
    probe.train_from_iterator(texts, trainer=trainer, length=len(texts))
    model = json.loads(probe.to_str())["model"]
    merges = [tuple(m) for m in model["merges"]][: cfg.n_merges]
    if len(merges) < cfg.n_merges:
        raise Gpt1Error(
            f"only {len(merges)} merges reach min_frequency={cfg.min_frequency}; "
            f"lower bpe.n_merges (now {cfg.n_merges}) or bpe.min_frequency"
        )
    products = {a + b for a, b in merges}
    base = sorted(
        (t for t in model["vocab"] if t not in products),
        key=lambda t: (t.endswith(cfg.end_of_word_suffix), t),
    )
    vocab: dict[str, int] = {t: i for i, t in enumerate(base)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, [(a, b) for a, b in merges]


def train_bpe(texts: Sequence[str], cfg: BpeCfg, out_dir: str | Path) -> Bpe:
    """Train the BPE vocabulary on standardized texts; write out_dir/tokenizer.json atomically.

    Same texts and cfg -> byte-identical tokenizer file.
    """
    if not texts:
        raise Gpt1Error("no documents to train BPE on")
    vocab, merges = learn_merges(texts, cfg)
    return write_bpe(vocab, merges, cfg, out_dir)


def write_bpe(vocab: dict[str, int], merges: list[tuple[str, str]], cfg: BpeCfg,
              out_dir: str | Path, unk_token: str | None = None,
              about: dict[str, Any] | None = None) -> Bpe:
    """Write the tokenizer of `vocab` + `merges` (the special tokens appended after them) to
    out_dir/tokenizer.json + bpe.json atomically. `unk_token`: the token an unknown symbol
    becomes (None: it is dropped); `about` joins bpe.json (e.g. where an import came from)."""
    tok = _build(vocab, merges, cfg, unk_token)
    meta = {
        "n_merges": len(merges),
        "n_base_symbols": len(vocab) - len(set(a + b for a, b in merges)),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "special_tokens": list(cfg.special_tokens),
        **(about or {}),
    }
    with atomic.atomic_path(out_dir) as tmp:
        tmp.mkdir()
        tok.save(str(tmp / TOKENIZER_FILE), pretty=True)
        atomic.write_json(tmp / META_FILE, meta)
    log.info("BPE: %d merges, %d base symbols, vocab %d (with %d specials)", meta["n_merges"],
             meta["n_base_symbols"], meta["vocab_size"], len(cfg.special_tokens))
    return load_bpe(out_dir)


class Bpe:
    """A trained tokenizer: encode standardized text, decode ids, special-token ids."""

    def __init__(self, tokenizer: Tokenizer, special_tokens: Sequence[str], file_hash: str):
        self._tok = tokenizer
        self.hash = file_hash
        """sha256 (hex) of tokenizer.json: recorded in shards and checkpoints."""
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        """Number of ids, the 3 special tokens included."""
        ids = [tokenizer.token_to_id(t) for t in special_tokens]
        if len(ids) != 3 or ids != list(range(self.vocab_size - 3, self.vocab_size)):
            raise Gpt1Error("special tokens are not the last 3 ids of the vocabulary")
        self.special_tokens = tuple(special_tokens)
        self.start_id, self.delimiter_id, self.classify_id = ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Standardized texts -> token ids (parallel in Rust)."""
        return [e.ids for e in self._tok.encode_batch_fast(texts, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=False))

    def token_to_id(self, token: str) -> int | None:
        result = self._tok.token_to_id(token)
        return None if result is None else int(result)

    def id_to_token(self, idx: int) -> str | None:
        result = self._tok.id_to_token(idx)
        return None if result is None else str(result)


def load_bpe(directory: str | Path) -> Bpe:
    """Load a tokenizer written by `train_bpe`; its hash is the sha256 of the file."""
    path = Path(directory) / TOKENIZER_FILE
    meta_path = Path(directory) / META_FILE
    try:
        blob = path.read_bytes()
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise Gpt1Error("missing; run the train_bpe stage first", err.filename) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise Gpt1Error(f"not valid JSON ({err}); re-run the train_bpe stage", meta_path) from None
    specials = meta.get("special_tokens") if isinstance(meta, dict) else None
    if not (isinstance(specials, list) and all(isinstance(t, str) for t in specials)):
        raise Gpt1Error("damaged: no list of special_tokens; re-run the train_bpe stage",
                        meta_path)
    try:
        tok = Tokenizer.from_str(blob.decode("utf-8"))
    except Exception as err:  # tokenizers raises plain Exception on a malformed file
        raise Gpt1Error(f"not a valid tokenizer file ({str(err).splitlines()[0]})", path) from None
    return Bpe(tok, specials, hashlib.sha256(blob).hexdigest())
