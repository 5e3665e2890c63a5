"""Atomic writes: every artifact is written to a temp path beside it, then renamed.

`user_folder` is the variant for a folder the user names (`gpt1 export-hf OUT`): it never
replaces a file or a non-empty folder it did not write; with `overwrite`, it replaces only its
own files there, each one atomically.

A write that fails leaves nothing behind: its temp path and any directory it had to create
are removed, and a full disk is one DiskFullError naming the destination, the free space there
and the space the write needs. Temp paths carry the
writer's pid, so one killed before it could clean up is removed by the next write of the same
destination (and only once its writer is gone).

What gpt1 writes outside the workspace (run locks, error logs, built kernels) goes to the user
cache, <$XDG_CACHE_HOME or ~/.cache>/gpt1 (`user_cache`), else the system temp folder
(`cache_dirs`): the one rule of where that is.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from gpt1.errors import Gpt1Error


def user_cache() -> Path:
    """<$XDG_CACHE_HOME or ~/.cache>/gpt1."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpt1"


def cache_dirs(kind: str) -> tuple[Path, Path]:
    """The folders of one kind of file (`locks`, `errors`), in the order to try them: the
    user cache's, then the system temp folder's gpt1-<kind> (when the cache is not writable)."""
    return user_cache() / kind, Path(tempfile.gettempdir()) / f"gpt1-{kind}"


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "os error 28")
"""How libraries that do not raise OSError (tokenizers, Rust) word a full disk."""


def size_text(n: int) -> str:
    """Bytes in words: 812 B, 3.4 MiB."""
    value, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"


def free_bytes(path: str | Path) -> int:
    """Free bytes (for this user) on the filesystem that holds `path` or its nearest
    existing parent."""
    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    return shutil.disk_usage(here).free


def is_disk_full(err: BaseException) -> bool:
    """Whether `err` says the disk (or the user's quota) is full."""
    if isinstance(err, OSError) and err.errno in _DISK_FULL:
        return True
    return any(text in str(err) for text in _DISK_FULL_TEXT)


class DiskFullError(Gpt1Error):
    """A write that ran out of space: one line naming the destination, the free space there
    and the space the write needs (at least what it had written when the disk filled)."""

    def __init__(self, dest: str | Path, needed: int) -> None:
        self.needed = needed
        free = free_bytes(dest)
        need = f"at least {size_text(needed)}" if needed else "more than that"
        super().__init__(f"no space left on the device: {size_text(free)} free there, writing "
                         f"it needs {need}; temp files removed, free at least "
                         f"{size_text(needed) if needed else 'some space'} and re-run", dest)


def _tree_size(path: Path) -> int:
    """Bytes of the file, or of every file under the folder, at `path` (0 if absent)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


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
def atomic_path(dest: str | Path, size: int | None = None) -> Iterator[Path]:
    """Yield a temp path in dest's directory; rename it onto dest only if the block succeeds.

    Works for files and directories (a directory dest is replaced as a whole). A full disk is
    a DiskFullError naming dest and the space needed: `size` (the bytes to write, when known),
    else what the temp path held when the disk filled (plus the need of a nested write).
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
            os.replace(dest, tmp / ".old")  # inside tmp: removed with it, even after a kill
            os.replace(target, dest)
        elif target.exists():
            if target.is_file():
                with open(target, "rb") as fh:
                    os.fsync(fh.fileno())
            os.replace(target, dest)
        done = True
    except DiskFullError as err:  # a write nested in this one: name this destination
        raise DiskFullError(dest, err.needed + _tree_size(tmp)) from None
    except Exception as err:
        if is_disk_full(err):
            raise DiskFullError(dest, max(size or 0, _tree_size(tmp))) from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not done:
            for path in created:  # deepest first; a directory someone filled meanwhile stays
                with contextlib.suppress(OSError):
                    path.rmdir()


def check_user_folder(dest: str | Path, overwrite: bool, owned: Collection[str],
                      flag: str | None = "--overwrite") -> None:
    """Gpt1Error unless `dest` may receive the files named in `owned`: it is absent, an empty
    folder, or (with `overwrite`) a folder where none of those names is a sub-folder. `flag`:
    the command's option that allows a non-empty folder (None: it has none)."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise Gpt1Error("exists and is not a folder; name a new or empty folder", dest)
    if not dest.is_dir() or not any(dest.iterdir()):
        return
    if not overwrite:
        raise Gpt1Error("folder is not empty; name a new or empty folder" + (
            f", or pass {flag} to replace only this command's own files in it" if flag else
            " (this command never writes into a folder holding files)"), dest)
    clashes = sorted(n for n in owned if (dest / n).exists() and not (dest / n).is_file())
    if clashes:
        raise Gpt1Error(f"{clashes} in it are not files; move them away first", dest)


@contextlib.contextmanager
def user_folder(dest: str | Path, overwrite: bool, owned: Collection[str],
                flag: str | None = "--overwrite") -> Iterator[Path]:
    """Yield a temp folder to fill with files named in `owned`; on success it becomes `dest`.

    `dest` absent or empty: renamed onto it as a whole (atomic_path). `dest` holding other
    files (only with `overwrite`): each written file replaces its namesake atomically, and a
    name of `owned` not written this time is removed (a stale file of an earlier run); any
    other entry in `dest` stays as it was.
    """
    dest = Path(dest)
    check_user_folder(dest, overwrite, owned, flag)
    if not dest.is_dir() or not any(dest.iterdir()):
        with atomic_path(dest) as tmp:
            tmp.mkdir()
            yield tmp
        return
    with _named_full(dest), atomic_path(dest.with_name(dest.name + ".export")) as tmp:
        tmp.mkdir()
        yield tmp
        written = {p.name for p in tmp.iterdir()}
        if written - set(owned):
            raise ValueError(f"wrote files outside `owned`: {sorted(written - set(owned))}")
        for name in sorted(written):
            os.replace(tmp / name, dest / name)
        for name in sorted(set(owned) - written):
            with contextlib.suppress(FileNotFoundError):
                (dest / name).unlink()
        tmp.rmdir()  # nothing left for atomic_path to rename


@contextlib.contextmanager
def _named_full(dest: Path) -> Iterator[None]:
    """A full disk while filling a staging folder names the folder the user gave."""
    try:
        yield
    except DiskFullError as err:
        raise DiskFullError(dest, err.needed) from None


def write_bytes(dest: str | Path, data: bytes) -> None:
    with atomic_path(dest, len(data)) as tmp:
        tmp.write_bytes(data)


def write_text(dest: str | Path, text: str) -> None:
    write_bytes(dest, text.encode("utf-8"))


def write_json(dest: str | Path, obj: Any) -> None:
    """Pretty, key-sorted JSON (stable bytes for DVC)."""
    write_text(dest, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
