"""The package's one way to ask git (gpt1.repo.git): the answer, a failure as one clear error,
and no git at all."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpt1.errors import Gpt1Error
from gpt1.repo import NO_GIT, git


def test_git_answers_fails_in_one_line_and_survives_no_git(tmp_path: Path, monkeypatch) -> None:
    subprocess.run(["git", "init", "-q", "-b", "trunk"], cwd=tmp_path, check=True)
    assert git("symbolic-ref", "--short", "HEAD", cwd=tmp_path) == (0, "trunk")
    assert git("rev-parse", "--verify", "-q", "HEAD", cwd=tmp_path) == (1, "")  # no commit yet
    with pytest.raises(Gpt1Error, match=r"`git rev-parse --verify HEAD` failed: \['fatal: "
                       ) as err:
        git("rev-parse", "--verify", "HEAD", cwd=tmp_path, check=True)
    assert str(tmp_path) in str(err.value)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert git("status", cwd=tmp_path) == (NO_GIT, "")
    with pytest.raises(Gpt1Error, match="`git status` failed"):
        git("status", cwd=tmp_path, check=True)
