"""Where a Prefect run of a preset works: never in the workspace's params.yaml.

`params.yaml` itself runs in the workspace, as `dvc repro` would. Any other preset (e.g.
configs/paper.yaml) runs in its own working copy, `.gpt1-runs/<preset name>/`: the workspace's
source files (tracked or untracked, minus git-ignored files, dvc.lock and DVC outputs) with the
preset as its params.yaml. The copy is a DVC repo of its own, so its dvc.lock is the run of
record of that preset; it shares the workspace's DVC cache and remotes (identical outputs are
stored once) and persists between runs, so a re-run skips finished stages and pre-training
resumes from its checkpoint. A file edited inside the copy since the last sync is never
overwritten: the sync refuses, naming it. No Prefect here, so it is cheap to test.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
from pathlib import Path

import yaml

from gpt1 import atomic
from gpt1.config import Params, load_params
from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)

RUNS_DIR = ".gpt1-runs"  # git-ignored; each DVC working copy is also a repo of its own
MANIFEST = ".gpt1-copy.json"  # relative path -> sha256 of what the last sync wrote
DVC_MANAGED = ".gitignore"  # DVC appends its outputs to these: not user edits


def workspace_for(root: Path, params_path: str) -> tuple[Path, Params]:
    """The directory a run of `params_path` works in, and its validated params.

    The preset is validated before anything is written, so a bad preset changes nothing.
    """
    src = (root / params_path).resolve()
    params = load_params(src)
    if src == (root / "params.yaml").resolve():
        return root, params
    copy = root / RUNS_DIR / src.stem
    sync(root, copy, src)
    return copy, load_params(copy / "params.yaml")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_files(root: Path) -> list[str]:
    """The workspace's files a working copy gets: git's tracked and untracked-not-ignored files,
    minus params.yaml, dvc.lock and anything under a DVC output."""
    from dvc.repo import Repo

    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                            capture_output=True, check=False)
    if listed.returncode:
        raise Gpt1Error("not a git repository (a preset's working copy is built from git's "
                        "file list)", root)
    with Repo(str(root)) as repo:
        outs = {os.path.relpath(o.fs_path, repo.root_dir) for o in repo.index.outs}
    skip = ("params.yaml", "dvc.lock", f"{RUNS_DIR}/")
    return sorted(
        rel for rel in filter(None, listed.stdout.decode().split("\0"))
        if not rel.startswith(skip) and not any(rel == o or rel.startswith(f"{o}/") for o in outs)
        and (root / rel).is_file()
    )


def preset_text(root: Path, preset: Path) -> str:
    """The preset with each `paths:` entry that leaves the workspace (the mirror) made absolute,
    since the copy sits two levels deeper; every other value as written."""
    raw = yaml.safe_load(preset.read_text(encoding="utf-8"))
    for key, value in raw["paths"].items():
        if isinstance(value, str) and not os.path.isabs(value):
            where = (root / value).resolve()
            if not where.is_relative_to(root.resolve()):
                raw["paths"][key] = str(where)
    hf = raw["pretrain"].get("import_hf")  # a downloaded checkpoint (git-ignored): read in place
    if isinstance(hf, str) and not os.path.isabs(hf) and (root / hf).is_dir():
        raw["pretrain"]["import_hf"] = str((root / hf).resolve())
    head = f"# {preset.relative_to(root)} as run by the Prefect flow (pipelines/workcopy.py)\n"
    return head + yaml.safe_dump(raw, sort_keys=False)


def sync(root: Path, copy: Path, preset: Path) -> None:
    """Bring `copy` up to date with the workspace's sources and `preset` as its params.yaml."""
    manifest_path = copy / MANIFEST
    old: dict[str, str] = (json.loads(manifest_path.read_text(encoding="utf-8"))
                           if manifest_path.exists() else {})
    for rel, digest in old.items():
        path = copy / rel
        if path.name != DVC_MANAGED and path.exists() and _sha256(path) != digest:
            raise Gpt1Error(f"edited inside the working copy of {preset.name} since its last "
                            f"run; move the edit to the workspace or delete {copy}", path)
    wanted = {rel: (root / rel).read_bytes() for rel in source_files(root)}
    wanted["params.yaml"] = preset_text(root, preset).encode()
    for rel, data in wanted.items():
        dst = copy / rel
        if not dst.exists() or dst.read_bytes() != data:
            dst.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(dst, data)
    for rel in set(old) - set(wanted):
        (copy / rel).unlink(missing_ok=True)
    _link_dvc(root, copy)
    atomic.write_json(manifest_path, {rel: hashlib.sha256(d).hexdigest()
                                      for rel, d in sorted(wanted.items())})
    log.info("working copy %s <- %s", copy, preset.relative_to(root))


def _link_dvc(root: Path, copy: Path) -> None:
    """The copy's own git repo (DVC needs one) and a .dvc/config.local pointing at the
    workspace's cache and at its local remotes by absolute path."""
    from dvc.repo import Repo

    if not (copy / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    with Repo(str(root)) as repo:
        lines = ["[cache]", f"    dir = {repo.cache.local_cache_dir}"]
        for name, remote in repo.config["remote"].items():
            if "://" not in remote["url"]:  # a directory: the copy sits deeper, so absolute
                lines += [f"['remote \"{name}\"']", f"    url = {remote['url']}"]
    atomic.write_text(copy / ".dvc" / "config.local", "\n".join(lines) + "\n")
