"""The LSTM's own pre-training peak lr (`lstm.lr_max`), chosen on the pre-training validation
split by short runs, before a study's plan commit.

The study pre-trains the LSTM baseline with the pre-training loop and data of the Transformer;
at the Transformer's lr it ended far behind (study v2: validation perplexity 430 vs 192), so a
Table 5 contrast against it would measure its lr, not the architecture. Each lr of `--lrs` gets
one short LSTM pre-training run (`--tokens` tokens, the params' warm-up and schedule over that
budget, the first pre-training seed) through the pipeline's own stage (gpt1.stages.pretrain),
into a temporary folder; the run's validation loss is read on the pre-training validation shards
(books held out of pre-training; no task split is read). The lr with the lowest loss is
printed as the one to put in the preset. `--transformer` adds the Transformer at
pretrain.lr_max, the same way, as the reference.

Needs the preset's tokenizer and shards (`dvc repro shard_corpus` at that preset):

    .venv/bin/python benchmarks/lstm_lr.py --params params.yaml [--lrs 5e-4 1e-3 2e-3 4e-3]
        [--tokens 1200000] [--transformer] [--results]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from results_file import add_option, recording

from gpt1.config import load_params, override
from gpt1.stages import pretrain as pretrain_stages


def short_run(params, body: str, lr: float, tokens: int, out: Path) -> dict:
    """One short pre-training run of `body` at peak lr `lr`: its final validation loss."""
    lr_key = {"lr_max": lr}
    run = override(params,
                   pretrain={"max_tokens": tokens, "epochs": None,
                             "seeds": params.pretrain.seeds[:1],
                             **(lr_key if body == "transformer" else {})},
                   lstm=lr_key if body == "lstm" else {},
                   paths={"checkpoints": str(out / "transformer"),
                          "lstm_checkpoints": str(out / "lstm"),
                          "metrics": str(out / "metrics"), "reports": str(out / "reports")},
                   tracking={"enabled": False})
    stage = pretrain_stages.pretrain_lstm if body == "lstm" else pretrain_stages.pretrain
    start = time.perf_counter()
    metrics = stage(run, run.pretrain.seeds[0])
    return {"val_loss": float(metrics["val_loss"]), "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--lrs", type=float, nargs="+", default=[5e-4, 1e-3, 2e-3, 4e-3])
    parser.add_argument("--tokens", type=int, default=1_200_000,
                        help="pre-training tokens per short run (default 1.2 M)")
    parser.add_argument("--transformer", action="store_true",
                        help="also the Transformer at pretrain.lr_max, as the reference")
    add_option(parser)
    args = parser.parse_args()
    params = load_params(args.params)
    updates = args.tokens // (params.pretrain.batch_seqs * params.pretrain.seq_len)
    print(f"params {args.params}: LSTM {params.lstm.n_layer}x{params.lstm.hidden_size}, "
          f"{args.tokens:,} tokens per run = {updates} updates (warm-up "
          f"{params.pretrain.warmup_steps}, {params.pretrain.lr_schedule}), pre-training seed "
          f"{params.pretrain.seeds[0]}; the loss is on the pre-training validation shards")
    runs = [("lstm", lr) for lr in args.lrs]
    if args.transformer:
        runs.append(("transformer", params.pretrain.lr_max))
    print(f"{'body':<12} {'lr':>9} {'val loss':>9} {'val ppl':>9} {'seconds':>8}")
    losses = {}
    for body, lr in runs:
        with tempfile.TemporaryDirectory() as tmp:
            result = short_run(params, body, lr, args.tokens, Path(tmp))
        if body == "lstm":
            losses[lr] = result["val_loss"]
        print(f"{body:<12} {lr:>9.2e} {result['val_loss']:>9.4f} "
              f"{math.exp(result['val_loss']):>9.1f} {result['seconds']:>8.0f}", flush=True)
    best = min(losses, key=lambda lr: losses[lr])
    edge = " (an end of the grid: widen it)" if best in (min(losses), max(losses)) else ""
    print(f"chosen: lstm.lr_max = {best:g}, the lowest validation loss of {len(losses)} lrs{edge}")


if __name__ == "__main__":
    with recording("lstm-lr"):
        main()
