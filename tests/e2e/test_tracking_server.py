"""A real `mlflow server` dies mid-stage and comes back: nothing is lost, nothing logged twice.

The stage (`download_corpus` on a tiny mirror) logs to an `mlflow server` process; once the
stage's run is open the server's process group is SIGKILLed. The stage finishes with exit 0 and
its outputs, warns once and keeps what it could not log under mlflow-pending/. The server is
restarted on the same store; `gpt1 relog` logs the records into the run the stage opened: one
run, FINISHED, with its metrics, params and artifacts, and a second relog has nothing to do.
Wall time is mostly the two server starts (about 10-25 s each on 2 cores).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from gpt1 import tracking
from gpt1.__main__ import main
from tests.helpers.corpus import write_corpus
from tests.helpers.params import make_params_dict

pytestmark = [pytest.mark.slow]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(port: int, store: Path, log: Path) -> subprocess.Popen:
    """`mlflow server` on the sqlite file and artifact folder under `store`, answering /health."""
    cmd = [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
           "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
           "--artifacts-destination", str(store / "artifacts"), "--workers", "1"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"mlflow server not up after 180 s:\n{log.read_text()[-2000:]}")


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the server and every process of its session (its uvicorn and job runner)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def test_server_killed_mid_stage_then_relog_restores_one_run(tmp_path: Path, monkeypatch,
                                                              caplog, capsys) -> None:
    from mlflow import MlflowClient

    from gpt1.tracking import runs

    monkeypatch.chdir(tmp_path)  # the pending records go under the repo root: here
    for name in ("DVC_STAGE", tracking.PARENT_ENV, tracking.STAGE_RUN_ENV):
        monkeypatch.delenv(name, raising=False)
    store, port = tmp_path / "server", _free_port()
    store.mkdir()
    uri = f"http://127.0.0.1:{port}"
    write_corpus(tmp_path / "mirror", n_books=2, n_paragraphs=1)
    raw = make_params_dict(tmp_path, {"tracking": {"enabled": True, "uri": uri}})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    server = _start_server(port, store, tmp_path / "server.log")
    try:
        opened = runs.create_run
        killed: list[str] = []

        def open_then_kill_server(*args, **kwargs):  # the stage's run is open; its server dies
            run_id = opened(*args, **kwargs)
            _kill(server)
            killed.append(run_id)
            return run_id

        with monkeypatch.context() as hook:
            hook.setattr(runs, "create_run", open_then_kill_server)
            assert main(["--params", str(tmp_path / "params.yaml"), "download_corpus"]) == 0
        (run_id,) = killed
        assert (tmp_path / "data" / "raw" / "manifest.json").is_file()
        assert (tmp_path / "reports" / "metrics" / "download_corpus.json").is_file()
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"
                  and "tracking store" in r.getMessage()]
        assert len(warned) == 1 and "gpt1 relog" in warned[0], warned
        pending = tmp_path / "mlflow-pending" / run_id
        assert (pending / "ops.jsonl").is_file()

        server = _start_server(port, store, tmp_path / "server.log")  # same store, same port
        capsys.readouterr()
        assert main(["--params", str(tmp_path / "params.yaml"), "relog"]) == 0
        assert f"of run {run_id}" in capsys.readouterr().out
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(raw["tracking"]["experiment"])
        (run,) = client.search_runs([experiment.experiment_id])  # no second run
        assert run.info.run_id == run_id and run.info.status == "FINISHED"
        assert run.data.metrics == {"files": 2.0}
        assert run.data.params["data.source"]
        assert sorted(a.path for a in client.list_artifacts(run_id)) == [
            "config.json", "download_corpus.info.json", "download_corpus.json"]
        assert not pending.exists()
        assert main(["--params", str(tmp_path / "params.yaml"), "relog"]) == 0
        assert "nothing to re-log" in capsys.readouterr().out
    finally:
        _kill(server)
