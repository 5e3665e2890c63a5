"""What a pre-training run costs on a GPU: parameters, FLOPs, tokens and hours at an assumed MFU.

The run's budget comes from the params file (configs/paper.yaml: 100 epochs of 64 x 512-token
windows) over a corpus of --corpus-tokens training tokens (default: the train tokens the last
`shard_corpus` stage recorded in reports/metrics/shard_corpus.json); the rate is the device's
dense bf16 peak (devices.PEAK_BF16) times --mfu. gpt1.pretraining.cost_projection does the
arithmetic, the same function the pre-training stage logs its projection with.

    .venv/bin/python benchmarks/cost_projection.py [--params configs/paper.yaml] [--results]
        [--gpu H100] [--mfu 0.4] [--corpus-tokens N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from devices import PEAK_BF16
from results_file import add_option, recording

from gpt1.config import load_params
from gpt1.model import GPT, flops_per_token
from gpt1.pretraining import cost_projection, total_steps_for

VOCAB = 40_478  # the original release's vocabulary (40,000 merges + characters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="configs/paper.yaml")
    parser.add_argument("--gpu", default="H100", choices=[name for name, _ in PEAK_BF16])
    parser.add_argument("--mfu", type=float, default=0.4, help="assumed model FLOPs utilisation")
    parser.add_argument("--corpus-tokens", type=int, help="training tokens in one epoch")
    parser.add_argument("--shard-metrics", default="reports/metrics/shard_corpus.json")
    add_option(parser)
    args = parser.parse_args()
    params = load_params(args.params)
    cfg = params.pretrain
    corpus = args.corpus_tokens or json.loads(Path(args.shard_metrics).read_text())["tokens"][
        "train"]
    steps = total_steps_for(cfg, corpus // cfg.seq_len)
    with torch.device("meta"):  # shapes only: no 117 M-parameter allocation
        n_params = sum(p.numel() for p in GPT(params.model, VOCAB).parameters())
    peak = dict(PEAK_BF16)[args.gpu]
    fpt = flops_per_token(params.model, VOCAB, cfg.seq_len)
    rate = peak * args.mfu / fpt  # tokens/s
    plan = cost_projection(n_params, fpt, steps * cfg.batch_seqs * cfg.seq_len, rate)
    print(f"{args.params}: {plan['params'] / 1e6:.1f} M parameters, "
          f"{plan['flops_per_token'] / 1e9:.3f} GFLOP/token, {steps:,} updates = "
          f"{plan['tokens'] / 1e9:.2f} G tokens ({corpus:,} per epoch), "
          f"{plan['flops']:.3g} FLOP")
    print(f"one {args.gpu} at {peak / 1e12:.0f} TFLOP/s dense bf16 x MFU {args.mfu:.0%} = "
          f"{rate:,.0f} tokens/s: {plan['hours']:.1f} h ({plan['hours'] / 24:.2f} days)")


if __name__ == "__main__":
    with recording("cost-projection"):
        main()
