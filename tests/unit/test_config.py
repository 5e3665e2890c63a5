"""Strict params loading: unknown / missing keys and bad values fail in one line naming the key."""

from __future__ import annotations

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
    text = (REPO / "params.yaml").read_text().replace("lr_max: 1.0e-3", "lr_max: 1e-3")
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
