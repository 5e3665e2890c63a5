"""Progress bars when stderr is not a terminal: plain log lines, no control codes (item 6)."""

from __future__ import annotations

import logging
import time

import pytest

from gpt1.progress import progress


def test_not_a_terminal_gives_log_lines_and_no_escape_codes(
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TQDM_MININTERVAL", "0")
    caplog.set_level(logging.INFO, logger="gpt1.progress")
    with progress(total=3, desc="outer", unit="step") as bar:
        for _ in range(3):
            for _ in progress(range(5), desc="inner", nested=True):
                time.sleep(0.001)
            bar.update(1)
    err = capsys.readouterr().err
    assert "\x1b[" not in err and "\r" not in err, repr(err)
    lines = [r.getMessage() for r in caplog.records]
    assert lines and all(line.startswith("outer:") for line in lines), lines
    assert lines[-1].startswith("outer: done, 3 step"), lines


def test_log_lines_are_rate_limited(caplog: pytest.LogCaptureFixture,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TQDM_MININTERVAL", "3600")
    caplog.set_level(logging.INFO, logger="gpt1.progress")
    for _ in progress(range(1000), desc="many"):
        pass
    assert len(caplog.records) <= 2  # the start and the end, not one per item


def test_one_plain_line_per_milestone_and_the_end_once(
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No bar when stderr is not a terminal: a line at 25, 50 and 75 %, one at the end (the
    100 % was logged twice), none drawn with bar characters."""
    monkeypatch.setenv("TQDM_MININTERVAL", "0")
    caplog.set_level(logging.INFO, logger="gpt1.progress")
    for _ in progress(range(200), desc="clean", unit="doc"):
        pass
    for _ in progress(iter(range(5)), desc="open", unit="file"):  # no total: the end only
        pass
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0] for line in lines] == [
        "clean:  25%", "clean:  50%", "clean:  75%", "clean: done, 200 doc in 00:00",
        "open: done, 5 file in 00:00"], lines
    assert not any("|" in line or "#" in line for line in lines)
    assert capsys.readouterr().err == ""

