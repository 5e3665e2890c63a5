"""Device slots (pipelines/devices.py): `devices: auto` on a worker declaring 8 GPUs hands each of
8 concurrent fine-tunes its own, pre-training (every device) is served before single-device
stages queued ahead of it, a configuration that would put two stages on one GPU says so in one
line, and the flow runs 8 fine-tunes at once, each seeing its own CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pipelines.devices import (
    DevicePool,
    gpu_count,
    sharing_warning,
    stage_slots,
    visible_gpus,
    worker_devices,
)

DVC = str(Path(sys.executable).with_name("dvc"))
EIGHT = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}  # a worker declaring 8 GPUs
TASKS = "abcdefgh"
# Each fine-tune writes what it sees, then waits (up to 240 s) for all 8 to start: it completes
# only if all 8 run at the same time.
FINETUNE = ("sh -c 'echo \"$CUDA_VISIBLE_DEVICES\" > seen_${item}; touch started_${item}; "
            "for i in $(seq 1200); do [ $(ls started_* | wc -l) -eq 8 ] && "
            "cp seen_${item} ft_${item} && exit 0; sleep 0.2; done; exit 1'")


def until(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_the_pool_hands_out_every_device_or_one():
    pool = DevicePool((0, 1))
    assert (pool.wanted("pretrain"), pool.wanted("finetune"), pool.wanted("shard_corpus")) == (
        2, 1, 0)
    assert DevicePool(()).wanted("pretrain") == 0
    with pool.hold("finetune") as a, pool.hold("finetune") as b:
        assert {a["CUDA_VISIBLE_DEVICES"], b["CUDA_VISIBLE_DEVICES"]} == {"0", "1"}
        waited = threading.Event()

        def pretrain() -> None:
            with pool.hold("pretrain") as both:
                assert both == {"CUDA_VISIBLE_DEVICES": "0,1"}
                waited.set()

        t = threading.Thread(target=pretrain)
        t.start()
        assert not waited.wait(0.3)  # pre-training waits for both devices
    t.join(10)
    assert waited.is_set()
    with pool.hold("report") as none:
        assert none == {}


def test_auto_hands_out_every_declared_gpu_and_one_stage_per_device(make_params):
    auto = make_params({"orchestrate": {"devices": "auto", "max_parallel_stages": "auto"}})
    orch = auto.orchestrate
    devices = worker_devices(orch, "auto", EIGHT)
    assert devices == tuple("01234567")
    assert stage_slots(orch, devices) == 8
    assert worker_devices(orch, "cpu", EIGHT) == ()  # model stages on the CPU: no GPU to share
    assert stage_slots(orch, ()) == 1
    listed = make_params({"orchestrate": {"devices": [2, 3], "max_parallel_stages": 3}})
    assert worker_devices(listed.orchestrate, "auto", EIGHT) == ("2", "3")
    assert stage_slots(listed.orchestrate, ("2", "3")) == 3
    # as CUDA reads the variable: up to the first empty or negative entry; UUIDs as they are
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,1,-1,0"}) == ("3", "1")
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-a1, MIG-b2"}) == ("GPU-a1", "MIG-b2")


def test_an_undeclared_worker_counts_its_gpus(tmp_path):
    import torch

    assert visible_gpus({}, lambda: 3) == ("0", "1", "2")
    assert gpu_count((tmp_path / "absent",)) == 0  # no trace of the driver: torch not asked
    assert gpu_count((tmp_path,)) == torch.cuda.device_count()


def test_eight_finetunes_hold_eight_distinct_devices_at_once():
    pool = DevicePool(tuple("01234567"))
    together = threading.Barrier(8, timeout=10)  # breaks unless all 8 hold devices at once
    seen: list[str] = []

    def finetune() -> None:
        with pool.hold("finetune") as visible:
            seen.append(visible["CUDA_VISIBLE_DEVICES"])
            together.wait()

    threads = [threading.Thread(target=finetune) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not together.broken
    assert sorted(seen) == list("01234567")


def test_pretrain_is_served_before_single_device_stages_queued_ahead_of_it():
    pool = DevicePool(tuple("01234567"))
    release = [threading.Event() for _ in range(8)]
    order: list[tuple[str, str]] = []
    lock = threading.Lock()

    def stage(name: str, base: str, done: threading.Event | None = None) -> None:
        with pool.hold(base) as visible:
            with lock:
                order.append((name, visible["CUDA_VISIBLE_DEVICES"]))
            if done is not None:
                done.wait(20)

    running = [threading.Thread(target=stage, args=(f"ft{i}", "finetune", release[i]))
               for i in range(8)]
    for t in running:
        t.start()
    until(lambda: len(order) == 8)  # every device busy
    queued = [threading.Thread(target=stage, args=(f"early{i}", "ablation")) for i in range(3)]
    for t in queued:
        t.start()
    until(lambda: len(pool.waiting) == 3)
    pretrain = threading.Thread(target=stage, args=("pretrain", "pretrain"))
    pretrain.start()
    until(lambda: len(pool.waiting) == 4)
    late = threading.Thread(target=stage, args=("late", "finetune"))
    late.start()
    until(lambda: len(pool.waiting) == 5)
    for event in release:  # devices come back one at a time; none goes to a queued ft
        event.set()
        time.sleep(0.02)
    for t in (*running, *queued, pretrain, late):
        t.join(20)
    after = [name for name, _ in order[8:]]
    assert after[0] == "pretrain", order
    assert order[8][1] == "0,1,2,3,4,5,6,7"
    assert after[1:] == ["early0", "early1", "early2", "late"]  # then first come, first served
    assert pool.free == list("01234567") and not pool.waiting


def test_two_stages_on_one_gpu_is_said_in_one_line():
    line = sharing_warning((), 4, "auto", EIGHT)
    assert line is not None and "\n" not in line
    assert "max_parallel_stages 4" in line and "GPU 0 of this worker's 8" in line
    assert "devices: auto" in line  # the fix
    assert sharing_warning((), 1, "auto", EIGHT) is None  # one stage at a time: no sharing
    assert sharing_warning((), 4, "cpu", EIGHT) is None  # model stages on the CPU
    assert sharing_warning((), 4, "auto", {"CUDA_VISIBLE_DEVICES": ""}) is None  # no GPU
    assert sharing_warning(("0", "1"), 4, "auto", EIGHT) is None  # the pool gives each its own


@pytest.fixture
def eight_device_repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "params.yaml").write_text(f"tasks: {list(TASKS)}\n")
    (tmp_path / "dvc.yaml").write_text(textwrap.dedent(f"""\
        stages:
          pretrain:
            cmd: sh -c 'echo "$CUDA_VISIBLE_DEVICES" > pre'
            outs: [pre]
          finetune:
            foreach: ${{tasks}}
            do:
              cmd: {FINETUNE}
              deps: [pre]
              outs: ["ft_${{item}}"]
        """))
    return tmp_path


@pytest.mark.slow
def test_eight_finetunes_at_once_see_different_devices(eight_device_repo, make_params,
                                                        monkeypatch):
    from prefect import flow
    from prefect.testing.utilities import prefect_test_harness

    from pipelines.dag import read_plan
    from pipelines.gpt1_flow import run_graph, stage_env

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT["CUDA_VISIBLE_DEVICES"])
    params = make_params({"orchestrate": {"devices": "auto", "max_parallel_stages": "auto",
                                          "dvc_remote": None}})

    @flow
    def eight_devices() -> list[dict]:
        return run_graph(read_plan(eight_device_repo), params, eight_device_repo,
                         stage_env(params), None, None)

    with prefect_test_harness():  # a temporary Prefect server and database
        records = eight_devices()
    assert [r["status"] for r in records] == ["ran"] * 9, records
    seen = {p: (eight_device_repo / p).read_text().strip()
            for p in ("pre", *(f"ft_{t}" for t in TASKS))}
    assert seen.pop("pre") == "0,1,2,3,4,5,6,7"
    assert sorted(seen.values()) == list("01234567")
