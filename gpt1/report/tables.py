"""Tables 2-5: each paper column beside ours (mean ± sd over seeds), its bootstrap CI,
chance and majority baselines and the delta; the paper's numbers come from params."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpt1.config import Params
from gpt1.records import Metrics
from gpt1.report.contrasts import (
    RowPreds,
    baseline_text,
    cell_flags,
    cell_of,
    ci_text,
    column_cell,
    column_values,
    contrast,
    flag_text,
    present,
    row_predictions,
    seed_mean,
)
from gpt1.report.floor_row import floor_line, render_floor_row
from gpt1.report.runs import scored_on, variant_results

TABLE_TITLES = {
    "table2": "Table 2: natural language inference (accuracy)",
    "table3": "Table 3: question answering and commonsense reasoning (accuracy)",
    "table4": "Table 4: semantic similarity and classification (MCC, acc, F1, Pearson)",
}


def _footnotes(notes: list[str]) -> list[str]:
    """Unique notes; the `not run` ones of one row collapse into a single line."""
    not_run: dict[str, list[str]] = {}
    other = []
    for note in dict.fromkeys(notes):
        if note.endswith(": not run"):
            row, _, comp = note.removesuffix(": not run").rpartition(": ")
            not_run.setdefault(row, []).append(comp.split(".")[0])
        else:
            other.append(note)
    lines = [f"- * {row + ': ' if row else ''}not run for "
             f"{', '.join(dict.fromkeys(tasks))}" for row, tasks in not_run.items()]
    return lines + [f"- * {n}" for n in other]


def _scored_on(results: Mapping[str, dict[str, Any]], tasks: Sequence[str]) -> str:
    """The split each task of a table is scored on, as its record names it."""
    parts = [f"{task}: {text}" for task in dict.fromkeys(tasks)
             if task in results and (text := scored_on(results[task])) is not None]
    return "Scored on: " + ("; ".join(parts) if parts else "no task run") + "."


def render_table(name: str, params: Params, results: Mapping[str, dict[str, Any]]) -> str:
    """One of Tables 2-4: paper, ours (mean ± sd over seeds), the 95 % bootstrap CI over eval
    examples, chance and majority-class baselines, delta, seeds and sizes per column; the split
    each task is scored on under the title."""
    cfg = params.report
    preds = row_predictions(results)
    all_tasks = [c.split(".")[0] for label in cfg.paper[name] for c in cfg.columns[label]
                 if c != "glue"]
    lines = [f"### {TABLE_TITLES[name]}", "", _scored_on(results, all_tasks), "",
             "| dataset | paper | ours (mean ± sd) | 95 % CI | chance | majority | Δ | runs "
             "| n_train | n_eval | flag |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    notes: list[str] = []
    for label, paper in cfg.paper[name].items():
        comps = cfg.columns[label]
        cell = column_cell(results, comps, cfg.glue)
        notes += cell.missing
        tasks = list(cfg.glue) if list(comps) == ["glue"] else [c.split(".")[0] for c in comps]
        res = results.get(tasks[0]) if len(set(tasks)) == 1 else None
        n_train = str(res.get("n_train", "")) if res else ""
        n_eval = str(res.get("n_eval", "")) if res else ""
        have = present(results, comps)
        ci = contrast([preds], [1.0], [have], params) if have else None
        flags = cell_flags(results, have, preds, ci, params) if have else []
        checked = bool(have) and all(c.split(".")[0] in preds for c in have)
        lines.append(f"| {label} | {paper:.1f} | {cell.text()} | {ci_text(ci)} | "
                     f"{baseline_text(results, have, 'chance') if have else 'n/a'} | "
                     f"{baseline_text(results, have, 'majority') if have else 'n/a'} | "
                     f"{cell.delta(paper, flags)} | {cell.seeds or ''} | {n_train} | {n_eval} | "
                     f"{flag_text(flags, checked) if have else ''} |")
    return "\n".join(lines + [""] + _footnotes(notes))


def render_custom(params: Params, results: Mapping[str, dict[str, Any]]) -> list[str]:
    """The tasks of the user's own (params tasks.custom) that ran, one row each with what
    Tables 2-4 give for ours (no paper number); [] when none ran."""
    tasks = [t for t in params.finetune.tasks if t in params.tasks.custom and t in results]
    if not tasks:
        return []
    preds = row_predictions(results)
    lines = ["### Tasks of your own (params tasks.custom)", "", _scored_on(results, tasks), "",
             "| task | score | ours (mean ± sd) | 95 % CI | chance | majority | runs | n_train "
             "| n_eval | flag |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for task in tasks:
        metric = params.tasks.custom[task].metric
        comps = [f"{task}.{metric}"]
        cell = column_cell(results, comps, params.report.glue)
        have = present(results, comps)
        ci = contrast([preds], [1.0], [have], params) if have else None
        flags = cell_flags(results, have, preds, ci, params) if have else []
        checked = bool(have) and task in preds
        res = results[task]
        lines.append(f"| {task} | {metric} | {cell.text()} | {ci_text(ci)} | "
                     f"{baseline_text(results, have, 'chance') if have else 'n/a'} | "
                     f"{baseline_text(results, have, 'majority') if have else 'n/a'} | "
                     f"{cell.seeds or ''} | {res.get('n_train', '')} | {res.get('n_eval', '')} "
                     f"| {flag_text(flags, checked) if have else ''} |")
    return [*lines, ""]


def table5_columns(params: Params) -> list[str]:
    """Table 5's score columns (the paper's, without Avg)."""
    return [c for c in next(iter(params.report.paper_ablations.values())) if c != "Avg"]


def matched_columns(params: Params, metrics: Metrics) -> list[str]:
    """The Table 5 columns every row that ran has a value for: each row's Avg is over exactly
    these, so no row is averaged against a different set of tasks (a row not run at all, e.g.
    a preset without it, shows no Avg and does not shrink the others' set)."""
    cfg = params.report
    ran = [r for v in cfg.paper_ablations if (r := variant_results(metrics, v))]
    return [c for c in table5_columns(params)
            if ran and all(column_values(r, cfg.columns[c], cfg.glue)[0] for r in ran)]


def render_ablations(params: Params, metrics: Metrics) -> str:
    """Table 5: per variant the paper's row, ours (mean ± sd over seeds), the 95 % bootstrap CI
    and the delta; then chance and majority rows. Avg = the mean over the matched columns
    (those every row has), for every row, the paper's included."""
    cfg = params.report
    cols = table5_columns(params)
    matched = matched_columns(params, metrics)
    full = variant_results(metrics, "full")
    tasks = [c.split(".")[0] for col in cols for c in cfg.columns[col]]
    avg_note = (f"Avg = unweighted mean over the columns every row has ({', '.join(matched)}), "
                "the paper's row recomputed over the same columns"
                + ("" if matched != cols else " (= the paper's Avg up to rounding)") + "."
                if matched else "Avg: n/a, no column is present in every row.")
    avg_note += (" The paper's own Avg over its eight columns is printed beside it (`paper "
                 "Avg`); the matched Avg is the one compared. A flagged cell (FLAG: >= "
                 f"{100 * cfg.degenerate_frac:.0f} % of predictions one class, or a CI that does "
                 "not clear the majority baseline) gets no Δ.")
    lines = ["### Table 5: ablations", "", _scored_on(full, tasks), "", avg_note, "",
             "| method | | Avg | paper Avg | " + " | ".join(cols) + " |",
             "|---|---|" + "---:|" * (len(cols) + 2)]
    notes: list[str] = []
    for variant, paper in cfg.paper_ablations.items():
        results = variant_results(metrics, variant)
        preds = row_predictions(results)
        cells, cis, row_vals, flags = {}, {}, [], {}
        for c in cols:
            vals, missing = column_values(results, cfg.columns[c], cfg.glue)
            cells[c] = cell_of(vals, missing)
            notes += [f"{cfg.row_labels[variant]}: {m}" for m in missing]
            have = [present(results, cfg.columns[c])]
            cis[c] = contrast([preds], [1.0], have, params) if have[0] else None
            flags[c] = cell_flags(results, have[0], preds, cis[c], params) if have[0] else []
            if c in matched and vals:
                row_vals.append(seed_mean(vals))
        notes += [f"{cfg.row_labels[variant]}: {c} flagged ({'; '.join(flags[c])}), no Δ"
                  for c in cols if flags[c]]
        flags["Avg"] = [f"{c}" for c in matched if flags[c]]
        checked = {c: bool(preds_cols(preds, cfg, c)) for c in cols}
        checked["Avg"] = all(checked[c] for c in matched)
        cells["Avg"] = cell_of(row_vals if len(row_vals) == len(matched) else [], [])
        cis["Avg"] = contrast([preds], [1.0], _matched_components(params, matched, results),
                              params) if matched else None
        paper_row = {**paper, "Avg": float(np.mean([paper[c] for c in matched]))
                     if matched else None}
        order = ["Avg", *cols]
        published = f"{paper['Avg']:.1f}" if "Avg" in paper else "n/a"
        lines.append(f"| {cfg.row_labels[variant]} | paper | " + " | ".join(
            "n/a" if paper_row[c] is None else f"{paper_row[c]:.1f}" for c in order[:1])
            + f" | {published} | " + " | ".join(
            "n/a" if paper_row[c] is None else f"{paper_row[c]:.1f}" for c in cols) + " |")
        for name, texts in (("ours", [cells[c].text() for c in order]),
                            ("95 % CI", [ci_text(cis[c]) for c in order]),
                            ("Δ", [cells[c].delta(paper_row[c], flags[c]) for c in order]),
                            ("flag", ["FLAG" if flags[c] else "-" if checked[c]
                                      else "unchecked" for c in order])):
            lines.append(f"| | {name} | {texts[0]} | | " + " | ".join(texts[1:]) + " |")
    floor_rows, floor_notes = render_floor_row(params, metrics, cols, matched)
    lines += floor_rows
    notes += floor_notes
    for kind in ("chance", "majority"):
        per_col = {c: baseline_text(full, cfg.columns[c], kind) if cfg.columns[c] != ("glue",)
                   else "n/a" for c in cols}
        nums = [float(per_col[c]) for c in matched if per_col[c] != "n/a"]
        avg = f"{np.mean(nums):.1f}" if matched and len(nums) == len(matched) else "n/a"
        lines.append(f"| {kind} baseline | | {avg} | | "
                     + " | ".join(per_col[c] for c in cols) + " |")
    against = floor_line(params, metrics, cols)
    return "\n".join(lines + [""] + _footnotes(notes) + ([""] + against if against else []))


def preds_cols(preds: RowPreds, cfg: Any, col: str) -> list[str]:
    """[col] when the row has predictions for every task of the column (its flag is checked),
    else []."""
    comps = cfg.columns.get(col, ())
    if comps and comps != ("glue",) and all(c.split(".")[0] in preds for c in comps):
        return [col]
    return []


def _matched_components(params: Params, matched: Sequence[str],
                        results: Mapping[str, dict[str, Any]]) -> list[list[str]]:
    """Per matched column, the components of it that this row has (the ones it is scored on)."""
    return [present(results, params.report.columns[c]) for c in matched]
