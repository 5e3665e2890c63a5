"""The CLI's refusal contract (exit 2, one line, nothing on stdout) and a folder's bytes."""

from __future__ import annotations

from pathlib import Path

from gpt1.__main__ import main


def file_tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes: what "nothing written" compares."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def refused(capsys, argv: list[str], *needles: str) -> str:
    """`gpt1 argv` exits 2 with one line on stderr holding every needle, nothing on stdout."""
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and not captured.out, captured
    assert "internal error" not in lines[0], lines[0]
    assert all(n in lines[0] for n in needles), (lines[0], needles)
    return lines[0]
