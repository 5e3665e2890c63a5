"""The task table: covers the presets' task lists, consistent rows."""

from __future__ import annotations

import pytest

from gpt1.config import load_params
from gpt1.tasks.registry import SPLITS, TASKS, get_task
from tests.helpers.repo import REPO


@pytest.mark.parametrize("preset", ["params.yaml", "configs/paper.yaml"])
def test_table_covers_the_twelve_tasks(preset: str) -> None:
    tasks = load_params(REPO / preset).finetune.tasks
    assert sorted(tasks) == sorted(TASKS) and len(TASKS) == 12


@pytest.mark.parametrize("name", list(TASKS))
def test_rows_are_consistent(name: str) -> None:
    spec = TASKS[name]
    assert spec.name == name and set(spec.sources) == set(SPLITS)
    assert spec.metric in {spec.score_names.get(m, m) for m in spec.metrics}
    assert "label" in spec.hub.fields and "text_a" in spec.hub.fields
    if spec.fmt == "choice":
        assert spec.n_choices >= 2 and spec.n_outputs == 1 and "choices" in spec.hub.fields
    elif spec.regression:
        assert spec.score_range is not None and spec.n_outputs == 1
    else:
        assert spec.n_outputs == len(spec.labels) >= 2 and spec.n_choices == 0


def test_families_and_metrics_follow_the_paper() -> None:
    fams = {n: t.fmt for n, t in TASKS.items()}
    assert fams == {"snli": "entail", "mnli": "entail", "qnli": "entail", "rte": "entail",
                    "scitail": "entail", "race": "choice", "story_cloze": "choice",
                    "mrpc": "similarity", "qqp": "similarity", "stsb": "similarity",
                    "sst2": "classify", "cola": "classify"}
    assert {n: t.metric for n, t in TASKS.items() if t.metric != "acc"} == {
        "mnli": "acc_matched", "mrpc": "f1", "qqp": "f1", "stsb": "pearson", "cola": "mcc"}
    assert TASKS["race"].groups == ("middle", "high")
    assert "acc_mismatched" in TASKS["mnli"].missing_scores


def test_unknown_task_lists_known_ones() -> None:
    with pytest.raises(KeyError, match="known: snli, mnli"):
        get_task("imdb")


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_split_has_an_origin_that_its_source_text_agrees_with(name: str) -> None:
    spec = TASKS[name]
    assert set(spec.origins) == set(SPLITS)
    for split in SPLITS:
        text = spec.sources[split]
        assert (spec.origin(split) == "carved") == text.startswith("carved"), split
        if spec.origin(split) == "held-out":
            assert "held-out" in text or "sample of" in text, split
