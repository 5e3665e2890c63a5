"""Validation perplexity curve of a pre-training run -> PNG (reports/pretrain_demo.md).

Reads the history the pretrain stage writes (`<paths.metrics>/pretrain_p<seed>.curve.json`,
earlier `..._val.json`: step, tokens, train_loss, val_loss, val_ppl per evaluation) and plots
val perplexity against tokens seen.

    .venv/bin/python benchmarks/plot_pretrain_curve.py reports/metrics/pretrain_val.json \
        reports/pretrain_demo.png
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("history", type=Path)
    parser.add_argument("png", type=Path)
    args = parser.parse_args()
    history = json.loads(args.history.read_text())
    tokens = [h["tokens"] / 1e6 for h in history]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(tokens, [h["val_ppl"] for h in history], marker="o", label="validation")
    ax.plot(tokens, [math.exp(h["train_loss"]) for h in history], marker=".", linestyle="--",
            label="train (last batch)")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("perplexity (token level)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title("GPT-1 demo preset: pre-training on the Gutenberg mirror")
    fig.tight_layout()
    fig.savefig(args.png)
    for h in history:
        print(f"step {h['step']:5d}  tokens {h['tokens']:>9,d}  val loss {h['val_loss']:.4f}  "
              f"val ppl {h['val_ppl']:8.2f}")


if __name__ == "__main__":
    main()
