"""The chaos drill: SIGKILL a random process of a running pipeline at random moments; re-run.

Builds the end-to-end tests' tiny preset (a generated mirror, tests/helpers/params.py's TINY model,
tracking off) in a temporary copy of the repository, git and DVC initialised, and runs
`dvc repro finetune@sst2-1234` (nine stages: the data stages, pre-training, the task table, a
fine-tune) once without interruption: the reference.

- **DVC**: in a fresh copy, `dvc repro` runs and, at a random moment (seeded), one process of
  its tree is SIGKILLed: DVC itself, a stage's `python -m gpt1`, or a process a stage started
  (a cleaning worker, the C compiler). Once the rest of the tree has ended (a stage outlives a
  killed DVC), the same command runs again, and is killed again, until the drill's kills are
  spent; the last run then goes to the end. A run that ends before its kill moment ends a round,
  and the next round starts from a fresh copy.
- **Prefect**: `gpt1 serve --no-ui` (Prefect server, `gpu` pool, deployments, worker) in a fresh
  copy; `prefect deployment run gpt1/demo` with the same stages; at a random moment either the
  worker with everything under it (a lost machine) or the Prefect server is SIGKILLed, `gpt1
  serve` restarts what died (after a server kill the flow run's process is left to end first)
  and a new deployment run follows, until a run completes. Each run whose worker was killed
  must end Crashed (Prefect's zombie-run automation, which `gpt1 serve` creates).

Checked after every round: the outputs (every file of every output dvc.lock records: records,
tables, tokenizer, shards, checkpoints, models; not the Data Docs HTML, the `.info.json`
sidecars nor a fine-tune's `result.json`, which hold wall times) equal
the reference's, and no run ran a stage that dvc.lock already recorded as finished when the run
started (`scan_mirror`, always_changed, runs every time). It prints each kill (the victim, the
stage in flight) and what each re-run ran, then the totals; exit 1 when anything differs.

    nice -n 19 .venv/bin/python benchmarks/chaos.py [--seed 0] [--dvc-kills 20]
        [--prefect-kills 5] [--results]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path[:0] = [str(ROOT)]  # the tests' builders, tests/helpers/
from results_file import add_option, recording  # noqa: E402

from tests.helpers.corpus import write_corpus  # noqa: E402
from tests.helpers.dvc_repo import copy_repo  # noqa: E402  source files, no outputs
from tests.helpers.params import TINY, deep_merge  # noqa: E402  the tests' tiny preset
from tests.helpers.task_mirror import write_mirror  # noqa: E402

TARGET = "finetune@sst2-1234"
ALWAYS_RUNS = {"scan_mirror"}  # always_changed in dvc.yaml
# files that hold wall times or generated ids: the great-expectations Data Docs, each stage's
# .info.json sidecar, a fine-tune's result.json (its throughput); the scores are compared
VOLATILE = ("data_docs/", ".info.json", "/result.json")
RUNNING = re.compile(r"Running stage '([^']+)'")
FINAL = ("Completed", "Failed", "Crashed", "Cancelled")
STAGE_TIMEOUT_S = 900.0  # a run that outlives this is hung: a finding
KILL_WINDOW = 0.6  # kill moments: uniform over this share of the shortest whole run's time
TREE_TIMEOUT_S = 300.0  # what is left of a run's tree after a kill and outlives this: hung


@dataclass
class Drill:
    """What one path of the drill saw."""

    kills: list[dict[str, Any]] = field(default_factory=list)
    reruns: list[list[str]] = field(default_factory=list)
    recomputed: list[str] = field(default_factory=list)  # finished stages run again
    differing: list[str] = field(default_factory=list)  # outputs unlike the reference
    failures: list[str] = field(default_factory=list)  # runs that failed without a kill
    lost_runs: list[str] = field(default_factory=list)  # final states of a killed worker's runs
    rounds: int = 0


def env_for(home: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))},
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PREFECT_HOME": str(home),
            "DO_NOT_TRACK": "true", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "MLFLOW_DISABLE_TELEMETRY": "true", "DVC_NO_ANALYTICS": "1",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
            "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_EXTRA_LOGGERS": "gpt1",
            "GIT_AUTHOR_NAME": "chaos", "GIT_AUTHOR_EMAIL": "chaos@localhost",
            "GIT_COMMITTER_NAME": "chaos", "GIT_COMMITTER_EMAIL": "chaos@localhost"}


def _sh(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout + done.stderr


def make_template(dest: Path, env: dict[str, str]) -> Path:
    """The repository's source files, a tiny mirror and the tiny preset, under git and DVC."""
    copy_repo(dest)
    write_corpus(dest / "mirror", n_books=4, n_paragraphs=20)
    write_mirror(dest / "mirror", rows=40)
    raw = deep_merge(yaml.safe_load((dest / "params.yaml").read_text()), TINY)
    raw = deep_merge(raw, {"paths": {"mirror_dir": "mirror"},
                           "pretrain": {"precision": "fp32", "max_tokens": 64 * 128},
                           "finetune": {"tasks": ["sst2"]},  # every task list: prepared ones
                           "zeroshot": {"tasks": ["sst2"]},
                           "report": {"confirmatory_tasks": ["sst2"]},
                           "layers": {"layers_transferred": [0, 2],  # TINY has 2 blocks
                                      "tasks": ["sst2"]},
                           "ablations": {"tasks": ["sst2"]},
                           "orchestrate": {"io_retries": 0, "dvc_remote": None}})
    raw["finetune"]["overrides"] = {}
    (dest / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (dest / ".venv").symlink_to(BIN.parent)  # the README's `.venv/bin/...` lines
    _sh(["git", "init", "-q"], dest, env)
    _sh([str(BIN / "dvc"), "init", "-q"], dest, env)
    _sh(["git", "add", "-A"], dest, env)
    _sh(["git", "commit", "-qm", "tiny preset"], dest, env)
    return dest


def fresh_copy(template: Path, dest: Path) -> Path:
    shutil.copytree(template, dest, symlinks=True)
    return dest


def lock_stages(repo: Path) -> dict[str, Any]:
    """dvc.lock's stages; none when it is missing or unreadable (the re-run then says why)."""
    path = repo / "dvc.lock"
    try:
        return dict(yaml.safe_load(path.read_text())["stages"]) if path.exists() else {}
    except (yaml.YAMLError, TypeError, KeyError) as err:
        print(f"{path}: unreadable ({type(err).__name__})", flush=True)
        return {}


def outputs(repo: Path) -> dict[str, str]:
    """path -> md5 of every deterministic file of the outputs dvc.lock records (a folder's
    files listed from DVC's cache)."""
    found = {}
    for stage in lock_stages(repo).values():
        for out in stage.get("outs", []):
            path, md5 = out["path"], out["md5"]
            listing = repo / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]
            if md5.endswith(".dir") and listing.is_file():
                for entry in json.loads(listing.read_text()):
                    found[f"{path}/{entry['relpath']}"] = entry["md5"]
            else:
                found[path] = md5
    return {k: v for k, v in found.items() if not any(x in k for x in VOLATILE)}


def compare(repo: Path, reference: dict[str, str], drill: Drill) -> None:
    got = outputs(repo)
    for path in sorted(set(reference) | set(got)):
        if reference.get(path) != got.get(path):
            drill.differing.append(f"{repo.name}: {path} {reference.get(path)} != {got.get(path)}")


def describe(proc: psutil.Process, dvc_pid: int) -> str:
    """What a process of the run's tree is: dvc, a stage, or a process a stage started."""
    if proc.pid == dvc_pid:
        return "dvc"
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "gone"
    if "gpt1" in cmd and "-m" in cmd:
        return "stage `" + " ".join(cmd[cmd.index("gpt1") + 1:]) + "`"
    return "stage child `" + " ".join(Path(cmd[0]).name if i == 0 else c
                                      for i, c in enumerate(cmd[:4])) + "`"


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def end_tree(procs: list[psutil.Process], timeout: float) -> list[str]:
    """Wait for the processes to end; those still alive after `timeout` are killed and named."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    hung = []
    for proc in alive:
        with_children = [proc, *proc.children(recursive=True)]
        hung.append(describe(proc, -1))
        for p in with_children:
            with_ok(p.kill)
    return hung


def with_ok(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except psutil.Error:
        pass


def dvc_attempt(repo: Path, env: dict[str, str], kill_after: float | None, rng: random.Random,
                log: Path, target: str) -> tuple[list[str], dict[str, Any] | None, int]:
    """One `dvc repro`; with `kill_after`, a random process of its tree is SIGKILLed then.
    Returns the stages it started, the kill (None when it ended first) and its exit code."""
    with log.open("w") as out:
        proc = subprocess.Popen([str(BIN / "dvc"), "repro", target], cwd=repo, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + (kill_after if kill_after is not None else STAGE_TIMEOUT_S)
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    kill = None
    if proc.poll() is None and kill_after is not None:
        procs = tree(proc.pid)
        victim = rng.choice(procs)
        ran = RUNNING.findall(log.read_text())
        kill = {"at_s": round(kill_after, 1), "victim": describe(victim, proc.pid),
                "in_flight": ran[-1] if ran else None}
        with_ok(victim.kill)
        rest = [p for p in procs if p.pid != victim.pid]
        try:
            proc.wait(timeout=TREE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        hung = end_tree(rest, TREE_TIMEOUT_S)
        if hung:
            kill["hung"] = hung
    if proc.poll() is None:  # never ended: a hang
        for p in tree(proc.pid):
            with_ok(p.kill)
    code = proc.wait()
    return RUNNING.findall(log.read_text()), kill, code


def reference_run(template: Path, work: Path, env: dict[str, str],
                  target: str) -> tuple[dict[str, str], float]:
    """The uninterrupted run: its outputs and its wall time."""
    start = time.monotonic()
    repo = fresh_copy(template, work / "reference")
    _sh([str(BIN / "dvc"), "repro", target], repo, env, timeout=STAGE_TIMEOUT_S)
    took = time.monotonic() - start
    found = outputs(repo)
    print(f"reference: uninterrupted `dvc repro {target}` in {took:.0f} s, "
          f"{len(lock_stages(repo))} stages, {len(found)} output files compared", flush=True)
    return found, took


def drill_dvc(template: Path, work: Path, env: dict[str, str], kills: int, horizon: float,
              rng: random.Random, reference: dict[str, str], target: str = TARGET) -> Drill:
    drill = Drill()
    while len(drill.kills) < kills:
        drill.rounds += 1
        repo = fresh_copy(template, work / f"dvc-round{drill.rounds}")
        while True:
            finished = set(lock_stages(repo))
            kill_after = rng.uniform(0.5, KILL_WINDOW * horizon) if len(drill.kills) < kills \
                else None
            log = work / f"dvc-round{drill.rounds}-{len(drill.kills)}.log"
            started = time.monotonic()
            ran, kill, code = dvc_attempt(repo, env, kill_after, rng, log, target)
            if kill is None and not finished and not code:  # a whole run, uninterrupted: the
                horizon = min(horizon, time.monotonic() - started)  # machine got faster
            drill.recomputed += [f"{s} (round {drill.rounds})"
                                 for s in ran if s in finished - ALWAYS_RUNS]
            if kill is None:
                drill.reruns.append(ran)
                print(f"round {drill.rounds}: run ended (exit {code}), ran {', '.join(ran)}")
                if code:
                    drill.failures.append(f"round {drill.rounds}: {log.read_text()[-800:]}")
                break
            kill["code"] = code
            drill.kills.append(kill)
            print(f"kill {len(drill.kills)} (round {drill.rounds}) at {kill['at_s']} s: "
                  f"{kill['victim']}, in flight {kill['in_flight']}; dvc exited {code}"
                  + (f"; HUNG: {kill['hung']}" if "hung" in kill else ""), flush=True)
        compare(repo, reference, drill)
    return drill


# ---------------------------------------------------------------- Prefect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def services(home: Path) -> dict[str, int]:
    path = home / "gpt1-serve.json"
    if not path.exists():
        return {}
    return {k: v["pid"] for k, v in json.loads(path.read_text())["services"].items()}


def flow_state(api: str, flow_run_id: str) -> tuple[str, list[str]]:
    """(state name, the stages the run's logs say DVC started) of one flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        state = client.read_flow_run(uuid.UUID(flow_run_id)).state
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    ran = [str(m.group(1)) for log in logs for m in [RUNNING.match(log.message)] if m]
    return str(state.name if state else "none"), ran


def prefect_round(template: Path, work: Path, env: dict[str, str], kills: int, horizon: float,
                  rng: random.Random, drill: Drill) -> Path:
    """One fresh copy under `gpt1 serve`: deployment runs, each killed at a random moment (the
    worker with everything under it, or the server) until one runs to the end."""
    drill.rounds += 1
    repo = fresh_copy(template, work / f"prefect-round{drill.rounds}")
    home = work / f"prefect-home{drill.rounds}"
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**env, "PREFECT_HOME": str(home)}
    serve = [str(BIN / "gpt1"), "serve", "--no-ui", "--prefect-port", str(port)]
    run = [str(BIN / "prefect"), "deployment", "run", "gpt1/demo",
           "--param", f"stages={json.dumps([TARGET])}"]
    lost: list[str] = []  # flow runs whose worker was killed
    try:
        _sh(serve, repo, env)
        while True:
            finished = set(lock_stages(repo))
            out = _sh(run, repo, env, timeout=180)
            flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)  # type: ignore[union-attr]
            kill_after = rng.uniform(5.0, horizon) if len(drill.kills) < kills else None
            deadline = time.monotonic() + (kill_after if kill_after is not None
                                           else STAGE_TIMEOUT_S)
            state, ran = "Scheduled", list[str]()
            while time.monotonic() < deadline and state not in FINAL:
                time.sleep(1.0)
                state, ran = flow_state(api, flow_run_id)
            drill.recomputed += [f"{s} (prefect round {drill.rounds})"
                                 for s in ran if s in finished - ALWAYS_RUNS]
            if state in FINAL or kill_after is None:
                drill.reruns.append(ran)
                print(f"prefect round {drill.rounds}: flow run {state}, ran {', '.join(ran)}",
                      flush=True)
                if state != "Completed":
                    drill.failures.append(f"prefect round {drill.rounds}: flow run {state}")
                break
            victim = rng.choice(["worker", "prefect-server"])
            worker = services(home)["worker"]
            procs = tree(services(home)[victim])
            for proc in procs:  # the service and everything under it, at once
                with_ok(proc.kill)
            psutil.wait_procs(procs, timeout=60)
            kill = {"at_s": round(kill_after, 1), "victim": victim,
                    "in_flight": ran[-1] if ran else None}
            _sh(serve, repo, env)  # restarts what died
            if victim == "worker":
                lost.append(flow_run_id)
            else:  # the flow run outlived its server: let it end before the next run starts
                hung = end_tree(tree(worker)[1:], TREE_TIMEOUT_S)
                kill["then"] = flow_state(api, flow_run_id)[0]
                if hung:
                    kill["hung"] = hung
            drill.kills.append(kill)
            print(f"prefect kill {len(drill.kills)} at {kill_after:.1f} s: {victim}, "
                  f"in flight {kill['in_flight']}"
                  + (f"; its flow run then {kill['then']}" if "then" in kill else ""),
                  flush=True)
        for flow_run_id in lost:  # Prefect's zombie automation (gpt1 serve) crashes them
            deadline = time.monotonic() + 180
            while (state := flow_state(api, flow_run_id)[0]) not in FINAL:
                if time.monotonic() > deadline:
                    break
                time.sleep(2.0)
            drill.lost_runs.append(state)
    finally:
        subprocess.run(serve[:2] + ["serve", "--stop"], cwd=repo, env=env, timeout=120,
                       check=False, capture_output=True)
        for proc in psutil.process_iter():
            if _under(proc, repo):
                with_ok(proc.kill)
    return repo


def _under(proc: psutil.Process, root: Path) -> bool:
    """A process still running in the round's copy (after `gpt1 serve --stop`)."""
    try:
        return proc.pid != os.getpid() and Path(proc.cwd()).is_relative_to(root)
    except (psutil.Error, ValueError):
        return False


def drill_prefect(template: Path, work: Path, env: dict[str, str], kills: int, horizon: float,
                  rng: random.Random, reference: dict[str, str]) -> Drill:
    drill = Drill()
    while len(drill.kills) < kills:
        repo = prefect_round(template, work, env, kills, horizon, rng, drill)
        compare(repo, reference, drill)
    return drill


# ---------------------------------------------------------------- report


def summary(name: str, drill: Drill) -> bool:
    victims: dict[str, int] = {}
    for k in drill.kills:
        kind = k["victim"].split(" `")[0]
        victims[kind] = victims.get(kind, 0) + 1
    stages_killed = sorted({k["in_flight"] for k in drill.kills if k["in_flight"]})
    print(f"\n{name}: {len(drill.kills)} kills in {drill.rounds} rounds "
          f"({', '.join(f'{v}: {n}' for v, n in sorted(victims.items()))}); "
          f"stages in flight when killed: {', '.join(stages_killed)}")
    print(f"  finished stages run again: {len(drill.recomputed)} {drill.recomputed or ''}")
    print(f"  outputs unlike the uninterrupted run: {len(drill.differing)} "
          f"{drill.differing or ''}")
    hangs = [k for k in drill.kills if "hung" in k]
    print(f"  hangs after a kill: {len(hangs)} {hangs or ''}")
    if drill.lost_runs:  # Prefect: runs of a killed worker, ended by the zombie automation
        ends = {s: drill.lost_runs.count(s) for s in sorted(set(drill.lost_runs))}
        print(f"  flow runs of a killed worker: {len(drill.lost_runs)}, ended "
              f"{', '.join(f'{s}: {n}' for s, n in ends.items())}")
    print(f"  runs that failed without a kill: {len(drill.failures)}")
    for failure in drill.failures:
        print("    " + failure.replace("\n", "\n    "))
    return not (drill.recomputed or drill.differing or drill.failures or hangs
                or set(drill.lost_runs) - {"Crashed"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dvc-kills", type=int, default=20)
    parser.add_argument("--prefect-kills", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    add_option(parser)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="gpt1-chaos-"))
    env = env_for(work / "prefect-home")
    ok = True
    try:
        template = make_template(work / "template", env)
        reference, took = reference_run(template, work, env, TARGET)
        if args.dvc_kills:
            ok &= summary("dvc repro", drill_dvc(template, work, env, args.dvc_kills, took,
                                                 rng, reference))
        if args.prefect_kills:
            ok &= summary("Prefect deployment", drill_prefect(
                template, work, env, args.prefect_kills, took + 30.0, rng, reference))
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("drill: " + ("nothing lost, nothing finished recomputed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    with recording("chaos"):
        code = main()
    sys.exit(code)
