"""The GPU work-pool templates (pipelines/pools/): Prefect accepts them as base job templates,
and rendered with their defaults the Kubernetes job requests every GPU of a node and the
Docker container gets every GPU of the host, both with a /dev/shm large enough for NCCL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prefect.server.schemas.actions import WorkPoolCreate
from prefect.utilities.templating import apply_values

from tests.helpers.repo import REPO

POOLS = REPO / "pipelines" / "pools"


def template(kind: str) -> dict[str, Any]:
    return json.loads((POOLS / f"{kind}.json").read_text(encoding="utf-8"))


def rendered(kind: str, **job_variables: Any) -> dict[str, Any]:
    """The job configuration a worker gets: the variables' defaults, then the deployment's
    job variables, filled into the template as Prefect fills it (unset values dropped)."""
    tpl = template(kind)
    values = {name: spec["default"] for name, spec in tpl["variables"]["properties"].items()
              if spec.get("default") is not None}
    return apply_values(tpl["job_configuration"], values | job_variables)


@pytest.mark.parametrize("kind", ["kubernetes", "docker"])
def test_prefect_accepts_the_template(kind: str) -> None:
    pool = WorkPoolCreate(name="gpu", type=kind, base_job_template=template(kind))
    assert pool.base_job_template["job_configuration"]


def test_kubernetes_job_requests_every_gpu_of_a_node_and_shared_memory() -> None:
    job = rendered("kubernetes")["job_manifest"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}  # unset cpu/memory dropped
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    four = rendered("kubernetes", gpus_per_node=4, cpu_limit="32")["job_manifest"]
    limits = four["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "32", "nvidia.com/gpu": 4}


def test_docker_container_gets_every_gpu_and_shared_memory() -> None:
    from docker.models.containers import _create_container_args  # what containers.create runs
    from docker.types import HostConfig

    kwargs = rendered("docker", image="gpt1:cuda")["container_create_kwargs"]
    args = _create_container_args({"image": "gpt1:cuda", "version": "1.44", **kwargs})
    host = args["host_config"]
    assert isinstance(host, HostConfig)
    assert host["ShmSize"] == 16 * 1024**3
    (gpus,) = host["DeviceRequests"]
    assert (gpus["Driver"], gpus["Count"], gpus["Capabilities"]) == ("nvidia", -1, [["gpu"]])
    assert {u["Name"]: u["Hard"] for u in host["Ulimits"]} == {"memlock": -1, "stack": 64 << 20}
