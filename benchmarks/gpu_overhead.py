"""Where a GPU update's time goes beyond the matrix products, and why: what the GPU check
(benchmarks/gpu_check.py) showed but could not explain, within 5 minutes on one GPU.

    python benchmarks/gpu_overhead.py [PART,PART...]    (default: every part, in this order:
        sync-sites,sync-error,zero1,micro8,micro8-cudagraphs,micro64,real-loop)

Measures on cuda:0 and writes benchmarks/results/gpu-overhead_<device>_<date>.md:
  1. per update of the paper model (compiled, bf16) at micro-batches of 8 (also with CUDA
     graphs: gpt1.graphs, as pretrain.cuda_graphs runs them) and 64 sequences, one
     update each: wall milliseconds, the milliseconds the host takes to enqueue it (no sync:
     near the wall time, the update waits on the host, not the GPU), the GPU's kernel time
     (torch.profiler's kernel rows only, each once: never above the wall) and the top kernels
     and host operations by their own time;
  2. where each synchronizing CUDA call of a steady update comes from (the repo's frames of
     its Python stack, torch's sync debug mode `warn`), and the same updates under mode
     `error` (a synchronizing call raises where it is made);
  3. the 2-rank DDP update with ZeRO-1 (gloo over one GPU where only one is), its whole error
     when it fails;
  4. 20 updates of the real pre-training loop: the tokens/s of each 5-update log window, so the
     compiled loop's rate is told apart from a checkpoint's stall.
A part that fails is named with its error and the script goes on. Without CUDA it stops at
once: exit 2, one line.
"""

from __future__ import annotations

import shlex
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import gpu_check  # noqa: E402
import torch  # noqa: E402
from gpu_check import Check, small_bf16_updates  # noqa: E402
from gpu_workloads import (  # noqa: E402
    CausalLoss,
    compiled,
    gpt,
    pretrain_loop,
    synchronizing_calls,
)

from gpt1 import graphs  # noqa: E402
from gpt1.optim import build_optimizer  # noqa: E402
from gpt1.runtime import c_compiler, to_device  # noqa: E402
from gpt1.step import NonFiniteWatch, seeded_loss, train_step  # noqa: E402

PARTS = ["sync-sites", "sync-error", "zero1", "micro8", "micro8-cudagraphs", "micro64",
         "real-loop"]
HARD_CAP_S = 290
"""The watchdog writes the results file and ends the script here."""


def device_us(avg: Any) -> float:
    """An averaged profiler event's own GPU time in microseconds (torch renamed cuda->device)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(avg, name):
            return float(getattr(avg, name))
    return 0.0


def is_kernel(avg: Any) -> bool:
    """A row of the GPU's own timeline that is one kernel (or copy): not a host operation, whose
    own device time is the time of the kernels it launched, nor a GPU-side annotation (`## Call
    CompiledFxGraph`, `Optimizer.step#...`) spanning kernels listed in their own rows; summing
    those too counted GPU time twice ("197 % of the wall")."""
    return (str(getattr(avg, "device_type", "")).endswith("CUDA")
            and not getattr(avg, "is_user_annotation", False)
            and not str(avg.key).startswith("## "))


def kernel_ms(averages: list[Any], updates: int) -> float:
    """GPU milliseconds an update: the kernels' own time only, each counted once."""
    return sum(device_us(a) for a in averages if is_kernel(a)) / 1e3 / updates


def where(frames: list[traceback.FrameSummary]) -> str:
    """The innermost 6 frames of the repo or torch, innermost first."""
    ours = [f for f in frames if str(ROOT) in f.filename or "/torch/" in f.filename]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(ours[-6:]))


def update_breakdown(check: Check, micro: int, cuda: torch.device, can_compile: bool,
                     mode: str | None = None) -> None:
    """Part 1 at one micro-batch size: wall, host enqueue and GPU kernel time per update;
    `mode`: torch.compile's mode (reduce-overhead: CUDA graphs)."""
    module: torch.nn.Module = CausalLoss(gpt(gpu_check.PAPER, gpu_check.PAPER_VOCAB,
                                             cuda)).train()
    if mode == graphs.MODE and can_compile:
        torch._dynamo.reset()
        module = graphs.graphed(module)  # as the pipeline's pretrain.cuda_graphs
    else:
        compiled(module, can_compile)
    opt = build_optimizer(module, 2.5e-4, (0.9, 0.999), 1e-8, 0.01)
    data = torch.randint(0, gpu_check.PAPER_VOCAB, (micro, gpu_check.SEQ + 1),
                         generator=torch.Generator().manual_seed(0))
    watch = NonFiniteWatch(cuda)

    def update(i: int) -> None:
        out = train_step(module, opt, [(i, to_device(data, cuda))], seeded_loss, 2.5e-4, 1.0,
                         "bf16", watch.halted)
        watch.record(i, *out)

    for i in range(3):
        update(i)
    torch.cuda.synchronize()
    steps, enqueue = 5, 0.0
    t = time.perf_counter()
    for i in range(steps):
        s = time.perf_counter()
        update(i)
        enqueue += time.perf_counter() - s
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / steps
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(3):
            update(i)
        torch.cuda.synchronize()
    averages = prof.key_averages()
    gpu_ms = kernel_ms(list(averages), 3)
    tokens = micro * gpu_check.SEQ
    how = (f"compiled, mode {mode}" if mode else "compiled") if can_compile else "eager"
    check.report(f"micro-batch {micro} x {gpu_check.SEQ} ({how}, "
                 f"bf16): {wall * 1e3:.1f} ms an update ({tokens / wall:,.0f} tokens/s); the "
                 f"host enqueues it in {enqueue / steps * 1e3:.1f} ms; GPU kernels "
                 f"{gpu_ms:.1f} ms ({gpu_ms / (wall * 1e3):.0%} of the wall: the GPU busy)")
    top_gpu = sorted((a for a in averages if is_kernel(a)), key=device_us, reverse=True)[:8]
    check.report("  top kernels (ms an update): " + "; ".join(
        f"{a.key[:60]} {device_us(a) / 1e3 / 3:.2f}" for a in top_gpu))
    top_cpu = sorted(averages, key=lambda a: a.self_cpu_time_total, reverse=True)[:8]
    check.report("  top host operations, own time (ms an update): " + "; ".join(
        f"{a.key[:60]} {a.self_cpu_time_total / 1e3 / 3:.2f}" for a in top_cpu))


def sync_sites(check: Check, cuda: torch.device) -> None:
    """Part 2: where each synchronizing call of 4 steady small-model updates was made."""
    update = small_bf16_updates(cuda, 5)
    update(0)
    torch.cuda.synchronize()
    with synchronizing_calls(cuda) as calls:
        for i in range(1, 5):
            update(i)
    check.report(f"synchronizing calls in 4 steady updates: {len(calls)}")
    for stack in calls:
        check.report(f"  {where(list(stack))}")


def sync_error(check: Check, cuda: torch.device) -> None:
    """Part 2b: the same updates under the sync debug mode `error`: a synchronizing call
    inside them raises there, with its stack."""
    update = small_bf16_updates(cuda, 5)
    update(0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(1, 5):
            update(i)
    except RuntimeError as err:
        check.report(f"sync debug mode error: update {i} raised {str(err).strip()[:160]} at "
                     + where(traceback.extract_tb(err.__traceback__)))
        return
    finally:
        torch.cuda.set_sync_debug_mode("default")
    check.report("sync debug mode error: 4 steady updates ran without a synchronizing call")


def zero1_error(check: Check, cuda: torch.device) -> None:
    """Part 3: the ZeRO-1 DDP update, its whole error text when it fails."""
    try:
        backend, gap = gpu_check.ddp_vs_one_process(cuda, zero1=True)
        check.report(f"2-rank DDP ({backend}) with ZeRO-1: max relative loss gap {gap:.2e}")
    except Exception as err:  # noqa: BLE001 (the point is the whole error)
        check.report(f"2-rank DDP with ZeRO-1 failed: {type(err).__name__}:", False)
        for line in str(err).strip().splitlines()[-25:]:
            check.report(f"  {line}")


def loop_windows(check: Check, cuda: torch.device) -> None:
    """Part 4: the real loop's log windows."""
    m = pretrain_loop(cuda)
    check.report(f"real pre-training loop, micro-batch {m['micro_batch_seqs']} x "
                 f"{m['accumulation']}: tokens/s of each log window: "
                 + "; ".join(f"to update {s}: {r:,.0f}" for s, r in m["windows"])
                 + f"; checkpoints held the loop {m['checkpoint_blocking_s']:.2f} s, wrote in "
                   f"{m['checkpoint_writing_s']:.1f} s")


def main() -> int:
    chosen = sys.argv[1].split(",") if len(sys.argv) > 1 else PARTS
    if unknown := [p for p in chosen if p not in PARTS]:
        print(f"gpu_overhead: unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(gpu_check.no_cuda_line().replace("gpu_check", "gpu_overhead"), file=sys.stderr)
        return 2
    check = Check(shlex.join(["python", *sys.argv]), hard_cap_s=HARD_CAP_S,
                  topic="gpu-overhead")
    check.watchdog.start()
    cuda = torch.device("cuda", 0)
    can_compile = c_compiler() is not None
    check.report(f"device: {torch.cuda.get_device_name(cuda)}, torch {torch.__version__}")
    parts = {"sync-sites": lambda: sync_sites(check, cuda),
             "sync-error": lambda: sync_error(check, cuda),
             "zero1": lambda: zero1_error(check, cuda),
             "micro8": lambda: update_breakdown(check, 8, cuda, can_compile),
             "micro8-cudagraphs": lambda: update_breakdown(check, 8, cuda, can_compile,
                                                           graphs.MODE),
             "micro64": lambda: update_breakdown(check, 64, cuda, can_compile),
             "real-loop": lambda: loop_windows(check, cuda)}
    for name in chosen:
        check.part(name, parts[name])
        torch.cuda.empty_cache()
    print(f"results: {check.finish()}")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
