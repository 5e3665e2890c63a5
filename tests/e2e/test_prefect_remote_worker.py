"""A worker on another machine: prefect.yaml's gpt1/demo-remote, whose pull step clones the
repository (Prefect's git_clone) instead of using this checkout's path.

The first checkout (a committed copy of the repo with tiny params and a DVC remote every
machine reaches) runs `gpt1 serve`; a second folder stands in for the other machine and runs
the `gpu-remote` worker, which clones the first checkout and runs the deployment in the clone
(MLflow's source of each stage run names the clone's gpt1/__main__.py). The
stages' outputs go to the DVC remote, dvc.lock and the metrics come back as branch
gpt1-runs/<flow run>, and `git merge` + `dvc pull` in the first checkout make its outputs
arrive there, up to date for DVC, although no stage ran in it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml

from gpt1.serve import _default_sigint  # SIGINT back to default before exec, as serve does
from tests.helpers.corpus import write_corpus
from tests.helpers.prefect_stack import (
    BIN,
    copy_repo,
    free_port,
    processes_under,
    run,
    state_pids,
    tiny_params,
)

pytestmark = pytest.mark.slow
STAGES = ["check_corpus"]  # plus its upstream: scan_mirror, download_corpus, clean_corpus
RAN = {"scan_mirror", "download_corpus", "clean_corpus", "check_corpus"}
GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@t"]


def test_remote_worker_runs_in_its_own_clone_and_outputs_arrive_in_the_first(
        tmp_path: Path) -> None:
    repo, other, home = tmp_path / "repo", tmp_path / "other-machine", tmp_path / "prefect"
    repo.mkdir()
    other.mkdir()
    copy_repo(repo)
    mirror = tmp_path / "mirror"
    write_corpus(mirror, n_books=4, n_paragraphs=10)
    params = tiny_params(repo, mirror)
    assert params["orchestrate"]["dvc_remote"] == "local"  # the relative default
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**{k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"},
           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PREFECT_HOME": str(home),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
           "PREFECT_WORKER_QUERY_SECONDS": "1", "GPT1_REPOSITORY": str(repo)}
    dvc = str(BIN / "dvc")  # made absolute by `gpt1 serve`: a URL both machines reach
    remote = tmp_path / "gpt1-dvc-remote"  # .dvc/config: ../../gpt1-dvc-remote of the repo
    run(["git", "add", "-A"], repo, env, 60)
    run(["git", *GIT_ID, "commit", "-qm", "tiny preset"], repo, env, 60)
    port = free_port()
    worker = None
    try:
        run([str(BIN / "gpt1"), "serve", "--no-ui", "--prefect-port", str(port)], repo, env, 240)
        env["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"  # the other machine's setting
        worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool",
                                   "gpu-remote"], cwd=other, env=env, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  preexec_fn=_default_sigint)
        out = run([str(BIN / "prefect"), "deployment", "run", "gpt1/demo-remote", "--watch",
                   "--param", f"stages={json.dumps(STAGES)}"], repo, env, 900)
        assert "Completed" in out, out[-3000:]

        assert not (repo / "dvc.lock").exists() and not (repo / "data").exists()  # ran elsewhere

        (branch,) = run(["git", "branch", "--list", "gpt1-runs/*", "--format",
                         "%(refname:short)"], repo, env, 60).split()
        run(["git", "merge", "--ff-only", "-q", branch], repo, env, 60)
        assert any(p.is_file() for p in remote.rglob("*")), "the clone pushed elsewhere"
        assert not list(other.rglob("gpt1-dvc-remote")), "the clone used its relative default"
        run([dvc, "pull", "--allow-missing", "-r", "local"], repo, env, 300)  # what ran
        assert set(yaml.safe_load((repo / "dvc.lock").read_text())["stages"]) == RAN
        assert (repo / params["paths"]["clean_corpus"]).is_file()  # from the DVC remote
        assert (repo / "reports" / "metrics" / "check_corpus.json").is_file()  # from git
        status = run([dvc, "status", *sorted(RAN - {"scan_mirror"})], repo, env, 120)
        assert "up to date" in status, status

        # the stages ran in the worker's clone: MLflow's source of each stage run says where
        import mlflow

        client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        sources = {r.data.tags["dvc.stage"]: r.data.tags["mlflow.source.name"] for r in runs
                   if r.data.tags.get("dvc.stage") in RAN - {"scan_mirror"}
                   and "mlflow.parentRunId" in r.data.tags}
        assert set(sources) == RAN - {"scan_mirror"}
        assert all(s.endswith("gpt1/gpt1/__main__.py") and not s.startswith(str(repo))
                   for s in sources.values()), sources
    finally:
        if worker is not None:  # as `gpt1 serve --stop` does: a worker only logs a SIGTERM
            os.killpg(worker.pid, signal.SIGTERM)
            time.sleep(1.0)
            os.killpg(worker.pid, signal.SIGINT)
            try:
                worker.wait(timeout=120)
            except subprocess.TimeoutExpired:  # a loaded machine: never leave it behind
                os.killpg(worker.pid, signal.SIGKILL)
        subprocess.run([str(BIN / "gpt1"), "serve", "--stop"], cwd=repo, env=env, timeout=120,
                       check=False, capture_output=True)  # the server and serve's workers
        if (home / "gpt1-serve.json").exists():
            started = set(state_pids(home).values())
            subprocess.run([str(BIN / "gpt1"), "serve", "--stop"], cwd=repo, env=env,
                           timeout=120, check=False)
            assert not [p for p in started if psutil.pid_exists(p)]
        leftovers = processes_under(tmp_path)
        for proc in leftovers:  # only what this test started
            proc.send_signal(signal.SIGKILL)
    assert not leftovers, f"processes left running: {leftovers}"
