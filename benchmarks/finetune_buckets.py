"""Length-bucketed fine-tuning batches vs random batches: padding and wall time, real data.

For each task (default SST-2 and QNLI), the task's TRAINING split only (from the mirror in
params.paths.mirror_dir; no dev or test split is read): encoded as fine-tuning encodes it, it
counts the tokens of one epoch after padding with random batches and with length buckets
(finetune.bucket_pool_batches, or 50 where the params turn buckets off) over the whole
training split and over a seeded sample of `--n` examples. Then it times fine-tuning epochs on
that sample with the params model (random init: the same arithmetic as a pre-trained one) and
the task's recipe (batch size, lambda), the two ways alternating epoch by epoch so load from
other processes hits both alike. Prints the padded/real ratios and the wall-time and CPU-time
ratios (on a shared machine the CPU time is the steadier of the two).

The tokenizer is params.paths.tokenizer when it exists, else a BPE (params.bpe) trained here on
the first `--corpus-books` books of the mirror's corpus, cleaned as the pipeline cleans them.

    .venv/bin/python benchmarks/finetune_buckets.py [--params configs/cpu-study.yaml]
        [--tasks sst2 qnli] [--n 2000] [--rounds 2] [--results]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from results_file import add_option, recording

from gpt1 import bpe
from gpt1.backends import apply_backend
from gpt1.batching import epoch_batches, example_lengths, padded_tokens
from gpt1.config import Params, load_params
from gpt1.data.clean import RawDocument, clean_document
from gpt1.finetune import Hparams, collate, make_loss_fn, resolve_hparams, train_subset_seed
from gpt1.heads import TaskModel
from gpt1.model import GPT
from gpt1.optim import build_optimizer
from gpt1.runtime import resolve_precision
from gpt1.step import train_step
from gpt1.tasks import formats, load
from gpt1.tasks.registry import TASKS, TaskSpec


def tokenizer(params: Params, books: int, tmp: Path) -> tuple[bpe.Bpe, str]:
    if Path(params.paths.tokenizer).is_dir():
        return bpe.load_bpe(params.paths.tokenizer), params.paths.tokenizer
    corpus = Path(str(params.paths.mirror_dir)) / "corpus"
    texts = []
    for path in sorted(corpus.glob("*.txt"))[:books]:
        data = path.read_bytes()
        doc = RawDocument(doc_id=path.stem, source=path.name, n_bytes=len(data),
                          sha256="", data=data)
        cleaned = clean_document(doc, params.clean)
        if cleaned.text:
            texts.append(cleaned.text)
    return (bpe.train_bpe(texts, params.bpe, tmp / "tok"),
            f"BPE trained here on {len(texts)} corpus books, {params.bpe.n_merges} merges")


def timed_epoch(spec: TaskSpec, hp: Hparams, params: Params, vocab: int, data: formats.Encoded,
                batches: list[np.ndarray], precision: str) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of one epoch over `batches`."""
    torch.manual_seed(0)
    body = GPT(params.model, vocab)
    apply_backend(body, params.model.backend, torch.device("cpu"))
    model = TaskModel(body, spec, hp.clf_pdrop, hp.init_std).train()
    opt = build_optimizer(model, hp.lr, hp.betas, hp.eps, hp.weight_decay)
    loss_fn = make_loss_fn(spec, hp.lm_coef)
    device = torch.device("cpu")
    t0, c0 = time.perf_counter(), time.process_time()
    for rows in batches:
        idx, lengths = collate([data.seqs[i] for i in rows], device)
        labels = torch.as_tensor(data.labels[rows], dtype=torch.long)
        train_step(model, opt, [(idx, lengths, labels)], loss_fn, hp.lr, hp.grad_clip, precision)
    return time.perf_counter() - t0, time.process_time() - c0


def ratios(data: formats.Encoded, batch_size: int, pool: int, seed: int) -> tuple[float, float]:
    """(padded/real tokens of one epoch) with random batches, with buckets."""
    perm = np.random.default_rng(seed).permutation(len(data))
    lengths = example_lengths(data.seqs)
    out = []
    for p in (None, pool):
        real, padded = padded_tokens(epoch_batches(perm, lengths, batch_size, p,
                                                   np.random.default_rng([seed, 1])), data.seqs)
        out.append(padded / real)
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--tasks", nargs="+", default=["sst2", "qnli"])
    ap.add_argument("--n", type=int, default=2000, help="training examples timed per epoch")
    ap.add_argument("--rounds", type=int, default=2, help="epochs timed per way")
    ap.add_argument("--corpus-books", type=int, default=12)
    add_option(ap)
    args = ap.parse_args()
    params = load_params(args.params)
    pool = params.finetune.bucket_pool_batches or 50
    precision = resolve_precision(params.pretrain.precision, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        tok, source = tokenizer(params, args.corpus_books, Path(tmp))
    print(f"params {args.params}; model {params.model.n_layer}x{params.model.n_embd}, "
          f"precision {precision}, threads {torch.get_num_threads()}; pool {pool} batches")
    print(f"tokenizer: {source}; vocab {tok.vocab_size}")
    print(f"{'task':<6}{'split':>16}{'batch':>6}{'real tok/ex':>12}{'random pad':>11}"
          f"{'bucket pad':>11}{'pad cut':>8}{'random s':>10}{'bucket s':>10}{'speed-up':>9}"
          f"{'rand cpu':>10}{'buck cpu':>10}{'cpu ratio':>9}")
    for task in args.tasks:
        spec, hp = TASKS[task], resolve_hparams(params, task)
        train = load.load_task(spec, params.tasks, params.paths.mirror_dir)["train"]
        tr = formats.Truncation(params.model.n_positions,
                                params.tasks.truncation_overrides.get(task,
                                                                      params.tasks.truncation),
                                params.tasks.truncate_keep)
        encode = formats.text_encoder(tok)
        full = formats.encode_table(train, spec, encode, formats.specials_of(tok), tr)
        sample = full.subset(np.sort(np.random.default_rng(
            train_subset_seed(params.seed, 0)).choice(len(full), min(args.n, len(full)),
                                                      replace=False)).tolist())
        for name, data in ((f"train (all {len(full)})", full), (f"sample {len(sample)}", sample)):
            rand, buck = ratios(data, hp.batch_size, pool, seed=0)
            real = sum(len(s) for ex in data.seqs for s in ex) / len(data)
            line = (f"{task:<6}{name:>16}{hp.batch_size:>6}{real:>12.1f}{rand:>10.2f}x"
                    f"{buck:>10.2f}x{rand / buck:>7.2f}x")
            if data is sample:
                lengths = example_lengths(data.seqs)
                times: dict[str, list[tuple[float, float]]] = {"random": [], "bucket": []}
                warm = epoch_batches(np.arange(len(data)), lengths, hp.batch_size, None,
                                     np.random.default_rng(0))[:2]
                timed_epoch(spec, hp, params, tok.vocab_size, data, warm, precision)  # warm-up
                for r in range(args.rounds):
                    perm = np.random.default_rng(r).permutation(len(data))
                    for way, p in (("random", None), ("bucket", pool)):
                        b = epoch_batches(perm, lengths, hp.batch_size, p,
                                          np.random.default_rng([r, 1]))
                        times[way].append(timed_epoch(spec, hp, params, tok.vocab_size, data,
                                                      b, precision))
                t_r, t_b = (statistics.median(w for w, _ in times[k]) for k in ("random", "bucket"))
                c_r, c_b = (statistics.median(c for _, c in times[k]) for k in ("random", "bucket"))
                line += (f"{t_r:>10.1f}{t_b:>10.1f}{t_r / t_b:>8.2f}x{c_r:>10.1f}{c_b:>10.1f}"
                         f"{c_r / c_b:>8.2f}x")
            print(line, flush=True)
    print("pad = tokens after padding / real tokens in one epoch; speed-up = median epoch wall "
          f"time, random / bucketed ({args.rounds} epochs each, alternating); cpu = the same "
          "epochs in this process's CPU seconds (less sensitive to other processes' load)")


if __name__ == "__main__":
    with recording("finetune-buckets"):
        main()
