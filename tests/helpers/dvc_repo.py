"""A copy of the repository's source files to run DVC in, its commands and its params."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers.params import deep_merge
from tests.helpers.repo import REPO


def copy_repo(dest: Path) -> None:
    """The repo's source files as git sees them (tracked or not ignored); no data, no .dvc."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file() and not name.startswith((".dvc/", "data/", "reports/", "dvc.lock")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def run(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def set_params(repo: Path, **sections: dict) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for section, values in sections.items():  # merged key by key, as the presets are
        merge = isinstance(values, dict)
        params[section] = deep_merge(params[section], values) if merge else values
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def stand_in_outputs(repo: Path) -> None:
    """A placeholder at every output and every missing dependency of the rendered stages (a
    folder where the name has no suffix): with `dvc commit`, a pipeline DVC judges up to date
    without running anything (what it compares is the files and params each stage declares)."""
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc:
        stages = list(dvc.index.stages)
    paths = [Path(o.fs_path) for s in stages for o in s.outs]
    paths += [Path(d.fs_path) for s in stages for d in s.deps if hasattr(d, "fs_path")
              and not Path(d.fs_path).exists() and not d.fs_path.endswith(".yaml")]
    for path in paths:
        if path.exists():
            continue
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}\n")
        else:
            path.mkdir(parents=True, exist_ok=True)
            (path / "placeholder").write_text("\n")
