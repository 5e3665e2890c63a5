"""A changed pilot re-runs only the stages that read its choice, as DVC sees it.

Each lr-pilot stage writes its choice (gpt1.arms.choice_path) as its own output, and each stage
that runs an arm on a task declares that one file: a copy of the repository on a tiny preset,
every output stood in and recorded with `dvc commit` (tests/helpers/dvc_repo.py), then one
pilot's choice file changed: `dvc status` names the stages a `dvc repro` would run. The one
exception: the labelled-data curve (curve_n) declares the folder of every choice, since an arm
of curves.arms need not be a row of ablations.variants and so may have no pilot stage of its own
(configs/paper-finetune.yaml's `scratch`); it re-runs when any choice changes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.dvc_repo import copy_repo, run, set_params, stand_in_outputs
from tests.helpers.params import TINY

pytestmark = pytest.mark.slow


def _changed(repo: Path) -> set[str]:
    return set(re.findall(r"^(\S+):", run(["dvc", "status"], repo), re.M)) - {"scan_mirror"}


def test_a_changed_pilot_reruns_only_the_stages_that_read_its_choice(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    copy_repo(repo)
    (repo / "mirror").mkdir()
    set_params(repo, **{**TINY, "paths": {"mirror_dir": "mirror"},
                        "pretrain": {**TINY["pretrain"], "seeds": [1, 2]},
                        "finetune": {**TINY["finetune"], "tasks": ["sst2", "cola", "rte"]},
                        "ablations": {"tasks": ["sst2", "cola"], "variants": ["scratch", "lstm"],
                                      "pilot": {**TINY["ablations"]["pilot"],
                                                "variants": ["full", "scratch"]}},
                        "layers": {"tasks": ["sst2", "rte"], "layers_transferred": [1]},
                        "curves": {**TINY["curves"], "tasks": ["sst2"], "arms": ["full"]},
                        "zeroshot": {"tasks": ["sst2", "cola"]},
                        "report": {"confirmatory_tasks": ["sst2"],
                                   "gate_margins": {"sst2": 0.03}}})
    run(["dvc", "init", "--no-scm", "-q"], repo)  # no git: no .gitignore written into deps
    stand_in_outputs(repo)
    run(["dvc", "commit", "-f", "-q"], repo)
    assert not _changed(repo)
    choices = repo / "data" / "finetuned" / "lr_pilot" / "choices"
    assert sorted(p.name for p in choices.iterdir()) == [  # full on every fine-tuned task
        "full_cola.json", "full_rte.json", "full_sst2.json", "lstm_cola.json", "lstm_sst2.json",
        "scratch_cola.json", "scratch_sst2.json"]

    (choices / "scratch_cola.json").write_text('{"lr": 0.001}\n')
    curve_n = {"curve_n@sst2-8-full-1", "curve_n@sst2-8-full-2"}  # every choice (docstring)
    assert _changed(repo) == {"lr_pilot@scratch-cola", "ablation@scratch-cola-1",
                              "ablation@scratch-cola-2", *curve_n, "report"}
    run(["dvc", "commit", "-f", "-q"], repo)

    (choices / "full_sst2.json").write_text('{"lr": 0.001}\n')
    assert _changed(repo) == {"lr_pilot_full@sst2", "finetune@sst2-1", "finetune@sst2-2",
                              "transfer_layers@sst2-1-1", "transfer_layers@sst2-1-2",
                              *curve_n, "curve_step@sst2-0-1", "curve_step@sst2-0-2", "report"}
    run(["dvc", "commit", "-f", "-q"], repo)

    (choices / "full_rte.json").write_text('{"lr": null}\n')  # a task no pilot tunes
    assert _changed(repo) == {"lr_pilot_full@rte", "finetune@rte-1", "finetune@rte-2",
                              "transfer_layers@rte-1-1", "transfer_layers@rte-1-2", *curve_n,
                              "report"}
