"""Cleaning: spec §5 standardisation, Gutenberg stripping, unusable files, duplicates."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from tests.helpers.corpus import make_book, write_corpus

from gpt1.__main__ import main
from gpt1.data import clean
from gpt1.errors import Gpt1Error
from gpt1.stages import data as data_stages


def test_standardize_text_follows_the_original_encoder() -> None:
    out = clean.standardize_text('He said—“don\'t”…  wait (a/b)´s\r\n\n  next_line!')
    tokens = out.split(" ")
    assert "-" in tokens and "..." in tokens and "—" not in out and "…" not in out
    assert ["do", "n't"] == tokens[tokens.index("do"):tokens.index("do") + 2]  # spaCy rules
    assert "( a / b )" in out and "next _ line !" in out
    assert "\n" in tokens and "  " not in out and not out.startswith(" ")
    assert "'" in out and "´" not in out


def test_standardize_text_runs_ftfy_first() -> None:
    assert clean.standardize_text("cafÃ©") == "café"


def test_standardize_texts_matches_single_calls() -> None:
    texts = ["One, two.\nThree!", "", "  spaced   out  ", "a\n\n\nb"]
    assert clean.standardize_texts(texts) == [clean.standardize_text(t) for t in texts]


def test_strip_gutenberg_keeps_the_body_only() -> None:
    text, flags = clean.strip_gutenberg(make_book(3).replace("\r\n", "\n"))
    assert "START OF" not in text and "END OF" not in text and "General Terms" not in text
    assert "This eBook is for the use" not in text and flags == ("gutenberg_stripped",)


def test_missing_end_marker_keeps_to_end_of_file() -> None:
    book = make_book(4, end_marker=False) + "LAST LINE"
    text, flags = clean.strip_gutenberg(book)
    assert text.rstrip().endswith("LAST LINE") and "no_end_marker" in flags


def test_missing_start_marker_keeps_the_text() -> None:
    assert clean.strip_gutenberg("plain text") == ("plain text", ("no_start_marker",))


def test_unwrap_paragraphs_joins_hard_wraps() -> None:
    assert clean.unwrap_paragraphs("one\ntwo\n\n\nthree\n  four\n \nfive") == (
        "one two\nthree four\nfive")


def test_decode_raw_normalises_bom_and_crlf(tiny_params) -> None:
    text, reason = clean.decode_raw("\ufeffa\r\nb\rc".encode(), tiny_params.clean)
    assert (text, reason) == ("a\nb\nc", None)


def _write_params(tmp_path, make_params_dict_overrides=None) -> str:
    from tests.helpers.params import make_params_dict

    raw = make_params_dict(tmp_path, make_params_dict_overrides)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_unusable_files_are_skipped_and_counted(tmp_path, make_params, capsys) -> None:
    """Non-UTF-8, binary, empty, 20 MB without newline, whitespace-only -> counted skips."""
    corpus = write_corpus(tmp_path / "mirror", n_books=3, n_paragraphs=5)
    (corpus / "latin1.txt").write_bytes("caf\xe9 ".encode("latin-1") * 100)
    (corpus / "binary.txt").write_bytes(bytes(range(256)) * 10)
    (corpus / "empty.txt").write_bytes(b"")
    (corpus / "oneline.txt").write_bytes(b"x" * 20_000_000)
    (corpus / "blank.txt").write_bytes(b"  \r\n\t\n   ")
    (corpus / "dup.txt").write_bytes((corpus / "book_01.txt").read_bytes())
    (corpus / "longline.txt").write_bytes(b"y" * 150_000)
    params = make_params({"clean": {"workers": 1}})
    data_stages.download_corpus(params)
    stats = data_stages.clean_corpus(params)
    assert stats["dropped"] == {
        "binary": 1, "not_utf8": 1, "empty": 1, "whitespace_only": 1, "too_large": 1,
        "line_too_long": 1, "too_short": 0, "duplicate": 1,
    }
    assert stats["documents"] == 3 and "oneline.txt: too_large" in stats["skipped_files"]
    df = pd.read_parquet(params.paths.clean_corpus)
    assert list(df["doc_id"]) == ["book_00.txt", "book_01.txt", "book_02.txt"]
    assert df["text"].str.len().tolist() == df["n_chars"].tolist()
    assert not df["text"].str.contains("Gutenberg").any()
    metrics = json.loads((tmp_path / "reports/metrics/clean_corpus.json").read_text())
    assert metrics == {"documents": 3}  # the score; counts by reason go to the sidecar
    info = json.loads((tmp_path / "reports/metrics/clean_corpus.info.json").read_text())
    assert info["dropped"]["binary"] == 1 and info["config_hash"] == params.digest()


def test_nothing_usable_is_one_line_error_and_no_output(tmp_path, capsys) -> None:
    corpus = tmp_path / "mirror" / "corpus"
    corpus.mkdir(parents=True)
    (corpus / "binary.bin").write_bytes(b"\x00\x01\x02")
    (corpus / "empty.txt").write_bytes(b"")
    params_file = _write_params(tmp_path, {"clean": {"workers": 1}})
    assert main(["--params", params_file, "download_corpus"]) == 0
    capsys.readouterr()
    assert main(["--params", params_file, "clean_corpus"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("gpt1 clean_corpus: error:")]
    assert len(errors) == 1 and "no document left after cleaning" in errors[0]
    assert "Traceback" not in err
    assert not (tmp_path / "data/clean/corpus.parquet").exists()


def test_changed_raw_file_is_refused(tmp_path, make_params) -> None:
    corpus = write_corpus(tmp_path / "mirror", n_books=2, n_paragraphs=3)
    params = make_params({"clean": {"workers": 1}})
    data_stages.download_corpus(params)
    (corpus / "book_00.txt").write_bytes(b"tampered")
    with pytest.raises(Gpt1Error, match="changed since download_corpus"):
        data_stages.clean_corpus(params)



def test_a_killed_cleaning_worker_stops_the_stage_instead_of_hanging(make_params) -> None:
    """SIGKILL a cleaning worker while the workers start: one line (Gpt1Error), in seconds; a
    multiprocessing.Pool would wait forever for the document the dead worker held (one of the
    kills benchmarks/chaos.py makes)."""
    import threading
    import time

    import psutil

    cfg = make_params({"clean": {"workers": 2}}).clean
    docs = [clean.RawDocument(f"d{i}", f"d{i}.txt", 10, "0" * 64, data=make_book(i).encode())
            for i in range(64)]  # outlasts the workers' start

    def kill_a_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            workers = [p for p in psutil.Process().children()
                       if "spawn_main" in " ".join(p.cmdline())]
            if workers:
                workers[0].kill()
                return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    started = time.monotonic()
    with pytest.raises(Gpt1Error, match="cleaning worker process died"):
        clean.clean_documents(docs, cfg)
    killer.join()
    assert time.monotonic() - started < 60


def test_a_worker_killed_while_the_pool_spawns_the_next_is_the_same_one_line(
        make_params, monkeypatch) -> None:
    """The race the test above can meet: the first worker dies while the pool spawns the second,
    whose spawn then fails on the pool's closed queues (OSError "handle is closed"). Made
    certain here: the second spawn waits until the pool has seen the death and closed its
    queues. It must read as the same one line, not an OSError."""
    import time
    from concurrent.futures import ProcessPoolExecutor

    spawn = ProcessPoolExecutor._spawn_process

    def spawn_once_the_first_worker_is_dead(pool: ProcessPoolExecutor) -> None:
        if pool._processes:
            first = next(iter(pool._processes.values()))
            first.kill()
            first.join()
            deadline = time.monotonic() + 30
            while not pool._call_queue._closed and time.monotonic() < deadline:
                time.sleep(0.01)
        spawn(pool)

    monkeypatch.setattr(ProcessPoolExecutor, "_spawn_process", spawn_once_the_first_worker_is_dead)
    cfg = make_params({"clean": {"workers": 2}}).clean
    docs = [clean.RawDocument(f"d{i}", f"d{i}.txt", 10, "0" * 64, data=make_book(i).encode())
            for i in range(4)]
    with pytest.raises(Gpt1Error, match="cleaning worker process died"):
        clean.clean_documents(docs, cfg)


def test_standardize_texts_answers_from_the_repositorys_table(tmp_path, monkeypatch) -> None:
    """A carry's table of standardised texts (a GPU host without spaCy) answers for the texts
    it holds; any other text is standardised as ever."""
    import pandas as pd

    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    pd.DataFrame({"text": ["Hello, world!"], "standardized": ["from the table"]}).to_parquet(
        tmp_path / clean.STANDARDIZED_TEXTS)
    monkeypatch.chdir(tmp_path)
    assert clean.standardize_texts(["Hello, world!", "It's 5-6 p.m.", "Hello, world!"]) == [
        "from the table", clean.standardize_text("It's 5-6 p.m."), "from the table"]
