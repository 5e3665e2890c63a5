"""Where and how the work runs: the device, the numeric precision, the distributed group.

Every stage asks `device()` for its device, so a process never mixes two choices; under
torchrun each process takes the GPU of its LOCAL_RANK. `resolve_precision` turns the params'
`auto | fp32 | bf16` into the precision this device runs fast, and `distributed` joins (and
leaves) the process group torchrun describes in the environment (gpt1/launcher.py starts those
processes), `check_shared_dir` refuses a run directory some rank does not see,
`compile_or_eager` guards torch.compile, and `bf16_peak` is the device's dense bf16 peak that
utilisation (MFU) is measured against.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from gpt1.errors import Gpt1Error
from gpt1.interrupt import StopRequest

log = logging.getLogger(__name__)

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of CPUs with native bf16 dot products: AMX tiles (Intel Sapphire Rapids
and later) or AVX512-BF16 (Intel Cooper Lake, AMD Zen 4 and later). Measured here: bf16 linear
layers 2.5-5x (AMX) and 3.3x (AVX512-BF16, AMD EPYC) faster than fp32."""


def has_fast_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True on a CPU with native bf16 matmul instructions (BF16_CPU_FLAGS) that oneDNN may
    use: ONEDNN_MAX_CPU_ISA capped below them (e.g. AVX2) means emulated bf16, so False."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if cap not in ("ALL", "DEFAULT") and not any(k in cap for k in ("BF16", "AMX", "AVX10")):
        return False
    if "AMX" in torch.backends.cpu.get_cpu_capability().upper():
        return True
    with contextlib.suppress(OSError):
        with open(cpuinfo, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return any(flag in line.split() for flag in BF16_CPU_FLAGS)
    return False


def resolve_precision(precision: str, device: torch.device) -> Literal["fp32", "bf16"]:
    """`auto` -> bf16 on CUDA with bf16 support or on a CPU with native bf16, else fp32."""
    if precision == "bf16" and device.type == "cpu" and not has_fast_bf16():
        log.warning("precision bf16 on a CPU without native bf16 (no AVX512-BF16 / AMX, or "
                    "ONEDNN_MAX_CPU_ISA below them): bf16 is emulated, many times slower than "
                    "fp32 (precision: auto picks fp32 here)")
    if precision in ("fp32", "bf16"):
        return "fp32" if precision == "fp32" else "bf16"
    if precision != "auto":
        raise ValueError(f"unknown precision {precision!r}")
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if has_fast_bf16() else "fp32"


def autocast_for(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast (weights and grads stay fp32) or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def check_device(requested: str) -> None:
    """Stop (Gpt1Error, exit 2) when `device: cuda` is asked of a torch that sees no GPU, naming
    the installed build and the fix; the CLI calls this before a stage reads any input."""
    if requested != "cuda" or torch.cuda.is_available():
        return
    build = (f"torch {torch.__version__} is a CPU-only build" if torch.version.cuda is None
             else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU "
                  "(driver too old for this build, or no GPU visible: CUDA_VISIBLE_DEVICES)")
    raise Gpt1Error(f"device: cuda, but {build}; on a GPU host run `bash setup.sh` (it installs "
                    "the CUDA build; TORCH_INDEX=<wheel index> picks another CUDA version), "
                    "or set device: auto / cpu")


def device(requested: str = "auto") -> torch.device:
    """The device every stage runs on (params `device`): cuda:LOCAL_RANK for `cuda`, and for
    `auto` when CUDA is available (torchrun: one GPU per process; LOCAL_RANK unset = GPU 0),
    else the CPU."""
    check_device(requested)
    if requested == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    index = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host batch on `device`. To CUDA through page-locked memory, asynchronously: the copy
    is queued behind the running step instead of waiting for it."""
    if device.type == "cuda":
        return batch.pin_memory().to(device, non_blocking=True)
    return batch.to(device)


def c_compiler() -> str | None:
    """The C compiler torch.compile calls at run time (Inductor's C++ wrappers, Triton's GPU
    launchers): $CC, else cc / gcc / clang on PATH; None when there is none."""
    names = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    return next((found for found in map(shutil.which, names) if found), None)


def compile_or_eager(module: torch.nn.Module, key: str) -> bool:
    """torch.compile `module` in place (state_dict keys and DDP wrapping unchanged); where no C
    compiler is found, leave it eager with one warning naming `key` and the fix, instead of a
    compiler error in the middle of the first step. Returns whether it compiled."""
    if c_compiler() is None:
        log.warning("%s: no C compiler (cc, gcc or clang on PATH, or $CC), which torch.compile "
                    "needs at run time: running eager (install one, e.g. apt-get install gcc)",
                    key)
        return False
    module.compile()
    return True


class Stopwatch:
    """Times queued device work without a host sync: CUDA events on a GPU, read (waited for)
    only when asked, at a point that syncs anyway; the host clock on the CPU (synchronous)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        if not self.cuda:
            return float(end - start)
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0


@contextlib.contextmanager
def distributed(device_type: str) -> Iterator[tuple[int, int]]:
    """(rank, world size); joins the torchrun process group when WORLD_SIZE > 1 (gloo on CPU,
    nccl on CUDA) and leaves it afterwards."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        yield 0, 1
        return
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    try:
        yield dist.get_rank(), dist.get_world_size()
    finally:
        if owned:
            dist.destroy_process_group()


def data_parallel(module: torch.nn.Module, device: torch.device, bucket_mb: int,
                  bf16_grads: bool) -> DistributedDataParallel:
    """`module` under DDP as pre-training runs it: gradients are views of the all-reduce
    buckets (no second copy of every gradient, no copy in and out of the buckets), buckets of
    `bucket_mb` MB (pretrain.ddp_bucket_mb: smaller buckets start reducing earlier in backward,
    so less is left after the last gradient, the tied embedding's, is ready), and with
    `bf16_grads` (pretrain.ddp_bf16_grads) gradients all-reduced in bf16 (half the bytes;
    the mean is rounded to bf16 before the fp32 update)."""
    ddp = DistributedDataParallel(
        module, device_ids=[device.index] if device.type == "cuda" else None,
        gradient_as_bucket_view=True, bucket_cap_mb=bucket_mb)
    if bf16_grads:
        ddp.register_comm_hook(None, _bf16_all_reduce)
    return ddp


def _bf16_all_reduce(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: a bucket's mean gradient all-reduced in bf16, written back to
    the fp32 bucket (as torch's bf16_compress_hook, which is nccl-only; this one runs on gloo
    too)."""
    buffer = bucket.buffer()
    half = buffer.to(torch.bfloat16).div_(dist.get_world_size())
    reduced = dist.all_reduce(half, async_op=True)
    assert reduced is not None

    def unpack(fut: torch.futures.Future[Any]) -> torch.Tensor:
        buffer.copy_(fut.value()[0])
        return buffer

    return reduced.get_future().then(unpack)


# DDP checks the hook's annotations against the classes themselves; this module's postponed
# annotations (`from __future__ import annotations`) would leave them strings.
_bf16_all_reduce.__annotations__.update(bucket=dist.GradBucket,
                                        **{"return": torch.futures.Future[torch.Tensor]})


def check_shared_dir(run_dir: Path, rank: int, world: int, device: torch.device) -> None:
    """Refuse (Gpt1Error, every rank) a run directory that not every rank sees: rank 0 writes
    a token file there and every rank looks for it. Ranks on other nodes need the checkpoints
    rank 0 writes (a shared filesystem mounted at the same path on every node)."""
    token = [secrets.token_hex(8) if rank == 0 else ""]
    dist.broadcast_object_list(token, src=0)
    probe = Path(run_dir) / f".rank-check-{token[0]}"
    if rank == 0:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text(token[0], encoding="ascii")
    dist.barrier()
    seen = torch.tensor([int(probe.is_file())], device=device)
    dist.all_reduce(seen, op=dist.ReduceOp.MIN)
    dist.barrier()
    if rank == 0:
        probe.unlink()
    if not int(seen.item()):
        raise Gpt1Error(f"run directory not shared by every rank: some of the {world} ranks do "
                        "not see rank 0's files; multi-node pre-training needs a filesystem "
                        "every node mounts at the same path (docs/gpu.md)", run_dir)


def stop_agreed(stop: StopRequest, world: int, device: torch.device) -> bool:
    """Whether to stop after this step: the local request, or any rank's under DDP (all ranks
    must save and leave at the same step)."""
    if world == 1:
        return bool(stop)
    signum = torch.tensor([stop.signum or 0], device=device)
    dist.all_reduce(signum, op=dist.ReduceOp.MAX)
    stop.signum = int(signum.item()) or None
    return bool(stop)


# Dense bf16 tensor-core peaks (FLOP/s, no sparsity) from the vendors' data sheets, matched
# as substrings of torch.cuda.get_device_name(), first match wins (PCIe before the SXM default).
PEAK_BF16 = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12),
             ("L40S", 362e12), ("L4", 121e12))


def bf16_peak(device_name: str, override_tflops: float | None = None) -> float | None:
    """The device's dense bf16 peak in FLOP/s: override_tflops, else PEAK_BF16, else None."""
    if override_tflops:
        return override_tflops * 1e12
    return next((peak for key, peak in PEAK_BF16 if key in device_name), None)
