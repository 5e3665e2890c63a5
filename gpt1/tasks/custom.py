"""A task of the user's own (params tasks.custom): its file read into canonical rows.

The file is CSV, TSV (a header row) or JSONL (one object per line), by its extension, in UTF-8
with or without a byte-order mark, any line ending (Excel's "CSV UTF-8" writes both). Each row
gives text_a (the `text` column), text_b (a pair task's second text), the label (a value of
the task's `labels`, compared as text) and, when the task names a `split` column, its split
(train, dev or test); the splits are otherwise carved by gpt1.tasks.load. A missing column, a
row of the wrong width, an unbalanced quote (named at the line where it opens), an unknown
label or split, a declared label no example has, or an empty file is one error naming the file
and line (or the params key).
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

from gpt1.errors import Gpt1Error
from gpt1.tasks.mirror_formats import Row, decode_utf8, row
from gpt1.tasks.registry import SPLITS, TaskSpec

FORMATS = (".csv", ".tsv", ".jsonl")


class _Record:
    """One example: its fields by column and the lines it spans (a quoted field may hold line
    breaks: Excel writes a cell's so)."""

    def __init__(self, fields: dict[str, Any], first: int, last: int) -> None:
        self.fields, self.first, self.last = fields, first, last

    def fail(self, problem: str, path: Path) -> Gpt1Error:
        """`problem` at the record's first line; a record over several lines whose fields are
        wrong is most often a quote left open there, so the line says so."""
        if self.last == self.first:
            return Gpt1Error(f"line {self.first}: {problem}", path)
        return Gpt1Error(f"line {self.first}: an unbalanced quote? a quoted field opened here "
                         f"runs on to line {self.last}, and then {problem}", path)


def _short(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _text(path: Path) -> str:
    if path.suffix not in FORMATS:
        raise Gpt1Error(f"tasks.custom: a task file is {', '.join(FORMATS)}; got "
                        f"{path.suffix or 'no extension'}", path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise Gpt1Error("tasks.custom: no such file", path) from None
    return decode_utf8(data, path)


def _jsonl(text: str, path: Path) -> list[_Record]:
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
        out.append(_Record(record, i, i))
    return out


def _table(text: str, path: Path) -> list[_Record]:
    """The rows of a CSV / TSV file under its header line, RFC 4180 quoting read strictly."""
    sep, what = ("\t", "tab") if path.suffix == ".tsv" else (",", "comma")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep, strict=True)
    header: list[str] | None = None
    out, first = [], 1
    try:
        for fields in reader:
            record = _Record({}, first, reader.line_num)
            first = reader.line_num + 1
            if not fields:
                continue  # a blank line
            if header is None:
                header = fields
                continue
            if len(fields) != len(header):
                hint = (f" (a text holding a {what} needs quotes)"
                        if len(fields) > len(header) else "")
                raise record.fail(f"{len(fields)} {what}-separated fields where the header "
                                  f"has {len(header)}{hint}", path)
            record.fields = dict(zip(header, fields, strict=True))
            out.append(record)
    except csv.Error as err:
        if "end of data" in str(err):
            raise Gpt1Error(f"line {first}: a quote opened here is never closed (its field "
                            "runs on to the end of the file)", path) from None
        broken = _Record({}, first, reader.line_num)
        raise broken.fail(f"the quoting breaks ({err}; a quote inside a quoted field is "
                          'written twice: "")', path) from None
    return out


def _records(path: Path) -> list[_Record]:
    """Every example in the file, in order."""
    text = _text(path)
    return _jsonl(text, path) if path.suffix == ".jsonl" else _table(text, path)


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
    missing = [c for c in wanted if c not in records[0].fields]
    if missing:
        raise Gpt1Error(f"no column {missing[0]!r} (tasks.custom.{spec.name}); the file has "
                        f"{sorted(records[0].fields)}", path)
    index = {name: i for i, name in enumerate(spec.labels)}
    rows, splits = [], []
    for record in records:
        fields = record.fields
        lacking = [c for c in wanted if c not in fields]
        if lacking:  # a JSONL line without a key the first one has
            raise record.fail(f"no field {lacking[0]!r} (tasks.custom.{spec.name})", path)
        raw = str(fields[src.label]).strip()
        if raw not in index:
            raise record.fail(f"label {_short(raw)} is not one of tasks.custom.{spec.name}."
                              f"labels {list(spec.labels)}", path)
        split = str(fields[src.split]).strip() if src.split else None
        if split is not None and split not in SPLITS:
            raise record.fail(f"split {_short(split)} (column {src.split!r}) is not one of "
                              f"{list(SPLITS)}", path)
        rows.append(row(f"{spec.name}-{record.first}", str(fields[src.text_a] or ""),
                        str(fields[src.text_b] or "") if src.text_b else "", index[raw],
                        f"{path.name}:{record.first}"))
        splits.append(split)
    _every_label_has_examples(spec, Counter(r["label"] for r in rows), path)
    return rows, splits


def _every_label_has_examples(spec: TaskSpec, counts: Counter[int], path: Path) -> None:
    """A declared label no example has would widen the head, the predictions and the chance
    baseline by a class the data never shows: refused, naming it."""
    absent = [name for i, name in enumerate(spec.labels) if not counts[i]]
    if absent:
        raise Gpt1Error(f"tasks.custom.{spec.name}.labels: {absent[0]!r} has no example in the "
                        f"file (its labels: {[n for n in spec.labels if n not in absent]}); "
                        "drop it from labels or add its examples", path)
