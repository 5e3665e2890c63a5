"""The chaos drill's 3-kill version (benchmarks/chaos.py, the 20-kill run is its results file).

The drill's tiny preset (tests/conftest.py's TINY model, a generated mirror) runs `dvc repro
pretrain@1234` once uninterrupted, then in a fresh copy with three SIGKILLs of a random process
of the run's tree (DVC, a stage, a process a stage started) at seeded random moments, re-running
after each: every output file equals the uninterrupted run's, no re-run ran a stage dvc.lock
already recorded as finished, nothing hung, and the last re-run succeeded. Measured: 81 s wall,
76 s CPU with its subprocesses, on 2 cores at load 4 (272 s wall at load 12); it replaces no
other test.
"""

from __future__ import annotations

import random
from pathlib import Path

import chaos  # benchmarks/ is on the path: pyproject.toml, [tool.pytest.ini_options]
import pytest

pytestmark = pytest.mark.slow  # started early among the long ones: tests/conftest.py
TARGET = "pretrain@1234"  # the data stages and a checkpointing pre-training (persist: true)


def test_three_random_kills_of_dvc_repro_lose_and_redo_nothing(tmp_path: Path) -> None:
    env = chaos.env_for(tmp_path / "prefect-home")
    template = chaos.make_template(tmp_path / "template", env)
    reference, took = chaos.reference_run(template, tmp_path, env, TARGET)
    assert any(p.endswith("model.safetensors") for p in reference)
    drill = chaos.drill_dvc(template, tmp_path, env, 3, took, random.Random(0), reference,
                            TARGET)
    assert len(drill.kills) == 3
    assert not [k for k in drill.kills if "hung" in k], drill.kills
    assert not drill.failures, drill.failures
    assert not drill.recomputed, drill.recomputed
    assert not drill.differing, drill.differing
