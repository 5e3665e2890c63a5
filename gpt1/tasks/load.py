"""Readers: the mirror's original file formats (or the hub) -> one canonical table per split.

Every quirk of the 12 datasets as found in the mirror's tasks/ folder lives here:
GLUE TSVs read with csv.QUOTE_NONE (quotes are literal text in GLUE), CoLA without a header,
MRPC's MSRP files with a UTF-8 BOM, STS-B rows with extra source columns, RTE in the
Hugging Face export, JSON train samples of MNLI/QNLI/QQP/SNLI, csv exports of SNLI/QNLI-v1/
SciTail, RACE one JSON per article, Story Cloze csv. Missing splits are carved out with a
seeded, documented rule (TaskSpec.sources says which). Bad files raise Gpt1Error naming the
file and line.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpt1 import atomic
from gpt1.config import TasksCfg
from gpt1.data import read_parquet_artifact
from gpt1.errors import Gpt1Error
from gpt1.tasks.gate import check_task_table
from gpt1.tasks.registry import CANONICAL_COLUMNS, SPLITS, TaskSpec

log = logging.getLogger(__name__)

Tables = dict[str, pd.DataFrame]
"""Canonical split name (train / dev / test) -> canonical table (registry.CANONICAL_COLUMNS)."""
Row = dict[str, Any]
HubLoader = Callable[..., Any]
"""datasets.load_dataset or a fake with the same (path, name, split=) signature."""

NLI3_RAW = {"entailment": 0, "neutral": 1, "contradiction": 2}
NLI2_RAW = {"entailment": 0, "not_entailment": 1}
BINARY_RAW = {"0": 0, "1": 1}


# ---------------------------------------------------------------- low-level file readers


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
    """The whole file as text (UTF-8, a leading BOM dropped); a byte that is not UTF-8 is
    named by line and column."""
    data = src.path.read_bytes().removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        raise src.fail(data.count(b"\n", 0, err.start) + 1,
                       f"not UTF-8 (byte 0x{data[err.start]:02x} at column "
                       f"{err.start - line_start + 1}); re-save the file as UTF-8") from None


def read_json(src: _Src) -> Any:
    try:
        return json.loads(read_text(src))
    except json.JSONDecodeError as err:
        raise src.fail(err.lineno, f"invalid JSON ({err.msg}, column {err.colno})") from None


def _label(src: _Src, line: int | str, raw: str, mapping: dict[str, int]) -> int:
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


def _row(id_: str, a: str, b: str, label: float, source: str, *,
         choices: Sequence[str] = (), group: str = "") -> Row:
    return {"id": id_, "text_a": a.strip(), "text_b": b.strip(),
            "choices": [c.strip() for c in choices], "label": label, "group": group,
            "source": source}


def to_table(rows: list[Row], spec: TaskSpec) -> pd.DataFrame:
    """Rows -> canonical DataFrame with fixed column order and dtypes."""
    df = pd.DataFrame(rows, columns=list(CANONICAL_COLUMNS))
    for col in ("id", "text_a", "text_b", "group", "source"):
        df[col] = df[col].astype(object)
    df["label"] = df["label"].astype("float64" if spec.regression else "int64")
    return df


# ---------------------------------------------------------------- the file formats


def pairs_from_json(src: _Src, mapping: dict[str, int], tag: str) -> list[Row]:
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
        rows.append(_row(f"{tag}-{key}", a, b, y, src.where(key)))
    if not rows:
        raise src.fail(1, "no examples (an empty split)")
    return rows


def pairs_from_csv(src: _Src, mapping: dict[str, int], tag: str) -> list[Row]:
    """CSV exports: premise, hypothesis, label (SNLI dev, QNLI-v1 dev, SciTail test)."""
    return [
        _row(f"{tag}-{line}", r["premise"], r["hypothesis"],
             _label(src, line, r["label"], mapping), src.where(line))
        for line, r in read_csv(src, ("premise", "hypothesis", "label"))
    ]


def read_kshot(root: Path, task_dir: str, seed_dir: str, file: str,
               text_cols: tuple[str, str], label_col: str, mapping: dict[str, int]) -> list[Row]:
    """LM-BFF k-shot GLUE TSVs (kshot_16/16-<seed>/*.tsv). The SNLI/MNLI layouts carry a
    variable number of annotator labels, so gold_label is the LAST field of each row."""
    src = _Src(root, f"{task_dir}/kshot_16/{seed_dir}/{file}")
    rows = []
    for line, r in read_tsv(src, None, (*text_cols, label_col), extra_fields_ok=True):
        raw = r["_extra"].rsplit("\t", 1)[-1] if r["_extra"] else r[label_col]
        rows.append(_row(f"{task_dir}-{seed_dir}-{file}-{line}", r[text_cols[0]],
                         r[text_cols[1]], _label(src, line, raw, mapping), src.where(line)))
    return rows


def _sst2(src: _Src, tag: str) -> list[Row]:
    return [_row(f"{tag}-{line}", r["sentence"], "", _label(src, line, r["label"], BINARY_RAW),
                 src.where(line)) for line, r in read_tsv(src, None, ("sentence", "label"))]


def _cola(src: _Src, tag: str) -> list[Row]:
    cols = ("source_code", "label", "original_author_mark", "sentence")  # no header line
    return [_row(f"{tag}-{line}", r["sentence"], "", _label(src, line, r["label"], BINARY_RAW),
                 src.where(line)) for line, r in read_tsv(src, cols)]


def _mrpc(src: _Src) -> list[Row]:
    # MSRP: header with a BOM (utf-8-sig strips it); Quality = 1 for a paraphrase.
    return [_row(f"{r['#1 ID']}-{r['#2 ID']}", r["#1 String"], r["#2 String"],
                 _label(src, line, r["Quality"], BINARY_RAW), src.where(line))
            for line, r in read_tsv(src, None, ("Quality", "#1 ID", "#2 ID", "#1 String",
                                                 "#2 String"))]


def _stsb(src: _Src) -> list[Row]:
    # No header; some rows carry 2 extra source columns after sentence2 (kept as found).
    cols = ("genre", "filename", "year", "id", "score", "sentence1", "sentence2")
    return [_row(f"{r['genre']}-{r['filename']}-{r['year']}-{r['id']}", r["sentence1"],
                 r["sentence2"], _score(src, line, r["score"]), src.where(line))
            for line, r in read_tsv(src, cols, extra_fields_ok=True)]


def _rte(src: _Src) -> list[Row]:
    # Hugging Face glue/rte export: sentence1, sentence2, label (0 = entailment), idx.
    return [_row(f"rte-{r['idx']}", r["sentence1"], r["sentence2"],
                 _label(src, line, r["label"], BINARY_RAW), src.where(line))
            for line, r in read_tsv(src, None, ("sentence1", "sentence2", "label", "idx"))]


def _race(root: Path, split: str) -> list[Row]:
    """RACE: one JSON object per article file: article, questions, options, answers, id."""
    rows = []
    letters = {"A": 0, "B": 1, "C": 2, "D": 3}
    for level in ("middle", "high"):
        folder = root / "RACE" / "RACE" / split / level
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
                rows.append(_row(f"{split}-{level}-{path.stem}-{q}", art["article"], question,
                                 _label(src, f"1 (question {q})", answer, letters),
                                 src.where(f"q{q}"), choices=options, group=level))
    return rows


def _story_cloze(src: _Src) -> list[Row]:
    cols = ("InputStoryid", *(f"InputSentence{i}" for i in range(1, 5)),
            "RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2", "AnswerRightEnding")
    return [_row(r["InputStoryid"], " ".join(r[f"InputSentence{i}"] for i in range(1, 5)), "",
                 _label(src, line, r["AnswerRightEnding"], {"1": 0, "2": 1}), src.where(line),
                 choices=(r["RandomFifthSentenceQuiz1"], r["RandomFifthSentenceQuiz2"]))
            for line, r in read_csv(src, cols)]


# ---------------------------------------------------------------- carving missing splits


def carve(df: pd.DataFrame, n_held: int, seed: int, by: str | None = None
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Deterministically split off about n_held rows (seeded permutation); (rest, held).

    by: a column whose equal values stay on one side (SciTail: premises are shared by several
    hypotheses, so they are carved whole to keep train and test text apart).
    """
    if not 0 < n_held < len(df):
        raise Gpt1Error(f"cannot carve {n_held} of {len(df)} rows (check tasks.dev_frac / "
                        "test_frac / dev_examples)")
    rng = np.random.default_rng(seed)
    keys = df[by] if by is not None else pd.Series(np.arange(len(df)), index=df.index)
    uniq = keys.drop_duplicates().to_numpy()
    order = uniq[rng.permutation(len(uniq))]
    sizes = keys.value_counts().reindex(order).to_numpy()
    take = set(order[: int(np.searchsorted(np.cumsum(sizes), n_held)) + 1])
    mask = keys.isin(take).to_numpy()
    return df[~mask].reset_index(drop=True), df[mask].reset_index(drop=True)


def _n_dev(spec: TaskSpec, cfg: TasksCfg, n_rows: int) -> int:
    return cfg.dev_examples.get(spec.name, round(cfg.dev_frac * n_rows))


def _carve_dev(spec: TaskSpec, cfg: TasksCfg, train: pd.DataFrame) -> tuple[pd.DataFrame, ...]:
    return carve(train, _n_dev(spec, cfg, len(train)), cfg.carve_seed)


# ---------------------------------------------------------------- per-task assembly (mirror)


def _mirror_tables(spec: TaskSpec, root: Path, cfg: TasksCfg) -> Tables:
    t = lambda rows: to_table(rows, spec)  # noqa: E731
    name, d = spec.name, spec.mirror_dir
    if name in ("snli", "qnli"):
        m = NLI3_RAW if name == "snli" else NLI2_RAW
        test_rel = "SNLI/dev_csv/dev.csv" if name == "snli" else "QNLI/glue_v1_dev_csv/dev.csv"
        return {
            "train": t(pairs_from_json(_Src(root, f"{d}/train_subset_10k/train.json"), m, "tr")),
            "dev": t(pairs_from_json(_Src(root, f"{d}/train_subset_10k/dev.json"), m, "dv")),
            "test": t(pairs_from_csv(_Src(root, test_rel), m, "te")),
        }
    if name in ("mnli", "qqp"):
        m = NLI3_RAW if name == "mnli" else BINARY_RAW
        full = t(pairs_from_json(_Src(root, f"{d}/train_subset_10k/train.json"), m, "tr"))
        train, dev = _carve_dev(spec, cfg, full)
        test = t(pairs_from_json(_Src(root, f"{d}/train_subset_10k/dev.json"), m, "te"))
        return {"train": train, "dev": dev, "test": test}
    if name == "scitail":
        full = t(pairs_from_csv(_Src(root, "SciTail/scitail_test.csv"), NLI2_RAW, "te"))
        rest, test = carve(full, round(cfg.test_frac * len(full)), cfg.carve_seed, by="text_a")
        train, dev = carve(rest, _n_dev(spec, cfg, len(rest)), cfg.carve_seed, by="text_a")
        return {"train": train, "dev": dev, "test": test}
    if name == "race":
        return {s: t(_race(root, s)) for s in SPLITS}
    if name == "story_cloze":
        # The original file names, spaces included (MANIFEST.md).
        name_of = "{0}/cloze_test_{1}__spring2016 - cloze_test_ALL_{1}.csv".format
        val, test = (t(_story_cloze(_Src(root, name_of(d, s)))) for s in ("val", "test"))
        train, dev = _carve_dev(spec, cfg, val)
        return {"train": train, "dev": dev, "test": test}
    if name == "stsb":
        return {s: t(_stsb(_Src(root, f"{d}/sts-{s}.tsv"))) for s in SPLITS}
    if name == "mrpc":
        train, dev = _carve_dev(spec, cfg, t(_mrpc(_Src(root, f"{d}/msr_paraphrase_train.txt"))))
        return {"train": train, "dev": dev,
                "test": t(_mrpc(_Src(root, f"{d}/msr_paraphrase_test.txt")))}
    if name in ("rte", "sst2", "cola"):
        if name == "rte":
            full, test = t(_rte(_Src(root, "RTE/train.tsv"))), t(_rte(_Src(root, "RTE/dev.tsv")))
        elif name == "sst2":
            full = t(_sst2(_Src(root, "SST-2/train.tsv"), "tr"))
            test = t(_sst2(_Src(root, "SST-2/dev.tsv"), "te"))
        else:
            raw = "CoLA/cola_public/raw"
            full = t(_cola(_Src(root, f"{raw}/in_domain_train.tsv"), "tr"))
            # GLUE's CoLA dev = in-domain dev followed by out-of-domain dev.
            test = t(_cola(_Src(root, f"{raw}/in_domain_dev.tsv"), "in")
                     + _cola(_Src(root, f"{raw}/out_of_domain_dev.tsv"), "out"))
        train, dev = _carve_dev(spec, cfg, full)
        return {"train": train, "dev": dev, "test": test}
    raise Gpt1Error(f"no mirror reader for task {name!r}")


# ---------------------------------------------------------------- hub


def _hub_rows(spec: TaskSpec, records: Any, split: str) -> list[Row]:
    hub, rows = spec.hub, []
    values = {v: i for i, v in enumerate(hub.labels)} if hub.labels is not None else None
    tag = f"hub:{hub.path}/{hub.name or ''}/{split}"

    def col(rec: dict[str, Any], key: str, i: int) -> Any:
        names = hub.fields[key]
        cols = (names,) if isinstance(names, str) else names
        missing = [c for c in cols if c not in rec]
        if missing:
            raise Gpt1Error(f"row {i}: missing column {missing[0]!r}", tag)
        vals = [rec[c] for c in cols]
        if key == "choices":
            return list(vals[0]) if isinstance(names, str) else vals
        return " ".join(str(v) for v in vals) if key == "text_a" else vals[0]

    dropped = 0
    for i, rec in enumerate(records):
        raw = col(rec, "label", i)
        if values is not None:
            if raw not in values:
                raise Gpt1Error(f"row {i}: label {raw!r} not in {list(values)}", tag)
            label: float = values[raw]
        elif not spec.regression and int(raw) < 0:
            dropped += 1  # hub marks unlabelled / no-gold rows with -1
            continue
        else:
            label = float(raw) if spec.regression else int(raw)
            if not spec.regression and not 0 <= label < len(spec.labels):
                raise Gpt1Error(f"row {i}: label {raw!r} not in 0..{len(spec.labels) - 1}", tag)
        ident = str(col(rec, "id", i)) if "id" in hub.fields else f"{split}-{i}"
        rows.append(_row(ident, str(col(rec, "text_a", i)),
                         str(col(rec, "text_b", i)) if "text_b" in hub.fields else "",
                         label, f"{tag}:{i}",
                         choices=col(rec, "choices", i) if "choices" in hub.fields else ()))
    if dropped:
        log.info("%s: dropped %d unlabelled rows (label -1)", tag, dropped)
    return rows


def _hub_tables(spec: TaskSpec, cfg: TasksCfg, loader: HubLoader) -> Tables:
    tables: Tables = {}
    for split, hub_split in spec.hub.splits.items():
        records = loader(spec.hub.path, spec.hub.name, split=hub_split)
        tables[split] = to_table(_hub_rows(spec, records, hub_split), spec)
    if "dev" not in tables:
        tables["train"], tables["dev"] = _carve_dev(spec, cfg, tables["train"])
    return tables


# ---------------------------------------------------------------- public API


def load_task(spec: TaskSpec, cfg: TasksCfg, mirror_dir: str | Path | None,
              hub_loader: HubLoader | None = None) -> Tables:
    """Canonical train/dev/test tables of one task: from <mirror_dir>/tasks, else the hub."""
    if mirror_dir is not None:
        root = Path(mirror_dir) / "tasks"
        if not root.is_dir():
            raise Gpt1Error("mirror has no tasks/ folder (paths.mirror_dir)", root)
        tables = _mirror_tables(spec, root, cfg)
    else:
        if hub_loader is None:
            from datasets import load_dataset

            hub_loader = load_dataset
        tables = _hub_tables(spec, cfg, hub_loader)
    for split in SPLITS:
        log.info("%s/%s: %d rows", spec.name, split, len(tables[split]))
    return tables


def write_tables(tables: Tables, out_dir: str | Path,
                 reports: dict[str, Any] | None = None) -> None:
    """<out_dir>/{train,dev,test}.parquet (+ <name>.json per report), as one directory,
    atomically."""
    with atomic.atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        for split in SPLITS:
            tables[split].to_parquet(tmp / f"{split}.parquet", index=False)
        for name, report in (reports or {}).items():
            atomic.write_json(tmp / f"{name}.json", report)


def read_tables(task_dir: str | Path) -> Tables:
    """Inverse of write_tables; a missing split file is a Gpt1Error naming it."""
    out = {}
    for split in SPLITS:
        path = Path(task_dir) / f"{split}.parquet"
        df = read_parquet_artifact(path, "prepare_task")
        missing = [c for c in CANONICAL_COLUMNS if c not in df.columns]
        if missing:
            raise Gpt1Error(f"not a canonical task table (no column {missing[0]!r}); re-run "
                            "the prepare_task stage", path)
        if df.empty:
            raise Gpt1Error("no rows; re-run the prepare_task stage", path)
        df["choices"] = df["choices"].map(list)
        out[split] = df
    return out


def validate_tables(tables: Tables, spec: TaskSpec, base: str | Path,
                    docs_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the task's great-expectations suite on every split (Data Docs in docs_dir/<split>
    when given); the first violation raises a Gpt1Error naming the file and line it came from
    (base = the mirror's tasks/ folder)."""
    report = {}
    for split in SPLITS:
        if tables[split].empty:  # every check of an empty table passes; the next stage fails
            raise Gpt1Error(f"{spec.name}/{split}: no rows (from {spec.sources[split]}); "
                            "every split needs examples")
        rep = check_task_table(tables[split], spec,
                               None if docs_dir is None else Path(docs_dir) / split)
        report[split] = rep
        if rep["success"]:
            continue
        fail = next(c for c in rep["checks"] if not c["success"])
        problem = f"{fail['label']} ({fail.get('unexpected_count') or 'all'} rows in {split})"
        if "data_docs" in rep:
            problem += f"; Data Docs {rep['data_docs']}"
        if fail.get("source") is None:
            raise Gpt1Error(f"{spec.name}/{split}: {problem}")
        if fail["column"] == "label":
            problem += f"; got {tables[split]['label'].iloc[fail['first_row']]!r}"
        file, _, line = str(fail["source"]).rpartition(":")
        where = file if file.startswith("hub:") else Path(base) / file
        raise Gpt1Error(f"line {line}: {problem}", where)
    return report
