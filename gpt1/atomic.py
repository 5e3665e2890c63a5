"""Atomic writes: every artifact is written to a temp path beside it, then renamed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(dest: str | Path) -> Iterator[Path]:
    """Yield a temp path in dest's directory; rename it onto dest only if the block succeeds.

    Works for files and directories (a directory dest is replaced as a whole).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    target = tmp / dest.name
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
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_bytes(dest: str | Path, data: bytes) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def write_text(dest: str | Path, text: str) -> None:
    write_bytes(dest, text.encode("utf-8"))


def write_json(dest: str | Path, obj: Any) -> None:
    """Pretty, key-sorted JSON (stable bytes for DVC)."""
    write_text(dest, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
