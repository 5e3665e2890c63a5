"""Training-step throughput: gpt1.model.GPT vs transformers' OpenAIGPTLMHeadModel (issue 3, B6).

One training step = forward, backward, gradient clipping, optimizer step, at the same config
(6 layers, 384 d, 6 heads, context 256, vocab 16,384, batch 8, 2 threads) from the same
weights, in the same process, alternating between the four variants (ours / theirs x fp32 /
bf16 autocast) round by round so that load from other processes hits all of them alike; the
median step time of each is reported. Both sides use fused AdamW (transformers' Trainer default
on torch >= 2.8) with weight decay on rank > 1 tensors. Then our fastest precision and our fp32
each train 100 steps from the same init on the same (synthetic, learnable) data with the same
dropout seeds, and their held-out losses are compared.

    .venv/bin/python benchmarks/train_throughput.py [--rounds 7] [--loss-steps 100]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable

# On a CPU shared with other jobs, spinning OpenMP workers stall each other (a 2-thread step
# ran 5x slower than a 1-thread one at load 4); passive waiting avoids it. Set before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel  # noqa: E402

from gpt1.backends import apply_kernels  # noqa: E402
from gpt1.config import load_params  # noqa: E402
from gpt1.export import hf_state_dict  # noqa: E402
from gpt1.model import GPT, flops_per_token  # noqa: E402
from gpt1.optim import build_optimizer, lr_at, param_groups  # noqa: E402
from gpt1.train import CausalLM, autocast_for  # noqa: E402

BENCH = {"n_layer": 6, "n_embd": 384, "n_head": 6, "n_inner": 4 * 384, "n_positions": 256}
VOCAB, BATCH, THREADS = 16_384, 8, 2


def synthetic_stream(n_tokens: int, seed: int) -> torch.Tensor:
    """A learnable token stream: a sparse random bigram chain (8 successors per token)."""
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, VOCAB, (VOCAB, 8), generator=g)
    choice = torch.randint(0, 8, (n_tokens,), generator=g)
    out = torch.empty(n_tokens, dtype=torch.long)
    out[0] = 0
    for i in range(1, n_tokens):  # python loop over 0.5M tokens: ~1 s
        out[i] = successors[out[i - 1], choice[i]]
    return out


def make_models(params_path: str) -> tuple[GPT, OpenAIGPTLMHeadModel]:
    base = load_params(params_path).model
    cfg = base.model_copy(update={**BENCH, "arch": "gpt1"})
    torch.manual_seed(0)
    ours = GPT(cfg, VOCAB)
    apply_kernels(ours, cfg.kernels, torch.device("cpu"))  # params.yaml: auto = the fused CPU path
    hf_cfg = OpenAIGPTConfig(
        vocab_size=VOCAB, n_positions=cfg.n_positions, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
        n_head=cfg.n_head, afn=cfg.afn, resid_pdrop=cfg.resid_pdrop, embd_pdrop=cfg.embd_pdrop,
        attn_pdrop=cfg.attn_pdrop, layer_norm_epsilon=cfg.layer_norm_epsilon,
    )
    theirs = OpenAIGPTLMHeadModel(hf_cfg)
    theirs.load_state_dict(hf_state_dict(ours.state_dict()))
    return ours, theirs


def step_fn(side: str, model: torch.nn.Module, precision: str) -> Callable[[torch.Tensor], float]:
    """A closure running one full training step on a (B, T + 1) batch; returns the loss."""
    optimizer = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-4, fused=True)
    loss_of = CausalLM(model) if side == "ours" else None  # type: ignore[arg-type]
    cpu = torch.device("cpu")

    def run(batch: torch.Tensor) -> float:
        with autocast_for(precision, cpu):
            if loss_of is not None:
                loss = loss_of(batch)
            else:  # transformers shifts labels itself
                loss = model(batch[:, :-1], labels=batch[:, :-1]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return run


def time_steps(rounds: int, stream: torch.Tensor, ours: GPT, theirs: torch.nn.Module) -> dict:
    T = BENCH["n_positions"]
    batch = stream[: BATCH * (T + 1)].view(BATCH, T + 1)
    variants = {
        (side, prec): step_fn(side, model, prec)
        for side, model in (("ours", ours), ("transformers", theirs))
        for prec in ("fp32", "bf16")
    }
    for fn in variants.values():  # warm-up: oneDNN primitive creation, allocator
        fn(batch)
        fn(batch)
    times: dict[tuple[str, str], list[float]] = {k: [] for k in variants}
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for key in order:
            torch.manual_seed(r)
            start = time.perf_counter()
            variants[key](batch)
            times[key].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def train_loss(
    model: GPT, precision: str, stream: torch.Tensor, steps: int, lr_max: float
) -> float:
    """Held-out fp32 eval loss after `steps` updates (same data and dropout seeds per call)."""
    T = BENCH["n_positions"]
    tokens_per_batch = BATCH * (T + 1)
    optimizer = build_optimizer(model, lr_max, (0.9, 0.999), 1e-8, 0.01)
    loss_of = CausalLM(model).train()
    cpu = torch.device("cpu")
    for step in range(steps):
        batch = stream[step * tokens_per_batch : (step + 1) * tokens_per_batch].view(BATCH, T + 1)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step + 1, steps, steps // 10, lr_max, "cosine")
        torch.manual_seed(step)
        with autocast_for(precision, cpu):
            loss = loss_of(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    held_out = stream[-4 * tokens_per_batch :].view(4 * BATCH, T + 1)
    loss_of.eval()
    with torch.no_grad():
        return float(loss_of(held_out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help="dropouts, LN eps, init std")
    parser.add_argument("--rounds", type=int, default=7, help="alternating timing rounds")
    parser.add_argument("--loss-steps", type=int, default=100)
    parser.add_argument("--lr-max", type=float, default=1e-3, help="peak lr of the loss check")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    T = BENCH["n_positions"]
    stream = synthetic_stream((args.loss_steps + 4) * BATCH * (T + 1), seed=1)
    ours, theirs = make_models(args.params)
    init = {k: v.clone() for k, v in ours.state_dict().items()}
    cfg = ours.cfg
    fpt = flops_per_token(cfg, VOCAB, T)
    print(f"config: {BENCH} vocab {VOCAB} batch {BATCH} threads {torch.get_num_threads()}; "
          f"{fpt / 1e6:.1f} MFLOP/token (fwd+bwd matmuls)")
    medians = time_steps(args.rounds, stream, ours.train(), theirs.train())
    tokens = BATCH * T
    for (side, prec), sec in medians.items():
        tps = tokens / sec
        print(f"{side:>12} {prec}: {sec * 1e3:7.1f} ms/step  {tps:8.0f} tokens/s  "
              f"{tps * fpt / 1e9:6.1f} GFLOP/s")
    best = {side: min((sec, prec) for (s, prec), sec in medians.items() if s == side)
            for side in ("ours", "transformers")}
    for prec in ("fp32", "bf16"):
        ratio = medians[("transformers", prec)] / medians[("ours", prec)]
        print(f"ratio ours/transformers tokens/s, both {prec}: {ratio:.2f}x")
    ratio = best["transformers"][0] / best["ours"][0]
    print(f"ratio ours/transformers tokens/s, each in its fastest precision "
          f"(ours {best['ours'][1]}, transformers {best['transformers'][1]}): {ratio:.2f}x "
          f"[target >= 1.5x: {'PASS' if ratio >= 1.5 else 'FAIL'}]")

    fast = best["ours"][1]
    losses = {}
    for prec in dict.fromkeys(["fp32", fast]):
        ours.load_state_dict(init)
        start = time.perf_counter()
        losses[prec] = train_loss(ours, prec, stream, args.loss_steps, args.lr_max)
        print(f"ours {prec}: held-out loss after {args.loss_steps} steps {losses[prec]:.4f} "
              f"({time.perf_counter() - start:.0f} s)")
    rel = abs(losses[fast] - losses["fp32"]) / losses["fp32"]
    print(f"loss of ours {fast} vs ours fp32: {rel * 100:.2f}% apart "
          f"[target <= 2%: {'PASS' if rel <= 0.02 else 'FAIL'}]")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
