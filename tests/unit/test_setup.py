"""setup.sh picks the torch build: on a GPU host (or TORCH_BUILD=cuda, as in a `docker build`)
an installed CPU build is removed first, since pip counts 2.13.0+cpu as torch==2.13.0."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.repo import REPO


def _run_setup(tmp_path: Path, installed_cpu_build: bool, env: dict[str, str]) -> list[str]:
    """setup.sh against a fake .venv whose pip logs its arguments; returns the pip calls."""
    shutil.copy(REPO / "setup.sh", tmp_path / "setup.sh")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "pip.log"
    (bin_dir / "pip").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    cpu = 0 if installed_cpu_build else 1  # the build check exits 0 for a CPU build
    (bin_dir / "python").write_text(
        f'#!/bin/sh\ncase "$*" in *"torch.version.cuda is not None"*) exit {cpu};; esac\n'
        "exit 0\n")
    for exe in ("pip", "python"):
        (bin_dir / exe).chmod(0o755)
    subprocess.run(["bash", str(tmp_path / "setup.sh")], cwd=tmp_path, check=True,
                   env={**os.environ, **env}, capture_output=True, timeout=60)
    return log.read_text().splitlines()


@pytest.mark.parametrize("installed_cpu_build", [True, False])
def test_the_cuda_build_replaces_an_installed_cpu_build(tmp_path, installed_cpu_build):
    calls = _run_setup(tmp_path, installed_cpu_build, {"TORCH_BUILD": "cuda", "TORCH_INDEX": ""})
    uninstall = ["uninstall -y -q torch"] if installed_cpu_build else []
    assert calls[: len(uninstall) + 1] == [
        *uninstall, "install --disable-pip-version-check -q torch==2.13.0"]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU host (nvidia-smi)")
def test_without_a_gpu_the_cpu_build_stays(tmp_path):
    calls = _run_setup(tmp_path, True, {"TORCH_BUILD": "", "TORCH_INDEX": ""})
    assert not any(c.startswith("uninstall") for c in calls)
    assert "download.pytorch.org/whl/cpu" in calls[0]
