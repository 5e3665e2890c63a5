"""gpt1 serve --stop: signals only the processes it recorded, twice for a Prefect-like worker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpt1 import atomic, serve
from gpt1.errors import Gpt1Error

# Like a Prefect worker: ignores the first SIGTERM, stops on the SIGINT that follows.
STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: None)\n"
    "print('ready', flush=True)\n"
    "try:\n"
    "    time.sleep(60)\n"
    "except KeyboardInterrupt:\n"
    "    print('interrupted', flush=True)\n"
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_stop_stops_recorded_services_and_spares_recycled_pids(tmp_path: Path) -> None:
    worker = serve._spawn("worker", [sys.executable, "-c", STUBBORN], dict(os.environ),
                          tmp_path, tmp_path)
    log = Path(worker["log"])
    deadline = time.monotonic() + 30
    while "ready" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        recycled = {"pid": bystander.pid, "started": 0.0, "cmd": ["mlflow"], "log": str(log)}
        state = tmp_path / serve.STATE_FILE
        atomic.write_json(state, {"services": {"worker": worker, "mlflow-ui": recycled}})
        assert serve._alive(worker) and not serve._alive(recycled)

        assert serve.stop(state, timeout=20) == ["worker"]
        assert _gone(worker["pid"])
        assert "interrupted" in log.read_text(), "the worker needed SIGKILL, not a 2nd signal"
        assert bystander.poll() is None, "a PID not started by serve was signalled"
        assert not state.exists()
        assert serve.stop(state, timeout=20) == []  # nothing recorded: nothing to do
    finally:
        bystander.kill()
        bystander.wait()


def test_settings_file_points_prefect_clients_at_the_server(tmp_path: Path) -> None:
    api = "http://127.0.0.1:4321/api"
    path = serve.write_settings(tmp_path, api)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PREFECT_API_URL", "PREFECT_FLOWS_HEARTBEAT_FREQUENCY")}
    read = [sys.executable, "-c", "from prefect.settings import get_current_settings as s; "
            "print(s().api.url, s().flows.heartbeat_frequency)"]
    seen = subprocess.run(read, cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=True).stdout.split()
    assert seen[0] == api, "a fresh shell's prefect CLI in the repo would miss the server"
    assert seen[1] == str(serve.FLOW_HEARTBEAT_SECONDS), "a flow run from the repo beats slower"
    serve.remove_settings(tmp_path)
    assert not path.exists()

    path.write_text('[api]\nurl = "http://elsewhere:1/api"\n')  # the user's own file
    with pytest.raises(Gpt1Error, match="prefect.toml: exists and was not written"):
        serve.write_settings(tmp_path, api)
    serve.remove_settings(tmp_path)
    assert path.read_text() == '[api]\nurl = "http://elsewhere:1/api"\n'


def test_zombie_automation_is_prefects_own_heartbeat_trigger() -> None:
    """The automation `gpt1 serve` creates parses as Prefect's own model: after a flow run's
    heartbeat, expect another (or a final state) within the window, else set it Crashed."""
    from prefect.client.schemas.objects import StateType
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

    automation = AutomationCore.model_validate(serve.zombie_automation())
    trigger = automation.trigger
    assert isinstance(trigger, EventTrigger) and trigger.posture == Posture.Proactive
    assert trigger.after == {"prefect.flow-run.heartbeat"}
    assert {"prefect.flow-run.heartbeat", "prefect.flow-run.Completed"} <= trigger.expect
    assert trigger.within.total_seconds() == serve.ZOMBIE_AFTER_SECONDS
    assert serve.ZOMBIE_AFTER_SECONDS > 2 * serve.FLOW_HEARTBEAT_SECONDS  # one late beat is fine
    (action,) = automation.actions
    assert action.type == "change-flow-run-state" and action.state == StateType.CRASHED


def test_every_deployment_beats_as_often_as_the_zombie_automation_expects() -> None:
    """Whatever worker runs a deployment (serve's, another machine's), its flow runs send
    heartbeats every FLOW_HEARTBEAT_SECONDS: Prefect's default (180 s) would get a healthy run
    crashed by the automation."""
    import yaml

    from gpt1.repo import repo_root

    deployments = yaml.safe_load((repo_root() / "prefect.yaml").read_text())["deployments"]
    for deployment in deployments:
        env = deployment["work_pool"]["job_variables"]["env"]
        assert env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == str(serve.FLOW_HEARTBEAT_SECONDS), (
            deployment["name"])
