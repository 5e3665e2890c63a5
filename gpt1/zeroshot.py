"""Zero-shot heuristics over a language model (spec §3, Figure 2 right).

Every heuristic is a choice between (prefix, continuation) pairs scored by the LM alone:
- SST-2: prefix = sentence + "very"; continuations "negative" / "positive"; the word with the
  higher probability (summed log-prob of its tokens) is the prediction.
- CoLA: one pair per sentence (first token, rest); score = average token log-prob; predict
  "acceptable" above a threshold fitted for the best MCC on another split (params; the paper
  does not say how its threshold was chosen).
- RACE: prefix = document + question; continuation = each answer; highest average token
  log-prob wins.
- DPRD: the definite pronoun is replaced by each candidate; prefix = the sentence up to and
  including the candidate, continuation = the rest; higher average token log-prob wins.
A prefix too long for the context is cut from the left (the question stays next to the answer).
Scores are normalised so that 0 = random guess and 1 = the state of the art (params).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from gpt1.config import ZeroShotCfg, ZeroShotTask
from gpt1.errors import Gpt1Error
from gpt1.progress import progress
from gpt1.scoring import score
from gpt1.tasks.load import cap_table

log = logging.getLogger(__name__)

Encode = Callable[[list[str]], list[list[int]]]
"""Texts -> token ids (standardise, then BPE), as gpt1.tasks.formats.text_encoder."""
Pair = tuple[list[int], list[int]]
"""(prefix tokens, continuation tokens)."""
Reduce = Literal["sum", "mean"]


class Scorer(Protocol):
    """A language model seen through token log-probabilities only."""

    def token_logprobs(self, seqs: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Per sequence of n tokens: the n-1 values log P(x_t | x_<t), t = 1..n-1."""
        ...


class ModelScorer:
    """Scorer over any body with forward(idx) -> (B, T, C) and lm_logits(h) (GPT, LSTMLM)."""

    def __init__(self, model: nn.Module, n_ctx: int, batch_size: int,
                 autocast: Callable[[], AbstractContextManager[Any]]) -> None:
        self.model = model.eval()
        self.n_ctx = n_ctx
        self.batch_size = batch_size
        self.autocast = autocast
        self.device = next(model.parameters()).device

    @torch.no_grad()
    def token_logprobs(self, seqs: Sequence[Sequence[int]]) -> list[np.ndarray]:
        out: list[np.ndarray] = [np.empty(0)] * len(seqs)
        order = np.argsort([len(s) for s in seqs], kind="stable")
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            T = max(len(seqs[i]) for i in rows)
            if T > self.n_ctx:
                raise ValueError(f"sequence of {T} tokens exceeds the context {self.n_ctx}")
            idx = torch.zeros((len(rows), T), dtype=torch.long)  # right padding: causal LM
            for b, i in enumerate(rows):
                idx[b, : len(seqs[i])] = torch.as_tensor(list(seqs[i]), dtype=torch.long)
            idx = idx.to(self.device)
            with self.autocast():
                h = self.model(idx)  # (B, T, C)
                lm_logits = cast(Callable[[torch.Tensor], torch.Tensor], self.model.lm_logits)
                logits = lm_logits(h[:, :-1])  # (B, T-1, V)
            logp = F.log_softmax(logits.float(), dim=-1)
            tok = logp.gather(-1, idx[:, 1:, None]).squeeze(-1).cpu().numpy()  # (B, T-1)
            for b, i in enumerate(rows):
                out[i] = tok[b, : max(len(seqs[i]) - 1, 0)].astype(np.float64)
        return out


def fit_pair(prefix: list[int], cont: list[int], n_ctx: int) -> Pair:
    """Cut a pair to n_ctx tokens: the continuation keeps its head (at most n_ctx - 1 tokens),
    the prefix keeps its tail (at least one token, so the continuation is conditioned)."""
    cont = cont[: n_ctx - 1]
    return prefix[-(n_ctx - len(cont)):], cont


def pair_scores(scorer: Scorer, pairs: Sequence[Pair], reduce: Reduce, n_ctx: int
                ) -> np.ndarray:
    """log P(continuation | prefix), summed or averaged over the continuation's tokens."""
    fitted = [fit_pair(p, c, n_ctx) for p, c in pairs]
    logps = scorer.token_logprobs([p + c for p, c in fitted])
    out = np.empty(len(pairs))
    for i, ((_, cont), lp) in enumerate(zip(fitted, logps, strict=True)):
        tail = lp[len(lp) - len(cont):] if cont else lp[:0]
        out[i] = -np.inf if not len(tail) else (tail.sum() if reduce == "sum" else tail.mean())
    return out


def choose(scorer: Scorer, candidates: Sequence[Sequence[Pair]], reduce: Reduce, n_ctx: int
           ) -> np.ndarray:
    """Per example, the index of its best-scoring (prefix, continuation) pair (ties: first)."""
    flat = [pair for cands in candidates for pair in cands]
    scores = pair_scores(scorer, flat, reduce, n_ctx)
    preds, pos = np.empty(len(candidates), dtype=np.int64), 0
    for i, cands in enumerate(candidates):
        preds[i] = int(np.argmax(scores[pos : pos + len(cands)]))
        pos += len(cands)
    return preds


# ---- the four heuristics ----------------------------------------------------------


def sst2_pairs(sentences: Sequence[list[int]], cue: list[int], words: Sequence[list[int]]
               ) -> list[list[Pair]]:
    """SST-2: sentence + cue ("very"), then each label word (negative, positive)."""
    return [[(s + cue, w) for w in words] for s in sentences]


def sentence_scores(scorer: Scorer, sentences: Sequence[list[int]], n_ctx: int) -> np.ndarray:
    """CoLA: average token log-prob of each sentence (its first n_ctx tokens)."""
    pairs = [(s[:1], s[1:n_ctx]) for s in sentences]
    return pair_scores(scorer, pairs, "mean", n_ctx)


def fit_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """The threshold (a midpoint between sorted scores) with the best MCC of `score > t`."""
    uniq = np.unique(scores[np.isfinite(scores)])
    if len(uniq) < 2:
        return float(uniq[0]) if len(uniq) else 0.0
    cands = (uniq[:-1] + uniq[1:]) / 2
    mccs = [score("mcc", labels, (scores > t).astype(int)) for t in cands]
    return float(cands[int(np.argmax(mccs))])


def race_pairs(contexts: Sequence[list[int]], answers: Sequence[Sequence[list[int]]]
               ) -> list[list[Pair]]:
    """RACE: document + question as the prefix of every answer."""
    return [[(ctx, a) for a in ans] for ctx, ans in zip(contexts, answers, strict=True)]


@dataclass(frozen=True)
class DprdExample:
    sentence: str
    pronoun: str
    candidates: tuple[str, str]
    label: int
    """Index of the correct candidate."""


def read_dprd(path: str | Path) -> list[DprdExample]:
    """DPRD blocks of 4 lines (sentence, pronoun, "cand1,cand2", answer), blank-separated."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Gpt1Error("DPRD file missing (MANIFEST.md: tasks/DPRD)", path) from None
    out, line = [], 1
    for block in re.split(r"\n[ \t\r]*\n", text.strip()):
        rows = [r.strip() for r in block.strip().splitlines()]
        if len(rows) != 4:
            raise Gpt1Error(f"line {line}: block of {len(rows)} lines, expected 4", path)
        sentence, pronoun, cands, answer = rows
        parts = tuple(c.strip() for c in cands.split(","))
        lowered = [c.lower() for c in parts]
        if len(parts) != 2 or answer.lower() not in lowered:
            raise Gpt1Error(f"line {line + 2}: candidates {cands!r} do not give two options "
                            f"including the answer {answer!r}", path)
        out.append(DprdExample(sentence, pronoun, (parts[0], parts[1]),
                               lowered.index(answer.lower())))
        line += len(rows) + 1
    return out


def pronoun_span(ex: DprdExample) -> tuple[int, int] | None:
    """Character span of the definite pronoun: its first whole-word occurrence after both
    candidates are mentioned (else its first occurrence); None if absent."""
    found = list(re.finditer(rf"\b{re.escape(ex.pronoun)}\b", ex.sentence, flags=re.IGNORECASE))
    if not found:
        return None
    ends = [m.end() for c in ex.candidates
            if (m := re.search(re.escape(c), ex.sentence, flags=re.IGNORECASE))]
    after = max(ends, default=0)
    best = next((m for m in found if m.start() >= after), found[0])
    return best.start(), best.end()


def dprd_pairs(examples: Sequence[DprdExample], encode: Encode
               ) -> tuple[list[list[Pair]], int]:
    """Per example and candidate: (sentence up to the pronoun + candidate, rest); the number
    of examples whose pronoun could not be found (scored as candidate 0)."""
    texts, unresolved = [], 0
    for ex in examples:
        span = pronoun_span(ex)
        if span is None:
            unresolved += 1
            span = (len(ex.sentence), len(ex.sentence))
        for cand in ex.candidates:
            texts += [ex.sentence[: span[0]] + cand, ex.sentence[span[1]:]]
    ids = encode(texts)
    pairs = [[(ids[4 * i + 2 * c], ids[4 * i + 2 * c + 1]) for c in range(2)]
             for i in range(len(examples))]
    return pairs, unresolved


def normalise(score: float, norm: ZeroShotTask) -> float:
    """0 = random guess, 1 = state of the art (Figure 2 right)."""
    return (score - norm.random) / (norm.sota - norm.random)


# ---- one checkpoint ----------------------------------------------------------------


@dataclass
class ZeroShotData:
    """Every task's pairs, encoded once and scored at every checkpoint."""

    sst2: tuple[list[list[Pair]], np.ndarray] | None
    cola: tuple[list[list[int]], np.ndarray, list[list[int]], np.ndarray] | None
    """(test sentences, labels, threshold-split sentences, labels)."""
    race: tuple[list[list[Pair]], np.ndarray] | None
    dprd: tuple[list[list[Pair]], np.ndarray] | None


Predictions = dict[str, tuple[np.ndarray, np.ndarray]]
"""task -> (labels, predictions) of one checkpoint, in example order."""


def predict_tasks(scorer: Scorer, data: ZeroShotData, n_ctx: int
                  ) -> tuple[Predictions, float | None]:
    """Per task the heuristic's prediction for every example, and the CoLA threshold used."""
    out: Predictions = {}
    steps = [(t, getattr(data, t)) for t in ("sst2", "race", "dprd")]
    for task, item in progress(steps, desc="zero-shot", unit="task", nested=True):
        if item is None:
            continue
        cands, labels = item
        reduce: Reduce = "sum" if task == "sst2" else "mean"
        out[task] = (labels, choose(scorer, cands, reduce, n_ctx))
    threshold = None
    if data.cola is not None:
        test, y_test, fit, y_fit = data.cola
        threshold = fit_threshold(sentence_scores(scorer, fit, n_ctx), y_fit)
        out["cola"] = (y_test, (sentence_scores(scorer, test, n_ctx) > threshold).astype(int))
    return out, threshold


def scores_of(preds: Predictions, threshold: float | None) -> dict[str, float]:
    """Raw score per task (accuracy; MCC for CoLA) plus the CoLA threshold used."""
    out = {t: score("mcc" if t == "cola" else "acc", y, p)
           for t, (y, p) in preds.items()}
    if threshold is not None:
        out["cola_threshold"] = threshold
    return out


def evaluate(scorer: Scorer, data: ZeroShotData, n_ctx: int) -> dict[str, float]:
    """Raw score per task (accuracy; MCC for CoLA) plus the CoLA threshold used."""
    return scores_of(*predict_tasks(scorer, data, n_ctx))


def build_data(cfg: ZeroShotCfg, tables: dict[str, dict[str, pd.DataFrame]],
               dprd: Sequence[DprdExample], encode: Encode, seed: int
               ) -> tuple[ZeroShotData, dict[str, int]]:
    """Encode the scored examples of every task in cfg.tasks (canonical `test` splits; the
    CoLA threshold split from params) once; returns the data and the example counts."""
    n: dict[str, int] = {}
    data = ZeroShotData(None, None, None, None)
    if "sst2" in cfg.tasks:
        df = cap_table(tables["sst2"]["test"], cfg.max_examples, seed)
        cue, *words = encode([cfg.sst2_cue, *cfg.sst2_words])
        data.sst2 = (sst2_pairs(encode(df["text_a"].tolist()), cue, words),
                     df["label"].to_numpy(dtype=np.int64))
        n["sst2"] = len(df)
    if "cola" in cfg.tasks:
        test = cap_table(tables["cola"]["test"], cfg.max_examples, seed)
        fit = cap_table(tables["cola"][cfg.cola_threshold_split], cfg.max_examples, seed)
        data.cola = (encode(test["text_a"].tolist()), test["label"].to_numpy(dtype=np.int64),
                     encode(fit["text_a"].tolist()), fit["label"].to_numpy(dtype=np.int64))
        n["cola"] = len(test)
    if "race" in cfg.tasks:
        df = cap_table(tables["race"]["test"], cfg.max_examples, seed)
        docs = encode([f"{a} {q}" for a, q in zip(df["text_a"], df["text_b"], strict=True)])
        answers = [encode(list(cs)) for cs in df["choices"]]
        data.race = (race_pairs(docs, answers), df["label"].to_numpy(dtype=np.int64))
        n["race"] = len(df)
    if "dprd" in cfg.tasks:
        rows = np.arange(len(dprd))
        if cfg.max_examples is not None and cfg.max_examples < len(dprd):
            rows = np.sort(np.random.default_rng(seed).choice(len(dprd), cfg.max_examples,
                                                              replace=False))
        kept = [dprd[int(i)] for i in rows]
        pairs, unresolved = dprd_pairs(kept, encode)
        data.dprd = (pairs, np.asarray([ex.label for ex in kept], dtype=np.int64))
        n["dprd"] = len(kept)
        n["dprd_unresolved"] = unresolved
    return data, n
