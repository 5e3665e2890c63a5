"""gpt1/demo-remote from a clone on another machine uses the deployer's DVC remote: `gpt1
serve` resolves orchestrate.dvc_remote's URL in its checkout (a relative default made absolute)
and the flow points the clone's remote at it; without that URL the flow refuses in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpt1.errors import Gpt1Error
from gpt1.serve import remote_url
from pipelines.publish import share_remote

DVC = str(Path(sys.executable).with_name("dvc"))


def _checkout(root: Path) -> Path:
    """A DVC repo whose remote `local` is the repository's relative default."""
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=root, check=True)
    subprocess.run([DVC, "remote", "add", "local", "../gpt1-dvc-remote"], cwd=root,
                   check=True)  # the cwd's parent: .dvc/config says ../../gpt1-dvc-remote
    return root


@pytest.mark.slow
def test_a_clone_uses_the_deployers_remote_not_its_relative_default(
        tmp_path: Path, tiny_params) -> None:
    first = _checkout(tmp_path / "here" / "repo")
    url = remote_url(first, "local")
    assert url == str(tmp_path / "here" / "gpt1-dvc-remote")  # absolute, as DVC reads it
    assert remote_url(first, "s3") == "" and remote_url(first, None) == ""  # the run refuses
    clone = tmp_path / "other-machine" / "run-1" / "gpt1"
    shutil.copytree(first, clone)
    assert remote_url(clone, "local") != url  # the default: an empty remote beside the clone
    params = tiny_params.model_copy(update={"orchestrate": tiny_params.orchestrate.model_copy(
        update={"dvc_remote": "local"})})
    share_remote(clone, params, url)
    assert remote_url(clone, "local") == url
    assert (clone / ".dvc" / "config.local").is_file()  # git-ignored: not published back
    for missing in (None, "", "{{ $GPT1_DVC_REMOTE }}"):
        with pytest.raises(Gpt1Error, match=r"^prefect.yaml: orchestrate.dvc_remote: a "
                                            r"worker's clone needs the URL of remote 'local'"):
            share_remote(clone, params, missing)
