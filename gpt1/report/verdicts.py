"""Write reports/verdicts.md: the paper's claims (a)-(e) x each committed run -> verdict,
statistic and CI, the design's MDE.

Each run is a params file (its `paths.metrics` holds the run's committed records); the
findings are the report's own: saved by the report stage (`findings.json`, with the CIs its
per-example prediction files gave) when the records are the ones it was built from, else
recomputed (gpt1.report.findings). A test against a flagged (non-learning) arm is
inconclusive; a finding whose piloted arm fails the plan's gate is untestable at this budget
(its gate not evaluable where the pilot records predate the gate); recomputed without the
prediction files (they are not in git) there is no CI and the verdict says so. The one-line
summary per run is also the README's verdict block (`--readme`), so the two agree word for
word.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path
from statistics import NormalDist

import numpy as np
import yaml

from gpt1 import stats
from gpt1.config import Params, load_params
from gpt1.errors import Gpt1Error
from gpt1.freshness import current_records
from gpt1.records import Metrics, read_metrics
from gpt1.report.document import FINDINGS_FILE
from gpt1.report.estimates import (
    NOT_EVALUABLE,
    UNTESTABLE,
    Finding,
    component,
    final_verdict,
    run_points,
    saved_findings,
)
from gpt1.report.figure2 import at_floors, layer_curves, zeroshot_curves
from gpt1.report.findings import evaluate_findings, harmonic_n, paper_gap, row_mde, row_variance
from gpt1.report.runs import variant_results

DEFAULT_RUNS = ("demo=params.yaml", "study=configs/cpu-study.yaml",
                "one GPU=configs/gpu-study.yaml")
"""The committed runs; one not run yet (no records) is named as such, not tested."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", action="append", metavar="NAME=PARAMS",
                        help="a committed run: its name and params file (its paths.metrics "
                             f"holds the records); repeat; default: {' '.join(DEFAULT_RUNS)}")
    parser.add_argument("--out", default="reports/verdicts.md", help="output markdown file")
    parser.add_argument("--readme", metavar="PATH",
                        help="also rewrite the verdict block of this README (between "
                             f"{README_START!r} and {README_END!r}) with the summary lines")


README_START = "<!-- verdicts: written by `gpt1 verdicts` (reports/verdicts.md); do not edit -->"
README_END = "<!-- /verdicts -->"


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
        params = runs[0][2]
        z_mde = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(params.report.power)
        lines += ["", f"Declared (`report.design_sd`): pre-training {100 * sd.pretrain:.2f}, "
                  f"seed {100 * sd.seed:.2f}, accuracy {100 * sd.accuracy:.0f}. MDE at "
                  f"{100 * params.report.power:.0f} % power of the mean of two confirmatory "
                  "tasks (gpt1.stats.design_variance, gpt1.stats.mde): SE² = per task (σ_p² / P + "
                  "σ_f² / 2 × (1 / R₁ + 1 / R₂) + σ_e² / n), divided by the number of tasks, "
                  "where σ_f is the sd of a per-run arm difference, so each arm carries half "
                  "of it over its own independent runs R: P F for a pre-trained arm, F for a "
                  "from-scratch arm (no pre-training seed; (a)'s row 2), so (a)'s MDE exceeds "
                  "(e)'s when P > 1; σ_e² = 2 × accuracy × (1 − accuracy). MDE and power are "
                  "those of the test actually run: the estimate ~ N(δ, SE²) against its CI, "
                  "whose seed term is estimated from the F seeds (a t with F − 1 degrees of "
                  "freedom, 97.5 % quantile 4.30 at F = 3) and whose pre-training term is "
                  "left out (the CI is conditional on the pre-trained models); not (z₀.₉₇₅ + "
                  f"z_power) SE = {z_mde:.2f} SE, which assumes a known SE.",
                  "",
                  "| design | pre-training x fine-tuning seeds | n_eval SST-2, QNLI (harmonic "
                  "mean) | (a) MDE, mean (points) | (e) MDE, mean (points) | SST-2 alone: (a), "
                  "(e) | QNLI alone: (a), (e) | (b): no gain ≥ δ shown when the true difference "
                  f"≤ (points) | power at the paper's gap: (a) {gap_text(params, 'scratch')}, "
                  f"(e) {gap_text(params, 'lstm')} |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        margin = params.report.margin
        for label, n_pre, n_ft, ns in plan_designs():
            n_eval = harmonic_n(ns)
            two = [row_mde(params, n_pre, n_ft, n_eval, 2, scratch_arms=k) for k in (1, 0)]
            alone = [[row_mde(params, n_pre, n_ft, n, 1, scratch_arms=k) for k in (1, 0)]
                     for n in ns]
            one = row_mde(params, n_pre, n_ft, n_eval, 2, one_sided=True)
            powers = [stats.power(float(np.mean(list(g.values()))),
                                  row_variance(params, n_pre, n_ft, n_eval, 2, k)) if g else None
                      for g, k in ((paper_gap(params, "full", v, DESIGN_TASKS), k)
                                   for v, k in (("scratch", 1), ("lstm", 0)))]
            lines.append(f"| {label} | {n_pre} x {n_ft} | {ns[0]:,}, {ns[1]:,} ({n_eval:,.0f}) "
                         f"| {100 * two[0]:.1f} | {100 * two[1]:.1f} | "
                         + " | ".join(f"{100 * a:.1f}, {100 * e:.1f}" for a, e in alone)
                         + f" | {100 * (margin - one):+.1f} | "
                         + ", ".join("n/a" if x is None else f"{100 * x:.0f} %" for x in powers)
                         + " |")
    return lines + [""]


DESIGN_TASKS = ("sst2", "qnli")
"""The confirmatory tasks of the designs (DESIGNS_FILE), in the MDE table's column order."""


def gap_text(params: Params, worse: str) -> str:
    """The paper's Table 5 gap full - `worse` on DESIGN_TASKS, in points."""
    gaps = paper_gap(params, "full", worse, DESIGN_TASKS) or {}
    return ("mean of " + ", ".join(f"{t.upper()} {100 * g:+.1f}" for t, g in gaps.items())
            if gaps else "n/a")


DESIGNS_FILE = Path(__file__).with_name("study_designs.yaml")
"""The designs of the study's plans so far (the repository's history, as data, shipped with
the package so that any checkout or install renders the MDE table): the table's rows."""


def plan_designs(path: Path = DESIGNS_FILE) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """(label, pre-training seeds, fine-tuning seeds, eval examples of each DESIGN_TASKS task)
    of each design in `path`; one line naming the file when it is not such a list."""
    try:
        rows = yaml.safe_load(path.read_text(encoding="utf-8"))
        return [(str(r["label"]), int(r["pretrain_seeds"]), int(r["finetune_seeds"]),
                 tuple(int(r["eval_examples"][t]) for t in DESIGN_TASKS)) for r in rows]
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as err:
        raise Gpt1Error(f"not a list of study designs (label, pretrain_seeds, finetune_seeds, "
                        f"eval_examples of {', '.join(DESIGN_TASKS)}): {err!r}", path) from None


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
    floored = at_floors(params, metrics)
    left = layer_curves(floored, params.layers.tasks, params.layers.layers_transferred)
    found = evaluate_findings(params, floored, left, zeroshot_curves(floored))
    why = ("none" if not path.is_file() else "other records or an older analysis")
    return metrics, found, f"findings recomputed from the records (`{path}`: {why})"


def summary_line(name: str, found: Sequence[Finding]) -> str:
    """One run's verdicts in one line (verdicts.md's summary and the README's block)."""
    words = [f"({f.tag}) {final_verdict(f.verdict, f.flagged)}" for f in found]
    held = [f"({f.tag})" for f in found if f.reproduces]
    return (f"- **{name}**: " + "; ".join(words) + ". Reproduces the paper (held, no arm "
            f"flagged): {', '.join(held) if held else 'none'}.")


def render(runs: Sequence[tuple[str, str, Params]], readme: str | None = None,
           pending: Sequence[tuple[str, str, Params]] = ()) -> tuple[str, list[str]]:
    """The verdict table, its summary lines and, per run, where it came from; `pending`: runs
    not made yet (no records), named under the runs."""
    rows, notes, summary = [], [], []
    for name, path, params in runs:
        metrics, found, source = run_findings(params)
        notes.append(f"- **{name}**: `{path}`, records in `{params.paths.metrics}`; {source}; "
                     f"{design_text(metrics)}; bootstrap {params.report.bootstrap_samples:,} "
                     f"draws; confirmatory tasks "
                     f"{', '.join(t.upper() for t in params.report.confirmatory_tasks)}.")
        summary.append(summary_line(name, found))
        for f in found:
            stat = f.statistic + (f" (gate: {f.gate})" if f.verdict in (UNTESTABLE, NOT_EVALUABLE)
                                  else "")
            rows.append(f"| ({f.tag}) {f.claim} | {name} | "
                        f"{final_verdict(f.verdict, f.flagged)} | {stat} | {f.ci} | "
                        f"{f.mde} | {f.flagged or '-'} | {'yes' if f.reproduces else 'no'} |")
    notes += [f"- **{name}**: `{path}`: not run yet (no records in `{params.paths.metrics}`)."
              for name, path, params in pending]
    cmd = ("python -m gpt1 verdicts" + "".join(f" --run {shlex.quote(f'{n}={p}')}"
                                               for n, p, _ in runs)
           + (f" --readme {readme}" if readme else ""))
    return "\n".join([
        "# Verdicts across scales", "",
        f"Regenerate from the committed metrics: `{cmd}`.", "",
        "Each paper claim (a)-(e) of docs/study.md, tested as there (gpt1/report/findings.py, "
        "gpt1/stats.py), on each committed run. `held` needs the CI (a run-level hierarchical "
        "bootstrap over per-example predictions, conditional on the pre-trained models). The "
        "prediction files are not in git: the "
        "report stage saves its findings, CIs included, in `findings.json` beside the report, "
        "and they are used while the run's records are the ones the report was built from and "
        "the analysis is this one; "
        "otherwise the findings are recomputed, and a run whose prediction files are absent "
        "has no CI and no verdict (`no CI: predictions not available`), only its point "
        "estimate from the records' per-run scores. A flagged arm (>= 95 % of predictions one "
        "class in half its runs, or a CI not above the majority baseline) makes a finding "
        "inconclusive; a finding whose piloted arm does not clear the plan's gate (pilot "
        "records only) is untestable at this budget, with no estimate; one whose pilot records "
        "predate the gate (no pilot-split majority, or no accuracy where the task's score is "
        f"another metric) is printed \"{NOT_EVALUABLE}\", with no estimate either.", "",
        "## Summary", "", *summary, "",
        "| claim | run | verdict | statistic | CI | design MDE (at report.power) | flagged arm "
        "| reproduces the paper |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        "Runs:", "", *notes, "", *design_lines(runs)]), summary


def rewrite_readme(path: Path, summary: Sequence[str]) -> str:
    """The README's text with its verdict block replaced by the summary lines."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if README_START not in text or README_END not in text.split(README_START, 1)[1]:
        raise Gpt1Error(f"no verdict block ({README_START} ... {README_END})", path)
    head, rest = text.split(README_START, 1)
    tail = rest.split(README_END, 1)[1]
    return head + README_START + "\n" + "\n".join(summary) + "\n" + README_END + tail


def run(args: argparse.Namespace, params: Params) -> None:
    """Write the verdict table (`params` is unused: every run names its own params file)."""
    from gpt1 import atomic

    del params
    runs: list[tuple[str, str, Params]] = []
    pending: list[tuple[str, str, Params]] = []
    for spec in args.run or DEFAULT_RUNS:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise Gpt1Error(f"--run {spec!r}: expected NAME=PARAMS")
        params = load_params(path)
        made = any(Path(params.paths.metrics).glob("*.json"))
        (runs if made or args.run else pending).append((name, path, params))
    out = Path(args.out)
    text, summary = render(runs, args.readme, pending)
    readme = None if args.readme is None else rewrite_readme(Path(args.readme), summary)
    atomic.write_text(out, text)
    print(f"wrote {out}")
    if readme is not None:
        atomic.write_text(Path(args.readme), readme)
        print(f"wrote the verdict block of {args.readme}")
