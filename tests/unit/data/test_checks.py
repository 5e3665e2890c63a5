"""great-expectations gates: the corpus suite, the generic validate_frame, one-line summary."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from gpt1.data import checks
from gpt1.errors import Gpt1Error
from gpt1.stages import data as data_stages


@pytest.fixture
def cfg(tiny_params):
    return tiny_params.checks.model_copy(update={"min_document_chars": 5,
                                                 "max_document_chars": 100,
                                                 "max_mojibake_frac": 0.2})


def test_clean_corpus_passes(cfg) -> None:
    df = pd.DataFrame({"doc_id": ["a", "b"], "text": ["hello world", "another \n text"]})
    report = checks.check_corpus(df, cfg)
    assert report["success"] and report["failed"] == 0
    assert checks.summarize(report) == "corpus: all 6 checks passed"


def test_each_violation_is_reported(cfg) -> None:
    df = pd.DataFrame({
        "doc_id": ["a", "b", "b", "d", "e", "f"],
        "text": ["hello world", "nul\x00here", "fine text", "x", "cafÃ© x", "naÃ¯ve Ã©t"],
    })
    report = checks.check_corpus(df, cfg)
    failed = {c["label"] for c in report["checks"] if not c["success"]}
    assert failed == {"unique ids", "length bounds", "no NUL/control characters",
                      "mojibake below threshold"}
    line = checks.summarize(report)
    assert line.startswith("corpus: 4/6 checks failed: ") and "\n" not in line
    assert "'nul\\x00here'" in line


def test_validate_frame_generic_rules() -> None:
    df = pd.DataFrame({"label": [0, 1, 2], "text": ["a", "b", "c"], "score": [0.1, 0.5, 7.0]})
    rules = [
        {"kind": "in_set", "column": "label", "values": [0, 1]},
        {"kind": "between", "column": "score", "min": 0, "max": 5, "label": "score range"},
        {"kind": "column_exists", "column": "text"},
        {"kind": "row_count_between", "min": 1, "max": 10},
    ]
    report = checks.validate_frame(df, "toy", rules)
    assert [c["success"] for c in report["checks"]] == [False, False, True, True]
    assert report["checks"][0]["examples"] == [2]
    assert [c["rows"] for c in report["checks"]] == [[2], [2], [], []]  # GX's own row index
    assert "data_docs" not in report
    json.dumps(report)  # JSON-ready
    with pytest.raises(ValueError, match="unknown rule kind"):
        checks.validate_frame(df, "toy", [{"kind": "nope", "column": "text"}])


def test_check_stage_writes_report_and_fails_in_one_line(make_params, tmp_path) -> None:
    params = make_params({"checks": {"min_document_chars": 5}})
    path = tmp_path / params.paths.clean_corpus
    path.parent.mkdir(parents=True)
    pd.DataFrame({"doc_id": ["a", "a"], "text": ["good text", "more text"]}).to_parquet(path)
    with pytest.raises(Gpt1Error, match="unique ids") as err:
        data_stages.check_corpus(params)
    assert "\n" not in str(err.value)
    report = json.loads(open(params.paths.corpus_checks).read())
    assert report["success"] is False and report["failed"] == 1
    assert report["checks"][1]["rows"] == [0, 1]  # both rows sharing the id "a"
    docs = Path(params.paths.data_docs) / "corpus"
    assert report["data_docs"] == str(docs / "index.html") and str(docs) in str(err.value)
    assert "corpus_suite" in (docs / "index.html").read_text()
    (page,) = (docs / "validations" / "corpus_suite").rglob("*.html")
    assert "values must be unique" in page.read_text()  # the failed rule, rendered by GX
    assert not list(docs.parent.glob(".corpus*"))  # built beside, then renamed


class _Tables(HTMLParser):
    """The text and links of every table row of a page, scripts not run (as offline)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.links: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "a" and self._cell is not None:
            self.links.append(dict(attrs)["href"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_data_docs_index_lists_the_validations_offline(cfg, tmp_path, monkeypatch) -> None:
    """The Data Docs index holds its list of validations as HTML (GX fills it from CDN
    scripts, which do not load offline), naming the run (the stage) and the asset, linked to
    the validation page, which names the asset too. Built with the network off."""
    import socket

    def no_network(*args, **kwargs):
        raise OSError("network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    df = pd.DataFrame({"doc_id": ["a", "b"], "text": ["Some text.", "More text."]})
    report = checks.validate_frame(df, "corpus", checks.corpus_rules(cfg),
                                   tmp_path / "docs", asset="clean_corpus",
                                   run_name="check_corpus")
    index = Path(report["data_docs"])
    page = _Tables()
    page.feed(index.read_text(encoding="utf-8"))
    assert ["Status", "Run Time", "Run Name", "Asset Name", "Batch ID",
            "Expectation Suite"] in page.rows
    (row,) = [r for r in page.rows if r and r[0] == "✔ Success"]  # an icon offline too
    assert row[2:4] == ["check_corpus", "clean_corpus"] and row[5] == "corpus_suite"
    validation = index.parent / next(x for x in page.links if x.startswith("validations/"))
    text = validation.read_text(encoding="utf-8")
    assert "Data asset: clean_corpus" in text and "__none__" not in text


def test_one_data_docs_home_with_status_icons_offline_and_small_sites(cfg, tmp_path) -> None:
    """The home page lists every gate with a status icon drawn without network (GX's icons
    are Font Awesome from a CDN: blank offline) and links each gate's site; a site's pages
    carry the same icons and the site drops GX's unused 3.4 MB of logos."""
    good = pd.DataFrame({"doc_id": ["a", "b"], "text": ["Some text.", "More text."]})
    bad = pd.DataFrame({"doc_id": ["a", "a"], "text": ["Some text.", "More text."]})
    root = tmp_path / "docs"
    corpus = checks.validate_frame(good, "corpus", checks.corpus_rules(cfg), root / "corpus")
    split = checks.validate_frame(bad, "rte_dev", checks.corpus_rules(cfg),
                                  root / "tasks" / "rte" / "dev")
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    (tmp_path / "rte.json").write_text(json.dumps({"dev": split}))
    home = checks.write_home(root, {"corpus": tmp_path / "corpus.json",
                                    "rte": tmp_path / "rte.json",
                                    "sst2": tmp_path / "missing.json"})
    page = _Tables()
    page.feed(home.read_text(encoding="utf-8"))
    assert [r[:2] for r in page.rows[1:]] == [["corpus", "✔ passed"], ["rte / dev", "✘ failed"],
                                              ["sst2", "not run"]]
    assert all((root / link).is_file() for link in page.links) and len(page.links) == 2
    site = root / "tasks" / "rte" / "dev"
    pages = [p.read_text(encoding="utf-8") for p in site.rglob("*.html")]
    assert not any('<i class="fas' in text for text in pages)
    assert any("✘" in text for text in pages if "validations" in text)
    assert [p.name for p in (site / "static" / "images").iterdir()] == ["favicon.ico"]
    assert sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) < 1_000_000
