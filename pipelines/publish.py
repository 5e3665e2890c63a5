"""A flow run on another machine hands its results back: the stages' outputs went to the DVC
remote as each stage finished (`dvc push`); what git tracks of the run (dvc.lock, the metrics
and reports DVC does not cache) is committed in the worker's checkout and pushed to the
repository it was cloned from, as branch `gpt1-runs/<flow run>`. The first checkout then takes
the run with `git merge gpt1-runs/<flow run>` and `dvc pull --allow-missing`."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpt1.errors import Gpt1Error

BRANCH_PREFIX = "gpt1-runs/"
# A worker needs no git identity of its own: the commit names the pipeline.
_IDENTITY = ["-c", "user.name=gpt1 worker", "-c", "user.email=gpt1-worker@localhost"]


def _git(args: list[str], root: Path) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
        raise Gpt1Error(f"`git {' '.join(args)}` failed: {tail}", root)
    return done.stdout.strip()


def publish_run(root: Path, run_name: str) -> str:
    """Commit the run's git-tracked results in `root` (a checkout cloned by the deployment's
    pull step) and push them to its origin as gpt1-runs/<run_name>; returns the branch."""
    branch = BRANCH_PREFIX + run_name
    _git(["add", "-A"], root)  # dvc.lock, metrics, reports; DVC's .gitignore keeps the data out
    if _git(["status", "--porcelain"], root):
        _git([*_IDENTITY, "commit", "-q", "-m", f"gpt1 pipeline run {run_name}"], root)
    _git(["push", "-q", "origin", f"HEAD:refs/heads/{branch}"], root)
    return branch
