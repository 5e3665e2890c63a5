"""A preset runs in its own working copy: the workspace's params.yaml is never written."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from gpt1.config import ParamsError
from gpt1.errors import Gpt1Error
from pipelines.workcopy import RUNS_DIR, workspace_for
from tests.helpers.params import TINY, deep_merge
from tests.helpers.repo import REPO

DVC = str(Path(sys.executable).with_name("dvc"))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=root, check=True)
    subprocess.run([DVC, "remote", "add", "-d", "local", "../../remote"], cwd=root, check=True)
    (root / "params.yaml").write_bytes((REPO / "params.yaml").read_bytes())
    raw = deep_merge(yaml.safe_load((REPO / "params.yaml").read_text()), TINY)
    (root / "configs").mkdir()
    (root / "configs" / "tiny.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (root / "dvc.yaml").write_text(textwrap.dedent("""\
        stages:
          make:
            cmd: echo x > data/out.txt
            outs: [data/out.txt]
        """))
    (root / "data").mkdir()
    (root / "data" / "out.txt").write_text("workspace output\n")
    (root / "dvc.lock").write_text("schema: '2.0'\n")
    (root / "code.py").write_text("print('v1')\n")
    return root


def test_params_yaml_runs_in_the_workspace(workspace: Path) -> None:
    where, params = workspace_for(workspace, "params.yaml")
    assert where == workspace
    assert params.model.n_layer == yaml.safe_load((REPO / "params.yaml").read_text())[
        "model"]["n_layer"]
    assert not (workspace / RUNS_DIR).exists()


@pytest.mark.slow
def test_preset_runs_in_a_copy_and_leaves_params_yaml_alone(workspace: Path) -> None:
    before = (workspace / "params.yaml").read_bytes()
    where, params = workspace_for(workspace, "configs/tiny.yaml")
    assert where == workspace / RUNS_DIR / "tiny"
    assert (workspace / "params.yaml").read_bytes() == before
    assert params.model.n_layer == TINY["model"]["n_layer"]
    # the mirror lies outside the workspace: absolute in the copy, same directory
    mirror = (workspace / yaml.safe_load(before)["paths"]["mirror_dir"]).resolve()
    assert params.paths.mirror_dir == str(mirror)
    assert (where / "code.py").read_text() == "print('v1')\n"
    assert not (where / "dvc.lock").exists() and not (where / "data" / "out.txt").exists()
    local = (where / ".dvc" / "config.local").read_text()
    assert f"dir = {workspace / '.dvc' / 'cache'}" in local
    assert f"url = {(workspace / '../../remote').resolve()}" in local
    stages = subprocess.run([DVC, "stage", "list"], cwd=where, capture_output=True, text=True,
                            check=True).stdout
    assert stages.startswith("make"), "the copy is a DVC repo of its own"
    outer = subprocess.run([DVC, "stage", "list"], cwd=workspace, capture_output=True,
                           text=True, check=True).stdout
    assert len(outer.splitlines()) == 1, f"the workspace's DVC sees the copy's stages: {outer}"

    (workspace / "code.py").write_text("print('v2')\n")  # the next run picks up source edits
    (workspace / "code.py").rename(workspace / "code2.py")
    workspace_for(workspace, "configs/tiny.yaml")
    assert (where / "code2.py").read_text() == "print('v2')\n"
    assert not (where / "code.py").exists()


def test_an_edit_inside_the_copy_is_refused_not_lost(workspace: Path) -> None:
    where, _ = workspace_for(workspace, "configs/tiny.yaml")
    (where / "code.py").write_text("print('my edit')\n")
    with pytest.raises(Gpt1Error, match=r"code.py: edited inside the working copy of tiny.yaml"):
        workspace_for(workspace, "configs/tiny.yaml")
    assert (where / "code.py").read_text() == "print('my edit')\n"


def test_a_bad_preset_writes_nothing(workspace: Path) -> None:
    (workspace / "configs" / "bad.yaml").write_text("model: {n_layer: 0}\n")
    with pytest.raises(ParamsError):
        workspace_for(workspace, "configs/bad.yaml")
    assert not (workspace / RUNS_DIR).exists()
