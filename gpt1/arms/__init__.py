"""The arms of the fine-tuning study: an arm is `full` (the finetune stage's recipe) or a
Table 5 row (ablations.presets; `ablations.variants` in params, `--arm` in the CLI), run at the (lr,
warm-up) its pilot chose. This package's rules: one function composes an arm's params for a
task (`arm_params`), one gives its training samples (`training_samples`), the pilot's split and
the choice file each pilot writes and its arm's stages read; the caps of Figure 2 left and the
curves too. Running one arm on these params: gpt1/arms/run.py; the lr pilot:
gpt1/arms/pilot.py."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from gpt1 import atomic, names, records
from gpt1.config import FULL_ARM, Params, override
from gpt1.errors import Gpt1Error
from gpt1.stage_table import StageRun
from gpt1.tasks import load

if TYPE_CHECKING:
    from gpt1.finetune import Hparams


def ablation_params(params: Params, arm: str, lr: float | None = None,
                    warmup_frac: float | None = None) -> Params:
    """The finetune params of `arm` at a given (lr, warm-up) (`arm_params`: at its
    pilot's): Table 5's row ablations.presets[arm], or `full` (the
    finetune stage's own params); `lr` replaces finetune.lr and any per-task lr, `warmup_frac`
    finetune.warmup_frac (the configuration its pilot chose)."""
    preset = params.ablations.presets.get(arm)
    if preset is None and arm != FULL_ARM:
        raise Gpt1Error(f"unknown arm {arm!r} (full, or a name in ablations.presets "
                        f"{list(params.ablations.presets)})")
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


def pilot_run(arm: str, task: str) -> StageRun:
    """The pilot's run of `arm` on `task`: lr_pilot_full for `full`, else lr_pilot."""
    if arm == FULL_ARM:
        return StageRun.of("lr_pilot_full", task=task)
    return StageRun.of("lr_pilot", task=task, arm=arm)


def pilot_dir(params: Params, arm: str, task: str) -> Path:
    """The pilot's output folder of `arm` on `task` (its runs, its carved split)."""
    return Path(params.paths.finetuned) / "lr_pilot" / f"{arm}_{task}"


def choice_path(params: Params, arm: str, task: str) -> Path:
    """The pilot's choice of `arm` on `task`: its own DVC output, which every stage that runs
    the arm on the task declares (dvc.yaml), so a changed pilot re-runs only what reads it."""
    return Path(params.paths.finetuned) / "lr_pilot" / "choices" / f"{arm}_{task}.json"


def choice_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The choice file's content from a pilot's record (gpt1.arms.pilot): the (lr, warm-up) chosen,
    both grids, the pilot-split scores and whether the choice lies at a grid's edge; `lr` and
    `warmup_frac` null (the recipe's) where the pilot does not tune the arm."""
    head = {"arm": record["variant"], "task": record["task"]}
    if "not_piloted" in record:
        return {**head, "lr": None, "warmup_frac": None, "not_piloted": record["not_piloted"]}
    return {**head, "lr": record["chosen_lr"], "warmup_frac": record["chosen_warmup"],
            "lr_grid": record["grid"], "warmup_grid": record["warmup_grid"],
            "metric": record["metric"], "scores": record["dev_scores"],
            "lr_at_edge": record["lr_at_edge"], "warmup_at_edge": record["warmup_at_edge"]}


def write_choice(params: Params, arm: str, task: str, record: Mapping[str, Any]) -> Path:
    """Write the pilot's choice file of `arm` on `task` (`choice_of` its record)."""
    path = choice_path(params, arm, task)
    atomic.write_json(path, choice_of(record))
    return path


def pilot_choice(params: Params, arm: str, task: str) -> tuple[float | None, float | None]:
    """(lr, warm-up fraction) the pilot chose for `arm` on `task` (its choice file); (None,
    None) where the pilot does not tune the arm on `task`."""
    pilot = params.ablations.pilot
    if arm not in pilot.variants or task not in params.ablations.tasks:
        return None, None
    path = choice_path(params, arm, task)
    try:
        choice = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Gpt1Error(f"no pilot choice for {arm} on {task}: run `dvc repro "
                        f"{pilot_run(arm, task).address}` first", path) from None
    except (OSError, ValueError) as err:
        raise Gpt1Error(f"unreadable pilot choice ({err})", path) from None
    lr, warmup = choice.get("lr"), choice.get("warmup_frac")
    if lr is None:
        raise Gpt1Error(f"the pilot of {arm} on {task} did not tune it "
                        f"({choice.get('not_piloted')}); re-run `dvc repro "
                        f"{pilot_run(arm, task).address}`", path)
    return float(lr), None if warmup is None else float(warmup)


def read_choice(params: Params, run: StageRun) -> tuple[float, float | None]:
    """(lr, warm-up fraction) pilot run `run` chose (its record)."""
    record = records.read_record(params.paths.metrics, run.stem)
    if record is None:
        raise Gpt1Error(f"no pilot record {run.stem}: run `dvc repro {run.address}` first",
                        records.record_paths(params.paths.metrics, run.stem)[0])
    warmup = record.get("chosen_warmup")
    return float(record["chosen_lr"]), None if warmup is None else float(warmup)


def arm_params(params: Params, arm: str, task: str,
               choice: tuple[float | None, float | None] | None = None) -> Params:
    """The finetune params `arm` runs with on `task`: its recipe (`ablation_params`) at the
    (lr, warm-up) its pilot chose where ablations.pilot tunes it on `task` (`choice`, else
    read from its choice file), else at the recipe's."""
    lr, warmup = pilot_choice(params, arm, task) if choice is None else choice
    return ablation_params(params, arm, lr, warmup)


DOSE_PILOT_DIR = "pilot_dose"
"""The dose pilots' folder under paths.finetuned (apart from lr_pilot's, which other stages
depend on)."""


def dose_params(params: Params, tokens: int) -> Params:
    """The params of the dose curve's budget of `tokens` pre-training tokens (a value of
    curves.dose_tokens) and of what fine-tunes from it: pretrain.max_tokens = tokens, so the
    run has its own warm-up and decays to 0 at its own end, and its runs live under
    paths.dose_checkpoints/<tokens> (gpt1.checkpoint.pretrain_dir adds p<seed>)."""
    if tokens not in params.curves.dose_tokens:
        raise Gpt1Error(f"{tokens} tokens: not a budget of curves.dose_tokens "
                        f"{list(params.curves.dose_tokens)}")
    return override(params, pretrain={"max_tokens": tokens},  # a run with no dose curve below
                    curves={"dose_tokens": [], "dose_tasks": []},
                    paths={"checkpoints": str(Path(params.paths.dose_checkpoints) / str(tokens))})


def dose_pilot_run(task: str, tokens: int) -> StageRun:
    """The pilot of the dose curve's budget of `tokens` tokens on `task`."""
    return StageRun.of("pilot_dose", task=task, tokens=tokens)


def dose_arm_params(params: Params, task: str, tokens: int) -> Params:
    """The finetune params of the dose curve's budget of `tokens` tokens on `task`: the `full`
    row's recipe at the (lr, warm-up) its own pilot chose, from that budget's runs."""
    return ablation_params(dose_params(params, tokens), FULL_ARM,
                           *read_choice(params, dose_pilot_run(task, tokens)))


def arm_body(params: Params, arm: str) -> str:
    """The network body `arm` fine-tunes: the Transformer for `full`, else its preset's."""
    return names.TRANSFORMER if arm == FULL_ARM else names.body(
        params.ablations.presets[arm].body)


def training_samples(pool: pd.DataFrame, hp: Hparams, seeds: Iterable[int] | None = None
                     ) -> dict[int, pd.DataFrame]:
    """Fine-tuning seed -> its training sample of `pool`: a seeded subset of
    hp.max_train_examples rows (all when uncapped), its own per seed; the same for every arm
    and the floor (default: the seeds of `hp`)."""
    from gpt1.finetune import train_subset_seed  # torch: only where an arm trains

    return {f: load.cap_table(pool, hp.max_train_examples, train_subset_seed(hp.data_seed, f))
            for f in (hp.seeds if seeds is None else seeds)}


def pilot_carve(params: Params, task: str, pool: pd.DataFrame
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the pool every fine-tuning sample of `task` is drawn from, the pilot split): the split
    is ablations.pilot.dev_examples rows carved (seeded: ablations.pilot.seed) from the training
    pool before any sample is drawn, the same for every arm; the rest is the pool. So no sample
    of any arm or seed holds a row the pilot scores, at any number of fine-tuning seeds."""
    cfg = params.ablations.pilot
    if len(pool) < 2 * cfg.dev_examples:
        raise Gpt1Error(f"{task}: training pool of {len(pool)} is too small to carve "
                        f"ablations.pilot.dev_examples={cfg.dev_examples} from it")
    return load.carve(pool, cfg.dev_examples, cfg.seed)


def pilot_split(params: Params, arm: str, task: str, pool: pd.DataFrame
                ) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(the pilot's training sample, its split, the split in words). The split is
    `pilot_carve`'s; the training sample is the arm's fine-tuning sample at the pilot seed,
    drawn from the rest of the pool as every confirmatory run's is (so neither a confirmatory
    run trains on the split nor is it a scored split)."""
    from gpt1.finetune import resolve_hparams  # torch: only where an arm trains

    cfg = params.ablations.pilot
    hp = resolve_hparams(ablation_params(params, arm), task)
    rest, dev = pilot_carve(params, task, pool)
    train = training_samples(rest, hp, [cfg.seed])[cfg.seed]
    sample = (f"fine-tuning seed {cfg.seed}'s sample of {len(train)}" if len(train) < len(rest)
              else f"all {len(train)} (the task fine-tunes on its whole pool)")
    return train, dev, (
        f"{len(dev)} examples carved (seed {cfg.seed}) from the {len(pool)}-example training "
        f"pool before any fine-tuning sample is drawn; every sample comes from the other "
        f"{len(rest)}; trained on {sample}")


def pilot_rows(params: Params, task: str) -> tuple[frozenset[str], int]:
    """(the ids of the training-pool rows the pilots of `task` score: `pilot_carve`'s split,
    none where no pilot runs on the task; the pool's size). Every fine-tuning stage draws its
    samples outside them (`pilot_ids`, `outside_pilot`: `held_out` of gpt1.arm_run)."""
    pool = load.read_tables(Path(params.paths.tasks) / task)["train"]
    if not piloted(params, task):
        return frozenset(), len(pool)
    return frozenset(pilot_carve(params, task, pool)[1]["id"]), len(pool)


def piloted(params: Params, task: str) -> bool:
    """Whether a pilot runs on `task` (so its training pool has a pilot split)."""
    return task in params.ablations.tasks and bool(params.ablations.pilot.variants)


def pilot_ids(params: Params, task: str) -> frozenset[str]:
    """`pilot_rows`' ids; none, without reading the task's tables, where no pilot runs on it."""
    return pilot_rows(params, task)[0] if piloted(params, task) else frozenset()


def outside_pilot(params: Params, task: str, n: int, key: str) -> frozenset[str]:
    """The pilot's rows of `task` (`pilot_rows`), once n (params key `key`) fits outside them."""
    held, size = pilot_rows(params, task)
    if size - len(held) < n:
        raise Gpt1Error(f"{key} asks for {n} training examples of {task}, but only "
                        f"{size - len(held)} of its {size}-row training pool lie outside the "
                        f"pilot's split of {len(held)}; lower {key}")
    return held
