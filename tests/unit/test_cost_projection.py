"""benchmarks/cost_projection.py: hours on N GPUs for pre-training and the fine-tuning fan-out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpt1.config import load_params

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import cost_projection  # noqa: E402


def test_fanout_is_the_total_over_the_gpus_or_the_longest_run():
    runs = {"a": 3600, "b": 3600, "c": 7200}
    assert cost_projection.fanout_hours(runs, 2, 1.0) == pytest.approx(7200 / 3600)
    assert cost_projection.fanout_hours(runs, 4, 1.0) == pytest.approx(2.0)  # longest run
    assert cost_projection.fanout_hours(runs, 1, 2.0) == pytest.approx(14400 / 2 / 3600)


def test_every_finetuning_run_of_the_paper_preset_is_counted():
    params = load_params(ROOT / "configs" / "paper.yaml")
    rows = {t: 1000 for t in {*params.finetune.tasks, *params.ablations.tasks,
                              *params.layers.tasks}}
    runs = cost_projection.finetune_runs(params, rows)
    cells = (len(params.finetune.tasks) + len(params.ablations.variants)
             * len(params.ablations.tasks) + len(params.layers.tasks)
             * len(params.layers.layers_transferred))
    assert len(runs) == cells * len(params.finetune.seeds)
    assert runs["finetune@rte/seed0"] == 1000 * params.finetune.epochs * 512
    assert runs["finetune@race/seed0"] == 4 * runs["finetune@rte/seed0"]  # 4 choices
    assert runs["finetune@stsb/seed1"] == 2 * runs["finetune@rte/seed0"]  # both orders


def test_the_command_prints_hours_for_n_gpus(tmp_path):
    params = load_params(ROOT / "configs" / "paper.yaml")
    for task in {*params.finetune.tasks, *params.ablations.tasks, *params.layers.tasks}:
        (tmp_path / f"prepare_task_{task}.json").write_text(json.dumps({"rows": {"train": 100}}))
    done = subprocess.run([sys.executable, "benchmarks/cost_projection.py", "--gpus", "8",
                           "--corpus-tokens", "1000000000", "--metrics-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert lines[2].startswith("pre-training on 8 x H100 (DDP, linear scaling assumed): ")
    assert lines[3].startswith("fine-tuning fan-out: 186 runs, ")
    assert lines[4].startswith("in all: ") and lines[4].endswith(" GPU-hours")
