"""The GPU check: what a GPU host does with this code, in about 5 minutes on one GPU.

    python benchmarks/gpu_check.py        (or: python -m benchmarks.gpu_check)

Measures, on cuda:0, and writes them to benchmarks/results/gpu_<device>_<date>.md:
  1. CPU vs CUDA: the losses of the same 6 updates on the same batches (small model, fp32);
  2. compiled vs eager: the same on CUDA, and the graph breaks torch.compile took;
  3. host syncs per update of train_step + the non-finite watch (torch's sync debug mode);
  4. a 2-rank DDP update (nccl with 2 GPUs, else gloo over cuda:0) vs 1 rank accumulating 2;
  5. the paper shape (12 x 768, 512 tokens, bf16): tokens/s and MFU, compiled and eager,
     vocabulary padded to 64 (model.vocab_pad_multiple) and not, and transformers'
     OpenAIGPTLMHeadModel when installed; MFU against the device's data-sheet peak
     (benchmarks/devices.py) and against a measured bf16 GEMM ceiling; peak memory;
  6. the `-m gpu` tests (pytest), where the project's test dependencies are installed.
Without CUDA it stops at once: exit 2, one line. It imports torch and the model, optimizer and
update-step modules only (no params schema: no pydantic or PyYAML needed on the GPU host).
Exit 1 when an agreement check fails (the results file is written either way).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from devices import bf16_peak  # noqa: E402
from results_file import write  # noqa: E402
from torch import nn  # noqa: E402

from gpt1.model import GPT, flops_per_token  # noqa: E402
from gpt1.optim import build_optimizer  # noqa: E402
from gpt1.runtime import c_compiler, to_device  # noqa: E402
from gpt1.step import NonFiniteWatch, train_step  # noqa: E402

PAPER = {"arch": "gpt1", "n_positions": 512, "n_embd": 768, "n_layer": 12, "n_head": 12,
         "n_inner": 3072, "afn": "gelu", "resid_pdrop": 0.1, "embd_pdrop": 0.1,
         "attn_pdrop": 0.1, "embd_dropout": "activations", "layer_norm_epsilon": 1e-5,
         "initializer_range": 0.02, "vocab_pad_multiple": 64}
"""configs/paper.yaml's model section (tests/unit/test_gpu_check.py keeps them equal)."""
PAPER_VOCAB, SEQ = 40_481, 512  # the original release's 40,478 tokens + our 3 special tokens
SMALL_LEN = 128
SMALL = {**PAPER, "n_positions": SMALL_LEN, "n_embd": 256, "n_layer": 2, "n_head": 4,
         "n_inner": 1024, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
SMALL_VOCAB, SMALL_BATCH, STEPS = 1000, 8, 6
AGREE = 1e-4
BUDGET_S = 420
"""The optional parts (transformers' model, the -m gpu tests) are skipped, and said so, once the
check has run this long, so it stays within 8 minutes."""
"""Largest relative loss difference accepted between CPU and CUDA, compiled and eager (fp32,
no dropout) and DDP and one process."""


def model_cfg(**fields: Any) -> SimpleNamespace:
    """A model config with ModelCfg's fields (gpt1/config.py) without importing the schema."""
    return SimpleNamespace(**fields)


class CausalLoss(nn.Module):
    """(B, T + 1) windows -> mean next-token loss (as gpt1.pretraining.CausalLM)."""

    def __init__(self, lm: GPT) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        return self.lm.lm_losses(self.lm(windows[:, :-1]), windows[:, 1:]).mean()


def seeded(model: nn.Module, batch: tuple[int, torch.Tensor]) -> torch.Tensor:
    torch.manual_seed(batch[0])
    out: torch.Tensor = model(batch[1])
    return out


def batches(n: int, rows: int, seq: int, vocab: int) -> torch.Tensor:
    """(n, rows, seq + 1) token windows, the same on every device and run."""
    return torch.randint(0, vocab, (n, rows, seq + 1), generator=torch.Generator().manual_seed(0))


def build(cfg: dict[str, Any], vocab: int, device: torch.device) -> CausalLoss:
    torch.manual_seed(0)
    return CausalLoss(GPT(model_cfg(**cfg), vocab)).to(device)  # type: ignore[arg-type]


def losses(device: torch.device, compiled: bool = False, steps: int = STEPS,
           precision: str = "fp32") -> list[float]:
    """The losses of `steps` updates of the small model on the fixed batches."""
    module = build(SMALL, SMALL_VOCAB, device)
    if compiled:
        module.compile()
    opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    data = batches(steps, SMALL_BATCH, SMALL_LEN, SMALL_VOCAB)
    out = [train_step(module, opt, [(i, to_device(data[i], device))], seeded, 1e-3, 1.0,
                      precision)[0] for i in range(steps)]
    return [float(x) for x in torch.stack(out).tolist()]


def relative_gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b, strict=True))


def host_syncs_per_step(device: torch.device, steps: int = 4) -> float:
    """Synchronizing CUDA calls per update (train_step + NonFiniteWatch.record + batch copy),
    counted by torch.cuda.set_sync_debug_mode after a warm-up update."""
    module = build(SMALL, SMALL_VOCAB, device)
    opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    data = batches(steps + 1, SMALL_BATCH, SMALL_LEN, SMALL_VOCAB)
    watch = NonFiniteWatch(device)

    def update(i: int) -> None:
        out = train_step(module, opt, [(i, to_device(data[i], device))], seeded, 1e-3, 1.0,
                         "bf16", watch.halted)
        watch.record(i, *out)

    update(0)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for i in range(1, steps + 1):
                update(i)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    return len(syncs) / steps


def graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def ddp_backend(device_type: str) -> str:
    """nccl with a GPU per rank (2 or more GPUs), else gloo (2 ranks sharing cuda:0, or CPU)."""
    return "nccl" if device_type == "cuda" and torch.cuda.device_count() >= 2 else "gloo"


def _ddp_rank(rank: int, port: int, out: str, device_type: str) -> None:
    """One rank of the 2-rank check: half the global batch per update, two updates; rank 0
    writes the losses."""
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    backend = ddp_backend(device_type)
    device = torch.device(device_type, rank if backend == "nccl" else 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=2)
    try:
        module = build(SMALL, SMALL_VOCAB, device)
        ids = [device.index] if device.type == "cuda" else None
        ddp = nn.parallel.DistributedDataParallel(module, device_ids=ids)
        opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
        data = batches(2, 2 * SMALL_BATCH, SMALL_LEN, SMALL_VOCAB)
        got = []
        for i in range(2):
            half = data[i][rank * SMALL_BATCH:(rank + 1) * SMALL_BATCH]
            got.append(train_step(ddp, opt, [(2 * i + rank, to_device(half, device))], seeded,
                                  1e-3, 1.0, "fp32")[0])
        if rank == 0:
            Path(out).write_text(" ".join(str(float(x)) for x in torch.stack(got).tolist()))
    finally:
        dist.destroy_process_group()


def ddp_vs_one_process(device: torch.device) -> tuple[str, float]:
    """(backend, relative loss gap) of 2 DDP ranks vs 1 process accumulating the 2 halves."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "ddp.txt")
        mp.spawn(_ddp_rank, args=(port, out, device.type), nprocs=2)
        ranks = [float(x) for x in Path(out).read_text().split()]
    module = build(SMALL, SMALL_VOCAB, device)
    opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    data = batches(2, 2 * SMALL_BATCH, SMALL_LEN, SMALL_VOCAB)
    one = []
    for i in range(2):
        halves = [(2 * i + r, to_device(data[i][r * SMALL_BATCH:(r + 1) * SMALL_BATCH], device))
                  for r in range(2)]
        one.append(float(train_step(module, opt, halves, seeded, 1e-3, 1.0, "fp32")[0]))
    return ddp_backend(device.type), relative_gap(one, ranks)


def gemm_ceiling(device: torch.device, n: int = 8192, reps: int = 20) -> float:
    """Measured dense bf16 matmul FLOP/s (n x n x n), the practical ceiling for MFU."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t)


def paper_step_rate(device: torch.device, pad: int, compiled: bool, rows: int,
                    steps: int = 10) -> tuple[float, float]:
    """(tokens/s, peak GiB) of bf16 training updates at the paper shape, one micro-batch of
    `rows` x 512 tokens per update, through train_step as pre-training runs it."""
    torch.cuda.reset_peak_memory_stats(device)
    module = build({**PAPER, "vocab_pad_multiple": pad}, PAPER_VOCAB, device)
    if compiled:
        module.compile()
    opt = build_optimizer(module, 2.5e-4, (0.9, 0.999), 1e-8, 0.01)
    data = batches(2, rows, SEQ, PAPER_VOCAB)
    for i in range(3):  # warm-up: compilation, allocator, cuBLAS heuristics
        train_step(module, opt, [(i, to_device(data[i % 2], device))], seeded, 2.5e-4, 1.0,
                   "bf16")
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(steps):
        train_step(module, opt, [(i, to_device(data[i % 2], device))], seeded, 2.5e-4, 1.0,
                   "bf16")
    torch.cuda.synchronize()
    rate = steps * rows * SEQ / (time.perf_counter() - t)
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    del module, opt
    torch.cuda.empty_cache()
    return rate, peak


def transformers_rate(device: torch.device, compiled: bool, rows: int,
                      steps: int = 10) -> float | None:
    """tokens/s of transformers' OpenAIGPTLMHeadModel (bf16 autocast, fused AdamW), or None
    where transformers is not installed."""
    try:
        from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel
    except ImportError:
        return None
    cfg = OpenAIGPTConfig(vocab_size=PAPER_VOCAB, n_positions=SEQ, n_embd=768, n_layer=12,
                          n_head=12)
    model: Any = OpenAIGPTLMHeadModel(cfg)
    model = model.to(device).train()
    step_model = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=2.5e-4, fused=True)
    data = batches(1, rows, SEQ - 1, PAPER_VOCAB)[0].to(device)

    def update() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=data, labels=data).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        update()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        update()
    torch.cuda.synchronize()
    return steps * rows * SEQ / (time.perf_counter() - t)


def largest_rows(device: torch.device) -> int:
    """The largest micro-batch of 64, 32, 16 sequences that trains at the paper shape here."""
    for rows in (64, 32, 16):
        try:
            paper_step_rate(device, 64, False, rows, steps=1)
            return rows
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
    return 8


def gpu_tests(timeout: float) -> str:
    """The `-m gpu` tests' outcome line (pytest's summary, or why they did not run)."""
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p",
                               "no:cacheprovider", "tests"], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"did not finish in {timeout:.0f} s"
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    return f"exit {done.returncode}: {lines[-1] if lines else '(no output)'}"


def no_cuda_line() -> str:
    build = ("a CPU-only build" if torch.version.cuda is None
             else f"built for CUDA {torch.version.cuda} but sees no GPU")
    return (f"gpu_check: no CUDA device: torch {torch.__version__} is {build}; run it on a GPU "
            "host (bash setup.sh installs the CUDA build)")


def main() -> int:
    if not torch.cuda.is_available():
        print(no_cuda_line(), file=sys.stderr)
        return 2
    started = time.monotonic()

    def over_budget() -> bool:
        return time.monotonic() - started > BUDGET_S
    cuda = torch.device("cuda", 0)
    name = torch.cuda.get_device_name(cuda)
    lines = [f"device: {name} (x{torch.cuda.device_count()}), torch {torch.__version__}, "
             f"CUDA {torch.version.cuda}, C compiler: {c_compiler() or 'none'}"]
    failed = []

    def report(line: str, ok: bool = True) -> None:
        lines.append(line + ("" if ok else "  <-- FAILED"))
        print(lines[-1], flush=True)
        if not ok:
            failed.append(line)

    print(lines[0], flush=True)
    cpu_vs_cuda = relative_gap(losses(torch.device("cpu")), losses(cuda))
    report(f"CPU vs CUDA, {STEPS} fp32 updates, same batches: max relative loss gap "
           f"{cpu_vs_cuda:.2e} (<= {AGREE:g})", cpu_vs_cuda <= AGREE)
    can_compile = c_compiler() is not None
    if can_compile:
        torch._dynamo.reset()
        eager, compiled = losses(cuda), losses(cuda, compiled=True)
        gap = relative_gap(eager, compiled)
        report(f"compiled vs eager on CUDA: max relative loss gap {gap:.2e} (<= {AGREE:g}); "
               f"graph breaks: {graph_breaks()}", gap <= AGREE)
    else:
        report("compiled vs eager: not run, no C compiler (torch.compile needs one)", False)
    report(f"host syncs per update (train_step + non-finite watch + batch copy, bf16): "
           f"{host_syncs_per_step(cuda):g}")
    backend, ddp_gap = ddp_vs_one_process(cuda)
    report(f"2-rank DDP ({backend}) vs 1 process accumulating 2: max relative loss gap "
           f"{ddp_gap:.2e} (<= {AGREE:g})", ddp_gap <= AGREE)
    ceiling, peak = gemm_ceiling(cuda), bf16_peak(name)
    report(f"bf16 GEMM 8192^3: {ceiling / 1e12:.0f} TFLOP/s measured; data-sheet peak "
           f"{f'{peak / 1e12:.0f} TFLOP/s' if peak else 'unknown for this device'}")
    rows = largest_rows(cuda)
    fpt = flops_per_token(model_cfg(**PAPER), PAPER_VOCAB, SEQ)  # type: ignore[arg-type]
    rates = {}
    for pad, comp in ((64, True), (1, True), (64, False), (1, False)):
        if comp and not can_compile:
            continue
        rate, mem = paper_step_rate(cuda, pad, comp, rows)
        rates[pad, comp] = rate
        mfu = f"{rate * fpt / peak:.1%} of peak, " if peak else ""
        report(f"paper shape, {rows} x {SEQ} tokens per update, bf16, "
               f"{'compiled' if comp else 'eager'}, vocabulary padded to {pad}: "
               f"{rate:,.0f} tokens/s, MFU {mfu}{rate * fpt / ceiling:.1%} of the GEMM ceiling; "
               f"peak memory {mem:.1f} GiB")
    best_mode = (64, can_compile)
    report(f"padding the vocabulary to 64: {rates[best_mode] / rates[1, can_compile]:.2f}x "
           f"tokens/s ({'compiled' if can_compile else 'eager'})" + (
               f"; compile: {rates[64, True] / rates[64, False]:.2f}x (padded)"
               if can_compile else ""))
    hf = ({} if over_budget() else
          {comp: transformers_rate(cuda, comp, rows) for comp in (False, can_compile)})
    if not hf:
        report(f"transformers OpenAIGPTLMHeadModel: skipped, past {BUDGET_S} s")
    elif hf[False] is None:
        report("transformers OpenAIGPTLMHeadModel: not installed, not compared")
    else:
        best = max(r for r in hf.values() if r)
        report(f"transformers OpenAIGPTLMHeadModel, best mode: {best:,.0f} tokens/s; ours "
               f"(padded, {'compiled' if can_compile else 'eager'}): "
               f"{rates[best_mode] / best:.2f}x")
    left = 470 - (time.monotonic() - started)  # the whole check within 8 minutes
    report(f"`-m gpu` tests: "
           f"{f'skipped, past {BUDGET_S} s' if over_budget() else gpu_tests(left)}")
    report(f"check took {time.monotonic() - started:.0f} s")
    command = shlex.join(["python", *sys.argv])
    path = write("gpu", "\n".join(lines), command)
    print(f"results: {os.path.relpath(path)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
