"""Shared fixtures and hooks: tiny params with every path under tmp_path, seeding, one thread,
the gpu skip and the slow mark on every end-to-end test. Shared builders are in tests/helpers/."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from gpt1.config import Params, parse_params
from tests.helpers.params import make_params_dict

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


@pytest.fixture
def make_params(tmp_path: Path):
    """make_params(overrides) -> Params with paths under tmp_path."""

    def _make(overrides: dict[str, Any] | None = None) -> Params:
        return parse_params(make_params_dict(tmp_path, overrides), "tiny")

    return _make


@pytest.fixture
def tiny_params(make_params) -> Params:
    return make_params()


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from 2 threads, and OpenMP spin-waits badly on a shared CPU. A
    module of tiny-model tests takes it with pytestmark = pytest.mark.usefixtures("one_thread")."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


E2E = Path(__file__).parent / "e2e"
# Test files by measured wall time, longest first (benchmarks/results/ci-time_*.md); any other
# file keeps its collection order after these.
LONGEST_FIRST = ("test_prefect_deployment.py", "test_dvc_pipeline.py", "test_dvc_import.py",
                 "test_chaos.py", "test_prefect_remote_worker.py",
                 "test_dvc_data.py", "test_custom_task.py", "test_cpu_isa.py",
                 "test_tracking_server.py")


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest tests first (so neither xdist worker is left with one at the end); every
    end-to-end test is `slow` (the fast lane, `-m "not slow"`, leaves them out); gpu tests skip
    without a CUDA device."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: ties keep order
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.slow)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu"):  # not `"gpu" in item.keywords`: folder names count
            item.add_marker(skip)
