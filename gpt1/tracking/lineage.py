"""Where a run comes from: its DVC stage and params sections, the git commit, and the parent
run shared by the stages of one `dvc repro` invocation (found by walking /proc up to the
`dvc` process and kept in a lock-guarded file keyed by that invocation)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpt1.repo import git, repo_root

PARENT_ENV = "GPT1_PARENT_RUN_ID"
"""Environment variable carrying the parent (pipeline) run id to stage subprocesses."""
STAGE_RUN_ENV = "GPT1_RUN_ID"
"""Environment variable carrying the stage's own run, opened by the flow: the stage's outermost
`start_run` logs into it instead of creating one."""


def stage_sections(stage: str | None) -> list[str] | None:
    """The params sections of the keys dvc.yaml declares for `stage` (an address such as
    finetune@cola; `pretrain.lr_max` -> `pretrain`), in their order, None when there is no
    such stage (the run then logs every section)."""
    dvc_yaml = repo_root() / "dvc.yaml"
    if stage is None or not dvc_yaml.is_file():
        return None
    stages = (yaml.safe_load(dvc_yaml.read_text(encoding="utf-8")) or {}).get("stages", {})
    entry = stages.get(stage.split("@")[0])
    if not isinstance(entry, dict):
        return None
    entry = entry.get("do", entry)  # foreach stages nest their body under `do`
    keys = [p for p in entry.get("params", []) if isinstance(p, str)]
    return list(dict.fromkeys(key.split(".")[0] for key in keys))


def git_commit() -> str | None:
    """HEAD of the repo the run comes from (None outside git)."""
    code, out = git("rev-parse", "HEAD")
    return out if code == 0 else None


def context_tags() -> dict[str, str]:
    """MLflow's own run context of this process (its context providers: mlflow.user,
    mlflow.source.name / type, and the git commit and branch of the entry point's repository).
    The commit is looked up here only when MLflow's git provider found none (an entry point
    outside the repository, e.g. a Prefect worker's), so every run names the commit of the
    code it ran."""
    from mlflow.tracking.context.registry import resolve_tags
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

    tags = dict(resolve_tags())
    commit = tags.get(MLFLOW_GIT_COMMIT) or git_commit()
    if commit:
        tags[MLFLOW_GIT_COMMIT] = commit
    return tags


def source_tags(digest: str, stage: str | None, sections: Mapping[str, Any]) -> dict[str, str]:
    """The run's context (context_tags), the config hash, the DVC stage address and a hash of
    its params."""
    tags = {**context_tags(), "gpt1.config_hash": digest}
    if stage:
        blob = json.dumps({"stage": stage, "params": sections}, sort_keys=True).encode()
        tags.update({"dvc.stage": stage, "dvc.stage_hash": hashlib.sha256(blob).hexdigest()[:12]})
    return tags


def _proc_stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time in clock ticks) of a process, from /proc (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), fields[19]


def _dvc_ancestor() -> tuple[int, str, list[str]] | None:
    """(pid, start time, argv) of the nearest ancestor process whose command line runs dvc."""
    pid = os.getppid()
    while pid > 1:
        stat = _proc_stat(pid)
        if stat is None:
            return None
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if any(Path(a.decode(errors="replace")).name == "dvc" for a in argv[:2]):
            words = [a.decode(errors="replace") for a in argv if a]
            return pid, stat[1], words
        pid = stat[0]
    return None


def repro_invocation() -> str | None:
    """`<pid>-<start time>` of the `dvc` process that runs this stage (the nearest ancestor
    whose command line runs dvc): the same for every stage of one `dvc repro` / `dvc exp run`,
    and never reused. None when there is no such ancestor or no /proc."""
    found = _dvc_ancestor()
    return None if found is None else f"{found[0]}-{found[1]}"


def repro_command() -> str:
    """The command line of the `dvc` invocation running this stage, as typed (`dvc repro
    finetune@sst2`, `dvc exp run -n study`): the name of its parent run."""
    found = _dvc_ancestor()
    if found is None:
        return "dvc repro"
    argv = found[2]
    start = next(i for i, a in enumerate(argv) if Path(a).name == "dvc")
    return " ".join(["dvc", *argv[start + 1:]])[:250]


def repro_parent_id(uri: str, key: str, create: Callable[[], str],
                    resume: Callable[[str], None]) -> str:
    """The parent run of `dvc repro` invocation `key` in the store at `uri`: the first stage
    calls `create`, the others `resume` the id it recorded. The record is read and written
    under an exclusive lock, so stages running at once (`dvc exp run --jobs`, parallel
    `dvc repro --single-item`) find the same parent."""
    folder = Path(tempfile.gettempdir()) / f"gpt1-repro-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    record = folder / (hashlib.sha256(f"{uri}|{key}".encode()).hexdigest()[:16] + ".json")
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.is_file():
            parent = str(json.loads(record.read_text())["run_id"])
            resume(parent)
            return parent
        parent = create()
        record.write_text(json.dumps({"run_id": parent, "tracking_uri": uri}))
        return parent
