"""What the study costs on N GPUs: pre-training and the fine-tuning fan-out, in hours at an
assumed MFU, before any run starts.

The pre-training budget comes from the params file (configs/paper.yaml: 100 epochs of 64 x
512-token windows) over a corpus of --corpus-tokens training tokens (default: the train tokens
the last `shard_corpus` stage recorded in reports/metrics/shard_corpus.json); the rate per GPU is
the device's dense bf16 peak (devices.PEAK_BF16) times --mfu, and --gpus GPUs train it with DDP
at that rate each (linear scaling: an assumption until the GPU check measures it).
gpt1.pretraining.cost_projection does the arithmetic, the same function the pre-training stage
logs its projection with.

The fine-tuning fan-out is every fine-tuning run the params ask for (finetune tasks x seeds,
Table 5 ablations x seeds, Figure 2 left's transfer runs x seeds), each run on one GPU
(orchestrate.devices), its training tokens = train rows (reports/metrics/prepare_task_<task>.json,
capped as params say) x epochs x sequences per example x model.n_positions: an upper bound,
every sequence counted at the full context; evaluation passes are not counted. The fan-out takes
max(all runs / GPUs, the longest run).

    .venv/bin/python benchmarks/cost_projection.py [--params configs/paper.yaml] [--results]
        [--gpu H100] [--gpus 8] [--mfu 0.4] [--corpus-tokens N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from devices import PEAK_BF16
from results_file import add_option, recording

from gpt1.config import Params, load_params
from gpt1.model import GPT, count_parameters, flops_per_token
from gpt1.pretraining import cost_projection, total_steps_for

VOCAB = 40_478  # the original release's vocabulary (40,000 merges + characters)


def finetune_runs(params: Params, train_rows: dict[str, int]) -> dict[str, int]:
    """Fine-tuning run -> its training tokens (upper bound: full-context sequences), for every
    run of the fine-tune, ablation and transfer_layers stages the params ask for."""
    from gpt1.tasks.registry import TASKS

    ft, seq = params.finetune, params.model.n_positions

    def tokens(task: str, cap: int | None) -> int:
        spec = TASKS[task]
        per_example = spec.n_choices if spec.fmt == "choice" else (
            2 if spec.fmt == "similarity" else 1)
        rows = min(train_rows[task], cap) if cap else train_rows[task]
        return rows * ft.epochs * per_example * seq

    cells = {f"finetune@{t}": tokens(t, ft.max_train_examples) for t in ft.tasks}
    cells |= {f"ablation@{v}-{t}": tokens(t, ft.max_train_examples)
              for v in params.ablations.variants for t in params.ablations.tasks}
    layers = params.layers
    cells |= {f"transfer_layers@{t}-{k}": tokens(t, layers.max_train_examples
                                                 or ft.max_train_examples)
              for t in layers.tasks for k in layers.layers_transferred}
    return {f"{name}/seed{s}": n for name, n in cells.items() for s in ft.seeds}


def fanout_hours(run_tokens: dict[str, int], gpus: int, tokens_per_s: float) -> float:
    """Hours of runs fanned out one per GPU: the total over the GPUs, or the longest run."""
    total, longest = sum(run_tokens.values()), max(run_tokens.values())
    return max(total / gpus, longest) / tokens_per_s / 3600.0


def task_rows(metrics_dir: Path, tasks: set[str]) -> dict[str, int] | None:
    """Train rows per task from the prepare_task records, or None if one is missing."""
    rows = {}
    for task in tasks:
        path = metrics_dir / f"prepare_task_{task}.json"
        if not path.is_file():
            return None
        rows[task] = int(json.loads(path.read_text())["rows"]["train"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="configs/paper.yaml")
    parser.add_argument("--gpu", default="H100", choices=[name for name, _ in PEAK_BF16])
    parser.add_argument("--gpus", type=int, default=1, help="GPUs (one node or several)")
    parser.add_argument("--mfu", type=float, default=0.4, help="assumed model FLOPs utilisation")
    parser.add_argument("--corpus-tokens", type=int, help="training tokens in one epoch")
    parser.add_argument("--metrics-dir", default="reports/metrics",
                        help="stage records: shard_corpus.json, prepare_task_<task>.json")
    add_option(parser)
    args = parser.parse_args()
    params = load_params(args.params)
    cfg = params.pretrain
    metrics_dir = Path(args.metrics_dir)
    corpus = args.corpus_tokens or json.loads(
        (metrics_dir / "shard_corpus.json").read_text())["tokens"]["train"]
    steps = total_steps_for(cfg, corpus // cfg.seq_len)
    with torch.device("meta"):  # shapes only: no 117 M-parameter allocation
        n_params = count_parameters(GPT(params.model, VOCAB))
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
    print(f"pre-training on {args.gpus} x {args.gpu} (DDP, linear scaling assumed): "
          f"{plan['hours'] / args.gpus:.1f} h")
    p = params
    tasks = {*p.finetune.tasks, *p.ablations.tasks, *p.layers.tasks}
    rows = task_rows(metrics_dir, tasks)
    if rows is None:
        print(f"fine-tuning: no prepare_task records in {metrics_dir} for every task; run "
              "`dvc repro prepare_task` first")
        return
    runs = finetune_runs(p, rows)
    hours = fanout_hours(runs, args.gpus, rate)
    print(f"fine-tuning fan-out: {len(runs)} runs, {sum(runs.values()) / 1e9:.2f} G tokens at "
          f"most (full-context sequences), one run per GPU on {args.gpus} x {args.gpu}: "
          f"{hours:.1f} h")
    print(f"in all: {plan['hours'] / args.gpus + hours:.1f} h on {args.gpus} x {args.gpu} "
          f"= {args.gpus * (plan['hours'] / args.gpus + hours):.0f} GPU-hours")


if __name__ == "__main__":
    with recording("cost-projection"):
        main()
