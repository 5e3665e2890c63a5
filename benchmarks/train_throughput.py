"""Training-step throughput: gpt1.model.GPT vs transformers' OpenAIGPTLMHeadModel.

One training step = forward, backward, gradient clipping, optimizer step, at the same config
from the same weights, in the same process, alternating between the variants (ours / theirs x
fp32 / bf16 autocast x eager / torch.compile) round by round so that load from other processes
hits all of them alike; the median step time of each is reported, and the ratio of each side
in its fastest variant, with that ratio's spread round by round (the measurement's noise).
Both sides use fused AdamW (transformers' Trainer default on torch >= 2.8) with weight decay
on rank > 1 tensors; torch.compile wraps the model (ours: the loss module), not the optimizer.
Then our fastest precision and our fp32 each train --loss-steps steps from the same init on the
same (synthetic, learnable) data with the same dropout seeds, and their held-out losses are
compared. On a CPU without native bf16 (AVX2-only x86-64) the bf16 variants are skipped, in
one line saying so (`precisions_for`): emulated there, they would only time the emulation.

--device cpu (default): the bench config (6 layers, 384 d, 6 heads, context 256, vocab 16,384,
batch 8, 2 threads). --device cuda: the paper config (12 layers, 768 d, 12 heads, context 512,
vocab 40,478, --batch 64 or what fits), also printing MFU: achieved matmul FLOP/s over the
device's dense bf16 peak (PEAK_BF16 by device name, or --peak-tflops).

    .venv/bin/python benchmarks/train_throughput.py [--rounds 7] [--loss-steps 100] [--results]
        [--modes eager,compile] [--device cuda] [--backend auto] [--precisions auto]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable
from typing import cast

# On a CPU shared with other jobs, spinning OpenMP workers stall each other (a 2-thread step
# ran 5x slower than a 1-thread one at load 4); passive waiting avoids it. Set before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from devices import bf16_peak  # noqa: E402
from results_file import add_option, recording  # noqa: E402
from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel  # noqa: E402

from gpt1.backends import apply_backend  # noqa: E402
from gpt1.config import load_params  # noqa: E402
from gpt1.hf_weights import to_hf  # noqa: E402
from gpt1.model import GPT, flops_per_token  # noqa: E402
from gpt1.optim import build_optimizer, lr_at, param_groups  # noqa: E402
from gpt1.pretraining import CausalLM  # noqa: E402
from gpt1.runtime import autocast_for, has_fast_bf16  # noqa: E402

BENCH = {"n_layer": 6, "n_embd": 384, "n_head": 6, "n_inner": 4 * 384, "n_positions": 256}
VOCAB, BATCH, THREADS = 16_384, 8, 2
PAPER = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": 4 * 768, "n_positions": 512}
PAPER_VOCAB, PAPER_BATCH = 40_478, 64  # the original release's vocabulary; spec §1 batch


def synthetic_stream(n_tokens: int, vocab: int, seed: int) -> torch.Tensor:
    """A learnable token stream: a sparse random bigram chain (8 successors per token)."""
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 8), generator=g)
    choice = torch.randint(0, 8, (n_tokens,), generator=g)
    out = torch.empty(n_tokens, dtype=torch.long)
    out[0] = 0
    for i in range(1, n_tokens):  # python loop over 0.5M tokens: ~1 s
        out[i] = successors[out[i - 1], choice[i]]
    return out


def make_models(params_path: str, shape: dict[str, int], vocab: int
                ) -> tuple[GPT, OpenAIGPTLMHeadModel]:
    base = load_params(params_path).model
    cfg = base.model_copy(update={**shape, "arch": "gpt1"})
    torch.manual_seed(0)
    ours = GPT(cfg, vocab)
    hf_cfg = OpenAIGPTConfig(
        vocab_size=vocab, n_positions=cfg.n_positions, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
        n_head=cfg.n_head, afn=cfg.afn, resid_pdrop=cfg.resid_pdrop, embd_pdrop=cfg.embd_pdrop,
        attn_pdrop=cfg.attn_pdrop, layer_norm_epsilon=cfg.layer_norm_epsilon,
    )
    theirs = OpenAIGPTLMHeadModel(hf_cfg)
    theirs.load_state_dict(to_hf(ours.state_dict(), vocab))
    return ours, theirs


def step_fn(side: str, model: torch.nn.Module, precision: str, mode: str
            ) -> Callable[[torch.Tensor], float]:
    """A closure running one full training step on a (B, T + 1) batch; returns the loss (read
    on the host: the step's end on an asynchronous device)."""
    optimizer = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-4, fused=True)
    forward: torch.nn.Module = CausalLM(model) if side == "ours" else model  # type: ignore[arg-type]
    if mode == "compile":
        forward = cast(torch.nn.Module, torch.compile(forward))
    device = next(model.parameters()).device

    def run(batch: torch.Tensor) -> float:
        with autocast_for(precision, device):
            if side == "ours":
                loss = forward(batch)
            else:  # transformers shifts labels itself
                loss = forward(batch[:, :-1], labels=batch[:, :-1]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return run


Variant = tuple[str, str, str]  # (side, precision, mode)


def precisions_for(choice: str, device: torch.device) -> list[str]:
    """--precisions: `auto` = fp32 and bf16, except on a CPU that emulates bf16 (no AVX512-BF16
    or AMX, e.g. AVX2-only x86-64), where a bf16 step is tens of times slower than fp32 and
    times nothing the target runs: fp32 only, said in one line."""
    if choice != "auto":
        return choice.split(",")
    if device.type == "cuda" or has_fast_bf16():
        return ["fp32", "bf16"]
    print("bf16 variants skipped: this CPU has no native bf16 (AVX512-BF16 / AMX), so bf16 "
          "is emulated, ~50x slower than fp32 (--precisions fp32,bf16 runs them anyway)")
    return ["fp32"]


def time_steps(rounds: int, batch: torch.Tensor, ours: GPT, theirs: torch.nn.Module,
               modes: list[str], precisions: list[str]) -> dict[Variant, list[float]]:
    """Each variant's step time (s) in each round, rounds in order."""
    variants = {
        (side, prec, mode): step_fn(side, model, prec, mode)
        for side, model in (("ours", ours), ("transformers", theirs))
        for prec in precisions
        for mode in modes
    }
    for key, fn in variants.items():  # warm-up: compilation, oneDNN primitives, allocator
        start = time.perf_counter()
        fn(batch)
        fn(batch)
        print(f"warm-up {' '.join(key)}: {time.perf_counter() - start:.0f} s", flush=True)
    times: dict[Variant, list[float]] = {k: [] for k in variants}
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for key in order:
            torch.manual_seed(r)
            start = time.perf_counter()
            variants[key](batch)
            times[key].append(time.perf_counter() - start)
    return times


def train_loss(
    model: GPT, precision: str, stream: torch.Tensor, steps: int, lr_max: float, batch_seqs: int
) -> float:
    """Held-out fp32 eval loss after `steps` updates (same data and dropout seeds per call)."""
    T = model.cfg.n_positions
    tokens_per_batch = batch_seqs * (T + 1)
    optimizer = build_optimizer(model, lr_max, (0.9, 0.999), 1e-8, 0.01)
    loss_of = CausalLM(model).train()
    device = next(model.parameters()).device
    for step in range(steps):
        batch = stream[step * tokens_per_batch : (step + 1) * tokens_per_batch]
        batch = batch.view(batch_seqs, T + 1).to(device)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps, steps // 10, lr_max, "cosine")  # t before increment
        torch.manual_seed(step)
        with autocast_for(precision, device):
            loss = loss_of(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    held_out = stream[-4 * tokens_per_batch :].view(4 * batch_seqs, T + 1).to(device)
    loss_of.eval()
    with torch.no_grad():
        return float(loss_of(held_out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help="dropouts, LN eps, init std")
    parser.add_argument("--rounds", type=int, default=7, help="alternating timing rounds")
    parser.add_argument("--loss-steps", type=int, default=100, help="0 skips the loss check")
    parser.add_argument("--lr-max", type=float, default=1e-3, help="peak lr of the loss check")
    parser.add_argument("--modes", default="eager,compile",
                        help="comma list of eager, compile (torch.compile of each side)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precisions", default="auto",
                        help="auto (fp32,bf16; fp32 alone on a CPU that emulates bf16) or a "
                             "comma list of fp32, bf16")
    parser.add_argument("--batch", type=int, help=f"sequences per step (cpu {BATCH}, cuda "
                        f"{PAPER_BATCH}; lower it if it does not fit)")
    parser.add_argument("--backend", choices=("auto", "torch", "cpu_fused"), default="auto",
                        help="our model's compute backend (gpt1.backends.apply_backend)")
    parser.add_argument("--peak-tflops", type=float,
                        help="dense bf16 peak of a device missing from PEAK_BF16")
    add_option(parser)
    args = parser.parse_args()
    device = torch.device(args.device)
    shape, vocab = (PAPER, PAPER_VOCAB) if device.type == "cuda" else (BENCH, VOCAB)
    batch_seqs = args.batch or (PAPER_BATCH if device.type == "cuda" else BATCH)
    modes = args.modes.split(",")
    if device.type == "cpu":
        torch.set_num_threads(THREADS)
    T = shape["n_positions"]
    stream = synthetic_stream((max(args.loss_steps, 1) + 4) * batch_seqs * (T + 1), vocab, 1)
    ours, theirs = make_models(args.params, shape, vocab)
    init = {k: v.clone() for k, v in ours.state_dict().items()}
    ours.to(device)
    cast(torch.nn.Module, theirs).to(device)  # transformers types .to() as its own
    backend = apply_backend(ours, args.backend, device)
    fpt = flops_per_token(ours.cfg, vocab, T)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = bf16_peak(name, args.peak_tflops) if device.type == "cuda" else None
    print(f"config: {shape} vocab {vocab} batch {batch_seqs} on {name} (threads "
          f"{torch.get_num_threads()}), our backend: {backend}; {fpt / 1e6:.1f} MFLOP/token "
          f"(fwd+bwd matmuls)" + (f"; bf16 peak {peak / 1e12:.0f} TFLOP/s" if peak else ""))
    batch = stream[: batch_seqs * (T + 1)].view(batch_seqs, T + 1).to(device)
    times = time_steps(args.rounds, batch, ours.train(), theirs.train(), modes,
                       precisions_for(args.precisions, device))
    medians = {k: statistics.median(v) for k, v in times.items()}
    report_times(medians, batch_seqs * T, fpt, peak)
    report_spread(times, medians)
    if args.loss_steps:
        check_loss(ours, init, stream, args.loss_steps, args.lr_max, batch_seqs,
                   min((sec, prec) for (s, prec, _), sec in medians.items() if s == "ours")[1])


def report_times(medians: dict[Variant, float], tokens: int, fpt: float, peak: float | None
                 ) -> None:
    """Per-variant step time, tokens/s, FLOP/s (and MFU), then ours / transformers ratios."""
    for (side, prec, mode), sec in medians.items():
        tps = tokens / sec
        mfu = f"  MFU {tps * fpt / peak * 100:5.1f}%" if peak else ""
        print(f"{side:>12} {prec} {mode:<7}: {sec * 1e3:7.1f} ms/step  {tps:9.0f} tokens/s  "
              f"{tps * fpt / 1e9:8.1f} GFLOP/s{mfu}")
    for prec, mode in dict.fromkeys((p, m) for _, p, m in medians):
        ratio = medians[("transformers", prec, mode)] / medians[("ours", prec, mode)]
        print(f"ratio ours/transformers tokens/s, both {prec} {mode}: {ratio:.2f}x")
    best = {side: min((sec, f"{prec} {mode}") for (s, prec, mode), sec in medians.items()
                      if s == side) for side in ("ours", "transformers")}
    ratio = best["transformers"][0] / best["ours"][0]
    print(f"ratio ours/transformers tokens/s, each in its fastest variant "
          f"(ours {best['ours'][1]}, transformers {best['transformers'][1]}): {ratio:.2f}x "
          f"[target >= 1.5x: {'PASS' if ratio >= 1.5 else 'FAIL'}]")
    eager = [sec for (s, _, mode), sec in medians.items() if s == "ours" and mode == "eager"]
    if eager and best["transformers"][0] < min(eager):
        print(f"note: transformers' fastest ({best['transformers'][1]}) beats our fastest eager "
              f"variant by {min(eager) / best['transformers'][0]:.2f}x")


def report_spread(times: dict[Variant, list[float]], medians: dict[Variant, float]) -> None:
    """The ratio of the two fastest variants (by median) round by round: both ran within
    seconds of each other in each round, so its spread is the measurement's own noise."""
    fastest = {side: min((sec, key) for key, sec in medians.items() if key[0] == side)[1]
               for side in ("ours", "transformers")}
    ratios = sorted(t / o for o, t in zip(times[fastest["ours"]], times[fastest["transformers"]],
                                          strict=True))
    print(f"ratio of the fastest variants round by round ({len(ratios)} rounds): min "
          f"{ratios[0]:.2f}x, median {statistics.median(ratios):.2f}x, max {ratios[-1]:.2f}x")


def check_loss(ours: GPT, init: dict[str, torch.Tensor], stream: torch.Tensor, steps: int,
               lr_max: float, batch_seqs: int, fast: str) -> None:
    """Our fastest precision and fp32 train from the same init: held-out losses within 2%."""
    losses = {}
    for prec in dict.fromkeys(["fp32", fast]):
        ours.load_state_dict(init)
        start = time.perf_counter()
        losses[prec] = train_loss(ours, prec, stream, steps, lr_max, batch_seqs)
        print(f"ours {prec}: held-out loss after {steps} steps {losses[prec]:.4f} "
              f"({time.perf_counter() - start:.0f} s)")
    rel = abs(losses[fast] - losses["fp32"]) / losses["fp32"]
    print(f"loss of ours {fast} vs ours fp32: {rel * 100:.2f}% apart "
          f"[target <= 2%: {'PASS' if rel <= 0.02 else 'FAIL'}]")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt), recording("train-throughput"):
        main()
