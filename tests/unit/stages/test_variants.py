"""Table 5 / Figure 2 stages are presets of the finetune stage: the overrides they apply, their
CLI arguments and their DVC entries."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from gpt1 import arms, stage_table
from gpt1.__main__ import build_parser
from gpt1.errors import Gpt1Error
from gpt1.stage_table import STAGES
from gpt1.stages import finetune as finetune_stages
from gpt1.stages import lr_pilot as lr_pilot_stages
from gpt1.stages import pretrain as pretrain_stages
from gpt1.stages import zeroshot as zeroshot_stages
from tests.helpers.repo import REPO


def test_presets_override_only_init_and_lm_coef(tiny_params) -> None:
    base = tiny_params.finetune
    scratch = arms.ablation_params(tiny_params, "scratch")
    no_aux = arms.ablation_params(tiny_params, "no_aux")
    lstm = arms.ablation_params(tiny_params, "lstm")
    assert scratch.finetune.init == "scratch" and scratch.finetune.lm_coef == 0.0  # the demo's λ
    assert no_aux.finetune.init == "pretrained" and no_aux.finetune.lm_coef == 0.0
    assert lstm.finetune == base.model_copy(update={"init": "pretrained"})
    for p in (scratch, no_aux, lstm):  # everything else is the full run's params
        assert p.model_dump(exclude={"finetune"}) == tiny_params.model_dump(exclude={"finetune"})
    assert tiny_params.ablations.presets["lstm"].body == "lstm"
    with pytest.raises(Gpt1Error, match="unknown arm"):
        arms.ablation_params(tiny_params, "bogus")


def test_cli_takes_arm_and_layers() -> None:
    args = build_parser().parse_args(["ablation", "--task", "rte", "--arm", "scratch"])
    assert (args.task, args.arm) == ("rte", "scratch")
    args = build_parser().parse_args(["transfer_layers", "--task", "mnli", "--layers", "3"])
    assert args.layers == 3
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ablation", "--task", "rte"])
    assert STAGES["transfer_layers"].arguments == ("task", "layers")
    args = build_parser().parse_args(["finetune", "--task", "rte", "--pretrain-seed", "7"])
    assert args.pretrain_seed == 7
    assert build_parser().parse_args(["zeroshot"]).pretrain_seed is None  # the first seed
    args = build_parser().parse_args(["lr_pilot", "--task", "rte", "--arm", "lstm"])
    assert (args.task, args.arm) == ("rte", "lstm")
    for old in (["--variant", "lstm"], ["--variant=lstm"]):  # the old flag, still accepted
        assert build_parser().parse_args(["lr_pilot", "--task", "rte", *old]).arm == "lstm"
    assert "--variant" not in build_parser().format_help() + _help("lr_pilot")


def _help(command: str) -> str:
    parser = build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command].format_help()


def test_a_pretraining_seed_outside_the_list_is_refused(tiny_params) -> None:
    seeds = tiny_params.pretrain.seeds
    assert stage_table.resolve_pretrain_seed(seeds, None) == seeds[0]
    for stage in (lambda: finetune_stages.finetune(tiny_params, "rte", 7),
                  lambda: zeroshot_stages.zeroshot(tiny_params, 7)):
        with pytest.raises(Gpt1Error, match=r"pre-training seed 7 not in pretrain.seeds \[1234\]"):
            stage()
    with pytest.raises(Gpt1Error, match="not in ablations.variants"):
        lr_pilot_stages.lr_pilot(tiny_params, "sst2", "bogus")


def test_a_row_the_pilot_does_not_tune_records_so_and_trains_nothing(make_params) -> None:
    tiny_params = make_params({"ablations": {"pilot": {"variants": ["scratch"]}}})
    out = lr_pilot_stages.lr_pilot(tiny_params, "sst2", "no_aux")
    assert "chosen_lr" not in out and out["not_piloted"].startswith("not in ablations.pilot")
    base = Path(tiny_params.paths.finetuned) / "lr_pilot" / "no_aux_sst2"
    assert [p.name for p in base.iterdir()] == ["not_piloted.json"]  # the stage's DVC output
    choice = json.loads(arms.choice_path(tiny_params, "no_aux", "sst2").read_text())
    assert choice["lr"] is None and choice["not_piloted"] == out["not_piloted"]
    assert arms.pilot_choice(tiny_params, "no_aux", "sst2") == (None, None)  # the recipe's


def test_the_full_row_has_a_pilot_stage_on_every_fine_tuned_task(tiny_params) -> None:
    """finetune@<task> depends on lr_pilot_full@<task>'s choice file, so every task of
    finetune.tasks has one: outside ablations.tasks it says the recipe's lr."""
    task = next(t for t in tiny_params.finetune.tasks if t not in tiny_params.ablations.tasks)
    out = lr_pilot_stages.lr_pilot_full(tiny_params, task)
    assert out["not_piloted"].startswith("not in ablations.tasks")
    choice = json.loads(arms.choice_path(tiny_params, "full", task).read_text())
    assert choice == {"arm": "full", "task": task, "lr": None, "warmup_frac": None,
                      "not_piloted": out["not_piloted"]}
    with pytest.raises(Gpt1Error, match="nor full x finetune.tasks"):
        lr_pilot_stages.lr_pilot(tiny_params, task, "scratch")


def test_a_missing_choice_names_the_pilot_stage_to_run(make_params) -> None:
    params = make_params({"ablations": {"pilot": {"variants": ["full"]}}})
    task = params.ablations.tasks[0]
    with pytest.raises(Gpt1Error, match=f"dvc repro lr_pilot_full@{task}"):
        arms.pilot_choice(params, "full", task)


def test_dvc_stages_exist_in_cli_and_call_it_with_their_matrix() -> None:
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for name in ("lr_pilot", "ablation", "floor", "transfer_layers", "zeroshot", "zeroshot_lstm",
                 "report"):
        assert name in STAGES and name in dvc
    assert dvc["floor"]["foreach"] == "${ablations.tasks}"  # no pre-training seed
    assert "--task ${item}" in dvc["floor"]["do"]["cmd"]
    assert set(dvc["ablation"]["matrix"]) == {"arm", "task", "pretrain_seed"}
    assert "--arm ${item.arm}" in dvc["ablation"]["cmd"]
    assert set(dvc["lr_pilot"]["matrix"]) == {"arm", "task"}  # one pilot per row and task
    for name in ("finetune", "ablation", "transfer_layers"):  # per pre-training seed
        assert dvc[name]["matrix"]["pretrain_seed"] == "${pretrain.seeds}"
        assert "--pretrain-seed ${item.pretrain_seed}" in dvc[name]["cmd"]
    for name in ("pretrain", "pretrain_lstm", "zeroshot", "zeroshot_lstm"):
        assert dvc[name]["foreach"] == "${pretrain.seeds}"
        assert "--pretrain-seed ${item}" in dvc[name]["do"]["cmd"]
    assert "--layers ${item.layers}" in dvc["transfer_layers"]["cmd"]
    assert "${paths.metrics}" in dvc["report"]["deps"]  # report reruns after any stage


def test_transfer_layers_refuses_k_beyond_the_model(tiny_params) -> None:
    with pytest.raises(Gpt1Error, match="outside 0..2"):
        finetune_stages.transfer_layers(tiny_params, "mnli", 3)


def test_layers_study_caps_replace_finetune_caps(make_params) -> None:
    params = make_params({"layers": {"max_train_examples": 7, "max_eval_examples": None},
                          "finetune": {"overrides": {"mnli": {"max_train_examples": 99,
                                                              "lr": 1e-3}}}})
    study = arms.layers_caps(params, "mnli")
    assert study.finetune.max_train_examples == 7
    assert study.finetune.max_eval_examples == params.finetune.max_eval_examples
    assert study.finetune.overrides["mnli"].max_train_examples is None
    assert study.finetune.overrides["mnli"].lr == 1e-3
    off = make_params({"layers": {"max_train_examples": None, "max_eval_examples": None}})
    assert arms.layers_caps(off, "mnli") == off


def test_the_lstm_pretrains_at_its_own_lr_where_set(make_params) -> None:
    same = make_params({"lstm": {"lr_max": None}})  # null: the Transformer's lr
    assert pretrain_stages.lm_params(same, "lstm") == same
    own = make_params({"lstm": {"lr_max": 2e-3}})
    lstm = pretrain_stages.lm_params(own, "lstm")
    gpt = pretrain_stages.lm_params(own, "transformer")
    assert (lstm.pretrain.lr_max, gpt.pretrain.lr_max) == (2e-3, own.pretrain.lr_max)
    assert gpt == own  # the seed is not rewritten: the loop takes the pre-training seed apart
    assert lstm.model_dump(exclude={"pretrain"}) == own.model_dump(exclude={"pretrain"})
