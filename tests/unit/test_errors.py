"""The CLI's one error boundary and the input gates: every bad input ends in one line
naming the file (row, key) and the problem, a non-zero exit, no traceback, no partial output."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gpt1 import bpe, checkpoint
from gpt1.__main__ import main
from gpt1.boundary import guarded
from gpt1.config import Params, ParamsError, load_params, parse_params
from gpt1.errors import Gpt1Error
from gpt1.records import read_metrics
from gpt1.stages import pretrain as pretrain_stages
from gpt1.tasks.load import load_task, validate_tables, write_tables
from gpt1.tasks.registry import TASKS
from tests.helpers.corpus import write_corpus
from tests.helpers.params import make_params_dict
from tests.helpers.repo import REPO
from tests.helpers.runs import prepare_run
from tests.helpers.task_mirror import write_mirror


def _one_line(capsys) -> str:
    """The CLI's one line on stderr (progress bars aside; logging goes to caplog here)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("gpt1 ")]
    return line


# ------------------------------------------------------------------ the boundary


def test_unexpected_error_is_one_line_naming_the_traceback_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def bug() -> None:
        {}["missing"]

    assert guarded("report", bug) == 1
    line = _one_line(capsys)
    match = re.fullmatch(r"gpt1 report: internal error: KeyError: 'missing'; traceback in (\S+)",
                         line)
    assert match, line
    log = Path(match.group(1))
    assert log.parent == tmp_path / "cache" / "gpt1" / "errors"
    assert "Traceback" in log.read_text() and "def bug" not in line


def test_environment_os_error_names_the_file(capsys):
    def denied() -> None:
        raise PermissionError(13, "Permission denied", "/data/out.parquet")

    assert guarded("clean_corpus", denied) == 2
    assert _one_line(capsys) == "gpt1 clean_corpus: error: /data/out.parquet: Permission denied"


def test_ctrl_c_outside_a_training_loop_is_one_line_exit_130(capsys):
    def interrupted() -> None:
        raise KeyboardInterrupt

    assert guarded("shard_corpus", interrupted) == 130
    assert _one_line(capsys).startswith("gpt1 shard_corpus: interrupted;")


# ------------------------------------------------------------------ params


def _params_text() -> str:
    return (REPO / "params.yaml").read_text()


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", ".NaN"])
def test_non_finite_numbers_are_refused(value, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(re.sub(r"(?ms)^(pretrain:.*?^  lr_max: )\S+", rf"\g<1>{value}",
                           _params_text(), count=1))
    with pytest.raises(ParamsError, match=r"pretrain\.lr_max: Input should be a finite number"):
        load_params(path)


@pytest.mark.parametrize("section", ["finetune", "ablations", "layers"])
def test_unknown_task_name_in_a_task_list_is_named(section):
    raw = yaml.safe_load(_params_text())
    raw[section]["tasks"] = [*raw[section]["tasks"], "sst3"]
    with pytest.raises(ParamsError, match=rf"p.yaml: {section}\.tasks: unknown task 'sst3'"):
        parse_params(raw, "p.yaml")


def test_key_written_twice_is_refused_with_both_lines(tmp_path):
    text = _params_text()
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith("  lr_max:"))
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("  lr_max:", "  lr_max: 1.0\n  lr_max:", 1))
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert str(info.value) == (f"{path}: not valid YAML (key 'lr_max' written twice "
                               f"(lines {line} and {line + 1}))")


def test_cli_bad_params_is_one_line_exit_2(tmp_path, capsys):
    raw = make_params_dict(tmp_path)
    raw["finetune"]["lr"] = float("nan")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["--params", str(path), "finetune", "--task", "sst2"]) == 2
    assert _one_line(capsys) == (f"gpt1 finetune: error: {path}: finetune.lr: Input should be "
                                 "a finite number")


# ------------------------------------------------------------------ corpus entries


def _params_file(tmp_path: Path, overrides: dict | None = None) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(make_params_dict(tmp_path, overrides)))
    return path


def test_corpus_entries_that_are_not_readable_files_are_skipped_and_counted(tmp_path, caplog):
    """A directory named like a book, a FIFO, dangling and looping symlinks, and a file that
    cannot be read (I/O error, even for root): skipped by reason in the log and the metrics."""
    corpus = write_corpus(tmp_path / "mirror", n_books=2, n_paragraphs=1)
    (corpus / "book_dir.txt").mkdir()
    os.mkfifo(corpus / "book_fifo.txt")
    (corpus / "book_gone.txt").symlink_to(corpus / "nowhere.txt")
    (corpus / "book_loop.txt").symlink_to(corpus / "book_loop.txt")
    (corpus / "book_eio.txt").symlink_to("/proc/self/mem")  # a regular file reads fail on
    assert main(["--params", str(_params_file(tmp_path)), "download_corpus"]) == 0
    metrics = read_metrics(tmp_path / "reports/metrics")["download_corpus"]  # scores + sidecar
    assert metrics["files"] == 2
    assert metrics["skipped"] == {"not_a_file": 2, "dangling_symlink": 1, "symlink_loop": 1,
                                  "unreadable": 1}
    warned = {r.getMessage() for r in caplog.records if r.levelname == "WARNING"}
    assert f"{corpus / 'book_gone.txt'}: skipped (dangling_symlink)" in warned
    assert f"{corpus / 'book_eio.txt'}: skipped (unreadable)" in warned


def test_corpus_without_a_readable_file_is_one_line_and_no_output(tmp_path, capsys):
    corpus = tmp_path / "mirror" / "corpus"
    corpus.mkdir(parents=True)
    (corpus / "book_eio.txt").symlink_to("/proc/self/mem")
    (corpus / "book_dir.txt").mkdir()
    assert main(["--params", str(_params_file(tmp_path)), "download_corpus"]) == 2
    assert _one_line(capsys) == (
        f"gpt1 download_corpus: error: {corpus}: corpus directory holds no readable files "
        "(skipped: {'not_a_file': 1, 'unreadable': 1})")
    assert not (tmp_path / "data").exists()


# ------------------------------------------------------------------ task files


def _mirror_params(tmp_path: Path) -> Path:
    write_mirror(tmp_path / "mirror")
    return _params_file(tmp_path, {"tasks": {"dev_examples": {"story_cloze": 3}}})


def test_non_utf8_byte_in_a_task_tsv_names_file_line_and_column(tmp_path, capsys):
    params_file = _mirror_params(tmp_path)
    bad = tmp_path / "mirror/tasks/SST-2/dev.tsv"
    lines = bad.read_bytes().split(b"\n")
    lines[2] = b"caf\xe9 " + lines[2]  # latin-1, as a mis-saved file holds
    bad.write_bytes(b"\n".join(lines))
    assert main(["--params", str(params_file), "prepare_task", "--task", "sst2"]) == 2
    assert _one_line(capsys) == (f"gpt1 prepare_task: error: {bad}: line 3: not UTF-8 (byte "
                                 "0xe9 at column 4); re-save the file as UTF-8")
    assert not (tmp_path / "data/tasks/sst2").exists()


def test_non_utf8_byte_in_a_task_csv_names_file_and_line(tmp_path, make_params):
    write_mirror(tmp_path / "mirror")
    bad = tmp_path / "mirror/tasks/SciTail/scitail_test.csv"
    bad.write_bytes(bad.read_bytes().replace(b"\n", b"\n\xff\xfe", 4).replace(b"\xff\xfe", b"", 3))
    with pytest.raises(Gpt1Error, match=r"line 5: not UTF-8 \(byte 0xff at column 1\)") as info:
        load_task(TASKS["scitail"], make_params().tasks, tmp_path / "mirror")
    assert str(info.value).startswith(f"{bad}: ")


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda a: a.pop("questions"), "missing column 'questions'"),
    (lambda a: a.update(options=None), "field 'options' is null, expected a list"),
    (lambda a: a.update(questions="Why?"), "field 'questions' is a string, expected a list"),
    (lambda a: a["options"].__setitem__(1, None), "field 'options': item 1 is null"),
    (lambda a: a["options"][0].__setitem__(2, 7), "field 'options[0]': item 2 is an integer"),
    (lambda a: a.update(article=["a"]), "field 'article' is a list, expected a string"),
    (lambda a: a["answers"].__setitem__(0, 1), "field 'answers': item 0 is an integer"),
])
def test_race_article_of_the_wrong_shape_is_named(edit, problem, tmp_path, make_params):
    write_mirror(tmp_path / "mirror")
    path = tmp_path / "mirror/tasks/RACE/RACE/train/high/1.txt"
    art = json.loads(path.read_text())
    edit(art)
    path.write_text(json.dumps(art))
    with pytest.raises(Gpt1Error) as info:
        load_task(TASKS["race"], make_params().tasks, tmp_path / "mirror")
    assert str(info.value).startswith(f"{path}: line 1: {problem}")


@pytest.mark.parametrize(("value", "problem"), [
    (None, "field 'text_b' is null, expected a string"),
    (["a", "b"], "field 'text_b' is a list, expected a string"),
])
def test_json_example_with_a_non_string_text_is_named(value, problem, tmp_path, make_params):
    write_mirror(tmp_path / "mirror")
    path = tmp_path / "mirror/tasks/MNLI/train_subset_10k/dev.json"
    data = json.loads(path.read_text())
    data["3"]["text_b"] = value  # was read as the text "None" / "['a', 'b']"
    path.write_text(json.dumps(data))
    with pytest.raises(Gpt1Error, match=re.escape(f"{path}: line '3': {problem}")):
        load_task(TASKS["mnli"], make_params().tasks, tmp_path / "mirror")


def test_header_only_evaluation_split_fails_prepare_task(tmp_path, capsys):
    params_file = _mirror_params(tmp_path)
    bad = tmp_path / "mirror/tasks/SST-2/dev.tsv"
    bad.write_text("sentence\tlabel\n")
    assert main(["--params", str(params_file), "prepare_task", "--task", "sst2"]) == 2
    assert _one_line(capsys) == (f"gpt1 prepare_task: error: {bad}: line 2: no data rows "
                                 "(an empty split)")
    assert not (tmp_path / "data/tasks/sst2").exists()


def test_a_split_that_ends_up_empty_is_refused_before_writing(tmp_path, make_params):
    write_mirror(tmp_path / "mirror")
    for article in (tmp_path / "mirror/tasks/RACE/RACE/dev").glob("*/*.txt"):
        article.unlink()
    tables = load_task(TASKS["race"], make_params().tasks, tmp_path / "mirror")
    with pytest.raises(Gpt1Error, match=r"^race/dev: no rows \(from .*\); every split needs"):
        validate_tables(tables, TASKS["race"], tmp_path / "mirror/tasks")


# ------------------------------------------------------------------ damaged artifacts


@pytest.fixture
def tokenized(tmp_path) -> tuple[Path, Params]:
    """A params file (and its Params) whose tokenizer and shards exist."""
    return prepare_run(tmp_path, "run", {})


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda ix: ix["splits"]["train"].update(shards=None), "damaged: splits.train.shards is not"),
    (lambda ix: ix["splits"]["train"]["shards"][0].pop("tokens"), "damaged: splits.train"),
    (lambda ix: ix.update(splits=[]), "no 'train' split; re-run shard_corpus"),
])
def test_damaged_shards_index_is_one_line(edit, problem, tokenized, capsys):
    params_file, params = tokenized
    index = Path(params.paths.shards) / "index.json"
    data = json.loads(index.read_text())
    edit(data)
    index.write_text(json.dumps(data))
    assert main(["--params", str(params_file), "pretrain"]) == 2
    assert _one_line(capsys).startswith(f"gpt1 pretrain: error: {index}: {problem}")
    assert not checkpoint.pretrain_dir(params, "transformer").exists()


@pytest.mark.parametrize(("content", "problem"), [
    (b'{"special_tokens": null}', "damaged: no list of special_tokens"),
    (b"[1, 2]", "damaged: no list of special_tokens"),
    (b'{"special_tokens": ["\xff"]}', "not valid JSON ('utf-8' codec can't decode"),
])
def test_damaged_tokenizer_metadata_is_one_line(content, problem, tokenized, capsys):
    params_file, params = tokenized
    meta = Path(params.paths.tokenizer) / bpe.META_FILE
    meta.write_bytes(content)
    assert main(["--params", str(params_file), "pretrain"]) == 2
    assert _one_line(capsys).startswith(f"gpt1 pretrain: error: {meta}: {problem}")


@pytest.mark.parametrize("damage", ["truncate", "columns"])
def test_damaged_task_parquet_is_one_line(damage, tokenized, capsys):
    params_file, params = tokenized
    raw = yaml.safe_load(params_file.read_text())
    raw["finetune"]["init"] = "scratch"
    params_file.write_text(yaml.safe_dump(raw))
    task_dir = Path(params.paths.tasks) / "sst2"
    table = pd.DataFrame({"id": ["a"], "text_a": ["x"], "text_b": [""], "choices": [[]],
                          "label": [0], "group": [""], "source": ["f:1"]})
    write_tables({s: table for s in ("train", "dev", "test")}, task_dir)
    bad = task_dir / "dev.parquet"
    if damage == "truncate":
        bad.write_bytes(bad.read_bytes()[:-40])
        problem = "unreadable parquet ("
    else:
        table.drop(columns="label").to_parquet(bad)
        problem = "not a canonical task table (no column 'label')"
    assert main(["--params", str(params_file), "finetune", "--task", "sst2"]) == 2
    assert _one_line(capsys).startswith(f"gpt1 finetune: error: {bad}: {problem}")
    assert not Path(params.paths.finetuned).exists()


def test_pretrained_shape_other_than_params_is_refused_before_any_work(tmp_path, capsys):
    params_file, params = prepare_run(tmp_path, "run", {"pretrain": {"max_tokens": 8 * 4 * 32}})
    pretrain_stages.pretrain(params)
    raw = yaml.safe_load(params_file.read_text())
    raw["model"].update(n_layer=3, n_positions=64)
    params_file.write_text(yaml.safe_dump(raw))
    for stage in (["finetune", "--task", "sst2"], ["zeroshot"]):
        assert main(["--params", str(params_file), *stage]) == 2
        meta = checkpoint.pretrain_dir(params, "transformer") / checkpoint.MODEL_META
        assert _one_line(capsys) == (
            f"gpt1 {stage[0]}: error: {meta}: model shape arch=gpt1 n_positions=32 n_embd=32 "
            "n_layer=2 n_head=2 n_inner=128 was pre-trained, params.model says arch=gpt1 "
            "n_positions=64 n_embd=32 n_layer=3 n_head=2 n_inner=128; restore params.model or "
            "re-run pre-training")
    assert not Path(params.paths.finetuned).exists()
