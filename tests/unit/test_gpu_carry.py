"""The carry of a one-shot run (gpt1/gpu_carry.py): laid out at the preset's relative paths
with every text the stages encode standardised, refused over its size limits with nothing
written; an archive (whole or in parts) unpacked only under the preset's records, only when it
is the preset's."""

from __future__ import annotations

import io
import json
import random
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gpt1 import bpe
from gpt1.config import load_params
from gpt1.data.clean import STANDARDIZED_TEXTS, standardize_texts
from gpt1.errors import Gpt1Error
from gpt1.gpu_carry import CARRY_MANIFEST, prepare, split_file, unpack
from gpt1.tasks.load import read_tables, write_tables
from tests.helpers.params import TINY, deep_merge
from tests.helpers.repo import REPO
from tests.helpers.task_tables import DPRD, sentence, table, write_dprd


def _workspace(root: Path) -> Path:
    """A tiny preset (relative paths) whose data-stage outputs exist as plain files."""
    raw = deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    raw["finetune"]["overrides"] = {}
    raw = deep_merge(raw, {"paths": {"mirror_dir": "mirror"}, "bpe": {"n_merges": 20},
                           "finetune": {"tasks": ["sst2"]}, "ablations": {"tasks": ["sst2"]},
                           "layers": {"tasks": ["sst2"]}, "curves": {"tasks": ["sst2"]},
                           "zeroshot": {"tasks": ["sst2", "dprd"]},
                           "report": {"confirmatory_tasks": ["sst2"]}})
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (root / "dvc.yaml").write_bytes((REPO / "dvc.yaml").read_bytes())
    params = load_params(root / "params.yaml")
    rng = random.Random(0)
    bpe.train_bpe([sentence(rng, 30) for _ in range(20)], params.bpe,
                  root / params.paths.tokenizer)
    (root / "data/shards").mkdir(parents=True)
    (root / "data/shards/train_0.bin").write_bytes(b"x" * 50_000)  # copied, never read
    write_tables({s: table("sst2", 12, rng) for s in ("train", "dev", "test")},
                 root / params.paths.tasks / "sst2")
    write_dprd(root / "mirror")
    return root / "params.yaml"


def test_the_carry_holds_the_inputs_at_the_presets_paths(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    params = load_params(_workspace(tmp_path))
    summary = prepare(params, "params.yaml", Path(".gpu_carry"), "none")
    carry = tmp_path / ".gpu_carry"
    assert (carry / "data/shards/train_0.bin").stat().st_size == 50_000
    assert (carry / "data/tasks/sst2/train.parquet").is_file()
    assert (carry / "mirror/tasks/DPRD/test.c.txt").read_text() == DPRD
    carried = load_params(carry / "params.yaml")
    assert carried.tracking.enabled is False and carried.paths.mirror_dir == "mirror"
    assert carried.paths.metrics == params.paths.metrics  # records name the workspace's paths
    sizes = json.loads((carry / CARRY_MANIFEST).read_text())
    assert sizes["data_bytes"] == summary["data_bytes"] > 50_000
    assert sizes["carry_bytes"] > sizes["data_bytes"] and sizes["wheels"] == []
    texts = pd.read_parquet(carry / STANDARDIZED_TEXTS)  # every text, the zero-shot cue too
    tables = read_tables(tmp_path / "data/tasks/sst2")
    assert {*tables["train"]["text_a"], *tables["test"]["text_a"], "very"} <= set(texts["text"])
    assert texts["standardized"].tolist() == standardize_texts(texts["text"].tolist())


def test_a_carry_over_its_limit_is_refused_and_nothing_is_written(tmp_path: Path,
                                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    params = load_params(_workspace(tmp_path))
    with pytest.raises(Gpt1Error, match=r"the carry's data is \d+\.\d KiB, over 39\.1 KiB "
                                        r"\(data/shards 48\.8 KiB, "):
        prepare(params, "params.yaml", Path(".gpu_carry"), "none", data_limit=40_000)
    assert not (tmp_path / ".gpu_carry").exists()
    with pytest.raises(Gpt1Error, match=r"weigh \d+\.\d KiB, over the 58\.6 KiB that travel"):
        prepare(params, "params.yaml", Path(".gpu_carry"), "none", tree_limit=60_000)
    (tmp_path / "mine").mkdir()
    with pytest.raises(Gpt1Error, match="is no carry"):
        prepare(params, "params.yaml", Path("mine"), "none")


def _archive(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:xz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpack_writes_only_the_presets_records(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    params = load_params(_workspace(tmp_path))
    manifest = {"preset": params.report.preset, "finished": 1, "runs": 1, "device": "cpu",
                "wall_s": 1.0, "deadline_s": 9.0, "torch": "t", "cuda": None, "python": "3",
                "pretraining": {}, "stages": [{"address": "floor@sst2", "status": "finished",
                                               "wall_s": 1.0}]}
    good = _archive(tmp_path / "a.tar.xz", {
        "one_shot.json": json.dumps(manifest).encode(),
        "reports/metrics/finetune_bow_sst2.json": b"{}",
        "data/finetuned/p1234/sst2/predictions_seed0.parquet": b"p"})
    parts = split_file(good, 200)  # over the limit: in parts, joined again by unpack
    assert len(parts) > 1 and not good.exists() and max(p.stat().st_size for p in parts) <= 200
    unpack(good, params)
    assert Path("reports/metrics/finetune_bow_sst2.json").read_bytes() == b"{}"
    assert Path("data/finetuned/p1234/sst2/predictions_seed0.parquet").is_file()
    assert "| floor@sst2 | finished | 1.0 |" in Path("reports/one_shot.md").read_text()
    evil = _archive(tmp_path / "b.tar.xz", {"one_shot.json": json.dumps(manifest).encode(),
                                            "reports/metrics/../../x.json": b"{}"})
    with pytest.raises(Gpt1Error, match="not under paths.metrics or paths.finetuned"):
        unpack(evil, params)
    other = _archive(tmp_path / "c.tar.xz", {
        "one_shot.json": json.dumps({**manifest, "preset": "paper"}).encode()})
    with pytest.raises(Gpt1Error, match="an archive of preset 'paper', not of 'demo'"):
        unpack(other, params)
    assert not (tmp_path / "x.json").exists()
