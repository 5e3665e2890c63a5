"""Sources: mirror manifest, hub streaming through an injected loader, retries, no-network."""

from __future__ import annotations

import json

import pytest
from tests.helpers.corpus import write_corpus

from gpt1.data import sources
from gpt1.errors import Gpt1Error


def test_mirror_manifest_records_sha256_and_size(tmp_path, tiny_params) -> None:
    corpus = write_corpus(tmp_path / "mirror", n_books=3, n_paragraphs=2)
    (corpus / ".hidden").write_text("ignored")
    manifest = sources.download_corpus(tiny_params.data, str(tmp_path / "mirror"),
                                       tmp_path / "raw")
    assert [f["name"] for f in manifest["files"]] == ["book_00.txt", "book_01.txt",
                                                      "book_02.txt"]
    first = corpus / "book_00.txt"
    assert manifest["files"][0]["bytes"] == first.stat().st_size
    assert manifest["files"][0]["sha256"] == sources.sha256_file(first)
    on_disk = (tmp_path / "raw" / sources.MANIFEST_FILE).read_bytes()
    again = sources.download_corpus(tiny_params.data, str(tmp_path / "mirror"), tmp_path / "raw")
    assert again == manifest and on_disk == (tmp_path / "raw" / sources.MANIFEST_FILE).read_bytes()
    docs = sources.raw_documents(manifest)
    assert docs[0].read() == first.read_bytes()


def test_max_documents_caps_the_mirror(tmp_path, tiny_params) -> None:
    write_corpus(tmp_path / "mirror", n_books=4, n_paragraphs=1)
    cfg = tiny_params.data.model_copy(update={"max_documents": 2})
    manifest = sources.download_corpus(cfg, str(tmp_path / "mirror"), tmp_path / "raw")
    assert len(manifest["files"]) == 2


@pytest.mark.parametrize("mirror", [None, "does/not/exist"])
def test_no_mirror_says_how_to_set_it(tmp_path, tiny_params, mirror) -> None:
    with pytest.raises(Gpt1Error, match="paths.mirror_dir") as err:
        sources.download_corpus(tiny_params.data, mirror, tmp_path / "raw")
    assert "\n" not in str(err.value) and not (tmp_path / "raw").exists()


class FakeHub:
    """A load_dataset stand-in: fails `failures` times with `error`, then streams rows."""

    def __init__(self, rows, failures=0, error=ConnectionError("connection reset")):
        self.rows, self.failures, self.error, self.calls = rows, failures, error, []

    def __call__(self, name, split, streaming):
        self.calls.append((name, split, streaming))
        if len(self.calls) <= self.failures:
            raise self.error
        yield from self.rows


def _hub_cfg(tiny_params, **update):
    return tiny_params.data.model_copy(update={"source": "hub", **update})


def test_hub_streams_up_to_max_documents(tmp_path, tiny_params) -> None:
    hub = FakeHub([{"text": f"doc {i}", "id": i} for i in range(10)])
    manifest = sources.download_corpus(_hub_cfg(tiny_params, max_documents=4), None,
                                       tmp_path / "raw", load_dataset=hub)
    assert hub.calls == [("bookcorpus", "train", True)]
    assert manifest["files"][0]["documents"] == 4
    lines = (tmp_path / "raw" / sources.HUB_FILE).read_text().splitlines()
    assert [json.loads(x)["text"] for x in lines] == ["doc 0", "doc 1", "doc 2", "doc 3"]
    docs = sources.raw_documents(manifest)
    assert [d.read() for d in docs] == [b"doc 0", b"doc 1", b"doc 2", b"doc 3"]


def test_hub_retries_transient_errors_with_backoff(tmp_path, tiny_params) -> None:
    hub, waits = FakeHub([{"text": "a"}], failures=2), []
    sources.download_corpus(_hub_cfg(tiny_params, download_retries=3), None, tmp_path / "raw",
                            load_dataset=hub, sleep=waits.append)
    assert len(hub.calls) == 3 and waits == [2.0, 4.0]


def test_hub_without_network_and_mirror_is_one_clear_line(tmp_path, tiny_params) -> None:
    hub, waits = FakeHub([], failures=99, error=TimeoutError("timed out")), []
    with pytest.raises(Gpt1Error) as err:
        sources.download_corpus(_hub_cfg(tiny_params, download_retries=2), None,
                                tmp_path / "raw", load_dataset=hub, sleep=waits.append)
    msg = str(err.value)
    assert "no network" in msg and "paths.mirror_dir" in msg and "\n" not in msg
    assert len(hub.calls) == 3 and len(waits) == 2 and not (tmp_path / "raw").exists()


def test_hub_offline_mode_fails_at_once(tmp_path, tiny_params) -> None:
    error = ConnectionError("Couldn't reach 'bookcorpus' on the Hub (OfflineModeIsEnabled)")
    hub = FakeHub([], failures=99, error=error)
    with pytest.raises(Gpt1Error, match="no network"):
        sources.download_corpus(_hub_cfg(tiny_params), None, tmp_path / "raw",
                                load_dataset=hub, sleep=lambda s: None)
    assert len(hub.calls) == 1


def test_hub_missing_text_column_is_named(tmp_path, tiny_params) -> None:
    hub = FakeHub([{"content": "x"}])
    with pytest.raises(Gpt1Error, match="no column 'text'.*content"):
        sources.download_corpus(_hub_cfg(tiny_params), None, tmp_path / "raw", load_dataset=hub)
