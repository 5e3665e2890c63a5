"""Adding a task of one's own re-runs only its stages (its preparation, the full row's pilot
stage, which records the recipe's lr outside ablations.tasks, and its fine-tuning) and the
report, as DVC sees it.

A copy of the repository on the tiny preset, every stage's outputs stood in by placeholder files
and recorded with `dvc commit` (what DVC compares is the params and files each stage declares,
not what the files hold, so nothing has to run), then an own task added to params.yaml: `dvc
status` names the stages a `dvc repro` would run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.helpers.dvc_repo import copy_repo, run, set_params, stand_in_outputs
from tests.helpers.params import TINY

pytestmark = pytest.mark.slow


def test_an_own_task_reruns_only_its_stages_and_the_report(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    copy_repo(repo)
    (repo / "mirror").mkdir()
    set_params(repo, **{**TINY, "paths": {"mirror_dir": "mirror"},
                        "finetune": {**TINY["finetune"], "tasks": ["sst2", "cola"]},
                        "ablations": {"tasks": ["sst2"]}, "layers": {"tasks": ["sst2"]},
                        "curves": {"tasks": ["sst2"]}, "zeroshot": {"tasks": ["sst2", "cola"]},
                        "report": {"confirmatory_tasks": ["sst2"], "gate_margins": {"sst2": 0.03}}})
    run(["dvc", "init", "--no-scm", "-q"], repo)  # no git: no .gitignore written into deps
    stand_in_outputs(repo)
    run(["dvc", "commit", "-f", "-q"], repo)
    assert re.findall(r"^(\S+):", run(["dvc", "status"], repo), re.M) == ["scan_mirror"]

    (repo / "questions.csv").write_text("text,label\n" + "".join(
        f"question {i},{'ab'[i % 2]}\n" for i in range(20)))
    params = yaml.safe_load((repo / "params.yaml").read_text())
    set_params(repo, finetune={"tasks": [*params["finetune"]["tasks"], "questions"]},
               tasks={"custom": {"questions": {"file": "questions.csv", "text": "text",
                                               "label": "label", "labels": ["a", "b"]}}})
    changed = set(re.findall(r"^(\S+):", run(["dvc", "status"], repo), re.M))
    seed = params["pretrain"]["seeds"][0]
    assert changed == {"scan_mirror", "prepare_task@questions", "lr_pilot_full@questions",
                       f"finetune@questions-{seed}", "data_docs", "report"}
