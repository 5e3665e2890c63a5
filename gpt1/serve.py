"""`gpt1 serve`: local Prefect server + `gpu` pool, deployments, worker, MLflow UI (127.0.0.1).

Starts a Prefect server, the `gpu` process pool with this repo's deployments and a worker, and
the MLflow UI, all bound to 127.0.0.1; `gpt1 serve --stop` stops them.

While the stack runs, `<repo>/prefect.toml` points Prefect's clients at its server, so that
`prefect deployment run ...` from any shell in the repo reaches it (Prefect reads prefect.toml
from the working directory; environment variables still win); `--stop` removes the file, and
Prefect falls back to its temporary server. A prefect.toml that serve did not write is never
overwritten.

Each service runs in its own session (process group); their PIDs and command lines go to
$PREFECT_HOME/gpt1-serve.json, so `--stop` signals exactly the processes it started (and their
children) and never a recycled PID. Re-running `gpt1 serve` restarts only services that died.
The tools are driven through their CLIs, so this module imports neither prefect nor mlflow.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil

from gpt1 import atomic, tracking
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.repo import git, repo_root

log = logging.getLogger(__name__)

POOL = "gpu"  # the work pool named in prefect.yaml
REMOTE_POOL = "gpu-remote"  # prefect.yaml's demo-remote: its worker runs on another machine
HOST = "127.0.0.1"
STATE_FILE = "gpt1-serve.json"
WORKER_POLL_SECONDS = "2"  # Prefect's default poll (15 s) delays every run start
STOP_ORDER = ("mlflow-ui", "worker", "prefect-server")
SETTINGS_FILE = "prefect.toml"  # read by Prefect from the working directory
SETTINGS_MARK = "# written by `gpt1 serve`; removed by `gpt1 serve --stop`"
# A flow run whose worker is gone (a lost machine) would stay Running forever: its process sends
# a heartbeat event every FLOW_HEARTBEAT_SECONDS (Prefect's least; set by prefect.yaml's
# deployments for their runs and by prefect.toml for flows started in the repo, since every run
# on the server must beat this often), and Prefect's own zombie automation (docs "Detect zombie
# flows") marks a run Crashed once ZOMBIE_AFTER_SECONDS pass without one; a re-run of the
# deployment then picks up from dvc.lock.
FLOW_HEARTBEAT_SECONDS = 30
ZOMBIE_AFTER_SECONDS = 3 * FLOW_HEARTBEAT_SECONDS
ZOMBIE_AUTOMATION = "gpt1: crash flow runs without heartbeats"
LEASE_STORAGE = "prefect.server.concurrency.lease_storage.filesystem"
FINAL_EVENTS = [f"prefect.flow-run.{s}" for s in ("Completed", "Failed", "Cancelled", "Crashed")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stop", action="store_true", help="stop what `gpt1 serve` started")
    parser.add_argument("--prefect-port", type=int, default=4200, help="Prefect API/UI port")
    parser.add_argument("--no-ui", action="store_true", help="do not start the MLflow UI")
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for each service"
    )


def prefect_home() -> Path:
    """$PREFECT_HOME, else <repo>/.prefect (kept out of git)."""
    return Path(os.environ.get("PREFECT_HOME") or repo_root() / ".prefect").resolve()


def run(args: argparse.Namespace, params: Params) -> None:
    """Entry point of `gpt1 serve [--stop]`."""
    if args.stop:
        state = prefect_home() / STATE_FILE
        stopped = stop(state, args.timeout)
        remove_settings(repo_root())
        print(f"stopped {', '.join(stopped)}" if stopped else
              f"nothing to stop: no service `gpt1 serve` started is running ({state})")
    else:
        start(params, args.prefect_port, not args.no_ui, args.timeout)


def _alive(entry: dict[str, Any]) -> bool:
    """The recorded process still runs (same PID and start time: not a recycled PID)."""
    try:
        proc = psutil.Process(entry["pid"])
        return proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() == entry["started"]
    except psutil.Error:
        return False


def _read_state(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise Gpt1Error(f"not valid JSON ({err.msg})", path) from None
    if not isinstance(state, dict):
        raise Gpt1Error("not a state file of `gpt1 serve`", path)
    return state


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default action. A shell starts background
    jobs with SIGINT ignored and exec keeps that, so a service started from `cmd &` would
    ignore the SIGINT that `stop` sends a Prefect worker after its SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _spawn(name: str, cmd: list[str], env: dict[str, str], home: Path, cwd: Path) -> dict:
    logfile = home / f"gpt1-serve-{name}.log"
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_default_sigint,
        )
    log.info("started %s (pid %d), log %s", name, proc.pid, logfile)
    started = psutil.Process(proc.pid).create_time()
    return {"pid": proc.pid, "started": started, "cmd": cmd, "log": str(logfile)}


def _wait_http(url: str, entry: dict[str, Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(entry):
            raise Gpt1Error(f"exited while starting; see {entry['log']}", url)
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise Gpt1Error(f"no answer after {timeout:.0f} s; see {entry['log']}", url)


def _cli(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    return str(exe) if exe.exists() else name


REMOTE_ENV = "GPT1_DVC_REMOTE"
"""prefect.yaml's demo-remote reads its `dvc_remote_url` from it at deploy time."""


def remote_url(root: Path, name: str | None) -> str:
    """The URL the checkout at `root` resolves for its DVC remote `name` (a relative path
    made absolute, as DVC reads it): the remote a worker's clone elsewhere must use; "" for
    none or an unknown one (a demo-remote run then stops, naming orchestrate.dvc_remote)."""
    if not name:
        return ""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        remote = repo.config["remote"].get(name)
    return "" if remote is None else str(remote["url"])


def clone_source(root: Path) -> dict[str, str]:
    """$GPT1_REPOSITORY and $GPT1_BRANCH for the deploy (the user's values win): the
    repository a worker on another machine clones (this checkout's `origin`, else the checkout
    itself) and the branch checked out here."""
    def answer(*args: str) -> str:
        code, out = git(*args, cwd=root)
        return out if code == 0 else ""

    return {"GPT1_REPOSITORY": os.environ.get("GPT1_REPOSITORY")
            or answer("remote", "get-url", "origin") or str(root),
            "GPT1_BRANCH": os.environ.get("GPT1_BRANCH")
            or answer("rev-parse", "--abbrev-ref", "HEAD") or "main"}


def start(params: Params, prefect_port: int, ui: bool, timeout: float) -> dict[str, Any]:
    """Start (or complete) the local stack; returns the state written to the state file."""
    root, home = repo_root(), prefect_home()
    home.mkdir(parents=True, exist_ok=True)
    path = home / STATE_FILE
    state = _read_state(path)
    services = {k: v for k, v in state.get("services", {}).items() if _alive(v)}
    if "prefect-server" in services:
        prefect_port = int(state["prefect_port"])
    api = f"http://{HOST}:{prefect_port}/api"
    uri = tracking.tracking_uri(params)
    env = {
        **os.environ,
        "PWD": str(root),  # prefect.yaml's working directory is "{{ $PWD }}" at deploy time
        **clone_source(root),  # what demo-remote's git_clone pull step clones
        REMOTE_ENV: os.environ.get(REMOTE_ENV)  # and the DVC remote that clone uses
        or remote_url(root, params.orchestrate.dvc_remote),
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # the stage slots' leases on disk ($PREFECT_HOME), not in the server's memory: a killed
        # server forgot them, so the slots its runs held never came back and every later run
        # waited forever (found by benchmarks/chaos.py); Prefect's own file lease storage
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": LEASE_STORAGE,
        "DO_NOT_TRACK": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_TRACKING_URI": uri,
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "PREFECT_WORKER_QUERY_SECONDS": os.environ.get(
            "PREFECT_WORKER_QUERY_SECONDS", WORKER_POLL_SECONDS
        ),
    }
    prefect = _cli("prefect")

    def save() -> None:
        atomic.write_json(path, {"prefect_port": prefect_port, "api_url": api,
                                 "mlflow_ui": params.tracking.ui_url, "services": services})

    if "prefect-server" not in services:
        services["prefect-server"] = _spawn(
            "prefect-server",
            [prefect, "server", "start", "--host", HOST, "--port", str(prefect_port)],
            env, home, root,
        )
        save()
    _wait_http(f"{api}/health", services["prefect-server"], timeout)
    settings = write_settings(root, api)
    for cmd in (
        [prefect, "work-pool", "create", POOL, "--type", "process", "--overwrite"],
        [prefect, "work-pool", "create", REMOTE_POOL, "--type", "process", "--overwrite"],
        [prefect, "--no-prompt", "deploy", "--all"],
    ):
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        if done.returncode:
            tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
            raise Gpt1Error(f"`prefect {' '.join(cmd[1:])}` failed: {tail}", root / "prefect.yaml")
    _create_zombie_automation(prefect, env, root)
    if "worker" not in services:
        services["worker"] = _spawn(
            "worker", [prefect, "worker", "start", "--pool", POOL], env, home, root
        )
        save()
    if ui and "mlflow-ui" not in services:
        if uri.startswith("sqlite:///"):
            ui_url = urlparse(params.tracking.ui_url)
            db_dir = Path(uri.removeprefix("sqlite:///")).parent
            services["mlflow-ui"] = _spawn("mlflow-ui", [
                _cli("mlflow"), "ui", "--host", HOST, "--port", str(ui_url.port),
                "--backend-store-uri", uri, "--default-artifact-root",
                (db_dir / "mlruns").as_uri(), "--workers", "1",
            ], env, home, root)
            save()
        else:
            log.info("tracking URI %s is a server: no local MLflow UI started", uri)
    log.info("Prefect UI http://%s:%d; %s points Prefect commands run in %s at it", HOST,
             prefect_port, settings.name, root)
    if "mlflow-ui" in services:
        log.info("MLflow UI %s (ready in about 30 s): the runs of %r", tracking.experiment_url(
            params), params.tracking.experiment)
    log.info("stop everything with: gpt1 serve --stop")
    save()
    return _read_state(path)


def zombie_automation() -> dict[str, Any]:
    """Prefect's zombie-flow automation: after a flow run's heartbeat, expect another heartbeat
    or a final state within ZOMBIE_AFTER_SECONDS, else set the run Crashed."""
    return {
        "name": ZOMBIE_AUTOMATION,
        "description": "A flow run whose process stopped sending heartbeats (its worker or "
                       "machine is gone) is marked Crashed; re-run it to resume from dvc.lock.",
        "enabled": True,
        "trigger": {
            "type": "event", "posture": "Proactive", "threshold": 1,
            "within": ZOMBIE_AFTER_SECONDS,
            "match": {"prefect.resource.id": "prefect.flow-run.*"},
            "for_each": ["prefect.resource.id"],
            "after": ["prefect.flow-run.heartbeat"],
            "expect": ["prefect.flow-run.heartbeat", *FINAL_EVENTS],
        },
        "actions": [{"type": "change-flow-run-state", "state": "CRASHED",
                     "message": f"no heartbeat for {ZOMBIE_AFTER_SECONDS} s: the flow run's "
                                "process is gone (worker or machine lost)"}],
    }


def _create_zombie_automation(prefect: str, env: dict[str, str], root: Path) -> None:
    """Create the automation unless the server has it (a restarted stack keeps its own)."""
    listed = subprocess.run([prefect, "automation", "inspect", ZOMBIE_AUTOMATION, "--json"],
                            cwd=root, env=env, capture_output=True, text=True)
    if listed.returncode == 0 and ZOMBIE_AUTOMATION in listed.stdout:
        return
    done = subprocess.run([prefect, "automation", "create", "--from-json",
                           json.dumps(zombie_automation())],
                          cwd=root, env=env, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
        raise Gpt1Error(f"`prefect automation create` failed: {tail}", root / "prefect.yaml")


def write_settings(root: Path, api: str) -> Path:
    """`<root>/prefect.toml` naming the server's API URL (refuses to replace a user's file)."""
    path = root / SETTINGS_FILE
    if path.exists() and not path.read_text(encoding="utf-8").startswith(SETTINGS_MARK):
        raise Gpt1Error("exists and was not written by `gpt1 serve`; add "
                        f'[api] url = "{api}" to it yourself, or move it away', path)
    atomic.write_text(path, f'{SETTINGS_MARK}\n[api]\nurl = "{api}"\n\n'
                            f"[flows]\nheartbeat_frequency = {FLOW_HEARTBEAT_SECONDS}\n")
    return path


def remove_settings(root: Path) -> None:
    """Remove the prefect.toml that `gpt1 serve` wrote (a user's own is left alone)."""
    path = root / SETTINGS_FILE
    if path.exists() and path.read_text(encoding="utf-8").startswith(SETTINGS_MARK):
        path.unlink()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the service's own session: it and its children
    except ProcessLookupError:
        pass


def stop(path: Path, timeout: float) -> list[str]:
    """Stop every service in the state file that still runs; returns the names stopped."""
    state = _read_state(path)
    services: dict[str, dict[str, Any]] = state.get("services", {})
    stopped = []
    for name in sorted(services, key=lambda n: STOP_ORDER.index(n) if n in STOP_ORDER else -1):
        entry = services[name]
        if not _alive(entry):
            continue
        _signal_group(entry["pid"], signal.SIGTERM)
        if name == "worker":  # a Prefect worker only logs the first signal
            time.sleep(1.0)
            _signal_group(entry["pid"], signal.SIGINT)
        try:
            psutil.Process(entry["pid"]).wait(timeout)
        except psutil.TimeoutExpired:
            log.warning("%s (pid %d) ignored SIGTERM for %.0f s: killing", name, entry["pid"],
                        timeout)
            _signal_group(entry["pid"], signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
        _signal_group(entry["pid"], signal.SIGKILL)  # leftovers of the group, if any
        log.info("stopped %s (pid %d)", name, entry["pid"])
        stopped.append(name)
    path.unlink(missing_ok=True)
    return stopped
