"""The fine-tuning seeds finding (a) needs: per task, the smallest number of fine-tuning seeds F
(up to `report.max_seeds`) at which the project's test of full - from scratch reaches
`report.power` at `report.declared_effect` (gpt1.stats.power, with the declared variance
components `report.design_sd` and the task's scored examples n: its fresh split where
tasks.fresh_examples carves one), with the MDE and the power at that F.

`gpt1 seeds` prints it from the params (before a run, for the plan); the report prints it from
the records (the n each task was scored on, and the F the run used)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpt1 import stats
from gpt1.config import Params
from gpt1.records import Metrics
from gpt1.report.estimates import component, design, run_points
from gpt1.report.findings import row_variance
from gpt1.report.runs import variant_results
from gpt1.tasks import load
from gpt1.tasks.registry import FRESH

SCRATCH_ARMS = 1
"""(a) compares the pre-trained Transformer with the from-scratch one: one arm of the two has no
pre-training seed, so its seed term is over F runs (gpt1.stats.seed_term)."""
FIRST_SEEDS = 2
"""The fewest fine-tuning seeds that estimate their own variance (a t with F - 1 >= 1 df)."""


@dataclass(frozen=True)
class SeedChoice:
    """The design of (a) on one task: its scored examples, the seeds chosen and their MDE and
    power; `reached` is False when no F up to the cap gives the power (F is then the cap)."""

    task: str
    split: str
    n_examples: int
    seeds: int
    reached: bool
    mde: float
    power: float


def power_at(params: Params, n_pretrain: int, n_seeds: int, n_examples: float) -> float:
    """Power of (a)'s test on one task at `report.declared_effect` with F = n_seeds."""
    var = row_variance(params, n_pretrain, n_seeds, n_examples, 1, SCRATCH_ARMS)
    return stats.power(params.report.declared_effect, var)


def choose_seeds(params: Params, task: str, split: str, n_examples: int, n_pretrain: int
                 ) -> SeedChoice:
    """The smallest F in FIRST_SEEDS..report.max_seeds with power >= report.power at
    report.declared_effect for (a) on one task of `n_examples` scored examples and
    `n_pretrain` pre-training seeds; the cap (reached False) when none has it."""
    cfg = params.report
    seeds, reached = cfg.max_seeds, False
    for f in range(FIRST_SEEDS, cfg.max_seeds + 1):
        if power_at(params, n_pretrain, f, n_examples) >= cfg.power:
            seeds, reached = f, True
            break
    var = row_variance(params, n_pretrain, seeds, n_examples, 1, SCRATCH_ARMS)
    return SeedChoice(task, split, n_examples, seeds, reached, stats.mde(var, cfg.power),
                      stats.power(cfg.declared_effect, var))


def planned_examples(params: Params) -> dict[str, tuple[str, int | None]]:
    """Per confirmatory task: (the split (a) scores it on, its examples) from the params and
    the prepared tables: the fresh split's rows (tasks.fresh_examples where not prepared yet)
    where carved, else the test split capped at the task's max_eval_examples; None when the
    test split is not prepared yet."""
    out: dict[str, tuple[str, int | None]] = {}
    for task in params.report.confirmatory_tasks:
        folder = Path(params.paths.tasks) / task
        if task in params.tasks.fresh_examples:
            fresh = load.read_fresh(folder) if folder.is_dir() else None
            out[task] = (FRESH, len(fresh[0]) if fresh is not None
                         else params.tasks.fresh_examples[task])
            continue
        over = params.finetune.overrides.get(task)  # as gpt1.finetune.resolve_hparams
        cap = (over.max_eval_examples if over is not None and over.max_eval_examples is not None
               else params.finetune.max_eval_examples)
        rows = len(load.read_tables(folder)["test"]) if folder.is_dir() else None
        out[task] = ("test", None if rows is None else rows if cap is None else min(cap, rows))
    return out


def seeds_table(params: Params, choices: Sequence[SeedChoice], n_pretrain: int,
                used: Mapping[str, int] | None = None) -> list[str]:
    """The design of (a) per task as markdown: n, F, MDE and power at F (and the F the run used
    with its power, where `used` gives it), with `n_pretrain` pre-training seeds."""
    cfg = params.report
    effect, goal = 100 * cfg.declared_effect, 100 * cfg.power
    head = (f"| task | split scored | n examples | F (smallest with ≥ {goal:.0f} % power at "
            f"{effect:.1f} points, at most {cfg.max_seeds}) | MDE at {goal:.0f} % power "
            f"(points) | power at {effect:.1f} points |")
    lines = [head + (" F run, its power |" if used else ""),
             "|---|---|---:|---:|---:|---:|" + ("---:|" if used else "")]
    for c in choices:
        f_text = f"{c.seeds}" if c.reached else f"{c.seeds} (cap: not reached)"
        row = (f"| {c.task.upper()} | {c.split} | {c.n_examples:,} | {f_text} | "
               f"{100 * c.mde:.1f} | {100 * c.power:.0f} % |")
        if used:
            f_run = used.get(c.task)
            row += (" n/a |" if f_run is None else
                    f" {f_run}, {100 * power_at(params, n_pretrain, f_run, c.n_examples):.0f} % |")
        lines.append(row)
    return lines


def explanation(params: Params, n_pretrain: int) -> str:
    """How the table is computed, in words."""
    cfg, sd = params.report, params.report.design_sd
    return (f"(a) = full − from scratch on each task alone, {n_pretrain} pre-training seed"
            f"{'s' if n_pretrain != 1 else ''}; the from-scratch arm counts once per "
            "fine-tuning seed. Power and MDE of the test actually run (gpt1.stats.power, "
            "gpt1.stats.mde: the seed term a t with F − 1 degrees of freedom, the CI "
            f"conditional on the pre-trained models) from the declared components "
            f"(`report.design_sd`: pre-training {100 * sd.pretrain:.1f}, seed "
            f"{100 * sd.seed:.1f} points, accuracy {100 * sd.accuracy:.0f} %) and n; F = the "
            f"smallest number of fine-tuning seeds with ≥ {100 * cfg.power:.0f} % power at "
            f"`report.declared_effect` = {100 * cfg.declared_effect:.1f} points "
            f"(gpt1/report/design.py).")


def design_section(params: Params, metrics: Metrics) -> list[str]:
    """The report's design of (a) where its records scored a fresh split: per task of that
    split, the n it was scored on, the F the rule asks for, its MDE and power, and the F the
    run used with its power; nothing without a fresh split (the findings' lines carry the
    MDE of the design run)."""
    tasks = [t for t in params.report.confirmatory_tasks
             if all(t in variant_results(metrics, v, FRESH) for v in ("full", "scratch"))]
    if not tasks:
        return []
    fresh = variant_results(metrics, "full", FRESH)
    runs = {t: design(run_points([fresh[t]], [1.0], [component(t)])) for t in tasks}
    n_pre = runs[tasks[0]][0]
    choices = [choose_seeds(params, t, FRESH, int(fresh[t].get("n_eval") or 0), n_pre)
               for t in tasks]
    used = {t: runs[t][1] for t in tasks}
    return ["### Seeds from the MDE: the design of (a)", "", explanation(params, n_pre), "",
            *seeds_table(params, choices, n_pre, used), ""]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options of its own: every number comes from the params file (--params)."""


def run(args: argparse.Namespace, params: Params) -> None:
    """Print, per confirmatory task, the fine-tuning seeds (a) needs (`choose_seeds`), from the
    params and the prepared task tables."""
    del args
    n_pre = len(params.pretrain.seeds)
    choices, missing = [], []
    for task, (split, n) in planned_examples(params).items():
        if n is None:
            missing.append(task)
        else:
            choices.append(choose_seeds(params, task, split, n, n_pre))
    print("\n".join([explanation(params, n_pre), "", *seeds_table(params, choices, n_pre)]))
    if missing:
        print(f"not prepared yet (run `dvc repro prepare_task@<task>` for their test split's "
              f"size): {', '.join(missing)}")
