"""A language model's own pre-training peak lr and warm-up, chosen on the pre-training validation
split by short runs, before a study's plan commit (`lstm.lr_max`; `pretrain.lr_max` and
`pretrain.warmup_steps` for the Transformer).

Each (lr, warm-up) of `--lrs` x `--warmups` gets one short pre-training run of `--body`
(`--tokens` tokens, the params' schedule over that budget, the first pre-training seed) through
the pipeline's own stage (gpt1.stages.pretrain), into a temporary folder; the run's validation
loss is read on the pre-training validation shards (books held out of pre-training; no task
split is read). The lowest loss is printed as the choice, with whether it lies at an end of
either grid (then widen the grid and run again: the rule is the lowest loss, widening while the
best is at an end). `--reference` adds the other body at its params' lr, as a yardstick.

Needs the preset's tokenizer and shards (`dvc repro shard_corpus` at that preset):

    .venv/bin/python benchmarks/pretrain_lr.py --params params.yaml --body transformer
        [--lrs 5e-4 1e-3 2e-3] [--warmups 25 100] [--tokens 1200000] [--reference] [--results]
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


def short_run(params, body: str, lr: float, warmup: int | None, tokens: int, out: Path) -> dict:
    """One short pre-training run of `body` at peak lr `lr` and `warmup` warm-up updates (None:
    the params'): its final validation loss."""
    warm = {} if warmup is None else {"warmup_steps": warmup}
    run = override(params,
                   pretrain={"max_tokens": tokens, "epochs": None,
                             "seeds": params.pretrain.seeds[:1], **warm,
                             **({"lr_max": lr} if body == "transformer" else {})},
                   lstm={"lr_max": lr} if body == "lstm" else {},
                   paths={"checkpoints": str(out / "transformer"),
                          "lstm_checkpoints": str(out / "lstm"),
                          "metrics": str(out / "metrics"), "reports": str(out / "reports")},
                   curves={"dose_tokens": [], "dose_tasks": []},  # budgets above a short run's
                   tracking={"enabled": False})
    stage = pretrain_stages.pretrain_lstm if body == "lstm" else pretrain_stages.pretrain
    start = time.perf_counter()
    metrics = stage(run, run.pretrain.seeds[0])
    return {"val_loss": float(metrics["val_loss"]), "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--body", choices=["lstm", "transformer"], default="lstm")
    parser.add_argument("--lrs", type=float, nargs="+", default=[5e-4, 1e-3, 2e-3, 4e-3])
    parser.add_argument("--warmups", type=int, nargs="+", default=None,
                        help="warm-up updates tried with each lr (default: the params')")
    parser.add_argument("--tokens", type=int, default=1_200_000,
                        help="pre-training tokens per short run (default 1.2 M)")
    parser.add_argument("--reference", action="store_true",
                        help="also the other body at its params' lr, as a yardstick")
    add_option(parser)
    args = parser.parse_args()
    params = load_params(args.params)
    updates = args.tokens // (params.pretrain.batch_seqs * params.pretrain.seq_len)
    shape = (f"LSTM {params.lstm.n_layer}x{params.lstm.hidden_size}" if args.body == "lstm" else
             f"Transformer {params.model.n_layer}x{params.model.n_embd}")
    print(f"params {args.params}: {shape}, {args.tokens:,} tokens per run = {updates} updates "
          f"({params.pretrain.lr_schedule}), pre-training seed {params.pretrain.seeds[0]}; the "
          f"loss is on the pre-training validation shards")
    warmups = args.warmups or [params.pretrain.warmup_steps]
    runs = [(args.body, lr, w) for lr in args.lrs for w in warmups]
    if args.reference:
        other = "transformer" if args.body == "lstm" else "lstm"
        runs.append((other, (params.pretrain if other == "transformer" else params.lstm).lr_max,
                     None))
    print(f"{'body':<12} {'lr':>9} {'warm-up':>8} {'val loss':>9} {'val ppl':>9} {'seconds':>8}")
    losses = {}
    for body, lr, warmup in runs:
        with tempfile.TemporaryDirectory() as tmp:
            result = short_run(params, body, lr, warmup, args.tokens, Path(tmp))
        if body == args.body:
            losses[lr, warmup] = result["val_loss"]
        shown = params.pretrain.warmup_steps if warmup is None else warmup
        print(f"{body:<12} {lr:>9.2e} {shown:>8} {result['val_loss']:>9.4f} "
              f"{math.exp(result['val_loss']):>9.1f} {result['seconds']:>8.0f}", flush=True)
    best_lr, best_warmup = min(losses, key=lambda key: losses[key])
    edges = [name for name, value, grid in (("lr", best_lr, args.lrs), ("warm-up", best_warmup,
                                                                       warmups))
             if len(grid) > 1 and value in (min(grid), max(grid))]
    edge = f" (at an end of the {' and '.join(edges)} grid: widen it)" if edges else ""
    key = "lstm.lr_max" if args.body == "lstm" else "pretrain.lr_max"
    print(f"chosen: {key} = {best_lr:g}, warm-up {best_warmup} updates, the lowest validation "
          f"loss of {len(losses)} runs{edge}")


if __name__ == "__main__":
    with recording("pretrain-lr"):
        main()
