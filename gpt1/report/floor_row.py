"""Table 5's bag-of-words floor (gpt1/floor.py): its row (ours, 95 % CI, flag; no paper row,
no Δ) and the line saying which neural arms clear it, per column.

An arm clears the floor on a column when the 95 % CI of (arm - floor) lies above 0. The
difference is paired by training sample: each run (pre-training seed p, fine-tuning seed f) of
the arm is compared with the floor's run f, which trained on the same examples (the floor has
no pre-training seed, so its run f serves every p); examples are resampled as for every CI.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpt1.config import Params
from gpt1.records import Metrics
from gpt1.report.contrasts import (
    RowPreds,
    cell_flags,
    cell_of,
    ci_text,
    column_values,
    contrast,
    present,
    row_predictions,
    seed_mean,
)
from gpt1.report.runs import variant_results

VARIANT = "bow"
"""The floor's variant in records (gpt1.floor.VARIANT; that module imports scikit-learn)."""


def paired_with(floor: RowPreds, arm: RowPreds) -> RowPreds:
    """The floor's predictions keyed by the arm's runs: run (p, f) of the arm gets the floor's
    run of fine-tuning seed f (same training sample)."""
    out: RowPreds = {}
    for task, runs in floor.items():
        by_seed = {f: preds for (_, f), preds in runs.items()}
        out[task] = {key: by_seed[key[1]] for key in arm.get(task, {}) if key[1] in by_seed}
    return out


def render_floor_row(params: Params, metrics: Metrics, cols: Sequence[str],
                     matched: Sequence[str]) -> tuple[list[str], list[str]]:
    """(Table 5 lines of the floor's row, footnotes); nothing when the floor did not run."""
    cfg = params.report
    results = variant_results(metrics, VARIANT)
    if not results:
        return [], []
    label = cfg.row_labels.get(VARIANT, "Bag-of-words floor")
    preds = row_predictions(results)
    texts: dict[str, list[str]] = {"ours": [], "95 % CI": [], "flag": []}
    notes: list[str] = []
    for c in ["Avg", *cols]:
        comps = [present(results, cfg.columns[m]) for m in matched] if c == "Avg" else \
            [present(results, cfg.columns[c])]
        if c == "Avg":
            per_col = [column_values(results, cfg.columns[m], cfg.glue)[0] for m in matched]
            complete = bool(matched) and all(per_col)
            cell = cell_of([seed_mean(v) for v in per_col] if complete else [], [])
            ci = contrast([preds], [1.0], comps, params) if complete else None
            flags: list[str] = []
        else:
            vals, _ = column_values(results, cfg.columns[c], cfg.glue)
            cell = cell_of(vals, [])
            ci = contrast([preds], [1.0], comps, params) if comps[0] else None
            flags = cell_flags(results, comps[0], preds, ci, params) if comps[0] else []
            notes += [f"{label}: {c} flagged ({'; '.join(flags)})"] if flags else []
        texts["ours"].append(cell.text() if cell.mean is not None else "")
        texts["95 % CI"].append(ci_text(ci) if cell.mean is not None else "")
        texts["flag"].append(("FLAG" if flags else "-") if cell.mean is not None else "")
    lines = [("| " + label + " |" if name == "ours" else "| |") + f" {name} | {vals[0]} | | "
             + " | ".join(vals[1:]) + " |" for name, vals in texts.items()]
    return lines, notes


def floor_line(params: Params, metrics: Metrics, cols: Sequence[str]) -> list[str]:
    """Per column the floor ran on: which neural arms clear it (CI of arm - floor above 0),
    which fall below it (CI below 0), which are not distinguishable from it."""
    cfg = params.report
    floor = variant_results(metrics, VARIANT)
    if not floor:
        return []
    floor_preds = row_predictions(floor)
    parts = []
    for c in cols:
        comps = present(floor, cfg.columns[c])
        if not comps:
            continue
        verdicts: dict[str, list[str]] = {"clear it": [], "are below it": [],
                                          "are not distinguishable from it": []}
        for variant in cfg.paper_ablations:
            results = variant_results(metrics, variant)
            if present(results, cfg.columns[c]) != comps:
                continue
            arm = row_predictions(results)
            d = contrast([arm, paired_with(floor_preds, arm)], [1.0, -1.0], [comps], params)
            if d is None:
                continue
            where = ("clear it" if d.ci.low > 0 else "are below it" if d.ci.high < 0
                     else "are not distinguishable from it")
            verdicts[where].append(f"{cfg.row_labels[variant]} ({100 * d.ci.estimate:+.1f}, "
                                   f"95 % CI {ci_text(d)})")
        said = [f"{k}: {', '.join(v)}" for k, v in verdicts.items() if v]
        if said:
            parts.append(f"{c}: " + "; ".join(said))
    if not parts:
        return []
    return ["Against the bag-of-words floor (arm - floor, paired by training sample; an arm "
            "clears it when the 95 % CI is above 0): " + ". ".join(parts) + "."]

