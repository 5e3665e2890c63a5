"""Input transformations: golden token layouts per family, symmetric similarity."""

from __future__ import annotations

import pandas as pd
import pytest

from gpt1.tasks.formats import (
    Specials,
    Truncation,
    encode_table,
    fit_lengths,
    layout,
    similarity_layout,
)
from gpt1.tasks.registry import TASKS

S, D, C = 100, 101, 102
SP = Specials(start=S, delimiter=D, classify=C)


def tr(n_ctx: int, rule: str = "half", keep: str = "head") -> Truncation:
    return Truncation(n_ctx=n_ctx, rule=rule, keep=keep)  # type: ignore[arg-type]


def test_classification_layout() -> None:
    seqs, cut = layout(TASKS["sst2"], [1, 2, 3], [], [], SP, tr(16))
    assert seqs == [[S, 1, 2, 3, C]] and not cut
    seqs, cut = layout(TASKS["cola"], list(range(1, 10)), [], [], SP, tr(6))
    assert seqs == [[S, 1, 2, 3, 4, C]] and cut  # n_ctx - 2 text tokens
    seqs, _ = layout(TASKS["cola"], list(range(1, 10)), [], [], SP, tr(6, keep="tail"))
    assert seqs == [[S, 6, 7, 8, 9, C]]


def test_entailment_layout() -> None:
    seqs, cut = layout(TASKS["snli"], [1, 2], [3, 4, 5], [], SP, tr(16))
    assert seqs == [[S, 1, 2, D, 3, 4, 5, C]] and not cut


def test_similarity_layout_has_both_orders() -> None:
    seqs, cut = layout(TASKS["mrpc"], [1, 2], [3], [], SP, tr(16))
    assert seqs == [[S, 1, 2, D, 3, C], [S, 3, D, 1, 2, C]] and not cut


def test_choice_layout_one_sequence_per_answer() -> None:
    # RACE: context = passage + question; one sequence per option.
    seqs, cut = layout(TASKS["race"], [1, 2], [3], [[7], [8, 9], [10], [11]], SP, tr(32))
    assert seqs == [[S, 1, 2, 3, D, 7, C], [S, 1, 2, 3, D, 8, 9, C],
                    [S, 1, 2, 3, D, 10, C], [S, 1, 2, 3, D, 11, C]] and not cut
    seqs, _ = layout(TASKS["story_cloze"], [1, 2], [], [[5], [6]], SP, tr(32))
    assert seqs == [[S, 1, 2, D, 5, C], [S, 1, 2, D, 6, C]]


def test_half_rule_is_the_original_max_len() -> None:
    # spec §5: [start] + ctx[:max_len] + [delim] + answer[:max_len] + [classify],
    # max_len = n_ctx // 2 - 2 (here 16 // 2 - 2 = 6).
    ctx, ans = list(range(1, 21)), list(range(30, 40))
    seqs, cut = layout(TASKS["story_cloze"], ctx, [], [ans, [50]], SP, tr(16))
    assert seqs[0] == [S, 1, 2, 3, 4, 5, 6, D, 30, 31, 32, 33, 34, 35, C] and cut
    assert seqs[1] == [S, 1, 2, 3, 4, 5, 6, D, 50, C]
    assert all(len(s) <= 16 for s in seqs)


def test_longest_first_keeps_the_question_and_cuts_the_passage() -> None:
    passage, question = list(range(1, 41)), [90, 91, 92]
    seqs, cut = layout(TASKS["race"], passage, question, [[7], [8], [9], [10]], SP,
                       tr(16, "longest_first"))
    # 16 - 3 specials - 1 answer token = 12 context tokens: 9 of the passage + the question.
    assert seqs[0] == [S, *range(1, 10), 90, 91, 92, D, 7, C] and cut
    assert all(len(s) == 16 for s in seqs)


@pytest.mark.parametrize("rule", ["half", "longest_first"])
@pytest.mark.parametrize(("la", "lb"), [(3, 4), (30, 2), (2, 30), (25, 25), (40, 9)])
def test_fit_lengths_fits_and_is_symmetric(rule: str, la: int, lb: int) -> None:
    t = tr(24, rule)
    ta, tb = fit_lengths(la, lb, t)
    assert ta + tb + 3 <= 24 and ta <= la and tb <= lb
    assert fit_lengths(lb, la, t) == (tb, ta)
    if la + lb + 3 <= 24 and rule == "longest_first":
        assert (ta, tb) == (la, lb)


@pytest.mark.parametrize("rule", ["half", "longest_first"])
def test_similarity_swap_swaps_the_two_sequences(rule: str) -> None:
    a, b = list(range(1, 30)), list(range(40, 45))
    ab, _ = similarity_layout(a, b, SP, tr(20, rule))
    ba, _ = similarity_layout(b, a, SP, tr(20, rule))
    assert ab == ba[::-1]


def test_encode_table_counts_truncation_and_encodes_each_text_once() -> None:
    seen: list[list[str]] = []

    def encode(texts: list[str]) -> list[list[int]]:
        seen.append(texts)
        return [[len(w) for w in t.split()] for t in texts]

    df = pd.DataFrame({
        "id": ["x", "y"], "text_a": ["aa b ccc", "aa b ccc"], "text_b": ["q", "q"],
        "choices": [["d", "ee"], ["d", "f f f f f f f f f f f f"]], "label": [1, 0],
        "group": ["high", "middle"], "source": ["f:1", "f:2"],
    })
    enc = encode_table(df, TASKS["story_cloze"], encode, SP, tr(12))
    assert len(seen) == 1 and len(seen[0]) == 5  # distinct texts only
    assert enc.seqs[0] == [[S, 2, 1, 3, 1, D, 1, C], [S, 2, 1, 3, 1, D, 2, C]]
    assert enc.truncated == [False, True] and enc.n_truncated == 1
    assert enc.labels.tolist() == [1, 0] and enc.groups == ["high", "middle"]
    sub = enc.subset([1])
    assert sub.ids == ["y"] and sub.n_truncated == 1
