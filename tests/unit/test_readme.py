"""The README is a user guide a newcomer reads in ten minutes, and its set-up and test commands
are the ones CI runs.

Ten minutes is measured, not capped in lines (a line cap invites packing paragraphs into long
lines): prose at PROSE_WORDS_PER_MINUTE, code blocks (commands, the code map) skimmed at
CODE_LINES_PER_MINUTE. No paragraph, list item or table row runs over UNIT_WORDS words: one
that long is a design note, and design lives in docs/.
"""

from __future__ import annotations

import re

from tests.helpers.repo import REPO

PROSE_WORDS_PER_MINUTE = 250
CODE_LINES_PER_MINUTE = 60
READ_MINUTES = 10
UNIT_WORDS = 120


def prose_and_code(text: str) -> tuple[str, list[str]]:
    """(the text outside fenced code blocks, the lines inside them)."""
    parts = re.split(r"^```.*$", text, flags=re.MULTILINE)
    prose = "\n".join(parts[0::2])
    code = [line for block in parts[1::2] for line in block.splitlines() if line.strip()]
    return prose, code


def reading_units(prose: str) -> list[str]:
    """Paragraphs, list items (with their continuation lines) and table rows of `prose`."""
    units: list[str] = []
    for para in re.split(r"\n\s*\n", prose):
        unit: list[str] = []  # the lines of this paragraph's current unit
        for line in para.strip("\n").splitlines():
            starts = line.startswith("|") or re.match(r"\s*(?:[-*]|\d+\.) ", line)
            if unit and (starts or unit[0].startswith("|")):
                units.append(" ".join(unit))
                unit = []
            unit.append(line.strip())
        units += [" ".join(unit)] if unit else []
    return units


def quick_start() -> list[str]:
    """The command lines of the README's Quick start block, comments removed."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_reads_in_ten_minutes() -> None:
    prose, code = prose_and_code((REPO / "README.md").read_text(encoding="utf-8"))
    minutes = len(prose.split()) / PROSE_WORDS_PER_MINUTE + len(code) / CODE_LINES_PER_MINUTE
    assert minutes <= READ_MINUTES, (f"README.md reads in {minutes:.1f} min ({len(prose.split())}"
                                      f" words, {len(code)} code lines); move design to docs/")


def test_no_readme_paragraph_packs_a_design_note() -> None:
    prose, _ = prose_and_code((REPO / "README.md").read_text(encoding="utf-8"))
    long = [f"{len(u.split())} words: {u[:60]}..." for u in reading_units(prose)
            if len(u.split()) > UNIT_WORDS]
    assert not long, f"README.md units over {UNIT_WORDS} words (move them to docs/): {long}"


def test_the_readers_split_prose_code_and_units() -> None:
    text = ("# T\n\none two\nthree\n\n```bash\nrun a\n\nrun b\n```\n- item one\n  more\n"
            "- item two\n\n| a | b |\n|---|---|\n")
    prose, code = prose_and_code(text)
    assert code == ["run a", "run b"] and "run" not in prose
    assert reading_units(prose) == ["# T", "one two three", "- item one more", "- item two",
                                    "| a | b |", "|---|---|"]


def test_ci_runs_the_readme_set_up_and_test_commands() -> None:
    setup, main_job, tests = quick_start()
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert setup == "bash setup.sh" and "dvc repro" in main_job
    assert setup in ci and tests in ci, f".ci/run lacks {setup!r} or {tests!r}"


def test_the_code_map_names_every_module() -> None:
    """"Where the code is" names each module and subpackage of gpt1/, each module of
    gpt1/stages/ (the stage families) and each module of pipelines/, so a new file cannot land
    without its line."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Where the code is", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    words = set(re.findall(r"[\w.]+/?", block))
    gpt1 = REPO / "gpt1"
    wanted = {p.name for p in gpt1.glob("*.py") if p.name != "__init__.py"}
    wanted |= {f"{p.name}/" for p in gpt1.iterdir() if (p / "__init__.py").is_file()}
    wanted |= {p.name for p in (REPO / "pipelines").glob("*.py") if p.name != "__init__.py"}
    assert not wanted - words, f"README.md's code map lacks {sorted(wanted - words)}"
    stages = sorted(p.name for p in (gpt1 / "stages").glob("*.py")
                    if p.name != "__init__.py" and not {p.name, p.stem} & words)
    assert not stages, f"README.md's code map lacks gpt1/stages/ modules {stages}"
