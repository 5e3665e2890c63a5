"""Write reports/verdicts.md: the paper's claims (a)-(e) x each committed run -> verdict,
statistic and CI, the design's MDE.

Each run is a params file (its `paths.metrics` holds the run's committed records); the
findings are the report's own (gpt1.report.findings), so a verdict here is the report's. A
"held" against a flagged (non-learning) arm is labelled as such and does not count as
reproducing the paper; without the per-example prediction files (they are not in git) there is
no CI and the verdict says so.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from gpt1.config import Params, load_params
from gpt1.errors import Gpt1Error
from gpt1.records import Metrics, read_metrics, variant_results
from gpt1.report.figure2 import layer_curves, zeroshot_curves
from gpt1.report.findings import evaluate_findings
from gpt1.report.verdict import Finding

DEFAULT_RUNS = ("demo=params.yaml", "study=configs/cpu-study.yaml")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", action="append", metavar="NAME=PARAMS",
                        help="a committed run: its name and params file (its paths.metrics "
                             f"holds the records); repeat; default: {' '.join(DEFAULT_RUNS)}")
    parser.add_argument("--out", default="reports/verdicts.md", help="output markdown file")


def design_text(metrics: Metrics) -> str:
    """The run's design, from its fine-tuning records' fields: runs per task, pre-training
    seeds, epoch selection (records without `pretrain_seed` / `select` are the old design)."""
    full = variant_results(metrics, "full")
    if not full:
        return "no fine-tuning records"
    runs = max(len(m["runs"]) for m in full.values())
    pre = max(len({p for p, _ in m["runs"]}) for m in full.values())
    select = {m.get("select") for m in full.values()}
    old = any("pretrain_seed" not in m for m in full.values()) or None in select
    sel = ("final epoch" if select == {"final"} else "epoch chosen on dev" if select == {"dev"}
           else "epoch chosen on dev (older records)")
    return (f"{'old design: ' if old else ''}{runs} runs per task ({pre} pre-training "
            f"seed{'s' if pre > 1 else ''}), {sel}")


def run_findings(params: Params) -> tuple[Metrics, list[Finding]]:
    metrics = read_metrics(params.paths.metrics)
    if not metrics:
        raise Gpt1Error("no stage records (run the pipeline, or name another --run)",
                        params.paths.metrics)
    left = layer_curves(metrics, params.layers.tasks, params.layers.layers_transferred)
    return metrics, evaluate_findings(params, metrics, left, zeroshot_curves(metrics))


def render(runs: Sequence[tuple[str, str, Params]]) -> str:
    """The verdict table and, per run, where it came from."""
    rows, notes = [], []
    for name, path, params in runs:
        metrics, found = run_findings(params)
        notes.append(f"- **{name}**: `{path}`, records in `{params.paths.metrics}`; "
                     f"{design_text(metrics)}; bootstrap {params.report.bootstrap_samples:,} "
                     f"draws; confirmatory tasks "
                     f"{', '.join(t.upper() for t in params.report.confirmatory_tasks)}.")
        for f in found:
            word = f.verdict + (" vs a non-learning baseline" if f.flagged and
                                f.verdict == "held" else "")
            rows.append(f"| ({f.tag}) {f.claim} | {name} | {word} | {f.statistic} | {f.ci} | "
                        f"{f.mde} | {f.flagged or '-'} | {'yes' if f.reproduces else 'no'} |")
    cmd = "python -m gpt1 verdicts" + "".join(f" --run {n}={p}" for n, p, _ in runs)
    return "\n".join([
        "# Verdicts across scales", "",
        f"Regenerate from the committed metrics: `{cmd}`.", "",
        "Each paper claim (a)-(e) of docs/study.md, tested as there (gpt1/report/findings.py, "
        "gpt1/stats.py), on each committed run. `held` needs the CI (a run-level hierarchical "
        "bootstrap over per-example predictions); the prediction files are not in git, so a "
        "run whose files are absent has no CI and no verdict (`no CI: predictions not "
        "available`), only its point estimate from the records' per-run scores. A flagged arm "
        "is a non-learning baseline (>= 95 % of predictions one class, or not above the "
        "majority baseline); a verdict against it does not reproduce the paper.", "",
        "| claim | run | verdict | statistic | CI | design MDE (at report.power) | flagged arm "
        "| reproduces the paper |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        "Runs:", "", *notes, ""])


def run(args: argparse.Namespace, params: Params) -> None:
    """Write the verdict table (`params` is unused: every run names its own params file)."""
    from gpt1 import atomic

    del params
    runs = []
    for spec in args.run or DEFAULT_RUNS:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise Gpt1Error(f"--run {spec!r}: expected NAME=PARAMS")
        runs.append((name, path, load_params(path)))
    out = Path(args.out)
    atomic.write_text(out, render(runs))
    print(f"wrote {out}")
