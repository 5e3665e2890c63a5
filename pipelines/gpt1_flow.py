"""Prefect flow over the DVC pipeline: one task per DVC stage, each `dvc repro --single-item`.

The stage graph is read from DVC (pipelines.dag), so dvc.lock stays the record and DVC decides
what is stale: a re-run skips finished stages, and a stage that checkpoints resumes. Stages with
no path between them run at once up to params.orchestrate.max_parallel_stages; only
params.orchestrate.io_stages are retried. One MLflow parent run per flow run and one nested run
per stage, which the stage process logs into through $GPT1_RUN_ID. Each stage pulls its inputs
from and pushes its outputs to params.orchestrate.dvc_remote. No ML logic here: the stages live
in gpt1.stages and run through `python -m gpt1 <stage>` as dvc.yaml says.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture, as_completed
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from gpt1 import atomic, tracking
from gpt1.config import Params, load_params
from gpt1.errors import Gpt1Error
from pipelines.dag import StagePlan, read_plan, select

# Threads available to stage tasks; the real cap is params.orchestrate.max_parallel_stages,
# enforced by `_run_graph` (a deployment cannot size its task runner from params).
_TASK_THREADS = 16


def dvc_command() -> str:
    """The dvc beside this interpreter (the project venv), else the one on PATH."""
    local = Path(sys.executable).with_name("dvc")
    found = str(local) if local.exists() else shutil.which("dvc")
    if not found:
        raise Gpt1Error("dvc is not installed in this environment", sys.executable)
    return found


def activate_params(root: Path, params_path: str) -> Params:
    """Validate `params_path` and make it the repo's params.yaml (what dvc.yaml reads).

    A preset such as configs/paper.yaml is copied over params.yaml, as `dvc exp` would apply
    it; the file is validated first, so a bad preset leaves params.yaml untouched.
    """
    src, dst = (root / params_path).resolve(), root / "params.yaml"
    params = load_params(src)
    if src != dst.resolve() and (not dst.exists() or src.read_bytes() != dst.read_bytes()):
        logging.getLogger(__name__).warning("params.yaml <- %s", params_path)
        atomic.write_bytes(dst, src.read_bytes())
    return params


def stage_env(params: Params) -> dict[str, str]:
    """Environment of the stage subprocesses: the venv first on PATH, an absolute MLflow URI."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MLFLOW_TRACKING_URI"] = tracking.tracking_uri(params)
    env.pop(tracking.PARENT_ENV, None)
    env.pop(tracking.STAGE_RUN_ENV, None)
    env.setdefault("TQDM_MININTERVAL", "10")  # progress lines become log lines: not too many
    return env


def _dvc(args: list[str], root: Path, env: dict[str, str]) -> list[str]:
    """Run one dvc command, streaming its output to the task log; returns its output lines."""
    logger = get_run_logger()
    cmd = [dvc_command(), "--wait-for-lock", *args]  # DVC's repo lock is held briefly; wait
    logger.info("$ dvc %s", " ".join(args))
    lines: list[str] = []
    with subprocess.Popen(
        cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip():
                lines.append(line.rstrip())
                logger.info("%s", lines[-1])
    if proc.returncode:
        tail = " | ".join(lines[-3:])
        raise Gpt1Error(f"`dvc {' '.join(args)}` exited with {proc.returncode}: {tail}", root)
    return lines


@task(name="dvc-stage", task_run_name="{stage.name}", cache_policy=NO_CACHE)
def run_stage(
    stage: StagePlan, params: Params, root: str, env: dict[str, str], parent: str | None
) -> dict[str, Any]:
    """Pull the stage's inputs, `dvc repro --single-item` it, push its outputs; the stage's
    MLflow run (nested under `parent`) gets its metrics files."""
    started, where = time.time(), Path(root)
    remote = params.orchestrate.dvc_remote
    with tracking.stage_run(stage.name, params, parent) as run_id:
        stage_env = {**env, tracking.STAGE_RUN_ENV: run_id} if run_id else env
        if remote and stage.upstream:
            _dvc(["pull", "--allow-missing", "-r", remote, *stage.upstream], where, stage_env)
        output = _dvc(["repro", "--single-item", stage.name], where, stage_env)
        if remote:
            _dvc(["push", "-r", remote, stage.name], where, stage_env)
        ran = any(line.startswith(f"Running stage '{stage.name}'") for line in output)
        status = "ran" if ran else "unchanged"
        if run_id:
            files = [where / m for m in stage.metrics]
            tracking.record_stage(params, run_id, files, {"gpt1.dvc": status})
    return {"stage": stage.name, "status": status, "started": started, "finished": time.time()}


def _run_graph(
    plan: list[StagePlan], params: Params, root: Path, env: dict[str, str], parent: str | None
) -> list[dict[str, Any]]:
    """Submit each stage once its upstream succeeded, at most max_parallel_stages at once."""
    orch = params.orchestrate
    pending = list(plan)  # topological: a stage's upstream comes before it
    running: dict[PrefectFuture[dict[str, Any]], StagePlan] = {}
    done: set[str] = set()
    dead: set[str] = set()  # failed, or downstream of a failure
    records: list[dict[str, Any]] = []
    while pending or running:
        for s in [s for s in pending if dead.intersection(s.upstream)]:
            pending.remove(s)
            dead.add(s.name)
            records.append({"stage": s.name, "status": "not run (upstream failed)"})
        ready = [s for s in pending if done.issuperset(s.upstream)]
        for s in ready[: orch.max_parallel_stages - len(running)]:
            pending.remove(s)
            io = s.base in orch.io_stages
            runner = run_stage.with_options(
                retries=orch.io_retries if io else 0,
                retry_delay_seconds=orch.io_retry_delay_seconds if io else 0,
            )
            running[runner.submit(s, params, str(root), env, parent)] = s
        if not running:
            break
        future = next(as_completed(list(running)))
        s = running.pop(future)
        result = future.result(raise_on_failure=False)
        if future.state.is_completed():
            done.add(s.name)
            records.append(result)
        else:
            dead.add(s.name)
            records.append({"stage": s.name, "status": "failed", "error": str(result)})
    return records


def results_markdown(
    root: Path, plan: list[StagePlan], records: list[dict[str, Any]], run_link: str | None
) -> str:
    """The flow run's results: stage timeline and the stages' metrics JSON files, as markdown."""
    head = f"MLflow parent run: [{run_link}]({run_link})" if run_link else "MLflow: disabled"
    lines = [f"# gpt1 pipeline: {flow_run.get_name() or 'local run'}", "", head, "",
             "| stage | status | started (UTC) | seconds |", "|---|---|---|---|"]
    for r in records:
        when = time.strftime("%H:%M:%S", time.gmtime(r["started"])) if "started" in r else ""
        secs = f"{r['finished'] - r['started']:.1f}" if "finished" in r else ""
        lines.append(f"| {r['stage']} | {r['status']} | {when} | {secs} |")
    lines += ["", "| metrics file | metric | value |", "|---|---|---|"]
    for rel in sorted({m for s in plan for m in s.metrics}):
        path = root / rel
        metrics = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        if isinstance(metrics, dict):  # plots files (lists of points) are not results
            lines += [f"| {rel} | {key} | {value} |" for key, value in _headline(metrics)]
    return "\n".join(lines) + "\n"


def _headline(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """Fine-tune files: each score as mean ± sd in %; other files: their numeric leaves."""
    scores = metrics.get("scores")
    if isinstance(scores, dict):
        return [(name, f"{100 * s['mean']:.1f} ± {100 * s.get('sd', 0.0):.1f}")
                for name, s in scores.items() if isinstance(s, dict) and "mean" in s]
    flat = tracking.flatten(metrics)
    return [(k, f"{v:.6g}") for k, v in flat.items()
            if isinstance(v, int | float) and not isinstance(v, bool)]


@flow(name="gpt1", task_runner=ThreadPoolTaskRunner(max_workers=_TASK_THREADS))  # type: ignore[arg-type]
def gpt1_pipeline(
    params_path: str = "params.yaml", stages: list[str] | None = None
) -> list[dict[str, Any]]:
    """Run the DVC pipeline (or `stages` plus their upstream) with `params_path` as params.yaml."""
    logger = get_run_logger()
    root = Path.cwd()
    params = activate_params(root, params_path)
    plan = select(read_plan(root), stages)
    logger.info("stages: %s", ", ".join(s.name for s in plan))
    env = stage_env(params)
    name = f"gpt1/{flow_run.get_name() or 'local'}"
    tags = {"prefect.flow_run_id": str(flow_run.get_id())}
    with tracking.pipeline_run(name, params, tags) as parent:
        records = _run_graph(plan, params, root, env, parent)
        link = tracking.run_url(params, parent) if parent else None
        table = results_markdown(root, plan, records, link)
        create_markdown_artifact(table, key="gpt1-results", description="gpt1 pipeline results")
        tracking.log_text(table, "pipeline_run.md")
        failed = [r["stage"] for r in records if r["status"] not in ("ran", "unchanged")]
        if failed:
            raise Gpt1Error(f"stages did not complete: {', '.join(failed)}", "dvc.yaml")
    return records


if __name__ == "__main__":  # `python -m pipelines.gpt1_flow [params file]`: no server needed
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")  # ENV.md
    gpt1_pipeline(params_path=sys.argv[1] if len(sys.argv) > 1 else "params.yaml")
