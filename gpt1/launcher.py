"""Launching a pre-training stage as pretrain.nproc processes (DDP) on this node.

`launch_if_needed` is what the CLI calls before a launched stage (gpt1.stage_table) runs: with
more than one process to run, this process checks the batch splits over them
(`PretrainCfg.accumulation`), starts `python -m gpt1 <stage>` once per rank with torch's elastic
launcher and waits; each rank then runs the stage itself (gpt1.runtime.distributed joins them),
knowing its rank by `rank`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys

from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.interrupt import StoppedError

log = logging.getLogger(__name__)


def launch_if_needed(argv: list[str], params: Params, params_path: str) -> bool:
    """Run the stage run of command line `argv` (gpt1.stage_table.StageRun.argv) as
    pretrain.nproc ranks when that is more than one and this process is not a rank already
    (a StoppedError or Gpt1Error when they stop or fail); False when this
    process is to run the stage itself (one process, a rank, or an import that trains nothing)."""
    if rank() is not None or params.pretrain.import_hf is not None:
        return False
    nproc = ranks_to_launch(params.pretrain.nproc, params.device)
    if nproc == 1:
        return False
    params.pretrain.accumulation(nproc)  # the batch splits over the ranks, or stop
    params.pretrain.refuse_graphs_with_ddp(nproc)  # or stop, before any rank starts
    code, signum = launch_ranks(nproc, ["--params", params_path, *argv])
    if signum is not None:
        raise StoppedError(f"stopped ({nproc} ranks); re-run to resume from the latest "
                           "checkpoint", signum)
    if code:
        raise Gpt1Error(f"{nproc} ranks (pretrain.nproc) failed, launcher exit {code}; "
                        "each rank's error is above")
    return True


def ranks_to_launch(nproc: int | str, requested_device: str) -> int:
    """How many processes a pre-training stage runs as on this node (pretrain.nproc): N, or
    for `auto` one per GPU torch sees (1 on the CPU). More processes than GPUs stop here."""
    import torch  # here: the CLI imports this module, and a data stage never loads torch

    gpus = torch.cuda.device_count() if requested_device != "cpu" else 0
    if nproc == "auto":
        return max(gpus, 1)
    n = int(nproc)
    if gpus and n > gpus:
        raise Gpt1Error(f"pretrain.nproc: {n} processes, but torch sees {gpus} GPU(s) "
                        "(one process per GPU; nproc: auto uses them all)")
    return n


def rank() -> int | None:
    """This process's rank in a launched group (torchrun's $RANK); None when it is no rank of
    one. The one reader of the rank: the rest ask the stage context (gpt1.recording)."""
    value = os.environ.get("RANK")
    return None if value is None else int(value)


def _die_with_parent() -> None:
    """In the launcher's process: SIGTERM it when this process dies (Linux prctl
    PR_SET_PDEATHSIG), so ranks never outlive a killed stage."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def launch_ranks(nproc: int, argv: list[str]) -> tuple[int, int | None]:
    """Run `python -m gpt1 ARGV` as `nproc` processes on this node with torch's elastic
    launcher (torch.distributed.run --standalone) and wait. The launcher runs in its own
    process group: a Ctrl-C or SIGTERM reaches it once, passed on by this process, and it
    passes one to every rank (a second would stop them at once, unsaved). Returns the
    launcher's exit code and the signal passed on (None if none)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "-m", "gpt1", *argv]
    log.info("launching %d processes: %s", nproc, " ".join(cmd[1:]))
    child = subprocess.Popen(cmd, start_new_session=True,  # noqa: S603 (our interpreter)
                             preexec_fn=_die_with_parent)  # noqa: PLW1509
    received: list[int] = []

    def pass_on(signum: int, _: object) -> None:
        received.append(signum)
        child.send_signal(signum)

    forward = {sig: signal.signal(sig, pass_on) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait(), (received[0] if received else None)
    finally:
        for sig, handler in forward.items():
            signal.signal(sig, handler)
