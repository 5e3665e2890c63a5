"""The tiny params of the unit tests: params.yaml with a CPU-sized model and every output path
under a test's folder."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.repo import REPO

# A model small enough for CPU unit tests; every other value comes from params.yaml.
TINY: dict[str, Any] = {
    "bpe": {"n_merges": 200, "min_frequency": 1},
    "shard": {"tokens_per_shard": 5000},
    "model": {"n_positions": 32, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_inner": 128},
    "lstm": {"hidden_size": 48, "n_embd": 32},
    "pretrain": {
        "batch_seqs": 4, "micro_batch_seqs": 2, "seq_len": 32, "max_tokens": 4096,
        "warmup_steps": 4, "eval_interval_steps": 8, "eval_batches": 2,
        "log_interval_steps": 4, "checkpoint_interval_steps": 8, "zero_shot_checkpoints": 3,
    },
    "finetune": {"batch_size": 4, "max_train_examples": 16, "max_eval_examples": 16,
                 "seeds": [0]},  # one seed keeps unit tests short; tests that need more set them
    # one point of each curve: the e2e repros run every curve stage (tests/unit/stages/
    # test_curves.py runs two arms at two n and three checkpoints in-process)
    "curves": {"ns": [8], "arms": ["full"], "compute_n": 8, "checkpoints": [0]},
    "report": {"bootstrap_samples": 200},
    # one arm, two configurations (the recipe's, lr 1e-4 warm-up 0.2 %, among them); the
    # tests that need every arm piloted say so (tests/unit/stages/test_pilot_grid.py)
    "ablations": {"pilot": {"variants": ["scratch"], "lr_grid": [1e-4, 1e-3],
                            "warmup_grid": [0.002], "dev_examples": 4}},  # tiny task pools
    "tracking": {"enabled": False},  # unit tests never touch MLflow
}


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into `base` key by key; an empty mapping in `over` clears that key's mapping
    (e.g. `finetune.overrides: {}` drops the demo's per-task recipes)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and value and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def make_params_dict(tmp_path: Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """params.yaml with TINY applied, every output path under tmp_path, then `overrides`."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw = deep_merge(raw, TINY)
    raw["finetune"]["overrides"] = {}  # the demo's per-task recipes (SST-2: 3 epochs) are not tiny
    for key, value in raw["paths"].items():
        if key != "mirror_dir" and value is not None:
            raw["paths"][key] = str(tmp_path / value)
    raw["paths"]["mirror_dir"] = str(tmp_path / "mirror")
    return deep_merge(raw, overrides or {})


EVERY_STAGE: dict[str, Any] = {
    "pretrain": {"precision": "fp32", "max_tokens": 2048},
    "finetune": {"tasks": ["sst2", "cola"], "max_train_examples": 12, "max_eval_examples": 8},
    "ablations": {"tasks": ["sst2"], "variants": ["scratch", "lstm"],
                  "pilot": {"variants": ["full", "scratch"], "dev_examples": 6},
                  "floor": {"cv_folds": 2}},
    "layers": {"tasks": ["sst2"], "layers_transferred": [1], "max_train_examples": 8,
               "max_eval_examples": 8},
    "curves": {"tasks": ["sst2"], "arms": ["full", "scratch"],
               "dose_tokens": [640, 1024], "dose_tasks": ["sst2"]},  # 5, 8 of 16 updates
    "zeroshot": {"tasks": ["sst2", "cola", "dprd"], "max_examples": 8},
    "report": {"confirmatory_tasks": ["sst2"], "gate_margins": {"sst2": 0.03}}}
"""Over TINY: runs that reach every stage family (two tasks, two arms piloted, the LSTM arm,
one block count, both curves, every zero-shot task)."""


def every_stage_params(overrides: dict[str, Any]) -> dict[str, Any]:
    """params.yaml with TINY and EVERY_STAGE applied, its paths as written (relative: a test
    runs in its repository folder), then `overrides`."""
    raw = deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    raw["finetune"]["overrides"] = {}
    return deep_merge(deep_merge(raw, EVERY_STAGE), overrides)
