"""A flow run on another machine hands its results back: the stages' outputs went to the DVC
remote as each stage finished (`dvc push`); what git tracks of the run (dvc.lock, the metrics
and reports DVC does not cache) is committed in the worker's checkout and pushed to the
repository it was cloned from, as branch `gpt1-runs/<flow run>`. The first checkout then takes
the run with `git merge gpt1-runs/<flow run>` and `dvc pull --allow-missing`.

The remote a clone uses is the deployer's (`share_remote`): the URL its checkout resolves for
orchestrate.dvc_remote, passed at deploy time, never the clone's own reading of a relative
default (which would be an empty remote beside the clone on the other machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.repo import git
from gpt1.serve import REMOTE_ENV

BRANCH_PREFIX = "gpt1-runs/"
# A worker needs no git identity of its own: the commit names the pipeline.
_IDENTITY = ["-c", "user.name=gpt1 worker", "-c", "user.email=gpt1-worker@localhost"]


def publish_run(root: Path, run_name: str) -> str:
    """Commit the run's git-tracked results in `root` (a checkout cloned by the deployment's
    pull step) and push them to its origin as gpt1-runs/<run_name>; returns the branch."""
    branch = BRANCH_PREFIX + run_name
    git("add", "-A", cwd=root, check=True)  # dvc.lock, metrics, reports (DVC's .gitignore: no data)
    if git("status", "--porcelain", cwd=root, check=True)[1]:
        git(*_IDENTITY, "commit", "-q", "-m", f"gpt1 pipeline run {run_name}", cwd=root,
            check=True)
    git("push", "-q", "origin", f"HEAD:refs/heads/{branch}", cwd=root, check=True)
    return branch


def share_remote(root: Path, params: Params, url: str | None) -> None:
    """Point the clone's remote orchestrate.dvc_remote at `url` (the deployer's), in the
    clone's git-ignored .dvc/config.local; without a usable `url`, refuse in one line."""
    name = params.orchestrate.dvc_remote
    if not name:
        return
    if not url or url.startswith("{{"):  # unset, or prefect.yaml's placeholder left as is
        raise Gpt1Error(f"orchestrate.dvc_remote: a worker's clone needs the URL of remote "
                        f"{name!r} as the deployer resolves it (a relative path would be an "
                        f"empty remote beside the clone): deploy with `gpt1 serve`, or set "
                        f"${REMOTE_ENV} for `prefect deploy`", "prefect.yaml")
    dvc = str(Path(sys.executable).with_name("dvc"))
    done = subprocess.run([dvc, "remote", "add", "--local", "--force", name, url], cwd=root,
                          capture_output=True, text=True)
    if done.returncode:
        raise Gpt1Error(f"cannot set DVC remote {name!r} to {url}: "
                        f"{(done.stdout + done.stderr).strip()}", root / ".dvc" / "config.local")
