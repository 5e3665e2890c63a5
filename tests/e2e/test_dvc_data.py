"""End to end through DVC: a copy of the repo, a tiny generated mirror, `dvc repro shard_corpus`.

Checks the outputs, that a second repro is a no-op, that the cleaned corpus does not depend on
the number of cleaning processes, and that changing one BPE parameter reruns train_bpe and
shard_corpus only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpt1.bpe import load_bpe
from gpt1.data.shards import read_shards
from gpt1.records import read_metrics
from tests.helpers.corpus import write_corpus
from tests.helpers.dvc_repo import copy_repo as _copy_repo
from tests.helpers.dvc_repo import run as _run
from tests.helpers.dvc_repo import set_params as _set_params

pytestmark = pytest.mark.slow
DATA_STAGES = ["download_corpus", "clean_corpus", "check_corpus", "train_bpe", "shard_corpus"]


def _ran(output: str) -> list[str]:
    return [s for s in DATA_STAGES if f"Running stage '{s}'" in output]


def test_dvc_repro_data_stages(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _copy_repo(repo)
    write_corpus(repo / "mirror", n_books=5, n_paragraphs=25)
    _set_params(repo, paths={"mirror_dir": "mirror"}, clean={"workers": 2},
                bpe={"n_merges": 200, "min_frequency": 1},
                shard={"tokens_per_shard": 3000, "val_frac": 0.2},
                tracking={"enabled": False})
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)

    first = _run(["dvc", "repro", "shard_corpus"], repo)
    assert _ran(first) == DATA_STAGES

    tok = load_bpe(repo / "data/tokenizer")
    train = read_shards(repo / "data/shards", "train", tok.hash)
    val = read_shards(repo / "data/shards", "val", tok.hash)
    scores = json.loads((repo / "reports/metrics/shard_corpus.json").read_text())
    assert scores == {"tokens": {"train": sum(map(len, train)), "val": sum(map(len, val))}}
    records = read_metrics(repo / "reports/metrics")  # scores merged with their sidecars
    metrics, clean = records["shard_corpus"], records["clean_corpus"]
    assert metrics["documents"] == {"train": 4, "val": 1} and metrics["tokens_per_second"] > 0
    assert clean["documents"] == 5 and clean["gutenberg"]["gutenberg_stripped"] == 5
    ignored = (repo / "data/.gitignore").read_text().split()
    assert {"/raw", "/tokenizer", "/shards"} <= set(ignored)
    assert "/clean" in ignored or "/corpus.parquet" in (repo / "data/clean/.gitignore").read_text()

    second = _run(["dvc", "repro", "shard_corpus"], repo)
    assert _ran(second) == []

    # A forced re-run with the same outputs: new timings go to the sidecars, no metric changes.
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "first run"], repo)
    assert _ran(_run(["dvc", "repro", "-f", "shard_corpus"], repo)) == DATA_STAGES
    targets = [f"reports/metrics/{s}.json" for s in DATA_STAGES]  # the stages that ran
    assert _run(["dvc", "metrics", "diff", "--targets", *targets], repo).strip() == ""
    assert _run(["dvc", "metrics", "show", *targets], repo).split("\n")[0].split() == [
        "Path", "documents", "failed", "files", "tokens.train", "tokens.val", "vocab_size"]

    # One worker instead of two: clean reruns and writes the same parquet, so nothing after it.
    _set_params(repo, clean={"workers": 1})
    assert _ran(_run(["dvc", "repro", "shard_corpus"], repo)) == ["clean_corpus"]

    _set_params(repo, bpe={"n_merges": 150})
    third = _run(["dvc", "repro", "shard_corpus"], repo)
    assert _ran(third) == ["train_bpe", "shard_corpus"]
    assert load_bpe(repo / "data/tokenizer").hash != tok.hash
