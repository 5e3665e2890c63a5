"""The fine-tuning seeds finding (a) needs (gpt1/report/design.py): the smallest F with the
plan's power at the declared effect, from gpt1.stats.power of the test actually run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpt1 import stats
from gpt1.report import design
from gpt1.report.findings import row_variance
from gpt1.tasks import load
from gpt1.tasks.mirror_formats import row
from gpt1.tasks.registry import TASKS


def test_power_rises_with_the_seeds_and_is_the_tests_own(tiny_params) -> None:
    powers = [design.power_at(tiny_params, 2, f, 3000) for f in range(2, 13)]
    assert all(b > a for a, b in zip(powers, powers[1:], strict=False))  # monotone in F
    var = row_variance(tiny_params, 2, 5, 3000, 1, scratch_arms=1)
    assert powers[3] == stats.power(tiny_params.report.declared_effect, var)


@pytest.mark.parametrize("n_examples", [3000, 5732, 20000])
def test_the_smallest_f_with_the_power_is_chosen(tiny_params, n_examples) -> None:
    cfg = tiny_params.report
    choice = design.choose_seeds(tiny_params, "qnli", "fresh", n_examples, 2)
    f = choice.seeds
    assert choice.reached and design.FIRST_SEEDS <= f <= cfg.max_seeds
    assert design.power_at(tiny_params, 2, f, n_examples) >= cfg.power
    if f > design.FIRST_SEEDS:
        assert design.power_at(tiny_params, 2, f - 1, n_examples) < cfg.power
    var = row_variance(tiny_params, 2, f, n_examples, 1, scratch_arms=1)
    assert choice.power == pytest.approx(stats.power(cfg.declared_effect, var))
    assert choice.mde == pytest.approx(stats.mde(var, cfg.power))
    assert choice.mde <= cfg.declared_effect  # at the chosen F the declared effect is seen


def test_more_examples_never_ask_for_more_seeds(tiny_params) -> None:
    chosen = [design.choose_seeds(tiny_params, "qnli", "fresh", n, 2).seeds
              for n in (300, 1000, 3000, 10000)]
    assert chosen == sorted(chosen, reverse=True)


def test_the_cap_is_said_when_no_f_reaches_the_power(make_params) -> None:
    params = make_params({"report": {"max_seeds": 3, "declared_effect": 0.01}})
    choice = design.choose_seeds(params, "qnli", "fresh", 3000, 2)
    assert not choice.reached and choice.seeds == 3 and choice.power < params.report.power
    row = design.seeds_table(params, [choice], 2)[2]
    assert "3 (cap: not reached)" in row and row.startswith("| QNLI | fresh | 3,000 |")


def test_the_cli_reads_the_fresh_split_and_the_capped_test_split(make_params, capsys) -> None:
    params = make_params({"report": {"confirmatory_tasks": ["sst2", "qnli"]},
                          "tasks": {"fresh_examples": {"qnli": 3000}},
                          "finetune": {"max_eval_examples": 200}})
    assert design.planned_examples(params) == {"sst2": ("test", None),  # not prepared yet
                                               "qnli": ("fresh", 3000)}   # declared
    table = load.to_table([row(str(i), f"s {i}", "", i % 2, f"f:{i}") for i in range(300)],
                          TASKS["sst2"])  # the prepared tables, 300 test rows
    load.write_tables({"train": table, "dev": table, "test": table},
                      Path(params.paths.tasks) / "sst2")
    assert design.planned_examples(params)["sst2"] == ("test", 200)
    design.run(None, params)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    chosen = design.choose_seeds(params, "qnli", "fresh", 3000, len(params.pretrain.seeds))
    f_text = f"{chosen.seeds}" + ("" if chosen.reached else " (cap: not reached)")
    assert f"| QNLI | fresh | 3,000 | {f_text} | {100 * chosen.mde:.1f} |" in out
    assert "| SST2 | test | 200 |" in out
