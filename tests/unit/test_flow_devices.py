"""Device slots (pipelines/devices.py): on a worker declaring 2 devices, the flow runs two
fine-tunes at once, each seeing its own CUDA_VISIBLE_DEVICES, and pre-training sees both."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from pipelines.devices import DevicePool

DVC = str(Path(sys.executable).with_name("dvc"))
# Each fine-tune writes what it sees, then waits (up to 60 s) for the other one to start: it
# completes only if both run at the same time.
FINETUNE = ("sh -c 'echo \"$CUDA_VISIBLE_DEVICES\" > seen_${item}; touch started_${item}; "
            "for i in $(seq 300); do [ -e started_a ] && [ -e started_b ] && "
            "cp seen_${item} ft_${item} && exit 0; sleep 0.2; done; exit 1'")


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


@pytest.fixture
def two_device_repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "params.yaml").write_text("tasks: [a, b]\n")
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
def test_two_finetunes_at_once_see_different_devices(two_device_repo, make_params):
    from prefect import flow
    from prefect.testing.utilities import prefect_test_harness

    from pipelines.dag import read_plan
    from pipelines.gpt1_flow import run_graph, stage_env

    params = make_params({"orchestrate": {"devices": [0, 1], "max_parallel_stages": 2,
                                          "dvc_remote": None}})

    @flow
    def two_devices() -> list[dict]:
        return run_graph(read_plan(two_device_repo), params, two_device_repo,
                         stage_env(params), None)

    with prefect_test_harness():  # a temporary Prefect server and database
        records = two_devices()
    assert [r["status"] for r in records] == ["ran"] * 3, records
    seen = {p: (two_device_repo / p).read_text().strip() for p in ("pre", "ft_a", "ft_b")}
    assert seen["pre"] == "0,1"
    assert {seen["ft_a"], seen["ft_b"]} == {"0", "1"}
