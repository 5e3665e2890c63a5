"""What a preset's fine-tuning costs on N GPUs: an estimate from FLOPs, not a measurement.

Every fine-tune the preset runs (finetune@<task>, ablation@<variant>-<task>,
transfer_layers@<task>-<k>; all seeds of a stage run one after another) is counted on the
prepared task tables with the preset's tokenizer, exactly as the stage encodes them (caps,
truncation, input transforms), each batch padded to its longest sequence. Training costs
gpt1.model.flops_per_token per token; evaluation (dev every epoch, test once) a third of that.
The rate is the device's dense bf16 peak (devices.PEAK_BF16) x --mfu; stages are
spread over N GPUs longest first (orchestrate.max_parallel_stages = N, one stage per GPU).
Run it after the CPU stages have prepared tables and tokenizer, e.g. for the released weights:

    dvc repro train_bpe prepare_task     # at configs/paper-finetune.yaml as params.yaml
    .venv/bin/python benchmarks/finetune_cost.py [--params params.yaml] [--gpus 1 4 8]
        [--gpu H100] [--mfu 0.4] [--results]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from devices import PEAK_BF16
from results_file import add_option, recording

from gpt1 import bpe
from gpt1.arms import ablation_params
from gpt1.arms.run import task_truncation
from gpt1.config import load_params
from gpt1.finetune import resolve_hparams
from gpt1.model import flops_per_token
from gpt1.tasks import formats, load
from gpt1.tasks.registry import TASKS


def padded_tokens(seqs: list[list[list[int]]], batch: int) -> tuple[int, float]:
    """(tokens of one pass with each batch padded to its longest sequence, mean length)."""
    total, n = 0, 0
    for start in range(0, len(seqs), batch):
        chunk = [s for example in seqs[start:start + batch] for s in example]
        total += len(chunk) * max(map(len, chunk))
        n += sum(map(len, chunk))
    return total, n / max(1, sum(len(e) for e in seqs))


def stage_flops(params, task: str, tok, encode) -> float:
    """Training + evaluation FLOPs of one fine-tuning stage (all its seeds)."""
    hp = resolve_hparams(params, task)
    tables = load.read_tables(Path(params.paths.tasks) / task)
    caps = {"train": hp.max_train_examples, "dev": hp.max_eval_examples,
            "test": hp.max_eval_examples}
    tokens = {}
    for split, table in tables.items():
        capped = load.cap_table(table, caps[split], hp.data_seed)
        enc = formats.encode_table(capped, TASKS[task], encode, formats.specials_of(tok),
                                   task_truncation(params, task))
        tokens[split] = padded_tokens(enc.seqs, hp.batch_size)
    fpt = flops_per_token(params.model, tok.vocab_size, round(tokens["train"][1]))
    per_seed = fpt * (hp.epochs * (tokens["train"][0] + tokens["dev"][0] / 3)
                      + tokens["test"][0] / 3)
    return per_seed * len(hp.seeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--gpu", default="H100", choices=[name for name, _ in PEAK_BF16])
    parser.add_argument("--mfu", type=float, default=0.4, help="assumed model FLOPs utilisation")
    add_option(parser)
    args = parser.parse_args()
    params = load_params(args.params)
    tok = bpe.load_bpe(params.paths.tokenizer)
    encode = formats.text_encoder(tok)
    stages = {f"finetune@{t}": stage_flops(params, t, tok, encode)
              for t in params.finetune.tasks}
    for variant in params.ablations.variants:
        run = ablation_params(params, variant)
        stages.update({f"ablation@{variant}-{t}": stage_flops(run, t, tok, encode)
                       for t in params.ablations.tasks})
    for t in params.layers.tasks:
        for k in params.layers.layers_transferred:
            stages[f"transfer_layers@{t}-{k}"] = stages.get(f"finetune@{t}", 0.0)
    rate = dict(PEAK_BF16)[args.gpu] * args.mfu  # FLOP/s
    hours = {name: flop / rate / 3600 for name, flop in stages.items()}
    for name, h in sorted(hours.items(), key=lambda kv: -kv[1]):
        print(f"{name:32s} {stages[name]:.3g} FLOP  {h:6.2f} h")
    print(f"{args.params}: {len(stages)} stages, {sum(stages.values()):.3g} FLOP = "
          f"{sum(hours.values()):.1f} GPU-hours on {args.gpu} at MFU {args.mfu:.0%} "
          "(estimate from FLOPs, not measured)")
    for n in args.gpus:
        load_h = [0.0] * n
        for h in sorted(hours.values(), reverse=True):  # longest first onto the freest GPU
            load_h[load_h.index(min(load_h))] += h
        print(f"on {n} GPU(s): {max(load_h):.1f} h wall")


if __name__ == "__main__":
    with recording("finetune-cost"):
        main()
