"""The plan a study runs under, from git: the commit that fixed docs/study.md, whether it is
an ancestor of the run and touches no result, and every later commit that changes the plan or
the analysis code (the report's deviations section)."""

from __future__ import annotations

from gpt1.config import Params
from gpt1.repo import git


def plan_commit(params: Params) -> str:
    """The commit that fixed the plan: report.plan_commit, else the last commit that touched
    docs/study.md (git), else `unknown`."""
    if params.report.plan_commit:
        return params.report.plan_commit
    _, out = git("log", "-1", "--format=%h", "--", "docs/study.md", timeout=10)
    return out or "unknown (docs/study.md not committed)"


def plan_check(commit: str) -> str:
    """Whether the plan commit is an ancestor of the checked-out commit and touches no result
    (nothing under reports/, no dvc.lock), from git."""
    code, _ = git("merge-base", "--is-ancestor", commit, "HEAD", timeout=10)
    if code not in (0, 1):
        return "not found in this clone's git history"
    code_files, files = git("show", "--name-only", "--format=", commit, timeout=10)
    results = [f for f in files.splitlines() if f.startswith("reports/") or f == "dvc.lock"]
    return (("an ancestor of HEAD" if code == 0 else "NOT an ancestor of HEAD") + "; "
            + ("touches no result" if not results and code_files == 0
               else f"touches results: {', '.join(results) or 'unknown'}"))


ANALYSIS_PATHS = ("docs/study.md", "configs/cpu-study.yaml", "gpt1/report", "gpt1/stats.py",
                  "gpt1/scoring.py", "gpt1/records.py")
"""The plan and the code that turns records into verdicts: a commit after the plan commit that
touches any of them is printed in the report."""


def analysis_changes(commit: str) -> list[str] | None:
    """`<hash> <subject>` of every commit after `commit` (to HEAD) touching ANALYSIS_PATHS;
    None when git cannot tell (no such commit, no git)."""
    code, out = git("log", "--format=%h %s", f"{commit}..HEAD", "--", *ANALYSIS_PATHS,
                    timeout=10)
    if code != 0:
        return None
    return [line if len(line) <= 300 else line[:299] + "…" for line in out.splitlines()]


def plan_section(params: Params) -> list[str]:
    """The plan commit (and what git says of it) and the deviations from the plan: every
    change after the plan commit, those declared in `report.deviations` (with their reasons)
    and every commit after it that touches the plan or the analysis code (git), so an
    undeclared change is listed too."""
    devs = params.report.deviations
    commit = plan_commit(params)
    changes = analysis_changes(commit)
    unknown = changes is None
    return [f"Plan: [docs/study.md](../docs/study.md) (pre-registration), fixed at commit "
            f"`{commit}` ({plan_check(commit)}).", "",
            "Deviations from the plan: every change after the plan commit, as declared "
            "(`report.deviations`) and as every commit after it that changes the plan or the "
            f"analysis code (`git log {commit}..HEAD -- {' '.join(ANALYSIS_PATHS)}`)"
            + (" none." if not devs and changes == [] else ":"),
            *[f"- declared: {d}" for d in devs],
            *[f"- commit `{c.split(' ', 1)[0]}` {c.partition(' ')[2]}" for c in changes or []],
            *(["- the commits: unknown (git cannot list them here)."] if unknown else [])]
