"""Shared fixtures: tiny params with every path under tmp_path, seeding, the gpu marker."""

from __future__ import annotations

import copy
import os
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpt1.config import Params, parse_params

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# `-n 2 --dist loadgroup` (the README's test command) hands out one test at a time: a worker
# gets the next test in collection order whenever it holds fewer than three. (No test has an
# xdist_group: under pytest 9 xdist 3.8 cannot tag a test's id with its group, so the groups
# were silently ignored.) The long end-to-end tests go first, longest first (LONGEST_FIRST), so
# neither worker starts one near the end while the other runs out of work: the short tests
# fill in around them.
# Under pytest-xdist (`-n 2`) each worker gets one core's worth of
# OpenMP threads, a passive wait (a spinning thread steals the other worker's core) and its own
# Prefect home (two ephemeral servers on one SQLite file race on its migrations). Set before
# torch or prefect is imported, so both read them; the test subprocesses inherit them.
if os.environ.get("PYTEST_XDIST_WORKER"):
    import atexit
    import shutil
    import tempfile

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    _prefect_home = tempfile.mkdtemp(prefix=f"gpt1-tests-{os.environ['PYTEST_XDIST_WORKER']}-")
    os.environ["PREFECT_HOME"] = _prefect_home
    atexit.register(shutil.rmtree, _prefect_home, ignore_errors=True)

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
    "report": {"bootstrap_samples": 200},
    "tracking": {"enabled": False},  # unit tests never touch MLflow
}


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
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


@pytest.fixture
def make_params(tmp_path: Path):
    """make_params(overrides) -> Params with paths under tmp_path."""

    def _make(overrides: dict[str, Any] | None = None) -> Params:
        return parse_params(make_params_dict(tmp_path, overrides), "tiny")

    return _make


@pytest.fixture
def tiny_params(make_params) -> Params:
    return make_params()


@pytest.fixture(autouse=True)
def _seed() -> None:
    random.seed(0)
    try:
        import numpy as np
        import torch

        np.random.seed(0)
        torch.manual_seed(0)
    except ImportError:
        pass


# Test files by measured wall time, longest first (benchmarks/results/ci-time_*.md); any other
# file keeps its collection order after these.
LONGEST_FIRST = ("test_prefect_deployment.py", "test_dvc_seeds.py", "test_dvc_import.py",
                 "test_dvc_records.py", "test_chaos.py", "test_prefect_remote_worker.py",
                 "test_dvc_data.py", "test_custom_task.py", "test_cpu_isa.py",
                 "test_tracking_server.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: ties keep order
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu"):  # not `"gpu" in item.keywords`: folder names count
            item.add_marker(skip)
