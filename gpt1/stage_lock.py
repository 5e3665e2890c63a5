"""One run of a stage at a time per workspace: a second `gpt1 <stage>` writing the same outputs
(a second `dvc repro` of it, a hand-run stage beside a Prefect flow) stops in one line.

Each run holds an exclusive flock for as long as it runs on a lock file named by the stage run
(`gpt1 finetune --task rte --pretrain-seed 1234`) and a digest of params' paths taken
absolute, so runs writing the same outputs share it; it lives in <cache>/gpt1/locks/
($XDG_CACHE_HOME or ~/.cache), never in the workspace, so a refused run writes nothing there.
The kernel releases the lock when the process ends, however it ends (a kill -9 leaves no stale
lock). The file names its holder (pid, start time) for the refusal line. DVC's own rwlock
(.dvc/tmp/rwlock) already stops a second `dvc repro` before it starts the stage; this lock
covers every way of starting one, DVC or not.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

from gpt1.atomic import cache_dirs
from gpt1.config import Params
from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)


def lock_dirs() -> tuple[Path, Path]:
    """<cache>/gpt1/locks, else the system temp folder's gpt1-locks (gpt1.atomic)."""
    return cache_dirs("locks")


def lock_name(run: str, params: Params) -> str:
    """The lock file's name of one stage run that writes under params' paths."""
    where = json.dumps({k: None if v is None else str(Path(v).absolute())
                        for k, v in params.paths.model_dump().items()}, sort_keys=True)
    digest = hashlib.sha256(where.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^A-Za-z0-9_.=-]+', '_', run)}.{digest}.lock"


def _open(name: str) -> tuple[int, Path] | None:
    for folder in lock_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o644), folder / name
        except OSError:
            continue
    return None


@contextlib.contextmanager
def held(run: str, params: Params) -> Iterator[Path | None]:
    """Hold the lock of `run` for the block (yields its file; None, with a warning, where no
    lock folder is writable); Gpt1Error naming the lock and its holder when another process
    holds it (nothing else is touched then)."""
    opened = _open(lock_name(run, params))
    if opened is None:
        log.warning("no writable folder for the lock of %s (%s): running without it", run,
                    ", ".join(map(str, lock_dirs())))
        yield None
        return
    fd, path = opened
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 400, 0).decode("utf-8", "replace").strip() or "another process"
            raise Gpt1Error(f"{run} is already running in this workspace ({holder}); wait for "
                            "it to finish, or stop it, then re-run", path) from None
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, started {stamp}, in {Path.cwd()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock
