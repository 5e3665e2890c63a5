"""Where the repository is (the root every relative project path is taken from), and the one
way the package asks git about it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpt1.errors import Gpt1Error

NO_GIT = 127
"""The exit status `git` reports when there is no git to run, or it gave no answer in time."""


def repo_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default cwd) holding dvc.yaml or .dvc/."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "dvc.yaml").exists() or (d / ".dvc").is_dir():
            return d
    return here


def git(*args: str, cwd: Path | None = None, check: bool = False,
        timeout: float | None = None) -> tuple[int, str]:
    """Run `git <args>` in `cwd` (default: the repository root): (exit status, stdout without
    surrounding whitespace). No git binary, or no answer within `timeout` seconds, is status
    NO_GIT with no output. `check`: a failure is a Gpt1Error naming the command and its last
    line of output, at `cwd`."""
    where = cwd or repo_root()
    try:
        done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.SubprocessError) as err:
        if check:
            raise Gpt1Error(f"`git {' '.join(args)}` failed: {err}", where) from None
        return NO_GIT, ""
    if check and done.returncode:
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
        raise Gpt1Error(f"`git {' '.join(args)}` failed: {tail}", where)
    return done.returncode, done.stdout.strip()
