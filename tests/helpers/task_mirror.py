"""A generated task mirror: every original file format of the real mirror's tasks/ folder, with
random sentences (never real data)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from gpt1.tasks.registry import SPLITS

WORDS = "the a cat dog sat ran on mat big small red blue house tree bird sang".split()


def _sent(rng: random.Random, n: int = 6) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _w(path: Path, text: str, bom: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")


def write_mirror(root: Path, rows: int = 20, seed: int = 0) -> Path:
    """A small mirror in every original format of the mirror's tasks/ folder (generated text)."""
    rng = random.Random(seed)
    t = root / "tasks"
    s = lambda: _sent(rng)  # noqa: E731
    for split in ("train", "dev"):
        body = "".join(f"{s()} \t{i % 2}\n" for i in range(rows))
        _w(t / "SST-2" / f"{split}.tsv", "sentence\tlabel\n" + body)
        _w(t / "RTE" / f"{split}.tsv", "sentence1\tsentence2\tlabel\tidx\n"
           + "".join(f'{s()} "q\t{s()}\t{i % 2}\t{i}\n' for i in range(rows)))
    for f in ("in_domain_train", "in_domain_dev", "out_of_domain_dev"):
        _w(t / "CoLA/cola_public/raw" / f"{f}.tsv",
           "".join(f"gj04\t{i % 2}\t{'*' if i % 2 == 0 else ''}\t{s()}\n" for i in range(rows)))
    for f in ("train", "test"):
        _w(t / "MRPC" / f"msr_paraphrase_{f}.txt", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
           + "".join(f"{i % 2}\t{i}\t{1000 + i}\t{s()}\t{s()}\n" for i in range(rows)), bom=True)
    for f in ("train", "dev", "test"):
        _w(t / "STS-B" / f"sts-{f}.tsv", "".join(
            f"main-captions\tMSRvid\t2012test\t{i:04d}\t{i % 6}.000\t{s()}\t{s()}"
            + ("\tsrc-a\tsrc-b" if i == 1 else "") + "\n" for i in range(rows)))
    nli = {"MNLI": ["entailment", "neutral", "contradiction"], "SNLI": ["entailment",
           "neutral", "contradiction"], "QNLI": ["entailment", "not_entailment"], "QQP": ["0", "1"]}
    for task, labels in nli.items():
        for f in ("train", "dev"):
            data = {str(i): {"text_a": s(), "text_b": s(), "label": labels[i % len(labels)]}
                    for i in range(rows)}
            _w(t / task / "train_subset_10k" / f"{f}.json", json.dumps(data, indent=4))
    csv_nli = {"SNLI/dev_csv/dev.csv": nli["SNLI"], "QNLI/glue_v1_dev_csv/dev.csv": nli["QNLI"],
               "SciTail/scitail_test.csv": nli["QNLI"]}
    for rel, labels in csv_nli.items():
        _w(t / rel, "premise,hypothesis,label\n" + "".join(
            f'"{s()[:-1]}, {s()}",{s()},{labels[i % len(labels)]}\n' for i in range(rows)))
    for split in SPLITS:
        for level in ("middle", "high"):
            for a in range(3):
                qs = [f"What did the {rng.choice(WORDS)} do?" for _ in range(2)]
                art = {"article": " ".join(s() for _ in range(5)), "questions": qs,
                       "options": [[s() for _ in range(4)] for _ in qs],
                       "answers": [rng.choice("ABCD") for _ in qs], "id": f"{level}{a}.txt"}
                _w(t / "RACE/RACE" / split / level / f"{a}.txt", json.dumps(art))
    head = ("InputStoryid,InputSentence1,InputSentence2,InputSentence3,InputSentence4,"
            "RandomFifthSentenceQuiz1,RandomFifthSentenceQuiz2,AnswerRightEnding\n")
    for f in ("val", "test"):
        name = f"cloze_test_{f}__spring2016 - cloze_test_ALL_{f}.csv"
        _w(t / "StoryCloze" / name, head + "".join(
            f"{f}-{i},{s()},\"{s()[:-1]}, then\",{s()},{s()},{s()},{s()},{1 + i % 2}\n"
            for i in range(rows)))
    return root
