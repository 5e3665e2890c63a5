"""What the study costs on N GPUs: every pre-training and fine-tuning run, in hours at the
measured (else an assumed) MFU, before any run starts.

The pre-training budget comes from the params file (configs/paper.yaml: 100 epochs of 64 x
512-token windows) over a corpus of --corpus-tokens training tokens (default: the train tokens
the last `shard_corpus` stage recorded in reports/metrics/shard_corpus.json), once per
pre-training seed for the Transformer (`pretrain`) and for the LSTM baseline (`pretrain_lstm`,
the same loop and data); none under pretrain.import_hf. Each trains on all --gpus GPUs with
DDP (linear scaling: an assumption until the GPU check measures it).

The fine-tuning fan-out is every fine-tuning run the params ask for: finetune tasks, Table 5
ablations and Figure 2 left's transfer runs, each x fine-tuning seeds x pre-training seeds, plus
the pilots (each lr x warm-up of ablations.pilot's grid and the recipe, per piloted arm x task,
one seed, on the training pool less the carved split), each run on one GPU
(orchestrate.devices: auto); its training tokens = train rows
(reports/metrics/prepare_task_<task>.json, capped as the task's fine-tuning) x epochs x
sequences per example x model.n_positions: an upper bound, every sequence counted at the full
context; evaluation passes are not counted. The fan-out takes max(all runs / GPUs, the longest
run).

The rate is the device's dense bf16 peak (devices.PEAK_BF16) times the MFU: --mfu when given,
else the one measured in the newest GPU-check results file of that device
(benchmarks/results/gpu_<device>_<date>.md; the line of the preset's split over --gpus GPUs
when there is one), else 40 %, said to be unmeasured. FLOPs per token
are gpt1.model.flops_per_token (the Transformer) and gpt1.lstm.lstm_flops_per_token (the LSTM);
gpt1.pretraining.cost_projection does the arithmetic, as the pre-training stage logs it.

    .venv/bin/python benchmarks/cost_projection.py [--params configs/paper.yaml] [--results]
        [--gpu H100] [--gpus 8] [--mfu 0.4] [--corpus-tokens N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import torch
from devices import PEAK_BF16
from results_file import RESULTS_DIR, add_option, recording

from gpt1 import names
from gpt1.arms import ablation_params, layers_caps
from gpt1.config import Params, ParamsError, load_params
from gpt1.errors import Gpt1Error
from gpt1.finetune import resolve_hparams
from gpt1.lstm import lstm_flops_per_token
from gpt1.model import GPT, count_parameters, flops_per_token
from gpt1.pretraining import cost_projection, total_steps_for

ROOT = Path(__file__).resolve().parents[1]
"""The repository: the default params and stage records are read from it, from any folder."""
VOCAB = 40_478  # the original release's vocabulary (40,000 merges + characters)
ASSUMED_MFU = 0.4
MFU = re.compile(r"\bMFU (\d+(?:\.\d+)?) ?%")
# the GPU check's line for the real pre-training loop, preferred over its bare-step lines
LOOP_LINE = "pre-training loop"
SPLIT_LINE = "micro_batch_seqs auto on {gpus} GPU(s)"
"""The GPU check's line for the paper preset's batch split over that many GPUs."""
RESULTS_NAME = re.compile(r"^gpu_.+_(\d{4}-\d{2}-\d{2})(?:-(\d+))?\.md$")
LSTM_LINE = "LSTM baseline"
"""The GPU check's lines for the LSTM (benchmarks/gpu_check.py), at 64 and 8 sequences."""
FINETUNE_LINE = re.compile(
    r"fine-tuning RACE-shaped update \((?P<n>\d+) x (?P<k>\d+) x (?P<seq>\d+) tokens.*?\): "
    r"(?:(?P<rate>[\d,]+) tokens/s|(?P<ms>\d+(?:\.\d+)?) ms)")


def finetune_runs(params: Params, train_rows: dict[str, int]) -> dict[str, tuple[int, str]]:
    """Fine-tuning run -> (its training tokens, its body: gpt or lstm), for every run of the
    finetune, ablation, transfer_layers and lr_pilot stages the params ask for. Tokens are an
    upper bound: full-context sequences."""
    from gpt1.tasks.registry import TASKS

    seq, pilot = params.model.n_positions, params.ablations.pilot

    def tokens(run: Params, task: str, rows: int) -> int:
        spec, hp = TASKS[task], resolve_hparams(run, task)
        per_example = spec.n_choices if spec.fmt == "choice" else (
            2 if spec.fmt == "similarity" else 1)
        capped = min(rows, hp.max_train_examples) if hp.max_train_examples else rows
        return capped * hp.epochs * per_example * seq

    def seeds(run: Params, task: str) -> tuple[int, ...]:
        return resolve_hparams(run, task).seeds

    def arm_body(variant: str) -> str:
        return names.TRANSFORMER if variant == "full" else params.ablations.presets[variant].body

    cells: dict[str, tuple[Params, str, str]] = {  # stage (no seed) -> run params, task, body
        f"finetune@{t}": (params, t, names.TRANSFORMER) for t in params.finetune.tasks}
    for v in params.ablations.variants:
        run, body = ablation_params(params, v), params.ablations.presets[v].body
        cells |= {f"ablation@{v}-{t}": (run, t, body) for t in params.ablations.tasks}
    for t in params.layers.tasks:
        run = layers_caps(params, t)
        cells |= {f"transfer_layers@{t}-{k}": (run, t, names.TRANSFORMER)
                  for k in params.layers.layers_transferred}
    runs = {f"{name}-{p}/seed{s}": (tokens(run, t, train_rows[t]), body)
            for name, (run, t, body) in cells.items() for p in params.pretrain.seeds
            for s in seeds(run, t)}
    for v in pilot.variants:  # every (lr, warm-up) and the recipe's row, once per arm x task
        for t in params.ablations.tasks:  # first pre-training seed, pilot.seed, carved dev out
            recipe = (resolve_hparams(ablation_params(params, v), t).lr,
                      params.finetune.warmup_frac)
            grid = [(lr, w) for lr in pilot.lr_grid for w in pilot.warmup_grid]
            stage = f"lr_pilot_full@{t}" if v == "full" else f"lr_pilot@{v}-{t}"
            for lr, w in dict.fromkeys([*grid, recipe]):
                rows = max(0, train_rows[t] - pilot.dev_examples)
                runs[f"{stage}/lr{lr:g}_w{w:g}"] = (
                    tokens(ablation_params(params, v, lr, w), t, rows), arm_body(v))
    return runs


def fanout_hours(run_flops: dict[str, float], gpus: int, flops_per_s: float) -> float:
    """Hours of runs fanned out one per GPU: the total over the GPUs, or the longest run."""
    total, longest = sum(run_flops.values()), max(run_flops.values())
    return max(total / gpus, longest) / flops_per_s / 3600.0


def task_rows(metrics_dir: Path, tasks: set[str]) -> dict[str, int] | None:
    """Train rows per task from the prepare_task records, or None if one is missing."""
    rows = {}
    for task in tasks:
        path = metrics_dir / f"prepare_task_{task}.json"
        if not path.is_file():
            return None
        rows[task] = int(json.loads(path.read_text())["rows"]["train"])
    return rows


def device_kind(name: str) -> str | None:
    """The PEAK_BF16 entry a device name matches (`H100` for `NVIDIA H100 80GB HBM3`)."""
    return next((key for key, _ in PEAK_BF16 if key in name), None)


def newest_results(results_dir: Path, gpu: str) -> tuple[Path, list[str]] | None:
    """The newest GPU-check results file measured on a `gpu` device and its lines."""
    found = []
    for path in results_dir.glob("gpu_*.md"):
        named = RESULTS_NAME.match(path.name)
        text = path.read_text(encoding="utf-8")
        device = re.search(r"^- hardware: ([^;\n]+)", text, re.M)
        if named and device and device_kind(device.group(1)) == gpu:
            found.append(((named.group(1), int(named.group(2) or 1)), path, text))
    if not found:
        return None
    _, path, text = max(found, key=lambda f: f[0])
    return path, [line.strip() for line in text.splitlines()]


def measured_mfu(results_dir: Path, gpu: str, gpus: int = 1) -> tuple[float, Path, str] | None:
    """(MFU, file, line) from the newest GPU-check results file measured on a `gpu` device: its
    line for the paper preset's split over `gpus` GPUs (each GPU's share of the batch, timed on
    one: the all-reduce is not counted) when it has one, else its pre-training-loop line, else
    its best Transformer MFU line; None without one."""
    newest = newest_results(results_dir, gpu)
    if newest is None:
        return None
    path, text = newest
    lines = [(float(m.group(1)) / 100, line) for line in text
             if (m := MFU.search(line)) and not line.startswith(LSTM_LINE)]
    split = [entry for entry in lines if SPLIT_LINE.format(gpus=gpus) in entry[1]]
    loop = [entry for entry in lines if LOOP_LINE in entry[1]]
    if not (split or loop or lines):
        return None
    mfu, line = max(split or loop or lines)
    return mfu, path, line


def measured_lstm_mfu(results_dir: Path, gpu: str, rows: int) -> tuple[float, Path, str] | None:
    """(MFU, file, line) of the LSTM baseline at micro-batch `rows` in the newest GPU-check
    results file of a `gpu` device, else at any micro-batch; None when it has none."""
    newest = newest_results(results_dir, gpu)
    if newest is None:
        return None
    path, text = newest
    lines = [(float(m.group(1)) / 100, line) for line in text
             if line.startswith(LSTM_LINE) and (m := MFU.search(line))]
    exact = [entry for entry in lines if f"micro-batch {rows} x" in entry[1]]
    if not (exact or lines):
        return None
    mfu, line = (exact or lines)[0]
    return mfu, path, line


def measured_finetune_rate(results_dir: Path, gpu: str) -> tuple[float, Path, str] | None:
    """(tokens/s, file, line) of one GPU's full-context fine-tuning update (the RACE-shaped
    line: 512-token sequences, as the fan-out counts them) in the newest GPU-check results file
    of a `gpu` device: its median tokens/s, or its examples x sequences x tokens over its
    milliseconds (the 2026-11-26 format); None without one."""
    newest = newest_results(results_dir, gpu)
    if newest is None:
        return None
    path, text = newest
    for line in text:
        if (m := FINETUNE_LINE.search(line)) is None:
            continue
        if m.group("rate"):
            return float(m.group("rate").replace(",", "")), path, line
        tokens = int(m.group("n")) * int(m.group("k")) * int(m.group("seq"))
        return tokens / (float(m.group("ms")) / 1e3), path, line
    return None


def corpus_line(corpus: int, given: bool, metrics_dir: Path) -> str:
    """The corpus the projection prices beside the one this workspace's mirror gave
    (shard_corpus's train tokens)."""
    record = metrics_dir / "shard_corpus.json"
    said = "assumed (--corpus-tokens)" if given else f"measured: {record.name}"
    if not given:
        return f"corpus: {corpus:,} training tokens an epoch, {said}"
    if not record.is_file():
        return (f"corpus: {corpus:,} training tokens an epoch, {said}; the mirror's: no "
                f"shard_corpus record in {os.path.relpath(metrics_dir)}")
    mirror = int(json.loads(record.read_text())["tokens"]["train"])
    return (f"corpus: {corpus:,} training tokens an epoch, {said}; the mirror's: {mirror:,} "
            f"({record.name}), {mirror / corpus:.1%} of it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=str(ROOT / "configs" / "paper.yaml"))
    parser.add_argument("--gpu", default="H100", choices=[name for name, _ in PEAK_BF16])
    parser.add_argument("--gpus", type=int, default=1, help="GPUs (one node or several)")
    parser.add_argument("--mfu", type=float,
                        help="model FLOPs utilisation (default: the GPU check's, else 0.4)")
    parser.add_argument("--corpus-tokens", type=int, help="training tokens in one epoch")
    parser.add_argument("--metrics-dir", default=str(ROOT / "reports" / "metrics"),
                        help="stage records: shard_corpus.json, prepare_task_<task>.json")
    parser.add_argument("--results-dir", default=str(RESULTS_DIR),
                        help="where the GPU check's results files are")
    add_option(parser)
    args = parser.parse_args()
    params = load_params(args.params)
    cfg = params.pretrain
    metrics_dir, results_dir = Path(args.metrics_dir), Path(args.results_dir)
    where = os.path.relpath(results_dir)

    def source(found: tuple[float, Path, str] | None, otherwise: str) -> tuple[float | None, str]:
        if args.mfu:
            return args.mfu, "given (--mfu)"
        if found:
            return found[0], f"measured: {found[1].name}: {found[2]}"
        return None, otherwise

    unmeasured = f"assumed: unmeasured, no GPU-check results file of an {args.gpu} in {where}"
    mfu, said = source(measured_mfu(results_dir, args.gpu, args.gpus), unmeasured)
    mfu = ASSUMED_MFU if mfu is None else mfu
    corpus = args.corpus_tokens or json.loads(
        (metrics_dir / "shard_corpus.json").read_text())["tokens"]["train"]
    steps = total_steps_for(cfg, corpus // cfg.seq_len)
    with torch.device("meta"):  # shapes only: no 117 M-parameter allocation
        n_params = count_parameters(GPT(params.model, VOCAB))
    peak = dict(PEAK_BF16)[args.gpu]
    fpt = {names.TRANSFORMER: flops_per_token(params.model, VOCAB, cfg.seq_len),
           names.LSTM: lstm_flops_per_token(params.lstm, VOCAB)}
    rate = peak * mfu / fpt[names.TRANSFORMER]  # tokens/s
    plan = cost_projection(n_params, fpt[names.TRANSFORMER],
                           steps * cfg.batch_seqs * cfg.seq_len, rate)
    print(f"{args.params}: {plan['params'] / 1e6:.1f} M parameters, "
          f"{plan['flops_per_token'] / 1e9:.3f} GFLOP/token, {steps:,} updates = "
          f"{plan['tokens'] / 1e9:.2f} G tokens ({corpus:,} per epoch), "
          f"{plan['flops']:.3g} FLOP")
    print(corpus_line(corpus, bool(args.corpus_tokens), metrics_dir))
    print(f"MFU {mfu:.1%}, {said}")
    print(f"one {args.gpu} at {peak / 1e12:.0f} TFLOP/s dense bf16 x MFU {mfu:.0%} = "
          f"{rate:,.0f} tokens/s: {plan['hours']:.1f} h ({plan['hours'] / 24:.2f} days)")
    rows = max(1, cfg.batch_seqs // args.gpus)
    lstm_mfu, lstm_said = source(measured_lstm_mfu(results_dir, args.gpu, rows),
                                 "unmeasured: Transformer MFU assumed")
    lstm_mfu = mfu if lstm_mfu is None else lstm_mfu
    print(f"LSTM pre-training MFU {lstm_mfu:.1%}, {lstm_said}")
    seeds = 0 if cfg.import_hf is not None else len(cfg.seeds)
    lstm_hours = plan["hours"] * fpt[names.LSTM] / fpt[names.TRANSFORMER] * mfu / lstm_mfu
    pretrain_hours = seeds * (plan["hours"] + lstm_hours) / args.gpus
    print(f"pre-training on {args.gpus} x {args.gpu} (DDP, linear scaling assumed): {seeds} "
          f"seed(s) x (Transformer {plan['hours'] / args.gpus:.1f} h + LSTM "
          f"{lstm_hours / args.gpus:.1f} h at {fpt['lstm'] / 1e9:.3f} GFLOP/token) = "
          f"{pretrain_hours:.1f} h")
    p = params
    tasks = {*p.finetune.tasks, *p.ablations.tasks, *p.layers.tasks}
    task_train = task_rows(metrics_dir, tasks)
    if task_train is None:
        print(f"fine-tuning: no prepare_task records in {metrics_dir} for every task; run "
              "`dvc repro prepare_task` first")
        return
    tuned = measured_finetune_rate(results_dir, args.gpu)
    one_gpu = measured_mfu(results_dir, args.gpu, 1)
    if args.mfu:
        ft_flops, ft_said = peak * args.mfu, "given (--mfu)"
    elif tuned:
        ft_flops = tuned[0] * fpt[names.TRANSFORMER]
        ft_said = f"measured: {tuned[1].name}: {tuned[2]}"
    elif one_gpu and SPLIT_LINE.format(gpus=1) in one_gpu[2]:
        ft_flops, ft_said = peak * one_gpu[0], f"measured: {one_gpu[1].name}: {one_gpu[2]}"
    else:
        ft_flops, ft_said = peak * mfu, f"assumed: the pre-training MFU ({unmeasured})"
    lstm_one = measured_lstm_mfu(results_dir, args.gpu, cfg.batch_seqs)
    flops_per_s = {names.TRANSFORMER: ft_flops,
                   names.LSTM: peak * (args.mfu or (lstm_one[0] if lstm_one else 0.0))
                   or ft_flops}
    print(f"fine-tuning, one GPU a run: Transformer {ft_flops / 1e12:.0f} TFLOP/s "
          f"(MFU {ft_flops / peak:.1%}), {ft_said}")
    print(f"fine-tuning, one GPU a run: LSTM {flops_per_s[names.LSTM] / 1e12:.0f} TFLOP/s, "
          + ("given (--mfu)" if args.mfu else f"measured: {lstm_one[1].name}: {lstm_one[2]}"
             if lstm_one else "unmeasured: the Transformer's fine-tuning rate assumed"))
    runs = finetune_runs(p, task_train)
    seconds = {name: n * fpt[body] / flops_per_s[body] for name, (n, body) in runs.items()}
    hours = fanout_hours(seconds, args.gpus, 1.0)
    stages: dict[str, int] = {}
    for name in runs:
        stages[name.split("@")[0]] = stages.get(name.split("@")[0], 0) + 1
    print(f"fine-tuning fan-out: {len(runs)} runs "
          f"({', '.join(f'{n} {s}' for s, n in stages.items())}), "
          f"{sum(n for n, _ in runs.values()) / 1e9:.2f} G tokens at most (full-context "
          f"sequences), one run per GPU on {args.gpus} x {args.gpu}: {hours:.1f} h")
    print(f"in all: {pretrain_hours + hours:.1f} h on {args.gpus} x {args.gpu} "
          f"= {args.gpus * (pretrain_hours + hours):.0f} GPU-hours")


if __name__ == "__main__":
    try:
        with recording("cost-projection"):
            main()
    except (Gpt1Error, ParamsError, OSError) as err:  # bad params, a missing stage record
        sys.exit(f"cost_projection: {err}")
