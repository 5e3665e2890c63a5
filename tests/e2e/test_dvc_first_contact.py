"""First contact through DVC: a missing mirror, `mirror_dir: null` and a shell without the
venv each end in the project's one line, never DVC's bare `[Errno 2]` or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.dvc_repo import copy_repo as _copy_repo
from tests.helpers.dvc_repo import set_params as _set_params

pytestmark = pytest.mark.slow
DVC = str(Path(sys.executable).with_name("dvc"))


def dvc_repro(repo: Path, stage: str, path_dir: Path) -> subprocess.CompletedProcess[str]:
    """`dvc repro <stage>` with `path_dir` first on PATH (it decides which `python` runs)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the copy's gpt1 runs
    env.update(PATH=f"{path_dir}{os.pathsep}{os.environ['PATH']}", DVC_NO_ANALYTICS="1")
    return subprocess.run([DVC, "repro", stage], cwd=repo, env=env, capture_output=True,
                          text=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    _copy_repo(root)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=root, check=True)
    _set_params(root, tracking={"enabled": False})
    return root


def test_missing_mirror_and_null_mirror(repo: Path, tmp_path: Path) -> None:
    venv_bin = Path(sys.executable).parent
    _set_params(repo, paths={"mirror_dir": str(tmp_path / "no_mirror")})
    done = dvc_repro(repo, "download_corpus", venv_bin)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "no_mirror: paths.mirror_dir is not a directory" in out, out
    assert "Errno 2" not in out and "Traceback" not in out, out

    _set_params(repo, paths={"mirror_dir": None}, data={"source": "hub"})
    done = dvc_repro(repo, "scan_mirror", venv_bin)
    assert done.returncode == 0, done.stdout + done.stderr
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    assert lock["scan_mirror"]["params"]["params.yaml"]["paths.mirror_dir"] is None
    assert "None" not in (repo / "dvc.lock").read_text()


def test_a_shell_without_the_venv_gets_one_line(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"  # `python` without the project, as a shell without the venv has
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    done = dvc_repro(repo, "scan_mirror", bare / "bin")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "run `source .venv/bin/activate`" in out and "Traceback" not in out, out
