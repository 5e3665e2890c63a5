"""The README is a user guide: short, and its set-up and test commands are the ones CI runs."""

from __future__ import annotations

from tests.helpers.repo import REPO

MAX_README_LINES = 252  # 246 + the verdict block (gpt1 verdicts --readme, issue 31 S4)


def quick_start() -> list[str]:
    """The command lines of the README's Quick start block, comments removed."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_stays_a_guide() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md: {len(lines)} lines; move design to docs/"


def test_ci_runs_the_readme_set_up_and_test_commands() -> None:
    setup, main_job, tests = quick_start()
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert setup == "bash setup.sh" and "dvc repro" in main_job
    assert setup in ci and tests in ci, f".ci/run lacks {setup!r} or {tests!r}"
