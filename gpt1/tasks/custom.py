"""A task of the user's own (params tasks.custom): its file read into canonical rows.

The file is CSV, TSV (a header row) or JSONL (one object per line), by its extension. Each row
gives text_a (the `text` column), text_b (a pair task's second text), the label (a value of
the task's `labels`, compared as text) and, when the task names a `split` column, its split
(train, dev or test); the splits are otherwise carved by gpt1.tasks.load. A missing column, an
unknown label or split, or an empty file is one error naming the file (and line).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from gpt1.errors import Gpt1Error
from gpt1.tasks.mirror_formats import Row, row
from gpt1.tasks.registry import SPLITS, TaskSpec

FORMATS = (".csv", ".tsv", ".jsonl")


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of every example in the file."""
    if path.suffix not in FORMATS:
        raise Gpt1Error(f"tasks.custom: a task file is {', '.join(FORMATS)}; got "
                        f"{path.suffix or 'no extension'}", path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Gpt1Error("tasks.custom: no such file", path) from None
    except UnicodeDecodeError as err:
        raise Gpt1Error(f"not UTF-8 ({err.reason} at byte {err.start})", path) from None
    if path.suffix == ".jsonl":
        out = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise Gpt1Error(f"line {i}: not JSON ({err.msg})", path) from None
            if not isinstance(record, dict):
                raise Gpt1Error(f"line {i}: expected a JSON object", path)
            out.append((i, record))
        return out
    reader = csv.DictReader(text.splitlines(), delimiter="\t" if path.suffix == ".tsv" else ",")
    return [(reader.line_num, dict(r)) for r in reader]


def read_custom(spec: TaskSpec) -> tuple[list[Row], list[str | None]]:
    """The task file's rows (canonical, label as an index into spec.labels) and each row's
    split (None when the task carves its splits)."""
    src = spec.custom
    assert src is not None
    path = Path(src.file)
    records = _records(path)
    if not records:
        raise Gpt1Error("no examples", path)
    wanted = [c for c in (src.text_a, src.text_b, src.label, src.split) if c]
    missing = [c for c in wanted if c not in records[0][1]]
    if missing:
        raise Gpt1Error(f"no column {missing[0]!r} (tasks.custom.{spec.name}); the file has "
                        f"{sorted(records[0][1])}", path)
    index = {name: i for i, name in enumerate(spec.labels)}
    rows, splits = [], []
    for line, record in records:
        raw = str(record[src.label]).strip()
        if raw not in index:
            raise Gpt1Error(f"line {line}: label {raw!r} is not one of tasks.custom."
                            f"{spec.name}.labels {list(spec.labels)}", path)
        split = str(record[src.split]).strip() if src.split else None
        if split is not None and split not in SPLITS:
            raise Gpt1Error(f"line {line}: split {split!r} (column {src.split!r}) is not one "
                            f"of {list(SPLITS)}", path)
        rows.append(row(f"{spec.name}-{line}", str(record[src.text_a] or ""),
                        str(record[src.text_b] or "") if src.text_b else "", index[raw],
                        f"{path.name}:{line}"))
        splits.append(split)
    return rows, splits
