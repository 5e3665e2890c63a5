"""Atomic writes: every artifact is written to a temp path beside it, then renamed.

A write that fails leaves nothing behind: its temp path and any directory it had to create
are removed, and a full disk is one Gpt1Error naming the destination. Temp paths carry the
writer's pid, so one killed before it could clean up is removed by the next write of the same
destination (and only once its writer is gone).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpt1.errors import Gpt1Error

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temps(dest: str | Path) -> list[Path]:
    """Remove temp paths of `dest` left by writers that were killed; return what was removed."""
    dest = Path(dest)
    pattern = re.compile(rf"^\.{re.escape(dest.name)}\.(\d+)\.[^.]+\.tmp$")
    removed = []
    if dest.parent.is_dir():
        for entry in dest.parent.iterdir():
            match = pattern.match(entry.name)
            if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def _make_parents(path: Path) -> list[Path]:
    """mkdir -p path; return the directories created, deepest first."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    return missing


@contextlib.contextmanager
def atomic_path(dest: str | Path) -> Iterator[Path]:
    """Yield a temp path in dest's directory; rename it onto dest only if the block succeeds.

    Works for files and directories (a directory dest is replaced as a whole).
    """
    dest = Path(dest)
    created = _make_parents(dest.parent)
    remove_stale_temps(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.{os.getpid()}.", suffix=".tmp",
                                dir=dest.parent))
    target = tmp / dest.name
    done = False
    try:
        yield target
        if target.is_dir() and dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
            os.replace(target, dest)
            shutil.rmtree(old, ignore_errors=True)
        elif target.exists():
            if target.is_file():
                with open(target, "rb") as fh:
                    os.fsync(fh.fileno())
            os.replace(target, dest)
        done = True
    except OSError as err:
        if err.errno in _DISK_FULL:
            raise Gpt1Error(f"no space left on the device while writing it ({err.strerror}); "
                            "temp files removed, free some space and re-run", dest) from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not done:
            for path in created:  # deepest first; a directory someone filled meanwhile stays
                with contextlib.suppress(OSError):
                    path.rmdir()


def write_bytes(dest: str | Path, data: bytes) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def write_text(dest: str | Path, text: str) -> None:
    write_bytes(dest, text.encode("utf-8"))


def write_json(dest: str | Path, obj: Any) -> None:
    """Pretty, key-sorted JSON (stable bytes for DVC)."""
    write_text(dest, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
