"""Data-pipeline throughput on a corpus directory, with a peer measured in the same run.

    .venv/bin/python benchmarks/data_pipeline.py <mirror>/corpus [--params params.yaml] [--results]

Prints clean MB/s, BPE training seconds, and shard-encode tokens/s (gpt1.data.shards, which
also writes the shards) beside bare `tokenizers.Tokenizer.encode_batch` on the same texts with
the same tokenizer file, as a ratio; the ratio against
`encode_batch_fast` (no offsets; what gpt1.bpe calls) is printed beside it.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from results_file import add_option, recording
from tokenizers import Tokenizer

from gpt1 import bpe
from gpt1.config import load_params
from gpt1.data import clean, shards, sources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus_dir", type=Path)
    parser.add_argument("--params", default="params.yaml")
    add_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = load_params(args.params)

    docs = sources.raw_documents({"source": "mirror", "root": str(args.corpus_dir),
                                  "files": sources.scan_corpus_dir(args.corpus_dir)})
    start = time.perf_counter()
    kept, stats = clean.clean_documents(docs, params.clean)
    clean_s = time.perf_counter() - start
    texts = [d.text or "" for d in kept]
    doc_ids = [d.doc_id for d in kept]

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        tok = bpe.train_bpe(texts, params.bpe, Path(tmp) / "tok")
        bpe_s = time.perf_counter() - start

        tok_file = str(Path(tmp) / "tok" / bpe.TOKENIZER_FILE)
        start = time.perf_counter()
        encodings = Tokenizer.from_file(tok_file).encode_batch(texts, add_special_tokens=False)
        bare_tokens = sum(len(e.ids) for e in encodings)
        bare_s = time.perf_counter() - start
        del encodings
        # A stricter peer: the variant without offsets, which gpt1.bpe itself calls.
        start = time.perf_counter()
        encodings = Tokenizer.from_file(tok_file).encode_batch_fast(texts,
                                                                    add_special_tokens=False)
        fast_tokens = sum(len(e.ids) for e in encodings)
        fast_s = time.perf_counter() - start
        del encodings

        start = time.perf_counter()
        index = shards.write_shards(doc_ids, texts, tok, params.shard, params.seed,
                                    Path(tmp) / "shards")
        shard_s = time.perf_counter() - start
    shard_tokens = sum(s["tokens"] for s in index["splits"].values())
    assert shard_tokens == bare_tokens == fast_tokens, (shard_tokens, bare_tokens, fast_tokens)

    mb = stats["input_bytes"] / 1e6
    print(f"corpus: {stats['input_documents']} files, {mb:.1f} MB -> {stats['documents']} "
          f"documents, {stats['characters'] / 1e6:.1f} M chars, {shard_tokens:,} tokens")
    print(f"clean: {mb / clean_s:.2f} MB/s ({clean_s:.1f} s, workers={params.clean.workers})")
    print(f"bpe: {bpe_s:.1f} s for {params.bpe.n_merges} merges (vocab {tok.vocab_size})")
    print(f"encode: shard_corpus {shard_tokens / shard_s:,.0f} tokens/s ({shard_s:.1f} s, "
          f"shards written) vs bare Tokenizer.encode_batch {bare_tokens / bare_s:,.0f} "
          f"tokens/s ({bare_s:.1f} s)")
    print(f"        bare Tokenizer.encode_batch_fast {fast_tokens / fast_s:,.0f} tokens/s "
          f"({fast_s:.1f} s)")
    print(f"ratio shard-encode / encode_batch = {bare_s / shard_s:.2f} "
          f"(/ encode_batch_fast = {fast_s / shard_s:.2f})")


if __name__ == "__main__":
    with recording("data-pipeline"):
        main()
