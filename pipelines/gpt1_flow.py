"""Prefect flow over the DVC pipeline: one task per DVC stage, each `dvc repro --single-item`.

The stage graph is read from DVC (pipelines.dag), so dvc.lock stays the record and DVC decides
what is stale: stages `dvc status` finds up to date (with nothing changed upstream) are not
scheduled at all, so a cached re-run takes about as long as `dvc repro`'s, and a stage that
checkpoints resumes. Each stage waits for its upstream stages, then for its devices and a stage
slot, and only then becomes a Prefect task (Running only while it works, its upstream futures
as `wait_for`); stages with no path between them run at once, at most
params.orchestrate.max_parallel_stages of them (a Prefect global concurrency limit; `auto`:
one per device handed out, pipelines.devices), and none downstream of a failure runs. Only
params.orchestrate.io_stages are retried, and never on a config error (exit code 2: retrying
cannot heal it). A preset other than params.yaml runs in its own working copy
(pipelines.workcopy), never by changing the workspace's params.yaml. One MLflow parent run per
flow run and one nested run per stage, which the stage process logs into through $GPT1_RUN_ID.
On one machine the stages share the workspace's DVC cache and nothing is pulled or pushed; a run
on another machine (`publish`, a clone) pulls each stage's inputs from and pushes its outputs to
params.orchestrate.dvc_remote, the deployer's remote. No ML logic here: the stages live in
gpt1.stages and run through `python -m gpt1 <stage>` as dvc.yaml says.
"""

from __future__ import annotations

import contextvars
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from prefect import Task, flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import TaskRun
from prefect.concurrency.sync import concurrency
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run
from prefect.states import State
from prefect.task_runners import ThreadPoolTaskRunner

from gpt1 import tracking
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.records import read_scores_file
from pipelines.dag import StagePlan, read_plan, select, to_run
from pipelines.devices import DevicePool, sharing_warning, stage_slots, worker_devices
from pipelines.publish import publish_run, share_remote
from pipelines.workcopy import workspace_for

# The Prefect global concurrency limit every stage task holds a slot of while it runs; the flow
# sets it to params.orchestrate.max_parallel_stages (shared by concurrent flow runs: one machine;
# `auto`: one per device handed out).
STAGE_SLOTS = "gpt1-stages"
# A held slot's lease, renewed by the holder every 3/4 of it. A lost worker (killed machine)
# renews nothing, so its slots return once this expires (plus the server's 15 s sweep); Prefect's
# default of 300 s stalled every later run for up to 5 minutes with no message.
SLOT_LEASE_SECONDS = 60.0  # the least the Prefect server accepts
CONFIG_EXIT = 2  # `python -m gpt1` exit code for a Gpt1Error / ParamsError (gpt1/__main__.py)


class StageError(Gpt1Error):
    """A `dvc` command of a stage exited non-zero; `config_error` when the stage's own command
    exited with CONFIG_EXIT (bad params or input: retrying cannot heal it)."""

    def __init__(self, message: str, where: str | Path, config_error: bool) -> None:
        super().__init__(message, where)
        self.config_error = config_error


def config_failure(dvc_output: list[str]) -> bool:
    """DVC's last lines say the stage command exited with CONFIG_EXIT (`failed to run: python
    -m gpt1 ..., exited with 2`): a config error of the stage, not DVC's own failure."""
    return any(line.rstrip().endswith(f"exited with {CONFIG_EXIT}") for line in dvc_output[-3:])


def retry_io_error(task_: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Prefect `retry_condition_fn`: retry a failed stage unless it failed on a config error."""
    try:
        state.result()
    except StageError as err:
        return not err.config_error
    except Gpt1Error:  # raised in this process: bad params or pipeline, not transient
        return False
    except Exception:  # noqa: BLE001 - an I/O or other transient error may heal
        return True
    return False


def dvc_command() -> str:
    """The dvc beside this interpreter (the project venv), else the one on PATH."""
    local = Path(sys.executable).with_name("dvc")
    found = str(local) if local.exists() else shutil.which("dvc")
    if not found:
        raise Gpt1Error("dvc is not installed in this environment", sys.executable)
    return found


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
        raise StageError(f"`dvc {' '.join(args)}` exited with {proc.returncode}: {tail}", root,
                         config_failure(lines))
    return lines


@task(name="dvc-stage", task_run_name="{stage.name}", cache_policy=NO_CACHE,
      retry_condition_fn=retry_io_error)
def run_stage(
    stage: StagePlan, params: Params, root: str, env: dict[str, str], parent: str | None,
    remote: str | None, visible: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`dvc repro --single-item` the stage; the stage's MLflow run (nested under `parent`) gets
    its metrics files. `remote`: the DVC remote its inputs are pulled from before and its
    outputs pushed to after (a clone on another machine); None on one machine, whose DVC cache
    already holds them. `visible`: the devices the stage holds (CUDA_VISIBLE_DEVICES), taken
    before this task was created (run_graph)."""
    where = Path(root)
    with tracking.stage_run(stage.name, params, parent) as run_id:
        started = time.time()
        env = {**env, **(visible or {})}
        stage_env = {**env, tracking.STAGE_RUN_ENV: run_id} if run_id else env
        if remote and stage.upstream:
            _dvc(["pull", "--allow-missing", "-r", remote, *stage.upstream], where, stage_env)
        output = _dvc(["repro", "--single-item", stage.name], where, stage_env)
        if remote:
            _dvc(["push", "-r", remote, stage.name], where, stage_env)
        ran = any(line.startswith(f"Running stage '{stage.name}'") for line in output)
        status = "ran" if ran else "unchanged"
        if run_id and ran:
            files = [where / m for m in stage.metrics]
            tracking.record_stage(params, run_id, files, {"gpt1.dvc": status})
    if run_id and not ran:
        tracking.discard_run(params, run_id)  # DVC's cache answered: no new run to show
    return {"stage": stage.name, "status": status, "started": started, "finished": time.time()}


UP_TO_DATE = "unchanged (up to date in dvc.lock: not scheduled)"


def run_graph(
    plan: list[StagePlan], params: Params, root: Path, env: dict[str, str], parent: str | None,
    remote: str | None,
) -> list[dict[str, Any]]:
    """Run the stages `dvc repro` would run, in DVC's order; records in plan order (`remote`:
    run_stage's).

    The always-changed stages (scan_mirror) run first; then `dvc status` (pipelines.dag.to_run)
    names the stages that changed and everything downstream of them, and only those are
    scheduled: an up-to-date stage gets no task at all. Each scheduled stage waits in its own
    thread for its upstream stages, then for its devices and a stage slot (a Prefect global
    concurrency limit), and only then becomes a Prefect task, so a task is Running only while
    it works; a stage downstream of a failure never runs."""
    orch, logger = params.orchestrate, get_run_logger()
    handed_out = worker_devices(orch, params.device, env)
    slots = stage_slots(orch, handed_out)
    logger.info("devices handed out: %s; up to %d stages at once",
                ",".join(handed_out) or "none", slots)
    shared = sharing_warning(handed_out, slots, params.device, env)
    if shared:
        logger.warning("%s", shared)
    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(STAGE_SLOTS, slots)
    devices = DevicePool(handed_out)  # this flow run's stages share the worker's devices
    # one thread per stage: a stage waiting for its upstream or a slot holds a thread only
    runner: ThreadPoolTaskRunner[Any] = ThreadPoolTaskRunner(max_workers=len(plan) or 1)
    futures: dict[str, PrefectFuture[dict[str, Any]]] = {}
    done = {s.name: threading.Event() for s in plan}
    completed: set[str] = set()
    errors: dict[str, str] = {}  # a stage whose slot or devices could not be had

    def launch(s: StagePlan) -> None:
        try:
            for u in s.upstream:
                if u in done:
                    done[u].wait()
            if any(u in done and u not in completed for u in s.upstream):
                return  # upstream failed (or was not run): this one is not run either
            io = s.base in orch.io_stages
            stage_task = run_stage.with_options(
                retries=orch.io_retries if io else 0,
                retry_delay_seconds=orch.io_retry_delay_seconds if io else 0,
            )
            # devices before the slot: a stage holding a slot never waits for devices, and
            # the pool's order (pre-training first) is not undone by a race for the slots
            with devices.hold(s.base) as visible, \
                    concurrency(STAGE_SLOTS, occupy=1, strict=True,
                                lease_duration=SLOT_LEASE_SECONDS,
                                raise_on_lease_renewal_failure=False):
                futures[s.name] = runner.submit(
                    stage_task, {"stage": s, "params": params, "root": str(root), "env": env,
                                 "parent": parent, "remote": remote, "visible": visible},
                    wait_for=[futures[u] for u in s.upstream if u in futures],
                )
                futures[s.name].wait()
            if futures[s.name].state.is_completed():
                completed.add(s.name)
        except Exception as err:  # noqa: BLE001 - reported as the stage's failure
            errors[s.name] = f"{type(err).__name__}: {err}"
        finally:
            done[s.name].set()

    def schedule(stages: list[StagePlan]) -> None:
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(launch, s),
                                    name=f"stage {s.name}", daemon=True) for s in stages]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    with runner:
        always = [s for s in plan if s.always_changed]
        schedule(always)
        stale = to_run(root, plan)  # after scan_mirror: the mirror's changes are in its outs
        for s in plan:
            if s.name not in stale and not s.always_changed:
                completed.add(s.name)
                done[s.name].set()
        schedule([s for s in plan if s.name in stale and not s.always_changed])
    records: list[dict[str, Any]] = []
    for s in plan:
        future = futures.get(s.name)
        if future is None:
            records.append({"stage": s.name, "status": UP_TO_DATE} if s.name in completed
                           else {"stage": s.name, "status": "failed", "error": errors[s.name]}
                           if s.name in errors
                           else {"stage": s.name, "status": "not run (upstream failed)"})
            continue
        state = future.state
        if state.is_completed():
            records.append(state.result())
        else:
            records.append({"stage": s.name, "status": "failed",
                            "error": str(state.result(raise_on_failure=False))})
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
        metrics = read_scores_file(path)  # None: a curve (a plot) or not written
        if metrics is not None:
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


@flow(name="gpt1")
def gpt1_pipeline(
    params_path: str = "params.yaml", stages: list[str] | None = None, publish: bool = False,
    dvc_remote_url: str | None = None,
) -> list[dict[str, Any]]:
    """Run the DVC pipeline (or `stages` plus their upstream) at the preset `params_path`: in
    the workspace for params.yaml, else in the preset's working copy (pipelines.workcopy).
    `publish` (a worker on another machine): use the deployer's DVC remote `dvc_remote_url`
    (each stage pulls its inputs from it and pushes its outputs to it) and push the run's
    git-tracked results to the repository the worker cloned, as branch gpt1-runs/<flow run>
    (pipelines.publish). Without it the run works in this machine's DVC cache: no pull, no
    push (`dvc push` shares its outputs)."""
    logger = get_run_logger()
    root, params = workspace_for(Path.cwd(), params_path)
    tracking.check_store(params)  # before any stage runs: an unusable store is one line
    if publish:  # a clone on another machine: the deployer's remote, not a relative default
        share_remote(root, params, dvc_remote_url)
    logger.info("working directory %s, params %s", root, params_path)
    plan = select(read_plan(root), stages)
    logger.info("stages: %s", ", ".join(s.name for s in plan))
    env = stage_env(params)
    name = f"gpt1/{flow_run.get_name() or 'local'}"
    tags = {"prefect.flow_run_id": str(flow_run.get_id())}
    with tracking.pipeline_run(name, params, tags) as parent:
        remote = params.orchestrate.dvc_remote if publish else None
        records = run_graph(plan, params, root, env, parent, remote)
        link = tracking.run_url(params, parent) if parent else None
        table = results_markdown(root, plan, records, link)
        create_markdown_artifact(table, key="gpt1-results", description="gpt1 pipeline results")
        tracking.log_text(table, "pipeline_run.md")
        failed = [r["stage"] for r in records
                  if r["status"] not in ("ran", "unchanged", UP_TO_DATE)]
        if failed:
            raise Gpt1Error(f"stages did not complete: {', '.join(failed)}", "dvc.yaml")
    if publish:
        branch = publish_run(root, flow_run.get_name() or "local")
        logger.info("results pushed to branch %s; take them with `git merge %s && dvc pull "
                    "--allow-missing`",
                    branch, branch)
    return records


if __name__ == "__main__":  # `python -m pipelines.gpt1_flow [params file]`: no server needed
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    gpt1_pipeline(params_path=sys.argv[1] if len(sys.argv) > 1 else "params.yaml")
