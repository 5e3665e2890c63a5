"""The GPU check: what a GPU host does with this code, within 8 minutes on one GPU.

    python benchmarks/gpu_check.py        (or: python -m benchmarks.gpu_check)

Measures on cuda:0, in this order, and writes benchmarks/results/gpu_<device>_<date>.md:
  1. CPU vs CUDA: the losses of the same 6 updates on the same batches (small model, fp32);
  2. compiled vs eager: the same on CUDA, and the graph breaks torch.compile took;
  3. host syncs per update of train_step + the non-finite watch (torch's sync debug mode);
  4. a 2-rank DDP update (nccl with 2 GPUs, else gloo over cuda:0) vs 1 rank accumulating 2,
     with the plain optimizer and with its state sharded (pretrain.zero1), consolidated on rank 0;
  5. a measured bf16 GEMM ceiling and the device's data-sheet peak;
  6. the paper preset's micro-batching (micro_batch_seqs: auto, batch 64): the probe's choice
     on 1 GPU and per GPU of 8 (8 sequences a rank), each timed compiled;
  7. CUDA graphs (pretrain.cuda_graphs, gpt1/graphs.py) at 8 x 512 and 64 x 512, the whole
     update captured (cuda_graph_scope: update) at 8 x 512, and the dropout rule under each
     scope: the same (seed, step, micro-batch) twice gives a bitwise-equal loss, another seed
     another, and no graph is recorded after warm-up;
  8. the LSTM baseline at 64 x 512 and 8 x 512 (compiled, bf16);
  9. 240 updates of the real pre-training loop on synthetic shards, a checkpoint every 80:
     tokens/s of its 20-update log windows and the seconds lost per checkpoint;
 10. the memory-bound cuts (pretrain.loss_chunk_tokens, fused_clip, bf16_norms) all on at
     64 x 512 and 8 x 512, beside the preset's rows (part 6, all off), while a row and the
     tests' reserve still fit before the watchdog (their agreement with the uncut update runs
     with parts 1-4);
 11. the `-m gpu` tests (pytest), where the project's test dependencies are installed; then
     each cut alone at 64 x 512 and 8 x 512, while a row still fits before the watchdog;
 12. a RACE-shaped (32 x 4 x 512) and an MNLI-shaped (32 x 1 x 128) fine-tuning update with the
     auxiliary LM loss; vocabulary padded to 64 vs not, compiled vs eager; transformers'
     OpenAIGPTLMHeadModel at the same shape, when installed.
Every rate is the median of 5 windows of 20 updates with its spread (min-max), each window
timed by CUDA events (gpu_workloads.windowed_rate), beside the host's enqueue time an update.
Each part runs on its own: one that fails is named in the file with its error and the check
goes on; Dynamo is reset before each compiled configuration. Part 12 is skipped (and said
so) past BUDGET_S, a cut row when it would not end before HARD_CAP_S, and a watchdog
writes the file and stops the check at HARD_CAP_S, naming the part it was in. It imports
torch and the model, LSTM, loss, optimizer, update-step, graphs and micro-batch modules only:
no params schema (pydantic, PyYAML) is needed on the GPU host, where part 9, which runs the
real loop and its params, is then reported as not run. Without CUDA it
stops at once: exit 2, one line. Exit 1 when a part failed or a check did not hold.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from devices import bf16_peak  # noqa: E402
from gpu_workloads import (  # noqa: E402
    FINETUNE_SHAPES,
    NO_CUTS,
    PAPER_FINETUNE,
    PAPER_PRETRAIN,
    CausalLoss,
    Cuts,
    finetune_step,
    gpt,
    graph_reseeding,
    loss_module,
    lost_per_checkpoint,
    pretrain_loop,
    probe_micro,
    synchronizing_calls,
    transformers_rate,
    update_rate,
)
from results_file import write  # noqa: E402
from torch import nn  # noqa: E402

from gpt1 import graphs  # noqa: E402
from gpt1.lstm import lstm_flops_per_token  # noqa: E402
from gpt1.model import flops_per_token  # noqa: E402
from gpt1.optim import build_optimizer  # noqa: E402
from gpt1.runtime import c_compiler, to_device  # noqa: E402
from gpt1.step import NonFiniteWatch, seeded_loss, train_step  # noqa: E402
from gpt1.zero1 import sharded_optimizer  # noqa: E402

PAPER = {"arch": "gpt1", "n_positions": 512, "n_embd": 768, "n_layer": 12, "n_head": 12,
         "n_inner": 3072, "afn": "gelu", "resid_pdrop": 0.1, "embd_pdrop": 0.1,
         "attn_pdrop": 0.1, "embd_dropout": "activations", "layer_norm_epsilon": 1e-5,
         "initializer_range": 0.02, "vocab_pad_multiple": 64}
"""configs/paper.yaml's model section (tests/unit/benchmarks/test_gpu_check.py keeps them
equal)."""
PAPER_VOCAB, SEQ = 40_481, 512  # the original release's 40,478 tokens + our 3 special tokens
SMALL_LEN = 128
SMALL = {**PAPER, "n_positions": SMALL_LEN, "n_embd": 256, "n_layer": 2, "n_head": 4,
         "n_inner": 1024, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
SMALL_VOCAB, SMALL_BATCH, STEPS = 1000, 8, 6
AGREE = 1e-4
"""Largest relative loss difference accepted between CPU and CUDA, compiled and eager (fp32,
no dropout) and DDP and one process."""
BUDGET_S = 360
"""Past this many seconds the optional parts (9-11) are skipped, and said so."""
HARD_CAP_S = 470
"""The watchdog writes the results file and ends the check here (within 8 minutes)."""
RANKS_OF_A_NODE = 8
"""The per-GPU split measured besides one GPU: the paper batch over an 8-GPU node."""
PAPER_LSTM = {"n_layer": 1, "hidden_size": 2048, "n_embd": 768, "dropout": 0.1,
              "initializer_range": 0.02}
"""configs/paper.yaml's lstm section (its lr aside; tests/unit/benchmarks/test_gpu_check.py
keeps them equal)."""
SMALL_DROPOUT = {**SMALL, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}
"""The small model with the paper's dropout: the reseeding rule under CUDA graphs."""
LOOP_STEPS, LOOP_CHECKPOINT_EVERY, LOOP_LOG_EVERY = 240, 80, 20
"""The real loop: 240 updates at the preset's split, a checkpoint every 80 (the 240th is
the run's end), a log window every 20: the first holds compilation, the other 11 are timed."""
CHECKPOINT_LOST_S = 0.5
"""Seconds a checkpoint may cost the loop (model + Adam, ~1.4 GB)."""
GPU_TESTS_S = 120
"""At most this long for the `-m gpu` tests (the 2026-11-26 run: 40 s)."""
GPU_TESTS_RESERVE_S = 60
"""Seconds kept for the `-m gpu` tests when the all-on cut rows run before them."""
PAPER_ROW_S = 50
"""The most one compiled row at the paper shape is expected to take (a compilation, 103
updates): a cut row starts only while this much is left before HARD_CAP_S (an
estimate: the 2026-11-26 check's 7 compiled configurations took about 33 s each)."""
LOSS_CHUNK_TOKENS = 8192
"""pretrain.loss_chunk_tokens measured: 4 chunks of 8,192 tokens at 64 x 512 (1.3 GB of fp32
logits at a time instead of 5.3 GB), one at 8 x 512."""
ALL_CUTS = Cuts(loss_chunk_tokens=LOSS_CHUNK_TOKENS, fused_clip=True, bf16_norms=True)
ONE_CUT = (Cuts(loss_chunk_tokens=LOSS_CHUNK_TOKENS), Cuts(fused_clip=True),
           Cuts(bf16_norms=True))
CUTS_BF16_AGREE = 1e-2
"""Largest relative loss difference accepted between the cut and the uncut update in bf16
(the cuts round differently: the chunked loss, the clip's divisor, bf16 residual sums)."""


def model_cfg(**fields: Any) -> SimpleNamespace:
    """A model config with ModelCfg's fields (gpt1/config.py) without importing the schema."""
    return SimpleNamespace(**fields)


def batches(n: int, rows: int, seq: int, vocab: int) -> torch.Tensor:
    """(n, rows, seq + 1) token windows, the same on every device and run."""
    return torch.randint(0, vocab, (n, rows, seq + 1), generator=torch.Generator().manual_seed(0))


def build(cfg: dict[str, Any], vocab: int, device: torch.device) -> CausalLoss:
    return CausalLoss(gpt(cfg, vocab, device))


def losses(device: torch.device, compiled: bool = False, steps: int = STEPS,
           precision: str = "fp32", cuts: Cuts = NO_CUTS) -> list[float]:
    """The losses of `steps` updates of the small model on the fixed batches (`cuts` on)."""
    module = loss_module(SMALL, SMALL_VOCAB, device, cuts)
    if compiled:
        torch._dynamo.reset()
        module.compile()
    opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    data = batches(steps, SMALL_BATCH, SMALL_LEN, SMALL_VOCAB)
    out = [train_step(module, opt, [(i, to_device(data[i], device))], seeded_loss, 1e-3, 1.0,
                      precision, fused_clip=cuts.fused_clip)[0] for i in range(steps)]
    return [float(x) for x in torch.stack(out).tolist()]


SMALL_CUTS = Cuts(loss_chunk_tokens=SMALL_BATCH * SMALL_LEN // 4, fused_clip=True,
                  bf16_norms=True)
"""The cuts on the small model: the loss in 4 chunks."""


def cuts_agreement(device: torch.device, steps: int = STEPS) -> tuple[float, float]:
    """Relative loss gaps of the small model's updates with the memory-bound cuts on vs off:
    fp32 (the chunked loss and the clip in AdamW: the same sums; bf16_norms does nothing
    without autocast) and bf16 (all three)."""
    fp32 = relative_gap(losses(device, steps=steps), losses(device, steps=steps, cuts=SMALL_CUTS))
    bf16 = relative_gap(losses(device, steps=steps, precision="bf16"),
                        losses(device, steps=steps, precision="bf16", cuts=SMALL_CUTS))
    return fp32, bf16


def relative_gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b, strict=True))


def small_bf16_updates(device: torch.device, n: int) -> Callable[[int], None]:
    """update(i), i < n: one bf16 update of the small model on batch i as the loop runs it
    (the batch copy, train_step, NonFiniteWatch.record)."""
    module = build(SMALL, SMALL_VOCAB, device)
    opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    data = batches(n, SMALL_BATCH, SMALL_LEN, SMALL_VOCAB)
    watch = NonFiniteWatch(device)

    def update(i: int) -> None:
        out = train_step(module, opt, [(i, to_device(data[i], device))], seeded_loss, 1e-3, 1.0,
                         "bf16", watch.halted)
        watch.record(i, *out)

    return update


def host_syncs_per_step(device: torch.device, steps: int = 4) -> float:
    """Synchronizing CUDA calls per update (small_bf16_updates), counted by torch's sync
    debug mode (gpu_workloads.synchronizing_calls) after a warm-up update."""
    update = small_bf16_updates(device, steps + 1)
    update(0)
    torch.cuda.synchronize()
    with synchronizing_calls(device) as calls:
        for i in range(1, steps + 1):
            update(i)
    return len(calls) / steps


def graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def ddp_backend(device_type: str) -> str:
    """nccl with a GPU per rank (2 or more GPUs), else gloo (2 ranks sharing cuda:0, or CPU)."""
    return "nccl" if device_type == "cuda" and torch.cuda.device_count() >= 2 else "gloo"


def _ddp_rank(rank: int, port: int, out: str, device_type: str, zero1: bool = False) -> None:
    """One rank of the 2-rank check: half the global batch per update, two updates; rank 0
    writes the losses. zero1: the Adam state sharded over the 2 ranks, then consolidated on
    rank 0, which must then hold the state of every parameter."""
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
        opt = (sharded_optimizer if zero1 else build_optimizer)(module, 1e-3, (.9, .999), 1e-8, .01)
        data = batches(2, 2 * SMALL_BATCH, SMALL_LEN, SMALL_VOCAB)
        got = []
        for i in range(2):
            half = data[i][rank * SMALL_BATCH:(rank + 1) * SMALL_BATCH]
            got.append(train_step(ddp, opt, [(2 * i + rank, to_device(half, device))], seeded_loss,
                                  1e-3, 1.0, "fp32")[0])
        if zero1:
            opt.consolidate_state_dict()  # type: ignore[attr-defined]
            held = len(opt.state_dict()["state"]) if rank == 0 else 0
            if rank == 0 and held != (params := sum(len(g["params"]) for g in opt.param_groups)):
                raise RuntimeError(f"ZeRO-1: rank 0 consolidated {held} of {params} states")
        if rank == 0:
            Path(out).write_text(" ".join(str(float(x)) for x in torch.stack(got).tolist()))
    finally:
        dist.destroy_process_group()


def ddp_vs_one_process(device: torch.device, zero1: bool = False) -> tuple[str, float]:
    """(backend, relative loss gap) of 2 DDP ranks (zero1: their Adam state sharded) vs 1
    process accumulating the 2 halves."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "ddp.txt")
        mp.spawn(_ddp_rank, args=(port, out, device.type, zero1), nprocs=2)
        ranks = [float(x) for x in Path(out).read_text().split()]
    module = build(SMALL, SMALL_VOCAB, device)
    opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    data = batches(2, 2 * SMALL_BATCH, SMALL_LEN, SMALL_VOCAB)
    one = []
    for i in range(2):
        halves = [(2 * i + r, to_device(data[i][r * SMALL_BATCH:(r + 1) * SMALL_BATCH], device))
                  for r in range(2)]
        one.append(float(train_step(module, opt, halves, seeded_loss, 1e-3, 1.0, "fp32")[0]))
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


def gpu_test_files() -> list[str]:
    """The test files that hold `-m gpu` tests: only these are collected, so a GPU host with
    torch and the params schema (pydantic, PyYAML) but not MLflow, Prefect or DVC runs them."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if "pytest.mark.gpu" in p.read_text(encoding="utf-8"))


def gpu_tests(timeout: float) -> str:
    """The `-m gpu` tests' outcome line (pytest's summary, or why they did not run)."""
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p",
                               "no:cacheprovider", *gpu_test_files()], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"did not finish in {timeout:.0f} s"
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    return f"exit {done.returncode}: {lines[-1] if lines else '(no output)'}"


def no_cuda_line() -> str:
    build = ("a CPU-only build" if torch.version.cuda is None
             else f"built for CUDA {torch.version.cuda} but sees no GPU")
    return (f"gpu_check: no CUDA device: torch {torch.__version__} is {build}; run it on a GPU "
            "host (bash setup.sh installs the CUDA build)")


class Check:
    """The lines of the results file, the parts that failed, the time cap: each part runs on
    its own (`part`), a failure is one line naming the part and its error, and the watchdog
    writes the file at HARD_CAP_S even while a part hangs, naming that part."""

    def __init__(self, command: str, hard_cap_s: float = HARD_CAP_S,
                 budget_s: float = BUDGET_S, topic: str = "gpu") -> None:
        self.topic = topic
        self.lines: list[str] = []
        self.failed: list[str] = []
        self.command, self.budget_s = command, budget_s
        self.started, self.current = time.monotonic(), "start"
        self.path: Path | None = None
        self.lock = threading.Lock()
        self.watchdog = threading.Timer(hard_cap_s, self.time_up)
        self.watchdog.daemon = True

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def report(self, line: str, ok: bool = True) -> None:
        self.lines.append(line + ("" if ok else "  <-- FAILED"))
        print(self.lines[-1], flush=True)
        if not ok:
            self.failed.append(line)

    def part(self, name: str, run: Callable[[], Any], optional: bool = False,
             until: float | None = None) -> Any:
        """run() as part `name`; None, and a line naming it, when it raised or was skipped
        (optional: past budget_s; `until`: past that many seconds)."""
        last = self.budget_s if optional else until
        if last is not None and self.elapsed() > last:
            self.report(f"{name}: skipped, past {last:.0f} s")
            return None
        self.current = name
        try:
            return run()
        except Exception as err:  # noqa: BLE001 (one failing part must not lose the others)
            first = (str(err).strip().splitlines() or [""])[0][:300]
            self.report(f"{name}: {type(err).__name__}: {first}", False)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return None

    def finish(self) -> Path:
        """Write the results file once (the watchdog or the end, whichever comes first)."""
        with self.lock:
            if self.path is None:
                self.watchdog.cancel()
                self.report(f"check took {self.elapsed():.0f} s")
                self.path = write(self.topic, "\n".join(self.lines), self.command)
            return self.path

    def time_up(self) -> None:
        self.report(f"hard time cap: stopped at {self.elapsed():.0f} s during part "
                    f"'{self.current}'", False)
        print(f"results: {os.path.relpath(self.finish())}", flush=True)
        os._exit(1)


def agreement_parts(check: Check, cuda: torch.device, can_compile: bool) -> None:
    """Parts 1-4: CPU vs CUDA, compiled vs eager, host syncs, DDP; the memory-bound cuts vs
    none."""
    def cpu_vs_cuda() -> None:
        gap = relative_gap(losses(torch.device("cpu")), losses(cuda))
        check.report(f"CPU vs CUDA, {STEPS} fp32 updates, same batches: max relative loss gap "
                     f"{gap:.2e} (<= {AGREE:g})", gap <= AGREE)

    def compiled_vs_eager() -> None:
        if not can_compile:
            check.report("compiled vs eager: not run, no C compiler (torch.compile needs one)",
                         False)
            return
        eager, comp = losses(cuda), losses(cuda, compiled=True)
        gap = relative_gap(eager, comp)
        check.report(f"compiled vs eager on CUDA: max relative loss gap {gap:.2e} "
                     f"(<= {AGREE:g}); graph breaks: {graph_breaks()}", gap <= AGREE)

    def ddp(zero1: bool = False) -> None:
        backend, gap = ddp_vs_one_process(cuda, zero1)
        check.report(f"2-rank DDP ({backend}){' with ZeRO-1' if zero1 else ''} vs 1 process "
                     f"accumulating 2: max relative loss gap {gap:.2e} (<= {AGREE:g})",
                     gap <= AGREE)

    check.part("CPU vs CUDA agreement", cpu_vs_cuda)
    check.part("compiled vs eager", compiled_vs_eager)
    check.part("host syncs per update", lambda: check.report(
        "host syncs per update (train_step + non-finite watch + batch copy, bf16): "
        f"{host_syncs_per_step(cuda):g}"))

    def cuts() -> None:
        fp32, bf16 = cuts_agreement(cuda)
        check.report(f"memory-bound cuts vs none, {STEPS} updates of the small model: fp32 "
                     f"(chunked loss, clip in AdamW) max relative loss gap {fp32:.2e} "
                     f"(<= {AGREE:g}); bf16 (and bf16 LayerNorm outputs) {bf16:.2e} "
                     f"(<= {CUTS_BF16_AGREE:g})", fp32 <= AGREE and bf16 <= CUTS_BF16_AGREE)

    check.part("2-rank DDP", ddp)
    check.part("2-rank DDP, ZeRO-1", lambda: ddp(zero1=True))
    check.part("memory-bound cuts agreement", cuts)


def workload_parts(check: Check, cuda: torch.device, can_compile: bool, name: str) -> None:
    """Parts 5-12: the GEMM ceiling, the preset's split with and without CUDA graphs, the
    dropout rule under graphs, the LSTM, the real loop and its checkpoints, the `-m gpu`
    tests, the memory-bound cuts, fine-tuning, padding, compile and transformers at the paper
    shape."""
    fpt = flops_per_token(model_cfg(**PAPER), PAPER_VOCAB, SEQ)  # type: ignore[arg-type]
    peak = bf16_peak(name)
    ceiling = check.part("bf16 GEMM ceiling", lambda: gemm_ceiling(cuda)) or 0.0
    check.report(f"bf16 GEMM 8192^3: {ceiling / 1e12:.0f} TFLOP/s measured; data-sheet peak "
                 f"{f'{peak / 1e12:.0f} TFLOP/s' if peak else 'unknown for this device'}")

    def mfu(rate: float, per_token: float = fpt) -> str:
        of_peak = f"{rate * per_token / peak:.1%} of peak, " if peak else ""
        of_ceiling = f"{rate * per_token / ceiling:.1%} of the GEMM ceiling" if ceiling else ""
        return f"MFU {of_peak}{of_ceiling}"

    batch = int(PAPER_PRETRAIN["batch_seqs"])
    how = "compiled" if can_compile else "eager"
    rates: dict[tuple[int, bool], float] = {}
    split: dict[int, int] = {}
    preset_rates: dict[int, float] = {}  # ranks -> the preset row's tokens/s (cuts off)
    for ranks in (1, RANKS_OF_A_NODE):
        def preset(ranks: int = ranks) -> None:
            per_rank = batch // ranks
            micro = probe_micro(PAPER, PAPER_VOCAB, SEQ, per_rank, "bf16", cuda)
            split[ranks] = micro
            rate, mem = update_rate(PAPER, PAPER_VOCAB, SEQ, micro, per_rank // micro, "bf16",
                                    cuda, can_compile)
            preset_rates[ranks] = rate.median
            if ranks == 1:
                rates[64, can_compile] = rate.median
            check.report(f"paper preset, micro_batch_seqs auto on {ranks} GPU(s): {per_rank} "
                         f"sequences a GPU -> micro-batch {micro} x {per_rank // micro} "
                         f"accumulation; {how}, bf16: {rate.text()} a GPU, {mfu(rate.median)}; "
                         f"peak memory {mem:.1f} GiB"
                         + (" (no all-reduce: one GPU's share)" if ranks > 1 else ""))
        check.part(f"preset micro-batching, {ranks} GPU(s)", preset)

    def graphed_rows() -> None:
        if not can_compile:
            check.report("CUDA graphs: not run, no C compiler (torch.compile needs one)", False)
            return
        split_rows = batch // RANKS_OF_A_NODE
        for scope, rows in (("forward_backward", split_rows), ("forward_backward", batch),
                            ("update", split_rows)):
            def one(scope: str = scope, rows: int = rows) -> None:
                rate, mem = update_rate(PAPER, PAPER_VOCAB, SEQ, rows, 1, "bf16", cuda, True,
                                        cuda_graphs=True, scope=scope)
                check.report(f"paper shape, micro-batch {rows} x 1, compiled with CUDA graphs "
                             f"(pretrain.cuda_graphs, cuda_graph_scope {scope}), bf16: "
                             f"{rate.text()}, {mfu(rate.median)}; peak memory {mem:.1f} GiB")
            check.part(f"CUDA graphs ({scope}), micro-batch {rows}", one)
        for scope in graphs.SCOPES:
            check.part(f"CUDA graphs ({scope}), dropout rule", partial(reseeding, scope))

    def reseeding(scope: str) -> None:
        reseed = graph_reseeding(SMALL_DROPOUT, SMALL_VOCAB, SMALL_LEN, SMALL_BATCH, "bf16",
                                 cuda, True, scope=scope)
        ok = (reseed["same_seed_equal"] and reseed["other_seed_differs"]
              and reseed["rerecordings"] == 0)
        check.report(f"CUDA graphs ({scope}), dropout reseeded per micro-batch: the same (seed, "
                     f"step, micro-batch) twice: bitwise-equal loss {reseed['same_seed_equal']}; "
                     f"another seed: another loss {reseed['other_seed_differs']} "
                     f"({reseed['loss']:.6f} vs {reseed['other_loss']:.6f}); graphs recorded "
                     f"in warm-up {reseed['recordings']}, after it {reseed['rerecordings']}", ok)

    check.part("CUDA graphs", graphed_rows)
    lstm_fpt = lstm_flops_per_token(model_cfg(**PAPER_LSTM), PAPER_VOCAB)  # type: ignore[arg-type]
    for rows in (batch, batch // RANKS_OF_A_NODE):
        def lstm(rows: int = rows) -> None:
            rate, mem = update_rate(PAPER_LSTM, PAPER_VOCAB, SEQ, rows, 1, "bf16", cuda,
                                    can_compile)
            check.report(f"LSTM baseline (configs/paper.yaml lstm), micro-batch {rows} x 1, "
                         f"{how}, bf16: {rate.text()}, {mfu(rate.median, lstm_fpt)} at "
                         f"{lstm_fpt / 1e9:.3f} GFLOP/token; peak memory {mem:.1f} GiB")
        check.part(f"LSTM {rows} x {SEQ}", lstm)

    def loop() -> None:
        try:
            m = pretrain_loop(cuda, LOOP_STEPS, checkpoint_every=LOOP_CHECKPOINT_EVERY,
                              log_every=LOOP_LOG_EVERY)
        except ImportError as err:
            check.report(f"real pre-training loop: not run, needs {err.name} (the project's "
                         "environment: bash setup.sh)")
            return
        tokens = m["tokens"] // m["steps"]
        taken = list(range(LOOP_CHECKPOINT_EVERY, LOOP_STEPS + 1, LOOP_CHECKPOINT_EVERY))
        timed = m["windows"][1:]  # the first window holds compilation and the graphs' warm-up
        lost, steady = lost_per_checkpoint(timed, tokens, taken[:-1])
        windows = "; ".join(f"to {step}: {rate:,.0f}" for step, rate in m["windows"])
        check.report(f"real pre-training loop (gpt1.pretraining.pretrain, configs/paper.yaml, "
                     f"{m['steps']} updates, synthetic shards): micro-batch "
                     f"{m['micro_batch_seqs']} x {m['accumulation']}; {steady:,.0f} tokens/s "
                     f"(median of {len(timed)} log windows of {LOOP_LOG_EVERY} updates after "
                     f"the first), {mfu(steady)}; tokens/s of each window ({windows})")
        check.report(f"checkpoints in the real loop, one every {LOOP_CHECKPOINT_EVERY} of "
                     f"{LOOP_STEPS} updates: {lost:.2f} s lost per checkpoint (the windows' "
                     f"time beyond the median window's, over the {len(taken) - 1} taken "
                     f"between windows); the loop spent {m['checkpoint_blocking_s']:.2f} s "
                     f"handing {len(taken)} over, the writer {m['checkpoint_writing_s']:.1f} s "
                     f"in the background; {m['host_syncs']} synchronizing CUDA calls in all "
                     "(the probe, compilation, log points, evaluation, the checkpoints' events)",
                     lost <= CHECKPOINT_LOST_S)

    check.part("real pre-training loop", loop)

    def cut_row(cuts: Cuts, ranks: int) -> None:
        per_rank = batch // ranks
        micro = split.get(ranks, per_rank)
        rate, mem = update_rate(PAPER, PAPER_VOCAB, SEQ, micro, per_rank // micro, "bf16", cuda,
                                can_compile, cuts=cuts)
        base = preset_rates.get(ranks)
        vs = f"; {rate.median / base:.2f}x the preset's row (cuts off)" if base else ""
        check.report(f"memory-bound cuts ({cuts.text()}), {per_rank} sequences a GPU as the "
                     f"preset splits them ({micro} x {per_rank // micro}), {how}, bf16: "
                     f"{rate.text()}, {mfu(rate.median)}; peak memory {mem:.1f} GiB{vs}")

    def cut_rows(kinds: tuple[Cuts, ...], until: float) -> None:
        for cuts in kinds:
            for ranks in (1, RANKS_OF_A_NODE):
                check.part(f"cuts ({cuts.text()}), {ranks} GPU(s)", partial(cut_row, cuts, ranks),
                           until=until)

    cut_rows((ALL_CUTS,), HARD_CAP_S - PAPER_ROW_S - GPU_TESTS_RESERVE_S)
    left = min(GPU_TESTS_S, HARD_CAP_S - 10 - check.elapsed())
    check.part("`-m gpu` tests", lambda: check.report(
        f"`-m gpu` tests: {gpu_tests(left)}" if left >= 30 else
        f"`-m gpu` tests: not run, {max(left, 0):.0f} s left before the hard cap", left >= 30))
    cut_rows(ONE_CUT, HARD_CAP_S - PAPER_ROW_S)
    for task, (k, seq) in FINETUNE_SHAPES.items():
        def tune(task: str = task, k: int = k, seq: int = seq) -> None:
            comp = bool(PAPER_FINETUNE["compile"]) and can_compile
            rate, mem = finetune_step(PAPER, PAPER_VOCAB, task, int(PAPER_FINETUNE[
                "batch_size"]), k, seq, "bf16", cuda, comp)
            n = int(PAPER_FINETUNE["batch_size"])
            per_s = rate.median / (k * seq)
            check.report(f"fine-tuning {task.upper()}-shaped update ({n} x {k} x {seq} tokens, "
                         f"aux LM loss chunked, {'compiled' if comp else 'eager'}, bf16): "
                         f"{rate.text()}; {per_s:,.0f} examples/s; peak memory {mem:.1f} GiB")
        check.part(f"fine-tuning {task.upper()} step", tune, optional=True)
    micro = split.get(1, 8)
    for pad, comp in ((1, can_compile), (64, False)):
        def variant(pad: int = pad, comp: bool = comp) -> None:
            rate, mem = update_rate({**PAPER, "vocab_pad_multiple": pad}, PAPER_VOCAB, SEQ,
                                    micro, batch // micro, "bf16", cuda, comp)
            rates[pad, comp] = rate.median
            check.report(f"paper shape, 1 GPU's split ({micro} x {batch // micro}), "
                         f"{'compiled' if comp else 'eager'}, vocabulary padded to {pad}: "
                         f"{rate.text()}, {mfu(rate.median)}; peak memory {mem:.1f} GiB")
        check.part(f"padding {pad} {'compiled' if comp else 'eager'}", variant, optional=True)
    if (64, can_compile) in rates and (1, can_compile) in rates:
        check.report(f"padding the vocabulary to 64: "
                     f"{rates[64, can_compile] / rates[1, can_compile]:.2f}x tokens/s")
    if can_compile and (64, True) in rates and (64, False) in rates:
        check.report(f"compile: {rates[64, True] / rates[64, False]:.2f}x tokens/s (padded)")

    def hf() -> None:
        rate = transformers_rate(cuda, can_compile, micro, SEQ - 1, PAPER_VOCAB)
        if rate is None:
            check.report("transformers OpenAIGPTLMHeadModel: not installed, not compared")
        elif (64, can_compile) in rates:
            check.report(f"transformers OpenAIGPTLMHeadModel ({micro} x {SEQ}, "
                         f"{'compiled' if can_compile else 'eager'}): {rate.text(False)}; "
                         f"ours: {rates[64, can_compile] / rate.median:.2f}x")

    check.part("transformers comparison", hf, optional=True)


def main() -> int:
    if not torch.cuda.is_available():
        print(no_cuda_line(), file=sys.stderr)
        return 2
    check = Check(shlex.join(["python", *sys.argv]))
    check.watchdog.start()
    cuda = torch.device("cuda", 0)
    name = torch.cuda.get_device_name(cuda)
    can_compile = c_compiler() is not None
    check.report(f"device: {name} (x{torch.cuda.device_count()}), torch {torch.__version__}, "
                 f"CUDA {torch.version.cuda}, C compiler: {c_compiler() or 'none'}")
    agreement_parts(check, cuda, can_compile)
    workload_parts(check, cuda, can_compile, name)
    print(f"results: {os.path.relpath(check.finish())}")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
