"""Write reports/verdicts.md: the paper's claims (a)-(e) x each committed run -> verdict,
statistic and CI, the design's MDE.

Each run is a params file (its `paths.metrics` holds the run's committed records); the
findings are the report's own: saved by the report stage (`findings.json`, with the CIs its
per-example prediction files gave) when the records are the ones it was built from, else
recomputed (gpt1.report.findings). A "held" against a flagged (non-learning) arm is labelled as
such and does not count as reproducing the paper; recomputed without the prediction files
(they are not in git) there is no CI and the verdict says so.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpt1.config import Params, load_params
from gpt1.errors import Gpt1Error
from gpt1.freshness import current_records
from gpt1.records import Metrics, read_metrics, variant_results
from gpt1.report.document import FINDINGS_FILE
from gpt1.report.estimates import Finding, component, run_points, saved_findings
from gpt1.report.figure2 import layer_curves, zeroshot_curves
from gpt1.report.findings import evaluate_findings, row_mde

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


PAIRS = (("a", "full", "scratch"), ("b", "full", "no_aux"), ("e", "full", "lstm"))


def seed_sds(params: Params, metrics: Metrics) -> list[tuple[str, str, float, float]]:
    """(finding, task, sd over runs of the per-run arm difference, mean accuracy of `full`) on
    each confirmatory task of findings (a), (b), (e): the between-seed variance component the
    MDE of docs/study.md assumes (runs share their eval examples, so this is seed variance)."""
    out = []
    for tag, better, worse in PAIRS:
        res = {v: variant_results(metrics, v) for v in (better, worse)}
        for task in params.report.confirmatory_tasks:
            if not all(task in r for r in res.values()):
                continue
            comp = component(task)
            diff = run_points([res[better][task], res[worse][task]], [1.0, -1.0], [comp])
            if len(diff) >= 2:
                acc = np.mean(res[better][task]["scores"][comp.split(".")[1]]["per_seed"])
                out.append((tag, task, float(np.std(list(diff.values()), ddof=1)), float(acc)))
    return out


def design_lines(runs: Sequence[tuple[str, str, Params]]) -> list[str]:
    """Per run: the seed sds behind the declared variance components, their root mean square,
    and the MDE of findings (a)/(e) and (b) in the run's design and in the declared one."""
    lines = ["## Variance components and MDE", "",
             "Between-seed sd of each per-run arm difference (x 100) on the confirmatory tasks, "
             "from the records' per-run scores; the root mean square over them is the `seed` "
             "component `report.design_sd` declares (docs/study.md). One pre-training run per "
             "committed run: the between-pre-training sd cannot be estimated and is declared "
             "equal to it.", ""]
    for name, _, params in runs:
        metrics = current_records(params, read_metrics(params.paths.metrics))
        sds = seed_sds(params, metrics)
        if not sds:
            continue
        rms = float(np.sqrt(np.mean([sd ** 2 for _, _, sd, _ in sds])))
        acc = float(np.mean([a for _, _, _, a in sds]))
        lines.append(f"- **{name}**: " + "; ".join(f"({t}) {task.upper()} {100 * sd:.2f}"
                                                 for t, task, sd, _ in sds)
                     + f"; RMS {100 * rms:.2f}; mean accuracy of the full row {100 * acc:.1f}.")
    sd = runs[0][2].report.design_sd if runs else None
    if sd is not None:
        lines += ["", f"Declared (`report.design_sd`): pre-training {100 * sd.pretrain:.2f}, "
                  f"seed {100 * sd.seed:.2f}, accuracy {100 * sd.accuracy:.0f}. MDE at "
                  f"{100 * runs[0][2].report.power:.0f} % power of the mean of two "
                  "confirmatory tasks (gpt1.stats.design_se, gpt1.stats.mde):", "",
                  "| design | pre-training x fine-tuning seeds | mean n_eval | (a)/(e) MDE "
                  "(points) | (b): no gain ≥ δ shown when the true difference ≤ (points) |",
                  "|---|---:|---:|---:|---:|"]
        margin = runs[0][2].report.margin
        for label, n_pre, n_ft, n_eval in PLAN_DESIGNS:
            two = row_mde(runs[0][2], n_pre, n_ft, n_eval, 2)
            one = row_mde(runs[0][2], n_pre, n_ft, n_eval, 2, one_sided=True)
            lines.append(f"| {label} | {n_pre} x {n_ft} | {n_eval:,.0f} | {100 * two:.1f} | "
                         f"{100 * (margin - one):+.1f} |")
    return lines + [""]


PLAN_DESIGNS = (("old study (capped pools)", 1, 3, (872 + 1000) / 2),
                ("study v2 plan (full pools)", 2, 3, (872 + 5732) / 2),
                ("demo (SST-2 872, QNLI 250)", 1, 3, (872 + 250) / 2))
"""(label, pre-training seeds, fine-tuning seeds, mean eval examples of SST-2 and QNLI)."""


def run_findings(params: Params) -> tuple[Metrics, list[Finding], str]:
    """The run's records, its findings and where they came from: the report's own
    (`<paths.reports>/findings.json`, CIs included) when it was built from exactly these
    records, else recomputed from the records (no CI where the prediction files are absent)."""
    metrics = current_records(params, read_metrics(params.paths.metrics))  # as the report
    if not metrics:
        raise Gpt1Error("no stage records (run the pipeline, or name another --run)",
                        params.paths.metrics)
    path = Path(params.paths.reports) / FINDINGS_FILE
    saved = saved_findings(path, metrics)
    if saved is not None:
        return metrics, saved, f"findings from `{path}` (the report's; same records)"
    left = layer_curves(metrics, params.layers.tasks, params.layers.layers_transferred)
    found = evaluate_findings(params, metrics, left, zeroshot_curves(metrics))
    why = "other records" if path.is_file() else "none"
    return metrics, found, f"findings recomputed from the records (`{path}`: {why})"


def render(runs: Sequence[tuple[str, str, Params]]) -> str:
    """The verdict table and, per run, where it came from."""
    rows, notes = [], []
    for name, path, params in runs:
        metrics, found, source = run_findings(params)
        notes.append(f"- **{name}**: `{path}`, records in `{params.paths.metrics}`; {source}; "
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
        "bootstrap over per-example predictions). The prediction files are not in git: the "
        "report stage saves its findings, CIs included, in `findings.json` beside the report, "
        "and they are used while the run's records are the ones the report was built from; "
        "otherwise the findings are recomputed, and a run whose prediction files are absent "
        "has no CI and no verdict (`no CI: predictions not available`), only its point "
        "estimate from the records' per-run scores. A flagged arm "
        "is a non-learning baseline (>= 95 % of predictions one class, or not above the "
        "majority baseline); a verdict against it does not reproduce the paper.", "",
        "| claim | run | verdict | statistic | CI | design MDE (at report.power) | flagged arm "
        "| reproduces the paper |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        "Runs:", "", *notes, "", *design_lines(runs)])


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
