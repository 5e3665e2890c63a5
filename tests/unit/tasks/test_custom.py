"""tasks.custom: a task of the user's own from a CSV / TSV / JSONL file, declared in params.

Its registry row, its splits (a split column, or carved), and one error line naming the file
and line (or the params key) for each mistake."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from gpt1.__main__ import build_parser
from gpt1.config import ParamsError, parse_params
from gpt1.errors import Gpt1Error
from gpt1.tasks import load
from gpt1.tasks.registry import TASKS, register_custom
from tests.helpers.params import make_params_dict
from tests.helpers.repo import REPO


@pytest.fixture(autouse=True)
def _paper_tasks_only_afterwards():
    """The registry holds the custom tasks of the params last parsed: leave only the paper's."""
    yield
    register_custom({})


def _params(tmp_path: Path, task: dict, name: str = "mine"):
    raw = make_params_dict(tmp_path, {"tasks": {"custom": {name: task}}})
    if name not in raw["finetune"]["tasks"]:  # zero-shot etc. stay prepared
        raw["finetune"]["tasks"] = [*raw["finetune"]["tasks"], name]
    return parse_params(raw, "tiny")


def _pairs_jsonl(path: Path, n: int = 12) -> None:
    path.write_text("".join(json.dumps({"p": f"premise {i}", "h": f"hypothesis {i}",
                                        "y": ["yes", "no"][i % 2],
                                        "part": ["train", "train", "dev", "test"][i % 4]}) + "\n"
                            for i in range(n)), encoding="utf-8")


def test_a_pair_task_from_jsonl_with_a_split_column(tmp_path: Path) -> None:
    _pairs_jsonl(tmp_path / "pairs.jsonl")
    params = _params(tmp_path, {"file": str(tmp_path / "pairs.jsonl"), "text": "p",
                                "text_b": "h", "label": "y", "labels": ["no", "yes"],
                                "metric": "f1", "split": "part"})
    spec = TASKS["mine"]
    assert (spec.fmt, spec.labels, spec.metric, spec.metrics) == (
        "entail", ("no", "yes"), "f1", ("f1", "acc"))
    tables = load.load_task(spec, params.tasks, None)
    assert {s: len(t) for s, t in tables.items()} == {"train": 6, "dev": 3, "test": 3}
    first = tables["train"].iloc[0]
    assert (first["text_a"], first["text_b"], first["label"]) == ("premise 0", "hypothesis 0", 1)
    assert first["source"] == "pairs.jsonl:1"


def test_a_classification_task_from_tsv_carves_dev_and_test(tmp_path: Path) -> None:
    rows = "".join(f"text {i}\t{'ab'[i % 2]}\n" for i in range(20))
    (tmp_path / "t.tsv").write_text("sentence\tclass\n" + rows, encoding="utf-8")
    params = _params(tmp_path, {"file": str(tmp_path / "t.tsv"), "text": "sentence",
                                "label": "class", "labels": ["a", "b"]})
    tables = load.load_task(TASKS["mine"], params.tasks, None)
    sizes = {s: len(t) for s, t in tables.items()}
    assert sum(sizes.values()) == 20 and all(sizes.values())
    ids = [i for t in tables.values() for i in t["id"]]
    assert len(set(ids)) == 20  # disjoint splits
    assert TASKS["mine"].fmt == "classify"


@pytest.mark.parametrize(("content", "needle"), [
    ("sentence,class\nhi,a\nyo,c\n", "line 3: label 'c' is not one of"),
    ("words,class\nhi,a\n", "no column 'sentence'"),
    ("sentence,class\n", "no examples"),
])
def test_file_mistakes_name_the_file_and_line(tmp_path: Path, content: str, needle: str) -> None:
    (tmp_path / "t.csv").write_text(content, encoding="utf-8")
    params = _params(tmp_path, {"file": str(tmp_path / "t.csv"), "text": "sentence",
                                "label": "class", "labels": ["a", "b"]})
    with pytest.raises(Gpt1Error, match=needle) as err:
        load.load_task(TASKS["mine"], params.tasks, None)
    assert "t.csv" in str(err.value)


@pytest.mark.parametrize(("name", "task", "needle"), [
    ("sst2", {"labels": ["a", "b"]}, "tasks.custom.sst2: a new lower-case name"),
    ("mine", {"labels": ["a", "a"]}, "tasks.custom.mine.labels: a label is listed twice"),
    ("mine", {"labels": ["a"]}, "tasks.custom.mine.labels"),
    ("mine", {"labels": ["a", "b"], "metric": "bleu"}, "tasks.custom.mine.metric"),
])
def test_params_mistakes_name_the_key(tmp_path: Path, name: str, task: dict,
                                      needle: str) -> None:
    with pytest.raises(ParamsError, match=needle):
        _params(tmp_path, {"file": "t.csv", "text": "s", "label": "y", **task}, name)


def test_the_cli_takes_a_custom_task_named_in_the_params_file(tmp_path: Path) -> None:
    raw = make_params_dict(tmp_path, {"tasks": {"custom": {"mine": {
        "file": "t.csv", "text": "s", "label": "y", "labels": ["a", "b"]}}}})
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    argv = ["--params", str(tmp_path / "p.yaml"), "prepare-task", "--task", "mine"]
    assert build_parser(argv).parse_args(argv).task == "mine"


def test_the_readme_example_loads(tmp_path: Path) -> None:
    """The README's params block, with its 20-line example file, is a valid task."""
    repo = REPO
    readme = (repo / "README.md").read_text(encoding="utf-8")
    block = readme.split("### A task of your own", 1)[1].split("```yaml\n", 1)[1].split("```")[0]
    custom = yaml.safe_load(block)["tasks"]["custom"]
    custom["reviews"]["file"] = str(repo / custom["reviews"]["file"])
    params = _params(tmp_path, custom["reviews"], "reviews")
    tables = load.load_task(TASKS["reviews"], params.tasks, None)
    assert sum(len(t) for t in tables.values()) == 19 and len(tables["train"]) > 0


def test_a_record_of_a_custom_task_no_longer_declared_is_left_out(tmp_path: Path) -> None:
    from gpt1.report.runs import variant_results

    record = {"variant": "full", "scores": {"acc": {"mean": 0.5}}}
    metrics = {"finetune_gone_p1": {**record, "task": "gone"},
               "finetune_sst2_p1": {**record, "task": "sst2"}}
    assert list(variant_results(metrics, "full")) == ["sst2"]


def test_a_model_recorded_before_custom_tasks_still_loads(tiny_params, tmp_path: Path) -> None:
    """A model.json written before tasks.custom existed reads as one with no custom task."""
    from gpt1.checkpoint import recorded_params

    raw = tiny_params.as_dict()
    del raw["tasks"]["custom"]
    assert recorded_params({"params": raw}, tmp_path / "model.json").tasks.custom == {}


def _classify(tmp_path: Path, name: str, data: bytes, labels=("neg", "pos")):
    """A task over `data` written as `name` (columns review, sentiment); its registry row."""
    (tmp_path / name).write_bytes(data)
    params = _params(tmp_path, {"file": str(tmp_path / name), "text": "review",
                                "label": "sentiment", "labels": list(labels)})
    return TASKS["mine"], params


def test_a_csv_saved_by_excel_as_csv_utf8_is_read(tmp_path: Path) -> None:
    """Excel's "CSV UTF-8": a byte-order mark, CRLF line ends, a cell with a line break and a
    quote quoted as Excel quotes them."""
    lines = ["review,sentiment", *(f"review {i},{'neg pos'.split()[i % 2]}" for i in range(18)),
             '"two lines\r\nin one cell, and a ""quote""",pos']
    data = b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n"
    spec, params = _classify(tmp_path, "excel.csv", data)
    tables = load.load_task(spec, params.tasks, None)
    every = {r: t for t in tables.values() for r, t in zip(t["id"], t["text_a"], strict=True)}
    assert len(every) == 19 and every["mine-2"] == "review 0"
    assert every["mine-20"] == 'two lines\r\nin one cell, and a "quote"'
    assert all(not str(t).endswith("\r") for t in every.values())


def test_a_jsonl_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    rows = [json.dumps({"review": f"r {i}", "sentiment": "neg pos".split()[i % 2]})
            for i in range(20)]
    spec, params = _classify(tmp_path, "t.jsonl", ("\ufeff" + "\r\n".join(rows)).encode())
    assert sum(len(t) for t in load.load_task(spec, params.tasks, None).values()) == 20


def _numbered(n: int = 20) -> list[str]:
    return ["review,sentiment", *(f"review {i},{'neg pos'.split()[i % 2]}" for i in range(n))]


@pytest.mark.parametrize(("line7", "needle"), [
    ('"the quote opens,neg', "line 7: a quote opened here is never closed"),
    ('"the quote opens,neg', None),  # closed at line 20 by a quoted field: its quoting breaks
    ('a 5" screen,"too small,neg', "line 7: a quote opened here is never closed"),
])
def test_an_unbalanced_quote_is_named_at_the_line_where_it_opens(tmp_path: Path, line7: str,
                                                                 needle: str | None) -> None:
    lines = _numbered()
    lines[6] = line7
    if needle is None:
        lines[19] = '"a quoted review, really",pos'
        needle = "line 7: an unbalanced quote? a quoted field opened here runs on to line 20"
    spec, params = _classify(tmp_path, "t.csv", "\n".join(lines).encode())
    with pytest.raises(Gpt1Error) as err:
        load.load_task(spec, params.tasks, None)
    assert str(err.value).startswith(f"{tmp_path / 't.csv'}: {needle}"), err.value
    assert "\n" not in str(err.value)


def test_a_quote_that_swallows_rows_into_a_bad_label_is_named_where_it_opens(
        tmp_path: Path) -> None:
    lines = _numbered()
    lines[6] = '"the quote opens,neg'
    lines[19] = 'closed here",oops'
    spec, params = _classify(tmp_path, "t.csv", "\n".join(lines).encode())
    with pytest.raises(Gpt1Error, match=r"t.csv: line 7: an unbalanced quote\? a quoted field "
                                        r"opened here runs on to line 20, and then label "):
        load.load_task(spec, params.tasks, None)


@pytest.mark.parametrize(("row", "needle"), [
    ("I liked it, really,pos", "line 5: 3 comma-separated fields where the header has 2 (a "
                               "text holding a comma needs quotes)"),
    ("no label here", "line 5: 1 comma-separated fields where the header has 2"),
])
def test_a_row_of_the_wrong_width_is_named(tmp_path: Path, row: str, needle: str) -> None:
    lines = _numbered()
    lines[4] = row
    spec, params = _classify(tmp_path, "t.csv", "\n".join(lines).encode())
    with pytest.raises(Gpt1Error, match=re.escape(needle)):
        load.load_task(spec, params.tasks, None)


def test_a_declared_label_without_an_example_is_refused_naming_it(tmp_path: Path) -> None:
    spec, params = _classify(tmp_path, "t.csv", "\n".join(_numbered()).encode(),
                             labels=("neg", "pos", "neutral"))
    with pytest.raises(Gpt1Error) as err:
        load.load_task(spec, params.tasks, None)
    assert str(err.value) == (
        f"{tmp_path / 't.csv'}: tasks.custom.mine.labels: 'neutral' has no example in the file "
        "(its labels: ['neg', 'pos']); drop it from labels or add its examples")


def test_a_utf16_file_is_named_as_such(tmp_path: Path) -> None:
    spec, params = _classify(tmp_path, "t.tsv", "\n".join(_numbered()).encode("utf-16"))
    with pytest.raises(Gpt1Error, match=r"t.tsv: line 1: UTF-16 text"):
        load.load_task(spec, params.tasks, None)


def test_the_cli_refuses_a_file_mistake_in_one_line_writing_nothing(tmp_path: Path,
                                                                    capsys) -> None:
    from gpt1.__main__ import main
    from tests.helpers.cli import file_tree

    lines = _numbered()
    lines[6] = '"the quote opens,neg'
    (tmp_path / "t.csv").write_text("\n".join(lines), encoding="utf-8")
    raw = make_params_dict(tmp_path, {"tasks": {"custom": {"mine": {
        "file": str(tmp_path / "t.csv"), "text": "review", "label": "sentiment",
        "labels": ["neg", "pos"]}}}})
    raw["finetune"]["tasks"] = [*raw["finetune"]["tasks"], "mine"]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    before = file_tree(tmp_path)
    assert main(["--params", str(tmp_path / "p.yaml"), "prepare-task", "--task", "mine"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{tmp_path / 't.csv'}: line 7: a quote opened here is never closed" in line
    assert file_tree(tmp_path) == before
