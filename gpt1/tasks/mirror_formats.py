"""The mirror's task file formats -> canonical rows (registry.CANONICAL_COLUMNS).

Every quirk of the 12 datasets as found in the mirror's tasks/ folder lives here:
GLUE TSVs read with csv.QUOTE_NONE (quotes are literal text in GLUE), CoLA without a header,
MRPC's MSRP files with a UTF-8 BOM, STS-B rows with extra source columns, RTE in the
Hugging Face export, JSON train samples of MNLI/QNLI/QQP/SNLI, csv exports of SNLI/QNLI-v1/
SciTail, RACE one JSON per article, Story Cloze csv. Which task reads which files in which
format is data (registry.MirrorSource); bad files raise Gpt1Error naming the file and line.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpt1.errors import Gpt1Error

Row = dict[str, Any]


class _Folder:
    """A source folder (RACE's split folders): its absolute path and the mirror root."""

    def __init__(self, root: Path, rel: str) -> None:
        self.root, self.path = root, root / rel


class _Src:
    """One source file: its absolute path plus the name used in `source` (relative to tasks/)."""

    def __init__(self, root: Path, rel: str) -> None:
        self.path = root / rel
        self.rel = rel
        if not self.path.is_file():
            raise Gpt1Error("task file not found (is paths.mirror_dir right?)", self.path)

    def fail(self, line: int | str, problem: str) -> Gpt1Error:
        return Gpt1Error(f"line {line}: {problem}", self.path)

    def where(self, line: int | str) -> str:
        return f"{self.rel}:{line}"


def read_tsv(
    src: _Src, columns: Sequence[str] | None, required: Sequence[str] = (), *,
    extra_fields_ok: bool = False,
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line, {column: value}) of a tab-separated file, quotes read literally (GLUE).

    columns=None: the first line is the header (which must hold `required`); otherwise the
    file has no header and these are its columns. Extra trailing fields (beyond the header)
    are an error unless extra_fields_ok; they are kept tab-joined under "_extra".
    """
    reader = csv.reader(io.StringIO(read_text(src), newline=""), delimiter="\t",
                        quoting=csv.QUOTE_NONE)
    header = list(columns) if columns is not None else next(reader, None)
    if not header:
        raise src.fail(1, "empty file, expected a header line")
    missing = [c for c in required if c not in header]
    if missing:
        raise src.fail(1, f"missing column {missing[0]!r} (header: {', '.join(header)})")
    n_rows = 0
    for i, fields in enumerate(reader, start=1 if columns is not None else 2):
        if not fields:
            continue
        if len(fields) < len(header) or (len(fields) > len(header) and not extra_fields_ok):
            raise src.fail(i, f"expected {len(header)} tab-separated fields "
                              f"({', '.join(header)}), found {len(fields)} "
                              "(missing column or broken quoting)")
        row = dict(zip(header, fields, strict=False))
        row["_extra"] = "\t".join(fields[len(header):])
        n_rows += 1
        yield i, row
    if not n_rows:
        raise src.fail(reader.line_num + 1, "no data rows (an empty split)")


def read_csv(src: _Src, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line, row dict) of a comma-separated file with a header; strict RFC-4180 quoting.

    A quoted field spanning lines is rejected: none of the mirror's csv files has one, so it
    means an unbalanced quote that swallowed the following rows.
    """
    reader = csv.reader(io.StringIO(read_text(src), newline=""), strict=True)
    start = n_rows = 0
    try:
        header = next(reader, None)
        if not header:
            raise src.fail(1, "empty file, expected a header line")
        missing = [c for c in required if c not in header]
        if missing:
            raise src.fail(1, f"missing column {missing[0]!r} (header: {', '.join(header)})")
        start = reader.line_num
        for fields in reader:
            first = start + 1
            if reader.line_num != first:
                raise src.fail(first, f"quoted field runs on to line {reader.line_num} "
                                      "(unbalanced quote)")
            start = reader.line_num
            if len(fields) != len(header):
                raise src.fail(first, f"expected {len(header)} comma-separated fields, "
                                      f"found {len(fields)} (broken quoting?)")
            n_rows += 1
            yield first, dict(zip(header, fields, strict=True))
    except csv.Error as err:
        raise src.fail(start + 1, f"broken csv quoting ({err})") from None
    if not n_rows:
        raise src.fail(start + 1, "no data rows (an empty split)")


def read_text(src: _Src) -> str:
    """The whole file as text (decode_utf8)."""
    return decode_utf8(src.path.read_bytes(), src.path)


def decode_utf8(data: bytes, path: Path) -> str:
    """A file's bytes as UTF-8 text, a leading byte-order mark dropped; a byte that is not
    UTF-8 is one Gpt1Error naming its line and column (a UTF-16 file, Excel's "Unicode Text",
    by name)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise Gpt1Error("line 1: UTF-16 text (Excel's \"Unicode Text\"); save it as UTF-8 "
                        "(Excel: \"CSV UTF-8\")", path)
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line, line_start = data.count(b"\n", 0, err.start) + 1, data.rfind(b"\n", 0, err.start)
        raise Gpt1Error(f"line {line}: not UTF-8 (byte 0x{data[err.start]:02x} at column "
                        f"{err.start - line_start}); re-save the file as UTF-8", path) from None


def read_json(src: _Src) -> Any:
    try:
        return json.loads(read_text(src))
    except json.JSONDecodeError as err:
        raise src.fail(err.lineno, f"invalid JSON ({err.msg}, column {err.colno})") from None


def _label(src: _Src, line: int | str, raw: str, mapping: Mapping[str, int]) -> int:
    try:
        return mapping[raw.strip()]
    except KeyError:
        raise src.fail(line, f"label {raw!r} not in {sorted(mapping)}") from None


def _score(src: _Src, line: int | str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise src.fail(line, f"score {raw!r} is not a number") from None


_JSON_TYPES = {str: "a string", int: "an integer", list: "a list", dict: "an object",
               float: "a number", bool: "a boolean", type(None): "null"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _typed(src: _Src, line: int | str, row: dict[str, Any], key: str,
           kind: type | tuple[type, ...]) -> Any:
    """row[key], which must be of JSON type `kind` (a bool is no integer here)."""
    value = _get(src, line, row, key)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or isinstance(value, bool):
        want = " or ".join(_JSON_TYPES[k] for k in kinds)
        raise src.fail(line, f"field {key!r} is {_json_type(value)}, expected {want}")
    return value


def _list_of(src: _Src, art: dict[str, Any], key: str, kind: type) -> list[Any]:
    """art[key] (line 1: one JSON object per file), a list whose items are all `kind`."""
    items: list[Any] = _typed(src, 1, art, key, list)
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            raise src.fail(1, f"field {key!r}: item {i} is {_json_type(item)}, expected "
                              f"{_JSON_TYPES[kind]}")
    return items


def _get(src: _Src, line: int | str, row: dict[str, Any], key: str) -> Any:
    if key not in row:
        raise src.fail(line, f"missing column {key!r} (has: {', '.join(map(str, row))})")
    return row[key]


def row(id_: str, a: str, b: str, label: float, source: str, *,
         choices: Sequence[str] = (), group: str = "") -> Row:
    return {"id": id_, "text_a": a.strip(), "text_b": b.strip(),
            "choices": [c.strip() for c in choices], "label": label, "group": group,
            "source": source}


def pairs_json(src: _Src, tag: str, mapping: Mapping[str, int]) -> list[Row]:
    """JSON train samples: {"0": {"text_a", "text_b", "label"}, ...}; the row is the JSON key."""
    data = read_json(src)
    if not isinstance(data, dict):
        raise src.fail(1, f"expected a JSON object of examples, got {type(data).__name__}")
    rows = []
    for key, ex in data.items():
        line = f"{key!r}"
        if not isinstance(ex, dict):
            raise src.fail(line, "example is not a JSON object")
        a, b = (_typed(src, line, ex, k, str) for k in ("text_a", "text_b"))
        y = _label(src, line, str(_typed(src, line, ex, "label", (str, int))), mapping)
        rows.append(row(f"{tag}-{key}", a, b, y, src.where(key)))
    if not rows:
        raise src.fail(1, "no examples (an empty split)")
    return rows


def pairs_csv(src: _Src, tag: str, mapping: Mapping[str, int]) -> list[Row]:
    """CSV exports: premise, hypothesis, label (SNLI dev, QNLI-v1 dev, SciTail test)."""
    return [
        row(f"{tag}-{line}", r["premise"], r["hypothesis"],
             _label(src, line, r["label"], mapping), src.where(line))
        for line, r in read_csv(src, ("premise", "hypothesis", "label"))
    ]


def read_kshot(root: Path, task_dir: str, seed_dir: str, file: str,
               text_cols: tuple[str, str], label_col: str, mapping: Mapping[str, int]
               ) -> list[Row]:
    """LM-BFF k-shot GLUE TSVs (kshot_16/16-<seed>/*.tsv). The SNLI/MNLI layouts carry a
    variable number of annotator labels, so gold_label is the LAST field of each row."""
    src = _Src(root, f"{task_dir}/kshot_16/{seed_dir}/{file}")
    rows = []
    for line, r in read_tsv(src, None, (*text_cols, label_col), extra_fields_ok=True):
        raw = r["_extra"].rsplit("\t", 1)[-1] if r["_extra"] else r[label_col]
        rows.append(row(f"{task_dir}-{seed_dir}-{file}-{line}", r[text_cols[0]],
                         r[text_cols[1]], _label(src, line, raw, mapping), src.where(line)))
    return rows


def sst2(src: _Src, tag: str, mapping: Mapping[str, int]) -> list[Row]:
    """GLUE SST-2 TSV: sentence, label (header line)."""
    return [row(f"{tag}-{line}", r["sentence"], "", _label(src, line, r["label"], mapping),
                 src.where(line)) for line, r in read_tsv(src, None, ("sentence", "label"))]


def cola(src: _Src, tag: str, mapping: Mapping[str, int]) -> list[Row]:
    """CoLA raw TSV: source code, label, author mark, sentence."""
    cols = ("source_code", "label", "original_author_mark", "sentence")  # no header line
    return [row(f"{tag}-{line}", r["sentence"], "", _label(src, line, r["label"], mapping),
                 src.where(line)) for line, r in read_tsv(src, cols)]


def mrpc(src: _Src, tag: str, mapping: Mapping[str, int]) -> list[Row]:
    """MSRP paraphrase corpus file; the row id is the two sentence ids."""
    # MSRP: header with a BOM (utf-8-sig strips it); Quality = 1 for a paraphrase.
    return [row(f"{r['#1 ID']}-{r['#2 ID']}", r["#1 String"], r["#2 String"],
                 _label(src, line, r["Quality"], mapping), src.where(line))
            for line, r in read_tsv(src, None, ("Quality", "#1 ID", "#2 ID", "#1 String",
                                                 "#2 String"))]


def stsb(src: _Src, tag: str, mapping: Mapping[str, int]) -> list[Row]:
    """STS-B TSV with its source columns; the label is the 0-5 similarity score."""
    # No header; some rows carry 2 extra source columns after sentence2 (kept as found).
    cols = ("genre", "filename", "year", "id", "score", "sentence1", "sentence2")
    return [row(f"{r['genre']}-{r['filename']}-{r['year']}-{r['id']}", r["sentence1"],
                 r["sentence2"], _score(src, line, r["score"]), src.where(line))
            for line, r in read_tsv(src, cols, extra_fields_ok=True)]


def rte(src: _Src, tag: str, mapping: Mapping[str, int]) -> list[Row]:
    """RTE in the Hugging Face glue/rte TSV export."""
    # Hugging Face glue/rte export: sentence1, sentence2, label (0 = entailment), idx.
    return [row(f"rte-{r['idx']}", r["sentence1"], r["sentence2"],
                 _label(src, line, r["label"], mapping), src.where(line))
            for line, r in read_tsv(src, None, ("sentence1", "sentence2", "label", "idx"))]


def race(split_dir: _Folder, tag: str, mapping: Mapping[str, int]) -> list[Row]:
    """RACE: a split folder of middle/ and high/ article files, one JSON object per article
    (article, questions, options, answers); `tag` is the split."""
    rows = []
    root, split = split_dir.root, tag
    for level in ("middle", "high"):
        folder = split_dir.path / level
        if not folder.is_dir():
            raise Gpt1Error("RACE folder not found (is paths.mirror_dir right?)", folder)
        for path in sorted(folder.glob("*.txt"), key=lambda p: (len(p.stem), p.stem)):
            src = _Src(root, str(path.relative_to(root)))
            art = read_json(src)
            if not isinstance(art, dict):
                raise src.fail(1, "expected one JSON object per article")
            _typed(src, 1, art, "article", str)
            qs, opts, ans = (_list_of(src, art, k, kind) for k, kind in
                             (("questions", str), ("options", list), ("answers", str)))
            for q, options in enumerate(opts):
                _list_of(src, {f"options[{q}]": options}, f"options[{q}]", str)
            if not len(qs) == len(opts) == len(ans):
                raise src.fail(1, f"{len(qs)} questions, {len(opts)} option lists and "
                                  f"{len(ans)} answers differ in number")
            for q, (question, options, answer) in enumerate(zip(qs, opts, ans, strict=True)):
                rows.append(row(f"{split}-{level}-{path.stem}-{q}", art["article"], question,
                                 _label(src, f"1 (question {q})", answer, mapping),
                                 src.where(f"q{q}"), choices=options, group=level))
    return rows


def story_cloze(src: _Src, tag: str, mapping: Mapping[str, int]) -> list[Row]:
    """Story Cloze 2016 CSV: four context sentences, two endings, the right one."""
    cols = ("InputStoryid", *(f"InputSentence{i}" for i in range(1, 5)),
            "RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2", "AnswerRightEnding")
    return [row(r["InputStoryid"], " ".join(r[f"InputSentence{i}"] for i in range(1, 5)), "",
                 _label(src, line, r["AnswerRightEnding"], mapping), src.where(line),
                 choices=(r["RandomFifthSentenceQuiz1"], r["RandomFifthSentenceQuiz2"]))
            for line, r in read_csv(src, cols)]


FORMATS: dict[str, Callable[[Any, str, Mapping[str, int]], list[Row]]] = {
    "pairs_json": pairs_json, "pairs_csv": pairs_csv, "sst2": sst2, "cola": cola, "mrpc": mrpc,
    "stsb": stsb, "rte": rte, "race": race, "story_cloze": story_cloze,
}
"""Mirror file format (registry.MirrorFiles.reader) -> reader of one file (RACE: one folder)."""


def read_rows(root: Path, reader: str, path: str, tag: str, mapping: Mapping[str, int]
              ) -> list[Row]:
    """The rows of one mirror file (a folder for RACE) in the named format."""
    src: Any = _Folder(root, path) if reader == "race" else _Src(root, path)
    return FORMATS[reader](src, tag, mapping)
