"""Readers of docs/paper.md, the spec the code cites as `spec §n`, for the tests that check
params, rendered tables and code comments against it."""

from __future__ import annotations

import re

import yaml

from tests.helpers.repo import REPO

SPEC = REPO / "docs" / "paper.md"
# A numbered section heading, "## 3. The 12 tasks ...".
HEADING = re.compile(r"^## (\d+)\. ", re.MULTILINE)
# A number as the spec writes it: thousands commas, decimals, exponent, optional percent.
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?%?")
KEY_COLUMN = "configs/paper.yaml"


def spec_text() -> str:
    return SPEC.read_text(encoding="utf-8")


def sections(text: str) -> dict[int, str]:
    """Section number -> its text, heading included, up to the next numbered heading."""
    starts = list(HEADING.finditer(text))
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return {int(m.group(1)): text[m.start() : end] for m, end in zip(starts, ends, strict=True)}


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of `text`: its rows (header first, separator left out) as
    stripped cells."""
    found: list[list[list[str]]] = []
    in_table = False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table:
            found.append([])
            in_table = True
        if not re.fullmatch(r"[|\-\s]+", line):
            found[-1].append([c.strip() for c in line.strip().strip("|").split("|")])
    return found


def table_rows(text: str) -> list[list[str]]:
    """The rows of every table of `text`, headers included."""
    return [row for table in tables(text) for row in table]


def spec_number(cell: str) -> int | float:
    """The number a value cell starts with: '2,000 updates' -> 2000, '0.2% of' -> 0.002."""
    m = NUMBER.match(cell)
    if m is None:
        raise ValueError(f"{SPEC}: value cell {cell!r} does not start with a number")
    token = m.group().replace(",", "")
    if token.endswith("%"):
        return float(token[:-1]) / 100
    return float(token) if re.search(r"[.e]", token) else int(token)


def keyed_values(section_text: str) -> dict[str, object]:
    """configs/paper.yaml key -> value, from the section's tables whose last column names the
    key: `key` takes the number the value cell starts with (or the cell's backticked text),
    `key = value` takes the YAML value written after ' = '."""
    out: dict[str, object] = {}
    for header, *rows in tables(section_text):
        if header[-1] != KEY_COLUMN:
            continue
        for _, value, keys in rows:
            for item in re.findall(r"`([^`]+)`", keys):
                key, eq, written = item.partition(" = ")
                if eq:
                    out[key] = yaml.safe_load(written)
                elif value.startswith("`"):
                    out[key] = value.split("`")[1]
                else:
                    out[key] = spec_number(value)
    return out
