"""The Prefect flow's stage plan is DVC's graph: same stages as `dvc dag`, upstream first."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpt1.errors import Gpt1Error
from pipelines.dag import read_plan, select
from tests.helpers.repo import REPO

DVC = str(Path(sys.executable).with_name("dvc"))


def dvc_dag(root: Path) -> tuple[set[str], set[tuple[str, str]]]:
    """Stages and (upstream, downstream) edges printed by `dvc dag --dot`."""
    dot = subprocess.run(
        [DVC, "dag", "--dot"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    nodes = set(re.findall(r'^"([^"]+)";$', dot, re.M))
    edges = set(re.findall(r'^"([^"]+)" -> "([^"]+)";$', dot, re.M))
    return nodes, edges


def assert_plan_matches_dvc(root: Path) -> list[str]:
    plan = read_plan(root)
    names = [s.name for s in plan]
    nodes, edges = dvc_dag(root)
    assert len(names) == len(set(names))
    assert set(names) == nodes
    position = {n: i for i, n in enumerate(names)}
    assert all(position[a] < position[b] for a, b in edges)
    assert {(u, s.name) for s in plan for u in s.upstream} == edges
    return names


def test_flow_stages_equal_dvc_dag_of_this_repo() -> None:
    names = assert_plan_matches_dvc(REPO)
    assert names, "dvc.yaml defines no stage"


def dvc_repo(root: Path, tasks: str, dvc_yaml: str) -> Path:
    """A git + DVC repo at `root` with params `tasks: <tasks>` and this dvc.yaml."""
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=root, check=True)
    (root / "params.yaml").write_text(f"tasks: {tasks}\n")
    (root / "dvc.yaml").write_text(textwrap.dedent(dvc_yaml))
    return root


@pytest.fixture
def toy_repo(tmp_path: Path) -> Path:
    return dvc_repo(tmp_path, "[rte, cola]", """\
        stages:
          report:
            cmd: cat a b > r
            deps: [a, ft_rte, ft_cola]
            outs: [r]
            metrics: [{reports/m.json: {cache: false}}]
          download_corpus:
            cmd: echo > raw
            outs: [raw]
          prep:
            cmd: cp raw a
            deps: [raw]
            outs: [a, m/prep.json, m/prep.info.json, m/other.json]  # a record, a plain JSON
          finetune:
            foreach: ${tasks}
            do:
              cmd: cp a ft_${item}
              deps: [a]
              outs: ["ft_${item}"]
          lonely:
            cmd: echo > l
            outs: [l]
        """)


@pytest.mark.slow
def test_plan_is_topological_and_keeps_dvc_yaml_order(toy_repo: Path) -> None:
    names = assert_plan_matches_dvc(toy_repo)
    # report is written first in dvc.yaml but needs everything except `lonely`; ties keep the
    # order DVC lists the stages in
    assert names == ["download_corpus", "prep", "finetune@rte", "finetune@cola", "report", "lonely"]
    plan = {s.name: s for s in read_plan(toy_repo)}
    assert plan["report"].upstream == ("prep", "finetune@rte", "finetune@cola")
    assert plan["report"].metrics == ("reports/m.json",)
    assert plan["prep"].metrics == ("m/prep.json",)  # a record (its .info.json beside it)
    assert plan["download_corpus"].metrics == ()
    assert plan["finetune@cola"].base == "finetune"


def test_select_adds_upstream_and_rejects_unknown(toy_repo: Path) -> None:
    plan = read_plan(toy_repo)
    assert select(plan, None) == plan
    assert [s.name for s in select(plan, ["finetune@cola"])] == [
        "download_corpus", "prep", "finetune@cola"]
    assert [s.name for s in select(plan, ["finetune", "lonely"])] == [
        "download_corpus", "prep", "finetune@rte", "finetune@cola", "lonely"]
    with pytest.raises(Gpt1Error, match="no DVC stage 'pretrian'"):
        select(plan, ["pretrian"])


def test_broken_dvc_yaml_is_one_line_error(toy_repo: Path) -> None:
    (toy_repo / "dvc.yaml").write_text("stages:\n  x: [\n")
    with pytest.raises(Gpt1Error, match="dvc.yaml: cannot read the DVC pipeline"):
        read_plan(toy_repo)


def test_results_table_reads_the_plans_metrics_files(tmp_path: Path) -> None:
    from pipelines.dag import StagePlan
    from pipelines.gpt1_flow import results_markdown

    (tmp_path / "m").mkdir()
    (tmp_path / "m/finetune_rte.json").write_text(
        '{"task": "rte", "scores": {"acc": {"mean": 0.5625, "sd": 0.01, "per_seed": [0.5625]}}}')
    (tmp_path / "m/pretrain.json").write_text('{"val": {"ppl": 112.03}, "done": true}')
    (tmp_path / "m/pretrain_val.json").write_text('[{"step": 1, "val_ppl": 3.0}]')  # a plot
    (tmp_path / "m/stale.json").write_text('{"x": 1}')  # no stage of the plan writes it
    plan = [StagePlan("pretrain", (), ("m/pretrain.json", "m/pretrain_val.json")),
            StagePlan("finetune@rte", ("pretrain",), ("m/finetune_rte.json",)),
            StagePlan("finetune@sst2", ("pretrain",), ("m/finetune_sst2.json",))]  # failed
    records = [{"stage": "pretrain", "status": "ran", "started": 0.0, "finished": 61.25},
               {"stage": "finetune@sst2", "status": "failed", "error": "boom"}]
    table = results_markdown(tmp_path, plan, records, "http://127.0.0.1:5000/#/x")
    assert "| pretrain | ran | 00:00:00 | 61.2 |" in table
    assert "| finetune@sst2 | failed |  |  |" in table
    assert "| m/finetune_rte.json | acc | 56.2 ± 1.0 |" in table
    assert "| m/pretrain.json | val.ppl | 112.03 |" in table
    assert "done" not in table and "stale" not in table and "val_ppl" not in table
    assert "[http://127.0.0.1:5000/#/x](http://127.0.0.1:5000/#/x)" in table


def test_config_errors_are_not_retried_io_errors_are() -> None:
    from prefect.states import Failed

    from pipelines.gpt1_flow import StageError, config_failure, retry_io_error

    said = ["Running stage 'download_corpus':", "> python -m gpt1 download_corpus",
            "ERROR: failed to reproduce 'download_corpus': failed to run: python -m gpt1 "
            "download_corpus, exited with 2"]
    assert config_failure(said)
    assert not config_failure([*said[:2], said[2].replace("with 2", "with 1")])

    def retried(exc: BaseException) -> bool:
        return retry_io_error(None, None, Failed(data=exc))  # type: ignore[arg-type]

    assert not retried(StageError("bad mirror", "dvc.yaml", config_error=True))
    assert retried(StageError("network down", "dvc.yaml", config_error=False))
    assert not retried(Gpt1Error("bad preset", "params.yaml"))
    assert retried(OSError("disk hiccup"))


@pytest.mark.slow  # a temporary Prefect server (~20 s): the scheduling is Prefect's and DVC's
def test_a_stage_runs_only_with_its_slot_and_a_cached_rerun_schedules_nothing(
        tmp_path: Path, make_params) -> None:
    """One stage slot, two independent 1 s stages: the second becomes a task (Running) only
    once the first has given the slot back, not while it waits. A re-run of the cached pipeline
    runs the always-changed stage and schedules nothing else (dvc status: up to date)."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.testing.utilities import prefect_test_harness

    from pipelines.gpt1_flow import UP_TO_DATE, run_graph, stage_env

    dvc_repo(tmp_path, "[a, b]", """\
        stages:
          scan:
            cmd: echo same > s
            always_changed: true
            outs: [{s: {cache: false}}]
          prep:
            cmd: cp s p
            deps: [s]
            outs: [p]
          finetune:
            foreach: ${tasks}
            do:
              cmd: sleep 1 && cp p ft_${item}
              deps: [p]
              outs: ["ft_${item}"]
        """)
    params = make_params({"orchestrate": {"max_parallel_stages": 1, "dvc_remote": None}})

    @flow
    def pipeline() -> list[dict]:
        return run_graph(read_plan(tmp_path), params, tmp_path, stage_env(params), None, None)

    with prefect_test_harness():
        first = pipeline(return_state=True)
        again = pipeline(return_state=True)
        with get_client(sync_client=True) as client:
            runs = [{r.name: r for r in client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))}
                for state in (first, again)]
    assert {r["stage"]: r["status"] for r in first.result()} == dict.fromkeys(
        ["scan", "prep", "finetune@a", "finetune@b"], "ran")
    a, b = sorted((runs[0]["finetune@a"], runs[0]["finetune@b"]), key=lambda r: r.start_time)
    assert b.start_time >= a.end_time, "a task was Running while it waited for the slot"
    assert {r["stage"]: r["status"] for r in again.result()} == {
        "scan": "ran", "prep": UP_TO_DATE, "finetune@a": UP_TO_DATE, "finetune@b": UP_TO_DATE}
    assert set(runs[1]) == {"scan"}  # nothing else was scheduled


def test_one_machine_works_in_its_dvc_cache_and_a_remote_worker_shares_through_the_remote(
        tmp_path: Path, make_params) -> None:
    """With orchestrate.dvc_remote set, a flow on this machine neither pulls nor pushes (its
    stages share the workspace's cache): the remote stays empty. A run given the remote (a
    clone on another machine, `publish`) pushes what its stages made."""
    from prefect import flow
    from prefect.testing.utilities import prefect_test_harness

    from pipelines.gpt1_flow import run_graph, stage_env

    repo = tmp_path / "repo"
    repo.mkdir()
    dvc_repo(repo, "[a]", """\
        stages:
          scan:
            cmd: echo same > s
            always_changed: true
            outs: [s]
          prep:
            cmd: cp s p
            deps: [s]
            outs: [p]
        """)
    remote = tmp_path / "remote"
    subprocess.run([DVC, "remote", "add", "local", str(remote)], cwd=repo, check=True)
    params = make_params({"orchestrate": {"max_parallel_stages": 1, "dvc_remote": "local"}})

    @flow
    def pipeline(share: str | None) -> list[dict]:
        return run_graph(read_plan(repo), params, repo, stage_env(params), None, share)

    with prefect_test_harness(server_startup_timeout=120):  # a loaded machine starts slowly
        here = pipeline(None)
        assert {r["stage"]: r["status"] for r in here} == {"scan": "ran", "prep": "ran"}
        assert not remote.exists() or not any(p.is_file() for p in remote.rglob("*"))
        pipeline("local")  # scan runs again (always changed) and is pushed
    assert any(p.is_file() for p in remote.rglob("*"))
