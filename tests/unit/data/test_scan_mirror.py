"""What DVC tracks of the mirror (scan_mirror): null = the hub, a missing mirror = one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpt1.data.sources import scan_mirror
from gpt1.errors import Gpt1Error
from tests.helpers.corpus import write_corpus
from tests.helpers.params import make_params_dict
from tests.helpers.repo import REPO

TASKS = {"rte": "RTE", "sst2": "SST-2"}


def read(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_fingerprints_change_only_with_their_input(tmp_path: Path) -> None:
    mirror, out = tmp_path / "mirror", tmp_path / "scan"
    write_corpus(mirror, n_books=3, n_paragraphs=5)
    (mirror / "tasks" / "RTE").mkdir(parents=True)
    (mirror / "tasks" / "RTE" / "train.tsv").write_text("a\tb\n")
    counts = scan_mirror(str(mirror), "mirror", TASKS, out)
    assert counts == {"corpus": 3, "dprd": 0, "rte": 1, "sst2": 0}
    first = read(out)
    assert set(first) == {"corpus.json", "dprd.json", "rte.json", "sst2.json"}
    assert json.loads(first["rte.json"])["files"].keys() == {"train.tsv"}

    scan_mirror(str(mirror), "mirror", TASKS, out)
    assert read(out) == first, "an unchanged mirror must leave DVC nothing to re-run"
    (mirror / "tasks" / "RTE" / "train.tsv").write_text("a\tc\n")
    scan_mirror(str(mirror), "mirror", TASKS, out)
    changed = {name for name, data in read(out).items() if data != first[name]}
    assert changed == {"rte.json"}


def test_an_own_tasks_settings_are_in_its_fingerprint(tmp_path: Path) -> None:
    """An own task's settings (labels, columns, metric) are no DVC params key of the paper's
    tasks, so they reach its prepare_task (and, through the settings it writes beside its
    tables, its fine-tuning) as part of its fingerprint: a changed label list changes
    questions.json and nothing else."""
    mirror, out = tmp_path / "mirror", tmp_path / "scan"
    write_corpus(mirror, n_books=2, n_paragraphs=3)
    own = tmp_path / "questions.csv"
    own.write_text("question,topic\nhow long to boil an egg?,cooking\n")
    settings = {"questions": {"file": str(own), "labels": ["cooking", "sports"]}}
    scan_mirror(str(mirror), "mirror", TASKS, out, {"questions": str(own)}, settings)
    first = read(out)
    assert json.loads(first["questions.json"])["settings"] == settings["questions"]
    scan_mirror(str(mirror), "mirror", TASKS, out, {"questions": str(own)}, settings)
    assert read(out) == first
    settings["questions"]["labels"].append("music")
    scan_mirror(str(mirror), "mirror", TASKS, out, {"questions": str(own)}, settings)
    assert {n for n, d in read(out).items() if d != first[n]} == {"questions.json"}


def test_null_mirror_means_the_hub(tmp_path: Path) -> None:
    out = tmp_path / "scan"
    scan_mirror(None, "hub", TASKS, out)
    assert {json.loads(d)["mirror_dir"] for d in read(out).values()} == {None}
    with pytest.raises(Gpt1Error, match="data.source is mirror but paths.mirror_dir is null"):
        scan_mirror(None, "mirror", TASKS, tmp_path / "scan2")


def test_missing_mirror_is_one_line_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(Gpt1Error) as err:
        scan_mirror(str(tmp_path / "nowhere"), "mirror", TASKS, tmp_path / "scan")
    assert "nowhere: paths.mirror_dir is not a directory" in str(err.value)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "scan").exists(), "nothing half-written"


def test_the_scan_mirror_stage_loads_no_torch(tmp_path: Path) -> None:
    """The data stages import no torch (a CI-time cut): scan_mirror, which also fingerprints
    the checkpoint pretrain.import_hf names, runs in a process that never loads it."""
    ckpt = tmp_path / "openai-gpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "vocab.json").write_text("{}")
    raw = make_params_dict(tmp_path, {"data": {"source": "hub"},
                                      "pretrain": {"import_hf": str(ckpt)}})
    raw["paths"]["mirror_dir"] = None
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    code = ("import sys\nfrom gpt1.config import load_params\nfrom gpt1.stages.data import "
            f"scan_mirror\nscan_mirror(load_params({str(tmp_path / 'params.yaml')!r}))\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out.split()[-1] == "False"
    scan = json.loads((Path(raw["paths"]["mirror_scan"]) / "import_hf.json").read_text())
    assert scan["source"] == str(ckpt) and set(scan["files"]) == {"config.json", "vocab.json"}
