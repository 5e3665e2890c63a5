"""The lr pilot of a Table 5 row: the lr its ablation stages fine-tune at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import atomic, tracking
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.finetune import pilot_key
from gpt1.stages.data import task_spec
from gpt1.stages.finetune import finetune_variant
from gpt1.stages.recording import record, record_in_own_run
from gpt1.stages.variants import ablation_params, override
from gpt1.tasks import load


def lr_pilot(params: Params, task: str, variant: str) -> dict[str, Any]:
    """The lr pilot of a Table 5 baseline: every lr of ablations.pilot.lr_grid fine-tunes on
    the training pool minus a carved dev split (seeded, ablations.pilot.dev_examples) and is
    scored on that split; the best (one class last, then score, log-loss, the larger lr) is the
    ablation's lr. Runs on the first pre-training seed. No scored split is touched."""
    cfg = params.ablations.pilot
    abl = params.ablations
    if variant not in abl.variants or task not in abl.tasks:
        raise Gpt1Error(f"{variant!r} / {task!r}: not in ablations.variants "
                        f"{list(abl.variants)} x ablations.tasks {list(abl.tasks)}")
    spec, seed = task_spec(params, task), params.pretrain.seeds[0]
    base = Path(params.paths.finetuned) / "lr_pilot" / f"{variant}_{task}"
    if variant not in cfg.variants:  # a row the pilot does not tune runs at the recipe's lr
        why = {"variant": variant, "task": task,
               "not_piloted": "not in ablations.pilot.variants: the fine-tuning recipe's lr"}
        atomic.write_json(base / "not_piloted.json", why)
        record_in_own_run(params, f"lr_pilot_{variant}_{task}", why, ())
        return why
    pool = load.read_tables(Path(params.paths.tasks) / task)["train"]
    if len(pool) < 2 * cfg.dev_examples:
        raise Gpt1Error(f"{task}: training pool of {len(pool)} is too small to carve "
                        f"ablations.pilot.dev_examples={cfg.dev_examples} from it")
    train, dev = load.carve(pool, cfg.dev_examples, cfg.seed)
    # the pilot's runs score (as their `test`) the carved dev split; they select nothing
    load.write_tables({"train": train, "dev": dev, "test": dev}, base / "tables" / task)
    keys, scores = {}, {}
    for lr in cfg.lr_grid:
        run = ablation_params(params, variant, lr)
        run = override(run, finetune={"seeds": [cfg.seed], "select": "final"},
                        paths={"tasks": str(base / "tables"), "metrics": str(base / "metrics"),
                               "finetuned": str(base / "runs")})
        kind = params.ablations.presets[variant].body
        with tracking.child_scope(f"lr={lr:g}", run, {"gpt1.lr_candidate": f"{lr:g}"}):
            m = finetune_variant(run, task, variant, kind, seed, out=f"lr_{lr:g}",
                                 stem=f"lr_{lr:g}")
        pred = pd.read_parquet(m["predictions"]["test"][0])["prediction"].to_numpy()
        flat = {k: v["mean"] for k, v in m["scores"].items()}
        scores[f"{lr:g}"] = flat[spec.metric]
        keys[lr] = pilot_key(spec, flat, pred, m["log_loss"][0], lr)
    chosen = max(keys, key=keys.__getitem__)
    metrics = {"variant": variant, "task": task, "metric": spec.metric,
               "grid": list(cfg.lr_grid), "dev_scores": scores, "chosen_lr": chosen,
               "dev_split": (f"{len(dev)} examples carved (seed {cfg.seed}) from the "
                             f"{len(pool)}-example training pool ({spec.sources['train']}); "
                             "trained on the rest, capped as the task's fine-tuning"),
               "chosen_by": ("dev " + ("accuracy" if spec.metric == "f1" else spec.metric)
                             + "; >= 95 % one class last, lower log-loss next, larger lr on ties"),
               "pretrain_seed": seed, "seed": cfg.seed}
    with tracking.start_run(f"lr_pilot_{variant}_{task}", params):  # the stage's own run
        record(params, f"lr_pilot_{variant}_{task}", metrics, ("dev_scores", "chosen_lr"),
               summary={"chosen_lr": chosen, f"chosen_dev_{spec.metric}": scores[f"{chosen:g}"],
                        "dev_scores": scores})
    return metrics

