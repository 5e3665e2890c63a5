"""The one-shot run (gpt1/one_shot.py) end to end on the CPU, on a tiny preset: the data the
model stages read made in code (tokenizer, shards, task tables, DPRD), the carry prepared,
`gpt1 one-shot run` from inside it in a fresh process as a GPU host runs it, the archive
(under the 16 MiB a file may weigh to come back) unpacked into the preset's records, and the
report and the verdict row rendered from them; a deadline that cuts the run still packs the
finished stages, whether no stage starts in its reserve or the watchdog fires mid-stage."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

import gpt1.__main__ as cli
from gpt1 import bpe
from gpt1.config import load_params
from gpt1.data import shards
from gpt1.one_shot import (
    ARCHIVE,
    ARCHIVE_LIMIT_BYTES,
    CUT,
    FINISHED,
    MANIFEST,
    NOT_STARTED,
    OneShot,
    one_shot_runs,
)
from gpt1.report.verdicts import render
from gpt1.stages import report as report_stages
from gpt1.tasks.load import write_tables
from tests.helpers.params import every_stage_params
from tests.helpers.repo import REPO
from tests.helpers.runs import random_texts
from tests.helpers.task_tables import table, write_dprd

pytestmark = pytest.mark.slow

TASKS = ("sst2", "cola")


def _workspace(root: Path) -> None:
    """A repository as the data stages leave it for a tiny preset (params.yaml's relative
    paths): dvc.yaml, params.yaml, tokenizer, token shards, task tables, the mirror's DPRD."""
    raw = every_stage_params({"paths": {"mirror_dir": "mirror"}, "device": "cpu",
                              "bpe": {"n_merges": 40}})
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (root / "dvc.yaml").write_bytes((REPO / "dvc.yaml").read_bytes())
    params = load_params(root / "params.yaml")
    texts = random_texts(8, 0)
    tok = bpe.train_bpe(texts, params.bpe, params.paths.tokenizer)
    shards.write_shards([f"d{i}" for i in range(8)], texts, tok, params.shard, params.seed,
                        params.paths.shards)
    rng = random.Random(0)
    for task in TASKS:
        write_tables({s: table(task, 40, rng) for s in ("train", "dev", "test")},
                     Path(params.paths.tasks) / task)
    write_dprd(params.paths.mirror_dir)


ABSENT = ("spacy", "dvc", "mlflow", "prefect", "great_expectations")
"""What a bare GPU host lacks (it has torch and the wheels the carry brings)."""


def _one_shot(carry: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`gpt1 one-shot run` from inside the carry, as a bare GPU host runs it: ABSENT fail to
    import there."""
    absent = out.parent / "absent"
    for name in ABSENT:
        (absent / name).mkdir(parents=True, exist_ok=True)
        (absent / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    env = {**os.environ, "PYTHONPATH": f"{absent}{os.pathsep}{REPO}"}
    return subprocess.run([sys.executable, "-m", "gpt1", "one-shot", "run", "--out", str(out),
                           *extra], cwd=carry, env=env, capture_output=True, text=True,
                          check=False)


def _manifest(archive: Path) -> tuple[dict, list[str]]:
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        return json.loads(tar.extractfile(MANIFEST).read()), names  # type: ignore[union-attr]


def test_one_shot_runs_every_model_stage_and_comes_back_as_a_report(
        tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    monkeypatch.chdir(root)
    _workspace(root)
    params = load_params("params.yaml")
    assert cli.main(["one-shot", "prepare", "--wheels", "none"]) == 0
    carry = root / ".gpu_carry"
    sizes = json.loads((carry / "carry.json").read_text())
    assert sizes["data_bytes"] > 0 and sizes["wheels"] == []
    assert load_params(carry / "params.yaml").tracking.enabled is False
    pristine = tmp_path / "carry-copy"
    shutil.copytree(carry, pristine)

    done = _one_shot(carry, tmp_path / "out", "--deadline-s", "900")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    archive = tmp_path / "out" / ARCHIVE
    assert archive.stat().st_size <= ARCHIVE_LIMIT_BYTES
    manifest, names = _manifest(archive)
    runs = one_shot_runs(params)
    assert [s["address"] for s in manifest["stages"]] == [r.address for r in runs]
    assert {s["status"] for s in manifest["stages"]} == {FINISHED}
    assert manifest["device"].startswith("cpu") and manifest["torch"]
    assert set(manifest["pretraining"]) == {"pretrain@1234", "pretrain_lstm@1234"}
    assert "reports/metrics/finetune_sst2_p1234.json" in names
    assert any(n.startswith("data/finetuned/p1234/sst2/predictions_seed") for n in names)
    assert not any(n.startswith("data/pretrain") for n in names)  # weights stay there

    assert cli.main(["one-shot", "unpack", str(archive)]) == 0
    assert Path("reports/one_shot.md").read_text().count("| finished |") == len(runs)
    out = report_stages.report(params)
    text = Path(out["outputs"]["report"]).read_text()
    assert "- **(a) paper: \"pre-training helps\"" in text and "(no per-example" not in text
    table_text, _ = render([("one GPU", "params.yaml", params)])
    assert "| one GPU |" in table_text and "findings from `reports/findings.json`" in table_text

    # the deadline: with the reserve all but the whole deadline, only the first stage starts
    monkeypatch.chdir(pristine)
    carried = load_params("params.yaml")
    shot = OneShot(carried, "params.yaml", tmp_path / "cut", 900.0, 899.9, time.perf_counter())
    shot.run()
    manifest, names = _manifest(tmp_path / "cut" / ARCHIVE)
    assert [s["status"] for s in manifest["stages"]] == [FINISHED] + [NOT_STARTED] * (
        len(runs) - 1)
    assert "reports/metrics/pretrain_p1234.json" in names
    assert "reports/metrics/pretrain_lstm_p1234.json" not in names

    # the watchdog fires during a stage: what finished is packed, the stage is cut
    cuts: list[int] = []
    shot = OneShot(carried, "params.yaml", tmp_path / "watchdog", 0.5, -1e9,
                   time.perf_counter(), on_cut=cuts.append)
    shot.run()
    manifest, names = _manifest(tmp_path / "watchdog" / ARCHIVE)
    statuses = [s["status"] for s in manifest["stages"]]
    k = statuses.index(CUT)
    assert cuts == [3] and statuses == [FINISHED] * k + [CUT] + [NOT_STARTED] * (
        len(runs) - k - 1)
    assert all(f"reports/metrics/{s['stem']}.json" in names for s in manifest["stages"][:k])
