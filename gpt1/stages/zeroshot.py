"""Figure 2 right as stages (zeroshot, zeroshot_lstm): the zero-shot heuristics (gpt1.zeroshot)
over every kept checkpoint of one pre-training run, with per-example predictions and the stage
record."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import atomic, bpe, checkpoint, hf_stand_in, names, runtime, tracking
from gpt1 import zeroshot as zs
from gpt1.backends import backend_of
from gpt1.config import Params
from gpt1.progress import progress
from gpt1.recording import record
from gpt1.records import StageContext
from gpt1.runtime import autocast_for, resolve_precision
from gpt1.stage_table import StageRun, resolve_pretrain_seed
from gpt1.tasks import formats, load

log = logging.getLogger(__name__)


def predictions_path(params: Params, kind: str, pretrain_seed: int) -> Path:
    """Where the stage of pre-training run `pretrain_seed` of `kind` writes its per-example
    predictions."""
    run = Path(params.paths.finetuned) / names.run_tag(pretrain_seed)
    return run / "zeroshot" / f"{names.body(kind)}.parquet"


def score_checkpoints(params: Params, name: str, kind: str, pretrain_seed: int, *,
                      context: StageContext | None = None) -> dict[str, Any]:
    """Score every kept checkpoint of pre-training run `pretrain_seed` of `kind` (transformer |
    lstm); writes <paths.finetuned>/p<pretrain_seed>/zeroshot/<model>.parquet and the record
    <name>_p<pretrain_seed>. Every checkpoint and run is scored on the same examples (seeded
    by params.seed)."""
    run_dir = checkpoint.pretrain_dir(params, kind, pretrain_seed)
    stage, model_name = StageRun.of(name, pretrain_seed=pretrain_seed).stem, names.body(kind)
    checkpoint.check_model_shape(run_dir, params)
    cfg = params.zeroshot
    tok = bpe.load_bpe(params.paths.tokenizer)
    tables = {t: load.read_tables(Path(params.paths.tasks) / t) for t in cfg.tasks if t != "dprd"}
    dprd_file = Path(params.paths.mirror_dir or "") / "tasks" / "DPRD" / f"{cfg.dprd_split}.c.txt"
    dprd = zs.read_dprd(dprd_file) if "dprd" in cfg.tasks else []
    data, counts = zs.build_data(cfg, tables, dprd, formats.text_encoder(tok), params.seed)
    steps = sorted(int(s) for s in checkpoint.read_model_meta(run_dir)["zeroshot"])
    device = runtime.device(params.device)
    precision = resolve_precision(params.pretrain.precision, device)
    n_ctx = params.model.n_positions
    rows, frames = [], []
    with tracking.start_run(stage, params, context=context) as on_metrics:
        for step in progress(steps, desc=f"{stage} checkpoints", unit="ckpt"):
            model, _ = checkpoint.load_model(run_dir, tok.hash, step=step)
            scorer = zs.ModelScorer(model.to(device), n_ctx, cfg.batch_size,
                                    lambda: autocast_for(precision, device))
            preds, threshold = zs.predict_tasks(scorer, data, n_ctx)
            raw = zs.scores_of(preds, threshold)
            frames += [pd.DataFrame({"step": step, "task": t, "example": range(len(y)),
                                     "label": y, "prediction": p}) for t, (y, p) in preds.items()]
            norm = {t: zs.normalise(raw[t], cfg.norm[t]) for t in cfg.tasks}
            rows.append({"step": step, "scores": raw, "normalised": norm})
            on_metrics(step, {f"zeroshot/{t}": v for t, v in norm.items()})
            log.info("%s step %d: %s", stage, step, {t: round(v, 3) for t, v in norm.items()})
        pred_path = predictions_path(params, kind, pretrain_seed)
        scored = [t for t in cfg.tasks if t != "dprd"]
        table = pd.concat(frames) if frames else pd.DataFrame(
            columns=["step", "task", "example", "label", "prediction"])
        atomic.write_bytes(pred_path, table.to_parquet(index=False) or b"")
        metrics = {
            "body": model_name, "pretrain_seed": pretrain_seed, "steps": steps,
            "checkpoints": rows,
            "n_examples": counts, "predictions": str(pred_path),
            "eval_split": (f"canonical test splits of {', '.join(scored)} (seeded sample, at "
                           f"most {cfg.max_examples}); CoLA threshold fitted on "
                           f"{cfg.cola_threshold_split}; DPRD {dprd_file.name}"),
            "norm": {t: n.model_dump() for t, n in cfg.norm.items()},
            "final": rows[-1]["normalised"],  # the last checkpoint's: the stage's one score row
            "backend": backend_of(model),
        }
        record(params, stage, metrics, ("final",), summary={}, context=context)
    return metrics


def zeroshot(params: Params, pretrain_seed: int | None = None, *,
             context: StageContext | None = None) -> dict[str, Any]:
    """Figure 2 right: zero-shot heuristics on the Transformer's log-spaced checkpoints."""
    return _zeroshot(params, "zeroshot", names.TRANSFORMER, pretrain_seed, context)


def zeroshot_lstm(params: Params, pretrain_seed: int | None = None, *,
                  context: StageContext | None = None) -> dict[str, Any]:
    """Figure 2 right: the same heuristics on the LSTM's checkpoints."""
    return _zeroshot(params, "zeroshot_lstm", "lstm", pretrain_seed, context)


def _zeroshot(params: Params, name: str, kind: str, pretrain_seed: int | None,
              context: StageContext | None) -> dict[str, Any]:
    pretrain_seed = resolve_pretrain_seed(params.pretrain.seeds, pretrain_seed)
    if params.pretrain.import_hf is not None:  # no intermediate checkpoints to score
        return hf_stand_in.not_run(params, StageRun.of(name, pretrain_seed=pretrain_seed).stem,
                                   zeroshot_file=predictions_path(params, kind, pretrain_seed),
                                   context=context)
    return score_checkpoints(params, name, kind, pretrain_seed, context=context)

