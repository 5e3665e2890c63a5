"""A tiny transformers OpenAI-GPT checkpoint as a user downloads one: a randomly initialised
OpenAIGPTLMHeadModel saved with save_pretrained, vocab.json + merges.txt (a BPE learned on
standardised text holding punctuation, contractions and accented letters) and the tokenizer
files transformers writes. Used by the import-hf unit tests and the end-to-end preset test."""

from __future__ import annotations

import json
from pathlib import Path

PARAGRAPH = ("The café's owner said: \"Don't worry -- it's naïve to think we'll fail!\" "
             "Costs rose 10% (from $5 to $5.50)… didn't they?\nYes—they did; Zoë's "
             "co-op [est. 1999] won't close.")
"""Raw text with punctuation, contractions and unicode (the tokenizer parity check)."""
SENTENCES = ["the cat sat on the mat .", "it was a very good film , i'd say .",
             "a bad film ? no , a great one !", "she didn't go ; he couldn't stay ."]


def write_tiny_openai_gpt(out: Path, n_positions: int = 32, n_embd: int = 32, n_layer: int = 2,
                          n_head: int = 2, n_merges: int = 80, seed: int = 0) -> dict:
    """Write the checkpoint into `out`; return {"vocab": ..., "merges": ...}."""
    import torch
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel, OpenAIGPTTokenizer

    from gpt1.bpe import learn_merges
    from gpt1.config import BpeCfg
    from gpt1.data.clean import standardize_texts

    texts = standardize_texts([PARAGRAPH, PARAGRAPH.upper(), *SENTENCES * 3])
    cfg = BpeCfg(n_merges=n_merges, min_frequency=1, lowercase=True, end_of_word_suffix="</w>",
                 special_tokens=("_start_", "_delimiter_", "_classify_"))
    vocab, merges = learn_merges(texts, cfg)
    torch.manual_seed(seed)
    hf = OpenAIGPTLMHeadModel(OpenAIGPTConfig(vocab_size=len(vocab), n_positions=n_positions,
                                              n_embd=n_embd, n_layer=n_layer, n_head=n_head))
    with torch.no_grad():  # non-trivial LayerNorm gains and biases too
        for name, p in hf.named_parameters():
            if "ln_" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    hf.eval().save_pretrained(out)
    OpenAIGPTTokenizer(vocab=vocab, merges=merges).save_pretrained(out)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
                                    encoding="utf-8")
    return {"vocab": vocab, "merges": merges}
