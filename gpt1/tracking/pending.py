"""What a run could not log while its tracking store was away, kept for `gpt1 relog`.

One folder per run under <repo>/mlflow-pending/<run id>/: `run.json` (the store's URI and the
run id), `ops.jsonl` (one logging call per line, in order: metrics with their steps and
timestamps, artifacts, texts, a model, the run's end status) and `files/` (the logged files,
hard-linked where possible, so the record survives a later re-run that replaces the outputs).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpt1.errors import Gpt1Error
from gpt1.repo import repo_root

RELOG_COMMAND = "gpt1 relog"
_DAMAGED = ("nothing was re-logged: delete that line (its record is lost), then run "
            f"`{RELOG_COMMAND}` again")
_DAMAGED_RUN = ("nothing was re-logged: remove this run's folder (its records are lost), then "
                f"run `{RELOG_COMMAND}` again")


def pending_root() -> Path:
    """The folder holding every run's pending records (git-ignored)."""
    return repo_root() / "mlflow-pending"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@dataclass(frozen=True)
class Pending:
    """The pending records of one run."""

    folder: Path

    @classmethod
    def of(cls, uri: str, run_id: str) -> Pending:
        folder = pending_root() / run_id
        (folder / "files").mkdir(parents=True, exist_ok=True)
        meta = folder / "run.json"
        if not meta.is_file():
            meta.write_text(json.dumps({"tracking_uri": uri, "run_id": run_id,
                                        "created_ns": time.time_ns()}), encoding="utf-8")
        return cls(folder)

    def add(self, op: dict[str, Any]) -> None:
        """Append one logging call (a JSON object with an "op" key)."""
        with (self.folder / "ops.jsonl").open("a", encoding="utf-8") as out:
            out.write(json.dumps(op) + "\n")

    def keep(self, path: str | Path) -> str:
        """Keep a copy of a file or folder to log later; returns its place under files/."""
        source = Path(path)
        number = sum(1 for _ in (self.folder / "files").iterdir())
        target = self.folder / "files" / str(number) / source.name
        target.parent.mkdir()
        if source.is_dir():
            shutil.copytree(source, target, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(source), str(target))
        return str(target.relative_to(self.folder))

    def meta(self) -> dict[str, Any]:
        """run.json, checked: a JSON object naming the store's URI and the run."""
        path = self.folder / "run.json"
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise Gpt1Error(f"not valid JSON ({err}); {_DAMAGED_RUN}", path) from None
        if not isinstance(meta, dict) or not all(
                isinstance(meta.get(k), str) for k in ("tracking_uri", "run_id")):
            raise Gpt1Error(f"not a pending run record (tracking_uri and run_id, strings); "
                            f"{_DAMAGED_RUN}", path)
        return meta

    def set_meta(self, meta: dict[str, Any]) -> None:
        (self.folder / "run.json").write_text(json.dumps(meta), encoding="utf-8")

    def set_ops(self, ops: list[dict[str, Any]]) -> None:
        """Replace the records (with those not yet logged)."""
        text = "".join(json.dumps(op) + "\n" for op in ops)
        (self.folder / "ops.jsonl").write_text(text, encoding="utf-8")

    def ops(self) -> list[dict[str, Any]]:
        """The records, in order; Gpt1Error naming the file and line of one that is not a
        JSON object with an "op" (a line cut short when the stage was killed mid-write)."""
        path = self.folder / "ops.jsonl"
        if not path.is_file():
            return []
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise Gpt1Error(f"not UTF-8 text ({err.reason} at byte {err.start}); {_DAMAGED}",
                            path) from None
        ops = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                op = json.loads(line)
            except json.JSONDecodeError as err:
                raise Gpt1Error(f"line {n} is not valid JSON ({err.msg}; cut short by a kill "
                                f"mid-write?); {_DAMAGED}", path) from None
            if not isinstance(op, dict) or not isinstance(op.get("op"), str):
                raise Gpt1Error(f"line {n} is not a pending record (a JSON object with an "
                                f"\"op\"); {_DAMAGED}", path)
            ops.append(op)
        return ops


def all_pending() -> list[Pending]:
    """Every run with pending records, oldest first (an enclosing run before its children)."""
    root = pending_root()
    if not root.is_dir():
        return []
    runs = [Pending(d) for d in root.iterdir() if (d / "run.json").is_file()]
    created: dict[Path, int] = {}
    for p in runs:  # each run.json checked
        when = p.meta().get("created_ns")
        created[p.folder] = when if isinstance(when, int) else 0
    return sorted(runs, key=lambda p: created[p.folder])
