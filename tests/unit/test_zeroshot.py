"""Each zero-shot heuristic against a rigged language model whose preferences are known."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gpt1 import zeroshot as zs
from gpt1.config import ZeroShotTask
from gpt1.errors import Gpt1Error
from gpt1.model import GPT

N_CTX = 64


class Vocab:
    """Whitespace words -> ids, assigned on first sight (id 0 is padding)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, texts: list[str]) -> list[list[int]]:
        return [[self.ids.setdefault(w, len(self.ids) + 1) for w in t.lower().split()]
                for t in texts]

    def __getitem__(self, word: str) -> int:
        return self.ids.setdefault(word, len(self.ids) + 1)


class RiggedLM:
    """Scorer whose log P(token | prefix) is a given function."""

    def __init__(self, logp: Callable[[Sequence[int], int], float]) -> None:
        self.logp = logp

    def token_logprobs(self, seqs: Sequence[Sequence[int]]) -> list[np.ndarray]:
        return [np.array([self.logp(s[:t], s[t]) for t in range(1, len(s))]) for s in seqs]


def test_sst2_predicts_the_word_the_lm_prefers_after_very() -> None:
    v = Vocab()
    sentences = v(["a good film", "a dull film", "good acting"])
    cue, neg, pos = v(["very", "negative", "positive"])

    def prefers(word: str) -> RiggedLM:  # prefers `word`, but only right after "very"
        return RiggedLM(lambda prefix, tok: -0.1 if prefix[-1] == v["very"]
                        and tok == v[word] else -3.0)

    for word, label in (("positive", 1), ("negative", 0)):
        preds = zs.choose(prefers(word), zs.sst2_pairs(sentences, cue, [neg, pos]), "sum", N_CTX)
        assert preds.tolist() == [label] * 3
    # sentiment-aware LM: "positive" more likely when the sentence holds "good"
    aware = RiggedLM(lambda prefix, tok: (-0.1 if (v["good"] in prefix) == (tok == v["positive"])
                                          else -3.0) if prefix[-1] == v["very"] else -1.0)
    preds = zs.choose(aware, zs.sst2_pairs(sentences, cue, [neg, pos]), "sum", N_CTX)
    assert preds.tolist() == [1, 0, 1]
    # without the cue the same LM has no preference: ties go to the first word
    preds = zs.choose(aware, zs.sst2_pairs(sentences, [], [neg, pos]), "sum", N_CTX)
    assert preds.tolist() == [0, 0, 0]


def test_sst2_compares_whole_word_probabilities() -> None:
    """A two-token word is scored by its joint probability (sum), not per token."""
    v = Vocab()
    sentence, cue, neg, pos = v(["fine", "very", "negative", "posi tive"])
    lm = RiggedLM(lambda prefix, tok: -1.5 if tok == v["negative"] else -1.0)
    assert zs.choose(lm, zs.sst2_pairs([sentence], cue, [neg, pos]), "sum", N_CTX)[0] == 0
    assert zs.choose(lm, zs.sst2_pairs([sentence], cue, [neg, pos]), "mean", N_CTX)[0] == 1


def test_cola_threshold_separates_what_the_lm_finds_unlikely() -> None:
    v = Vocab()
    lm = RiggedLM(lambda prefix, tok: -6.0 if tok == v["bad"] else -1.0)
    rng = np.random.default_rng(0)

    def split(n: int) -> tuple[list[list[int]], np.ndarray]:
        labels = rng.integers(0, 2, n)
        words = [" ".join(["the", "cat", "sat"][: rng.integers(1, 4)] + (["bad"] if y == 0
                 else []) + ["home"]) for y in labels]
        return v(words), labels

    train, y_train = split(40)
    test, y_test = split(40)
    train_scores = zs.sentence_scores(lm, train, N_CTX)
    threshold = zs.fit_threshold(train_scores, y_train)
    assert train_scores[y_train == 0].max() < threshold < train_scores[y_train == 1].min()
    pred = (zs.sentence_scores(lm, test, N_CTX) > threshold).astype(int)
    assert pred.tolist() == y_test.tolist()
    # average, not total: a long acceptable sentence outscores a short unacceptable one
    long_ok, short_bad = v(["the cat sat on the mat at home", "cat bad"])
    assert zs.sentence_scores(lm, [long_ok, short_bad], N_CTX).tolist() == [-1.0, -6.0]


def test_race_picks_the_highest_average_logprob_answer() -> None:
    v = Vocab()
    doc = v(["the old ship sailed north to the cold sea what did the ship do"])[0]
    answers = v(["sailed north to sea", "sank", "flew home", "it sailed"])
    lm = RiggedLM(lambda prefix, tok: -1.0 if tok in prefix else -2.0)  # copies the document
    assert zs.choose(lm, zs.race_pairs([doc], [answers]), "mean", N_CTX)[0] == 0
    # sum would prefer the short wrong answer: the heuristic is the *average* log-prob
    assert zs.choose(lm, zs.race_pairs([doc], [answers[:2]]), "sum", N_CTX)[0] == 1


def test_long_prefix_is_cut_from_the_left() -> None:
    prefix, cont = list(range(1, 101)), [200, 201]
    p, c = zs.fit_pair(prefix, cont, 16)
    assert c == cont and p == prefix[-14:] and len(p) + len(c) == 16
    lm = RiggedLM(lambda pre, tok: -1.0 if 100 in pre else -5.0)  # needs the question's end
    assert zs.pair_scores(lm, [(prefix, cont)], "mean", 16)[0] == -1.0


def test_dprd_substitution_follows_the_lm(tmp_path: Path) -> None:
    path = tmp_path / "test.c.txt"
    path.write_text("The sniper shot the terrorist because he had orders.\nhe\n"
                    "The sniper,the terrorist\nThe sniper\n\n"
                    "The sniper shot the terrorist because he was a bad guy.\nhe\n"
                    "The sniper,the terrorist\nthe terrorist\n")
    examples = zs.read_dprd(path)
    assert [e.label for e in examples] == [0, 1]
    v = Vocab()
    good = {(v["sniper"], v["had"]), (v["terrorist"], v["was"])}
    lm = RiggedLM(lambda prefix, tok: -0.2 if (prefix[-1], tok) in good else -2.0)
    pairs, unresolved = zs.dprd_pairs(examples, v)
    assert unresolved == 0
    assert pairs[0][0][0] == v(["the sniper shot the terrorist because the sniper"])[0]
    assert zs.choose(lm, pairs, "mean", N_CTX).tolist() == [0, 1]
    flipped = RiggedLM(lambda prefix, tok: -2.0 if (prefix[-1], tok) in good else -0.2)
    assert zs.choose(flipped, pairs, "mean", N_CTX).tolist() == [1, 0]


def test_dprd_pronoun_is_the_one_after_the_candidates() -> None:
    ex = zs.DprdExample("He said John hit Bill because he was angry.", "he", ("John", "Bill"), 0)
    start, end = zs.pronoun_span(ex)
    assert ex.sentence[start:end] == "he" and start > ex.sentence.index("Bill")


def test_dprd_bad_block_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.c.txt"
    path.write_text("A b c.\nit\nA,b\nA\n\nBroken block.\nit\nx,y\n")
    with pytest.raises(Gpt1Error, match=r"train\.c\.txt.*line 6"):
        zs.read_dprd(path)


def test_normalise_maps_random_to_0_and_sota_to_1() -> None:
    norm = ZeroShotTask(metric="acc", random=0.25, sota=0.533, source="test")
    assert zs.normalise(0.25, norm) == 0.0 and zs.normalise(0.533, norm) == pytest.approx(1.0)


def test_model_scorer_matches_log_softmax_and_ignores_padding(tiny_params) -> None:
    model = GPT(tiny_params.model, 50).eval()
    scorer = zs.ModelScorer(model, tiny_params.model.n_positions, 4, nullcontext)
    short, long_ = [5, 6, 7], [9, 8, 7, 6, 5, 4, 3]
    alone = scorer.token_logprobs([short])[0]
    batched = scorer.token_logprobs([long_, short])
    with torch.no_grad():
        idx = torch.tensor([short])
        logp = torch.log_softmax(model.lm_logits(model(idx)), -1)[0]
    expected = [logp[t - 1, short[t]].item() for t in range(1, len(short))]
    np.testing.assert_allclose(alone, expected, rtol=1e-5)
    np.testing.assert_allclose(batched[1], alone, rtol=1e-5, atol=1e-6)
    assert len(batched[0]) == len(long_) - 1


def test_build_data_uses_test_split_and_threshold_split(make_params) -> None:
    params = make_params({"zeroshot": {"max_examples": 3}})
    v = Vocab()
    frame = pd.DataFrame({"text_a": [f"s{i}" for i in range(5)], "text_b": [""] * 5,
                          "choices": [[]] * 5, "label": [0, 1, 0, 1, 1]})
    race = pd.DataFrame({"text_a": ["doc"] * 2, "text_b": ["q"] * 2,
                         "choices": [["a", "b", "c", "d"]] * 2, "label": [2, 3]})
    tables = {"sst2": {"test": frame}, "cola": {"test": frame, "train": frame.iloc[:4]},
              "race": {"test": race}}
    ex = zs.DprdExample("A hit B because he was mad.", "he", ("A", "B"), 1)
    data, n = zs.build_data(params.zeroshot, tables, [ex] * 4, v, params.seed)
    assert n == {"sst2": 3, "cola": 3, "race": 2, "dprd": 3, "dprd_unresolved": 0}
    assert data.sst2 is not None and data.sst2[0][0][0][0][-1] == v["very"]
    assert data.race is not None and len(data.race[0][0]) == 4
    lm = RiggedLM(lambda prefix, tok: -1.0)
    scores = zs.evaluate(lm, data, N_CTX)
    assert set(scores) == {"sst2", "cola", "cola_threshold", "race", "dprd"}
