"""The 12 fine-tuning tasks of Radford et al. (2018), Table 1, as one table.

Every task is a row: its input family (spec §2: classification, entailment, similarity,
multiple choice), label set, metrics, where each canonical split comes from in the mirror,
and the hub source. Per-dataset quirks live in gpt1/tasks/load.py, the four input
transformations in gpt1/tasks/formats.py; one head, one loop and one scorer serve all rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Fmt = Literal["classify", "entail", "similarity", "choice"]
Metric = Literal["acc", "f1", "mcc", "pearson", "spearman"]
Origin = Literal["official train", "official dev", "official test", "held-out", "carved"]
"""Where a canonical split comes from: an official split of the dataset (or a sample of one),
a part of the official train held out in the mirror's files, or carved (seeded) by us."""
SPLITS: tuple[str, ...] = ("train", "dev", "test")
"""Canonical splits: train = fitted, dev = model selection per epoch, test = reported."""

CANONICAL_COLUMNS: tuple[str, ...] = (
    "id", "text_a", "text_b", "choices", "label", "group", "source"
)
"""Canonical table: id (unique str), text_a (sentence / premise / context), text_b (second
sentence / hypothesis / question, "" if unused), choices (list of answers, [] unless multiple
choice), label (int index into TaskSpec.labels or the right choice; float score when
regression), group (sub-population, e.g. RACE middle/high, "" if none), source (file:line)."""


@dataclass(frozen=True, kw_only=True)
class HubSource:
    """Where a task lives on the Hugging Face hub (datasets.load_dataset(path, name))."""

    path: str
    name: str | None
    splits: dict[str, str]
    """Canonical split -> hub split; a canonical split absent here is carved from train."""
    fields: Mapping[str, str | tuple[str, ...]]
    """Canonical column -> hub column; a tuple for text_a is joined with spaces, a tuple for
    choices lists one column per choice (a single name = a list column)."""
    labels: tuple[str | int, ...] | None = None
    """Hub label values in the order of TaskSpec.labels; None = already indices / scores."""


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    name: str
    """= a params.finetune.tasks entry = DVC stage finetune@<name>."""
    title: str
    fmt: Fmt
    labels: tuple[str, ...]
    """Class names (label = index); choice tasks: one name per choice; () = regression."""
    metric: str
    """Primary score name in the metrics JSON (acc_matched for MNLI)."""
    metrics: tuple[Metric, ...]
    """Scores computed on every evaluated split (the primary one among them)."""
    score_range: tuple[float, float] | None = None
    """Allowed label range of a regression task (STS-B: 0-5)."""
    groups: tuple[str, ...] = ()
    """Sub-populations scored separately as <metric>_<group> (RACE middle / high)."""
    score_names: dict[str, str] = field(default_factory=dict)
    """Renames of score keys in the JSON (MNLI: acc -> acc_matched)."""
    missing_scores: dict[str, str] = field(default_factory=dict)
    """Scores the paper reports that this mirror cannot give, with the reason."""
    mirror_dir: str
    """Directory under <mirror>/tasks."""
    sources: dict[str, str]
    """Canonical split -> human-readable origin (goes into the metrics JSON eval_split)."""
    origins: dict[str, Origin]
    """Canonical split -> its origin as data (the report's split kinds and carve-outs)."""
    hub: HubSource

    def origin(self, split: str) -> Origin:
        """Where the canonical split `split` comes from."""
        return self.origins[split]

    @property
    def n_choices(self) -> int:
        return len(self.labels) if self.fmt == "choice" else 0

    @property
    def regression(self) -> bool:
        return not self.labels

    @property
    def n_outputs(self) -> int:
        """Width of the classifier head: 1 per choice (scalar), 1 for regression, else classes."""
        return 1 if self.fmt == "choice" or self.regression else len(self.labels)


NLI3 = ("entailment", "neutral", "contradiction")
NLI2 = ("entailment", "not_entailment")
_GLUE_PAIR = {"text_a": "sentence1", "text_b": "sentence2", "label": "label"}

TASKS: dict[str, TaskSpec] = {t.name: t for t in (
    TaskSpec(
        name="snli", title="SNLI", fmt="entail", labels=NLI3, metric="acc", metrics=("acc",),
        mirror_dir="SNLI",
        sources={
            "train": "SNLI/train_subset_10k/train.json (8,999-pair sample of SNLI train)",
            "dev": "SNLI/train_subset_10k/dev.json (1,000-pair sample of SNLI train, disjoint)",
            "test": "SNLI/dev_csv/dev.csv: official SNLI dev (9,831 gold pairs); test missing",
        },
        origins={"train": "official train", "dev": "held-out", "test": "official dev"},
        hub=HubSource(path="stanfordnlp/snli", name=None,
                      splits={"train": "train", "dev": "validation", "test": "test"},
                      fields={"text_a": "premise", "text_b": "hypothesis", "label": "label"}),
    ),
    TaskSpec(
        name="mnli", title="MultiNLI", fmt="entail", labels=NLI3, metric="acc_matched",
        metrics=("acc",), score_names={"acc": "acc_matched"},
        missing_scores={"acc_mismatched": "MNLI dev_mismatched is not in the mirror "
                        "(MANIFEST.md); no mismatched-genre data to score on"},
        mirror_dir="MNLI",
        sources={
            "train": "MNLI/train_subset_10k/train.json (8,999-pair sample of MNLI train) "
                     "minus the carved dev",
            "dev": "carved (seeded) from MNLI/train_subset_10k/train.json",
            "test": "MNLI/train_subset_10k/dev.json: 1,000 held-out pairs of MNLI TRAIN "
                    "(matched genres); official dev_matched/mismatched missing",
        },
        origins={"train": "official train", "dev": "carved", "test": "held-out"},
        hub=HubSource(path="nyu-mll/glue", name="mnli",
                      splits={"train": "train", "test": "validation_matched"},
                      fields={"text_a": "premise", "text_b": "hypothesis", "label": "label"}),
    ),
    TaskSpec(
        name="qnli", title="QNLI", fmt="entail", labels=NLI2, metric="acc", metrics=("acc",),
        mirror_dir="QNLI",
        sources={
            "train": "QNLI/train_subset_10k/train.json (8,999-pair sample of QNLI train)",
            "dev": "QNLI/train_subset_10k/dev.json (1,000-pair sample of QNLI train, disjoint)",
            "test": "QNLI/glue_v1_dev_csv/dev.csv: official GLUE-v1 dev (5,732, the paper's "
                    "version); test unlabelled",
        },
        origins={"train": "official train", "dev": "held-out", "test": "official dev"},
        hub=HubSource(path="nyu-mll/glue", name="qnli",
                      splits={"train": "train", "test": "validation"},
                      fields={"text_a": "question", "text_b": "sentence", "label": "label"}),
    ),
    TaskSpec(
        name="rte", title="RTE", fmt="entail", labels=NLI2, metric="acc", metrics=("acc",),
        mirror_dir="RTE",
        sources={
            "train": "RTE/train.tsv (GLUE train, 2,490) minus the carved dev",
            "dev": "carved (seeded) from RTE/train.tsv",
            "test": "RTE/dev.tsv: official GLUE dev (277); test unlabelled",
        },
        origins={"train": "official train", "dev": "carved", "test": "official dev"},
        hub=HubSource(path="nyu-mll/glue", name="rte",
                      splits={"train": "train", "test": "validation"}, fields=_GLUE_PAIR),
    ),
    TaskSpec(
        name="scitail", title="SciTail", fmt="entail", labels=NLI2, metric="acc",
        metrics=("acc",), mirror_dir="SciTail",
        sources={
            "train": "carved (seeded) from SciTail/scitail_test.csv (official train missing)",
            "dev": "carved (seeded) from SciTail/scitail_test.csv (official dev missing)",
            "test": "carved (seeded) part of SciTail/scitail_test.csv, the official test "
                    "(2,126); NOT comparable to the paper's full-test number",
        },
        origins={"train": "carved", "dev": "carved", "test": "carved"},
        hub=HubSource(path="allenai/scitail", name="snli_format",
                      splits={"train": "train", "dev": "validation", "test": "test"},
                      fields={"text_a": "sentence1", "text_b": "sentence2",
                              "label": "gold_label"},
                      labels=("entailment", "neutral")),
    ),
    TaskSpec(
        name="race", title="RACE", fmt="choice", labels=("A", "B", "C", "D"), metric="acc",
        metrics=("acc",), groups=("middle", "high"), mirror_dir="RACE",
        sources={
            "train": "RACE/RACE/train/{middle,high} (87,866 questions)",
            "dev": "RACE/RACE/dev/{middle,high} (4,887 questions)",
            "test": "RACE/RACE/test/{middle,high} (4,934 questions, official test)",
        },
        origins={"train": "official train", "dev": "official dev", "test": "official test"},
        hub=HubSource(path="ehovy/race", name="all",
                      splits={"train": "train", "dev": "validation", "test": "test"},
                      fields={"text_a": "article", "text_b": "question", "choices": "options",
                              "label": "answer", "id": "example_id"},
                      labels=("A", "B", "C", "D")),
    ),
    TaskSpec(
        name="story_cloze", title="Story Cloze", fmt="choice", labels=("1", "2"),
        metric="acc", metrics=("acc",), mirror_dir="StoryCloze",
        sources={
            "train": "Story Cloze 2016 val CSV (1,871) minus the held-out dev, as in the "
                     "original release",
            "dev": "carved (seeded) from the 2016 val CSV (paper: 374 held out)",
            "test": "Story Cloze 2016 test CSV (1,871, official test)",
        },
        origins={"train": "official dev", "dev": "carved", "test": "official test"},
        hub=HubSource(path="LSDSem/story_cloze", name="2016",
                      splits={"train": "validation", "test": "test"},
                      fields={"text_a": ("input_sentence_1", "input_sentence_2",
                                         "input_sentence_3", "input_sentence_4"),
                              "choices": ("sentence_quiz1", "sentence_quiz2"),
                              "label": "answer_right_ending", "id": "story_id"},
                      labels=(1, 2)),
    ),
    TaskSpec(
        name="mrpc", title="MRPC", fmt="similarity", labels=("not_paraphrase", "paraphrase"),
        metric="f1", metrics=("f1", "acc"), mirror_dir="MRPC",
        sources={
            "train": "MRPC/msr_paraphrase_train.txt (4,076) minus the carved dev",
            "dev": "carved (seeded) from msr_paraphrase_train.txt (GLUE's dev_ids.tsv missing)",
            "test": "MRPC/msr_paraphrase_test.txt (1,725, official labelled test)",
        },
        origins={"train": "official train", "dev": "carved", "test": "official test"},
        hub=HubSource(path="nyu-mll/glue", name="mrpc",
                      splits={"train": "train", "test": "validation"},
                      fields=_GLUE_PAIR),
    ),
    TaskSpec(
        name="qqp", title="QQP", fmt="similarity", labels=("not_duplicate", "duplicate"),
        metric="f1", metrics=("f1", "acc"), mirror_dir="QQP",
        sources={
            "train": "QQP/train_subset_10k/train.json (8,999-pair sample of QQP train) "
                     "minus the carved dev",
            "dev": "carved (seeded) from QQP/train_subset_10k/train.json",
            "test": "QQP/train_subset_10k/dev.json: 1,000 held-out pairs of QQP TRAIN; "
                    "official dev/test missing",
        },
        origins={"train": "official train", "dev": "carved", "test": "held-out"},
        hub=HubSource(path="nyu-mll/glue", name="qqp",
                      splits={"train": "train", "test": "validation"},
                      fields={"text_a": "question1", "text_b": "question2", "label": "label"}),
    ),
    TaskSpec(
        name="stsb", title="STS-B", fmt="similarity", labels=(), metric="pearson",
        metrics=("pearson", "spearman"), score_range=(0.0, 5.0), mirror_dir="STS-B",
        sources={
            "train": "STS-B/sts-train.tsv (5,749)",
            "dev": "STS-B/sts-dev.tsv (1,500)",
            "test": "STS-B/sts-test.tsv (1,379, official scored test)",
        },
        origins={"train": "official train", "dev": "official dev", "test": "official test"},
        hub=HubSource(path="nyu-mll/glue", name="stsb",
                      splits={"train": "train", "test": "validation"}, fields=_GLUE_PAIR),
    ),
    TaskSpec(
        name="sst2", title="SST-2", fmt="classify", labels=("negative", "positive"),
        metric="acc", metrics=("acc",), mirror_dir="SST-2",
        sources={
            "train": "SST-2/train.tsv (GLUE train, 67,349) minus the carved dev",
            "dev": "carved (seeded) from SST-2/train.tsv",
            "test": "SST-2/dev.tsv: official GLUE dev (872); test unlabelled",
        },
        origins={"train": "official train", "dev": "carved", "test": "official dev"},
        hub=HubSource(path="nyu-mll/glue", name="sst2",
                      splits={"train": "train", "test": "validation"},
                      fields={"text_a": "sentence", "label": "label"}),
    ),
    TaskSpec(
        name="cola", title="CoLA", fmt="classify", labels=("unacceptable", "acceptable"),
        metric="mcc", metrics=("mcc", "acc"), mirror_dir="CoLA",
        sources={
            "train": "CoLA raw/in_domain_train.tsv (8,551) minus the carved dev",
            "dev": "carved (seeded) from raw/in_domain_train.tsv",
            "test": "CoLA raw/in_domain_dev.tsv + raw/out_of_domain_dev.tsv = GLUE dev "
                    "(1,043); test hidden",
        },
        origins={"train": "official train", "dev": "carved", "test": "official dev"},
        hub=HubSource(path="nyu-mll/glue", name="cola",
                      splits={"train": "train", "test": "validation"},
                      fields={"text_a": "sentence", "label": "label"}),
    ),
)}


def get_task(name: str) -> TaskSpec:
    """The TaskSpec named `name`; KeyError lists the known names."""
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; known: {', '.join(TASKS)}") from None
