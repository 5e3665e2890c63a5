"""The four task-aware input transformations (spec §2 table, parity notes in spec §5).

classify:   [start] text [classify]
entail:     [start] premise [delim] hypothesis [classify]
similarity: [start] A [delim] B [classify]  and  [start] B [delim] A [classify]
            (both orders; the model sums their two `_classify_` states before the head)
choice:     per answer k: [start] context question [delim] answer_k [classify]
            (one scalar per answer, softmax over the answers)
Texts are standardised (gpt1.data.clean) and BPE-encoded before the layout; truncation follows
params.tasks (spec §5: `ctx[:max_len]`, `answer[:max_len]`, max_len = n_ctx // 2 - 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from gpt1.data.clean import standardize_texts
from gpt1.tasks.registry import TaskSpec

Encode = Callable[[list[str]], list[list[int]]]
"""Texts -> token ids (standardise, then BPE); see `text_encoder`."""
Rule = Literal["half", "longest_first"]
Keep = Literal["head", "tail"]


@dataclass(frozen=True)
class Specials:
    """Ids of the three special tokens appended after the BPE vocabulary (spec §5)."""

    start: int
    delimiter: int
    classify: int


@dataclass(frozen=True)
class Truncation:
    n_ctx: int
    """Model context in tokens (model.n_positions): every sequence fits it."""
    rule: Rule
    keep: Keep


@dataclass
class Encoded:
    """A task split as token sequences: example i has K sequences (1, 2 or n_choices)."""

    seqs: list[list[list[int]]]
    labels: np.ndarray
    ids: list[str]
    groups: list[str]
    truncated: list[bool]
    """Per example: at least one sequence was shortened to fit n_ctx."""

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def n_truncated(self) -> int:
        return sum(self.truncated)

    def subset(self, rows: Sequence[int]) -> Encoded:
        return Encoded([self.seqs[i] for i in rows], self.labels[np.asarray(rows, dtype=int)],
                       [self.ids[i] for i in rows], [self.groups[i] for i in rows],
                       [self.truncated[i] for i in rows])


def _cut(tokens: list[int], n: int, keep: Keep) -> list[int]:
    n = max(n, 0)
    return tokens[:n] if keep == "head" else tokens[len(tokens) - n:]


def fit_parts(parts: Sequence[list[int]], n: int, keep: Keep) -> list[int]:
    """Concatenate parts into at most n tokens, cutting the FIRST part first (a RACE passage is
    cut before its question), then the next ones if still too long."""
    out = [list(p) for p in parts]
    excess = sum(map(len, out)) - n
    for i in range(len(out)):
        if excess <= 0:
            break
        cut = min(excess, len(out[i]))
        out[i] = _cut(out[i], len(out[i]) - cut, keep)
        excess -= cut
    return [t for p in out for t in p]


def fit_lengths(len_a: int, len_b: int, tr: Truncation) -> tuple[int, int]:
    """Token budget of the two segments of `[start] A [delim] B [classify]`; symmetric in A, B.

    half (spec §5): each segment capped at n_ctx // 2 - 2. longest_first: the longer segment
    is cut until the sequence fits (equal caps when both are long).
    """
    if tr.rule == "half":
        cap = tr.n_ctx // 2 - 2
        return min(len_a, cap), min(len_b, cap)
    budget = tr.n_ctx - 3
    if len_a + len_b <= budget:
        return len_a, len_b
    short = min(len_a, len_b)
    cap = budget - short if 2 * short <= budget else budget // 2
    return min(len_a, cap), min(len_b, cap)


def classify_layout(text: list[int], sp: Specials, tr: Truncation) -> tuple[list[int], bool]:
    """`[start] text [classify]` -> (ids, truncated)."""
    kept = _cut(text, tr.n_ctx - 2, tr.keep)
    return [sp.start, *kept, sp.classify], len(kept) < len(text)


def pair_layout(a_parts: Sequence[list[int]], b: list[int], sp: Specials, tr: Truncation,
                ) -> tuple[list[int], bool]:
    """`[start] A [delim] B [classify]` with A = concatenated a_parts -> (ids, truncated)."""
    len_a = sum(map(len, a_parts))
    ta, tb = fit_lengths(len_a, len(b), tr)
    a = fit_parts(a_parts, ta, tr.keep)
    return [sp.start, *a, sp.delimiter, *_cut(b, tb, tr.keep), sp.classify], (ta, tb) != (
        len_a, len(b))


def similarity_layout(a: list[int], b: list[int], sp: Specials, tr: Truncation,
                      ) -> tuple[list[list[int]], bool]:
    """Both orders (spec §2); one truncation for both, so swapping A and B swaps them."""
    ta, tb = fit_lengths(len(a), len(b), tr)
    a2, b2 = _cut(a, ta, tr.keep), _cut(b, tb, tr.keep)
    return ([[sp.start, *a2, sp.delimiter, *b2, sp.classify],
             [sp.start, *b2, sp.delimiter, *a2, sp.classify]],
            (ta, tb) != (len(a), len(b)))


def choice_layout(context: Sequence[list[int]], answers: Sequence[list[int]], sp: Specials,
                  tr: Truncation) -> tuple[list[list[int]], bool]:
    """One `[start] context [delim] answer_k [classify]` per answer (spec §5)."""
    out = [pair_layout(context, ans, sp, tr) for ans in answers]
    return [s for s, _ in out], any(t for _, t in out)


def layout(spec: TaskSpec, a: list[int], b: list[int], choices: Sequence[list[int]],
           sp: Specials, tr: Truncation) -> tuple[list[list[int]], bool]:
    """The K sequences of one example in the task's family -> (sequences, truncated)."""
    if spec.fmt == "classify":
        seq, cut = classify_layout(a, sp, tr)
        return [seq], cut
    if spec.fmt == "entail":
        seq, cut = pair_layout([a], b, sp, tr)
        return [seq], cut
    if spec.fmt == "similarity":
        return similarity_layout(a, b, sp, tr)
    return choice_layout([a, b], choices, sp, tr)


def encode_table(df: pd.DataFrame, spec: TaskSpec, encode: Encode, sp: Specials,
                 tr: Truncation) -> Encoded:
    """Canonical table -> Encoded. Each distinct text is encoded once (RACE passages repeat)."""
    texts = set(df["text_a"]) | set(df["text_b"]) | {c for cs in df["choices"] for c in cs}
    uniq = sorted(t for t in texts if t)
    ids = dict(zip(uniq, encode(uniq), strict=True))
    ids[""] = []
    seqs, cuts = [], []
    for a, b, cs in zip(df["text_a"], df["text_b"], df["choices"], strict=True):
        s, cut = layout(spec, ids[a], ids[b], [ids[c] for c in cs], sp, tr)
        seqs.append(s)
        cuts.append(cut)
    labels = df["label"].to_numpy(dtype=np.float32 if spec.regression else np.int64)
    return Encoded(seqs, labels, list(df["id"]), list(df["group"]), cuts)


def specials_of(bpe: Any) -> Specials:
    """Specials from a gpt1.bpe.Bpe (its last three ids)."""
    return Specials(bpe.start_id, bpe.delimiter_id, bpe.classify_id)


def text_encoder(bpe: Any) -> Encode:
    """Task text -> ids exactly as the corpus was encoded: standardise (spec §5), then BPE."""
    def encode(texts: list[str]) -> list[list[int]]:
        return [list(x) for x in bpe.encode_batch(standardize_texts(texts))]

    return encode
