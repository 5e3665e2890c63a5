"""The params of each fine-tuning variant: a Table 5 row (with the lr its pilot chose) and the
caps of Figure 2 left, as validated params (the stages run the one fine-tuning loop on them)."""

from __future__ import annotations

from typing import Any

from gpt1 import records
from gpt1.config import FULL_ARM, Params, parse_params
from gpt1.errors import Gpt1Error
from gpt1.stage_table import StageRun


def override(params: Params, **sections: dict[str, Any]) -> Params:
    """params with some keys of some sections replaced, validated again like a params file."""
    raw = params.as_dict()
    for section, values in sections.items():
        raw[section] = {**raw[section], **values}
    return parse_params(raw, "<override>")


def lm_params(params: Params, kind: str) -> Params:
    """The params a `kind` (transformer | lstm) pre-training run trains with: for the LSTM its
    own peak lr, lstm.lr_max, where set (null: pretrain.lr_max); params otherwise. The run's
    seed is its pre-training seed, handed to the loop apart (gpt1.pretraining.pretrain)."""
    if kind != "lstm" or params.lstm.lr_max is None:
        return params
    return override(params, pretrain={"lr_max": params.lstm.lr_max})


def ablation_params(params: Params, variant: str, lr: float | None = None,
                    warmup_frac: float | None = None) -> Params:
    """The finetune params of one arm: Table 5's row ablations.presets[variant], or `full` (the
    finetune stage's own params); `lr` replaces finetune.lr and any per-task lr, `warmup_frac`
    finetune.warmup_frac (the configuration its pilot chose)."""
    preset = params.ablations.presets.get(variant)
    if preset is None and variant != FULL_ARM:
        raise Gpt1Error(f"unknown ablation variant {variant!r}; ablations.presets = "
                        f"{list(params.ablations.presets)}")
    values: dict[str, Any] = {}
    if preset is not None:
        lm_coef = params.finetune.lm_coef if preset.lm_coef is None else preset.lm_coef
        values.update(init=preset.init, lm_coef=lm_coef)
    if lr is not None:
        overrides = params.as_dict()["finetune"]["overrides"]
        values.update(lr=lr, overrides={t: {**o, "lr": None} for t, o in overrides.items()})
    if warmup_frac is not None:
        values["warmup_frac"] = warmup_frac
    return override(params, finetune=values) if values else params


def pilot_choice(params: Params, variant: str, task: str) -> tuple[float | None, float | None]:
    """(lr, warm-up fraction) the pilot chose for `variant` on `task` (its record
    lr_pilot_<variant>_<task>); (None, None) where the pilot does not tune the arm on `task`."""
    pilot = params.ablations.pilot
    if variant not in pilot.variants or task not in params.ablations.tasks:
        return None, None
    run = pilot_run(variant, task)
    record = records.read_record(params.paths.metrics, run.stem)
    if record is None:
        raise Gpt1Error(f"no pilot record for {variant} on {task}: run `dvc repro "
                        f"{run.address}` first",
                        records.record_paths(params.paths.metrics, run.stem)[0])
    warmup = record.get("chosen_warmup")
    return float(record["chosen_lr"]), None if warmup is None else float(warmup)


def pilot_run(variant: str, task: str) -> StageRun:
    """The pilot's run of arm `variant` on `task`: lr_pilot_full for `full`, else lr_pilot."""
    if variant == FULL_ARM:
        return StageRun.of("lr_pilot_full", task=task)
    return StageRun.of("lr_pilot", task=task, variant=variant)


def layers_caps(params: Params, task: str) -> Params:
    """params whose fine-tuning caps are the study's (layers.max_*), when it sets them."""
    return with_caps(params, task, params.layers.max_train_examples,
                     params.layers.max_eval_examples)


def with_caps(params: Params, task: str, max_train: int | None, max_eval: int | None
              ) -> Params:
    """params whose fine-tuning caps on `task` are max_train / max_eval (None: unchanged),
    replacing the task's own override of them."""
    caps = {k: v for k, v in (("max_train_examples", max_train),
                              ("max_eval_examples", max_eval)) if v is not None}
    if not caps:
        return params
    overrides = params.as_dict()["finetune"]["overrides"]
    if task in overrides:
        overrides[task] = {**overrides[task], **dict.fromkeys(caps)}
    return override(params, finetune={**caps, "overrides": overrides})
