"""Strict params loading: unknown / missing keys and bad values fail in one line naming the key."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpt1.config import ParamsError, load_params, parse_params

REPO = Path(__file__).resolve().parents[2]


def _raw() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def test_presets_load() -> None:
    demo = load_params(REPO / "params.yaml")
    paper = load_params(REPO / "configs" / "paper.yaml")
    assert demo.model.arch == paper.model.arch == "gpt1"
    assert demo.digest() != paper.digest()


def test_unknown_key_named_with_suggestion() -> None:
    raw = _raw()
    raw["bpe"]["n_mergez"] = raw["bpe"].pop("n_merges")
    expected = r"bpe\.n_mergez: unknown key \(did you mean 'n_merges'\?\)"
    with pytest.raises(ParamsError, match=expected):
        parse_params(raw, "p.yaml")


def test_missing_key_named() -> None:
    raw = _raw()
    del raw["pretrain"]["lr_max"]
    with pytest.raises(ParamsError, match=r"pretrain\.lr_max: missing key"):
        parse_params(raw, "p.yaml")


@pytest.mark.parametrize(
    ("section", "key", "value", "needle"),
    [
        ("model", "resid_pdrop", -0.1, "model.resid_pdrop"),
        ("bpe", "n_merges", 0, "bpe.n_merges"),
        ("pretrain", "lr_max", "fast", "pretrain.lr_max"),
        ("model", "n_head", 3, "model.n_head"),
        ("pretrain", "micro_batch_seqs", 7, "pretrain.micro_batch_seqs"),
        ("shard", "val_frac", 1.0, "shard.val_frac"),
    ],
)
def test_bad_values_named(section: str, key: str, value: object, needle: str) -> None:
    raw = _raw()
    raw[section][key] = value
    with pytest.raises(ParamsError) as info:
        parse_params(raw, "p.yaml")
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_float_exponent_without_dot(tmp_path: Path) -> None:
    text, n = re.subn(r"lr_max: \S+", "lr_max: 1e-3", (REPO / "params.yaml").read_text())
    assert n >= 1
    (tmp_path / "p.yaml").write_text(text)
    assert load_params(tmp_path / "p.yaml").pretrain.lr_max == pytest.approx(1e-3)


def test_cli_misspelled_key_exits_nonzero_one_line(tmp_path: Path) -> None:
    text = (REPO / "params.yaml").read_text().replace("n_merges:", "n_merge:")
    bad = tmp_path / "params.yaml"
    bad.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "gpt1", "--params", str(bad), "train_bpe"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "bpe.n_merge: unknown key" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written


# spec §1-2, one row per value: (dotted key in configs/paper.yaml, value, how the spec says it).
PAPER_VALUES = [
    ("bpe.n_merges", 40000, "40,000 merges"),
    ("bpe.lowercase", True, "lower-cased"),
    ("bpe.end_of_word_suffix", "</w>", "`</w>`"),
    ("model.arch", "gpt1", "post-LayerNorm"),
    ("model.n_layer", 12, "12-layer"),
    ("model.n_embd", 768, "768-d states"),
    ("model.n_head", 12, "12 heads"),
    ("model.n_inner", 3072, "3072-d position-wise FFN"),
    ("model.n_positions", 512, "k = 512"),
    ("model.afn", "gelu", "GELU"),
    ("model.initializer_range", 0.02, "N(0, 0.02)"),
    ("model.resid_pdrop", 0.1, "residual, embedding and attention dropout 0.1"),
    ("model.embd_pdrop", 0.1, "residual, embedding and attention dropout 0.1"),
    ("model.attn_pdrop", 0.1, "residual, embedding and attention dropout 0.1"),
    ("pretrain.lr_max", 2.5e-4, "max lr 2.5e-4"),
    ("pretrain.warmup_steps", 2000, "first 2,000 updates"),
    ("pretrain.lr_schedule", "cosine", "cosine annealing to 0"),
    ("pretrain.batch_seqs", 64, "64 randomly sampled contiguous sequences"),
    ("pretrain.seq_len", 512, "sequences of 512 tokens"),
    ("pretrain.epochs", 100, "100 epochs"),
    ("pretrain.weight_decay", 0.01, "w = 0.01"),
    ("finetune.clf_pdrop", 0.1, "| classifier dropout | 0.1 |"),
    ("finetune.lr", 6.25e-5, "6.25e-5"),
    ("finetune.batch_size", 32, "| batch size | 32 |"),
    ("finetune.epochs", 3, "| epochs | 3"),
    ("finetune.warmup_frac", 0.002, "warm-up over 0.2% of training"),
    ("finetune.lm_coef", 0.5, "λ = 0.5"),
]


def _get(cfg: object, dotted: str) -> object:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


@pytest.mark.parametrize(
    ("key", "value", "paper_text"), PAPER_VALUES, ids=[v[0] for v in PAPER_VALUES]
)
def test_paper_preset_holds_paper_md_values(key: str, value: object, paper_text: str) -> None:
    """A3: each value of spec §1-2 is in configs/paper.yaml, and docs/paper.md says it."""
    spec = REPO.parent / "shared" / "PAPER.md"
    assert spec.is_file(), f"{spec}: the spec must sit beside the repo (../shared)"
    text = spec.read_text(encoding="utf-8")
    section = text[text.index("## 1. Pre-training") : text.index("## 3. ")]
    assert paper_text in section, f"spec §1-2 no longer says {paper_text!r}"
    paper = load_params(REPO / "configs" / "paper.yaml")
    assert _get(paper, key) == value


def test_paper_preset_special_tokens_and_lstm() -> None:
    """spec §5 (parity): the three special tokens follow the vocabulary in this order."""
    paper = load_params(REPO / "configs" / "paper.yaml")
    assert list(paper.bpe.special_tokens) == ["_start_", "_delimiter_", "_classify_"]
    assert paper.lstm.hidden_size == 2048 and paper.lstm.n_layer == 1   # Table 5's LSTM
