"""The report stage: Tables 2-5 and Figure 2 from the current stage records."""

from __future__ import annotations

import logging
from typing import Any

from gpt1 import freshness, records, tracking
from gpt1.arms import arm_params
from gpt1.config import Params
from gpt1.records import StageContext
from gpt1.report import document
from gpt1.stage_table import StageRun

log = logging.getLogger(__name__)


def _choice(metrics: dict[str, Any], arm: str, task: str) -> tuple[float | None, float | None]:
    """The (lr, warm-up) the pilot record of `arm` on `task` chose; (None, None) without one."""
    pilot = metrics.get(StageRun.of("lr_pilot", arm=arm, task=task).stem, {})
    return pilot.get("chosen_lr"), pilot.get("chosen_warmup")


def report(params: Params, *, context: StageContext | None = None) -> dict[str, Any]:
    """Tables 2-5 and Figure 2 from every metrics file (reports/), logged to MLflow."""
    # the current stages' records only: another config's leftovers are not this run's
    metrics = freshness.current_records(params, records.read_metrics(params.paths.metrics))
    expected = {StageRun.of("ablation", arm=v, task=t, pretrain_seed=p).stem:
                arm_params(params, v, t, _choice(metrics, v, t)).digest()
                for v in params.ablations.presets for t in params.ablations.tasks
                for p in params.pretrain.seeds}
    paths = document.write_outputs(params, metrics, expected)
    with tracking.start_run("report", params, context=context):
        for path in paths.values():
            tracking.log_artifact(path, "report")
    log.info("report: %s from %d metrics files", paths["report"], len(metrics))
    return {"metrics_files": len(metrics), "outputs": {k: str(v) for k, v in paths.items()}}

