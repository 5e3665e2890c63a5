"""Checkpoints off the critical path: the loop trains on while a checkpoint is hashed and
written on the writer's thread; a failed write is raised in the loop; a host copy does not
change when training goes on. (Bit-identical resumes: test_checkpoint.py, test_pretraining.py.)"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from gpt1 import checkpoint
from gpt1.snapshot import BackgroundWriter, HostCopier
from tests.helpers.counters import count_updates
from tests.helpers.streams import pretrain_tiny

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (tests/conftest.py)


def test_the_loop_trains_on_while_a_checkpoint_is_written(make_params, tmp_path, monkeypatch):
    """32 updates, a checkpoint every 8: each write (but the last) waits until the loop has
    done two more updates, which a write on the loop's own thread would wait for forever."""
    import gpt1.pretraining as loop

    params = make_params({"device": "cpu", "pretrain": {"precision": "fp32"}})
    done = count_updates(loop, monkeypatch.setattr)
    write, writes = checkpoint.write_checkpoint, []

    def slow_write(run_dir, at, *args):
        seen, deadline = done[0], time.monotonic() + 60
        while at < 32 and done[0] < seen + 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        writes.append((at, threading.current_thread().name, done[0] - seen))
        return write(run_dir, at, *args)

    monkeypatch.setattr(checkpoint, "write_checkpoint", slow_write)
    metrics = pretrain_tiny(params, tmp_path / "run")
    assert [w[0] for w in writes] == [8, 16, 24, 32]
    assert {w[1] for w in writes} == {"gpt1-checkpoint"}
    assert all(trained >= 2 for at, _, trained in writes if at < 32), writes
    assert metrics["checkpoint_writing_s"] > metrics["checkpoint_blocking_s"]
    assert checkpoint.latest_checkpoint(tmp_path / "run").name == "step_00000032"


def test_a_failed_write_is_raised_in_the_loop_and_a_failing_loop_waits_for_the_write():
    with BackgroundWriter() as writer:
        writer.submit(lambda: HostCopier().copy({}), lambda host: (_ for _ in ()).throw(
            OSError("disk full")))
        with pytest.raises(OSError, match="disk full"):
            writer.wait()
    finished = threading.Event()

    def slow(host):
        time.sleep(0.2)
        finished.set()

    with pytest.raises(KeyError), BackgroundWriter() as writer:
        writer.submit(lambda: HostCopier().copy({}), slow)
        raise KeyError("the loop failed")
    assert finished.is_set()  # the write in flight completed before the error left the block


def test_a_host_copy_keeps_the_values_of_when_it_was_taken():
    weight = torch.ones(3)
    host = HostCopier().copy({"model": {"w": weight}})
    weight.add_(1.0)  # the next update, in place
    host.wait()
    assert host.groups["model"]["w"].tolist() == [1.0, 1.0, 1.0]
