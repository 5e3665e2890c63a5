"""The 12 fine-tuning tasks of Radford et al. (2018), Table 1, as one table.

Every task is a row: its input family (spec §2: classification, entailment, similarity,
multiple choice), label set, metrics, its mirror source as data (which files in which format
make which table, which splits are carved from which) and its hub source. The file formats
live in gpt1/tasks/mirror_formats.py, the one generic reader in gpt1/tasks/load.py, the four
input transformations in gpt1/tasks/formats.py; one head, one loop and one scorer serve all
rows.
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
FRESH = "fresh"
"""The optional fourth split (tasks.fresh_examples): labelled rows carved from train before
anything is drawn from it, scored by every fine-tuning arm beside test and never trained or
piloted on (gpt1.tasks.load.carve_fresh)."""

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


MirrorReader = Literal["pairs_json", "pairs_csv", "sst2", "cola", "mrpc", "stsb", "rte", "race",
                       "story_cloze"]
"""A file format of gpt1/tasks/mirror_formats.py (its FORMATS table)."""


@dataclass(frozen=True)
class MirrorFiles:
    """One table read from the mirror: the files (paths under <mirror>/tasks, read in order and
    concatenated) in one format of gpt1/tasks/mirror_formats.py, each with the id prefix its
    rows get."""

    reader: MirrorReader
    files: tuple[tuple[str, str], ...]
    """(path, id prefix) per file; RACE's path is a split folder and its prefix the split."""


def read(reader: MirrorReader, path: str, tag: str = "") -> MirrorFiles:
    """A table read from one mirror file."""
    return MirrorFiles(reader, ((path, tag),))


@dataclass(frozen=True)
class Carve:
    """Split table `source` into `rest` and a seeded held-out part `held` (gpt1.tasks.load.carve):
    `size` "dev" holds out tasks.dev_examples[task] or tasks.dev_frac of it, "test"
    tasks.test_frac; rows equal in column `by` stay on one side."""

    source: str
    rest: str
    held: str
    size: Literal["dev", "test"]
    by: str | None = None


DEV_FROM_TRAIN = Carve("full", "train", "dev", "dev")
"""The dev split most tasks carve from their official training file ("full")."""


@dataclass(frozen=True, kw_only=True)
class MirrorSource:
    """Where a task lives in the local mirror: the tables read from files, then the carves that
    make train / dev / test of them, and the raw label strings of its files."""

    tables: dict[str, MirrorFiles]
    carves: tuple[Carve, ...] = ()
    labels: Mapping[str, int]
    """Raw label value in the files -> label index (TaskSpec.labels order); {} = scores."""


NLI3_RAW = {"entailment": 0, "neutral": 1, "contradiction": 2}
NLI2_RAW = {"entailment": 0, "not_entailment": 1}
BINARY_RAW = {"0": 0, "1": 1}


@dataclass(frozen=True, kw_only=True)
class CustomSource:
    """A task of the user's own (params tasks.custom): one CSV, TSV or JSONL file, its
    columns, and either a column naming each row's split or none (dev and test are carved)."""

    file: str
    text_a: str
    text_b: str | None
    label: str
    split: str | None


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
    mirror: MirrorSource | None
    """None: a custom task (read from `custom`)."""
    hub: HubSource | None
    custom: CustomSource | None = None

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
_CLOZE = "StoryCloze/cloze_test_{0}__spring2016 - cloze_test_ALL_{0}.csv"  # names as shipped
_COLA = "CoLA/cola_public/raw"

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
        mirror=MirrorSource(
            tables={"train": read("pairs_json", "SNLI/train_subset_10k/train.json", "tr"),
                    "dev": read("pairs_json", "SNLI/train_subset_10k/dev.json", "dv"),
                    "test": read("pairs_csv", "SNLI/dev_csv/dev.csv", "te")},
            labels=NLI3_RAW),
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
        mirror=MirrorSource(
            tables={"full": read("pairs_json", "MNLI/train_subset_10k/train.json", "tr"),
                    "test": read("pairs_json", "MNLI/train_subset_10k/dev.json", "te")},
            carves=(DEV_FROM_TRAIN,), labels=NLI3_RAW),
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
        mirror=MirrorSource(
            tables={"train": read("pairs_json", "QNLI/train_subset_10k/train.json", "tr"),
                    "dev": read("pairs_json", "QNLI/train_subset_10k/dev.json", "dv"),
                    "test": read("pairs_csv", "QNLI/glue_v1_dev_csv/dev.csv", "te")},
            labels=NLI2_RAW),
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
        mirror=MirrorSource(
            tables={"full": read("rte", "RTE/train.tsv"),
                    "test": read("rte", "RTE/dev.tsv")},
            carves=(DEV_FROM_TRAIN,), labels=BINARY_RAW),
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
        mirror=MirrorSource(
            tables={"full": read("pairs_csv", "SciTail/scitail_test.csv", "te")},
            carves=(Carve("full", "rest", "test", "test", by="text_a"),
                    Carve("rest", "train", "dev", "dev", by="text_a")),
            labels=NLI2_RAW),
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
        mirror=MirrorSource(
            tables={s: read("race", f"RACE/RACE/{s}", s) for s in SPLITS},
            labels={"A": 0, "B": 1, "C": 2, "D": 3}),
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
        mirror=MirrorSource(
            tables={"full": read("story_cloze", _CLOZE.format("val")),
                    "test": read("story_cloze", _CLOZE.format("test"))},
            carves=(DEV_FROM_TRAIN,), labels={"1": 0, "2": 1}),
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
        mirror=MirrorSource(
            tables={"full": read("mrpc", "MRPC/msr_paraphrase_train.txt"),
                    "test": read("mrpc", "MRPC/msr_paraphrase_test.txt")},
            carves=(DEV_FROM_TRAIN,), labels=BINARY_RAW),
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
        mirror=MirrorSource(
            tables={"full": read("pairs_json", "QQP/train_subset_10k/train.json", "tr"),
                    "test": read("pairs_json", "QQP/train_subset_10k/dev.json", "te")},
            carves=(DEV_FROM_TRAIN,), labels=BINARY_RAW),
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
        mirror=MirrorSource(
            tables={s: read("stsb", f"STS-B/sts-{s}.tsv") for s in SPLITS}, labels={}),
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
        mirror=MirrorSource(
            tables={"full": read("sst2", "SST-2/train.tsv", "tr"),
                    "test": read("sst2", "SST-2/dev.tsv", "te")},
            carves=(DEV_FROM_TRAIN,), labels=BINARY_RAW),
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
        mirror=MirrorSource(
            tables={"full": read("cola", f"{_COLA}/in_domain_train.tsv", "tr"),
                    # GLUE's CoLA dev = in-domain dev followed by out-of-domain dev.
                    "test": MirrorFiles("cola", ((f"{_COLA}/in_domain_dev.tsv", "in"),
                                                 (f"{_COLA}/out_of_domain_dev.tsv",
                                                  "out")))},
            carves=(DEV_FROM_TRAIN,), labels=BINARY_RAW),
        hub=HubSource(path="nyu-mll/glue", name="cola",
                      splits={"train": "train", "test": "validation"},
                      fields={"text_a": "sentence", "label": "label"}),
    ),
)}


PAPER_TASKS: tuple[str, ...] = tuple(TASKS)
"""The 12 tasks of the paper; TASKS also holds the custom tasks of the params last loaded."""


def custom_task(name: str, source: CustomSource, labels: tuple[str, ...], metric: Metric
                ) -> TaskSpec:
    """The registry row of a task of the user's own: classification (one text) or entailment
    (a pair: text_b given), its splits from the file's split column or carved."""
    where = f"{source.file} ({'column ' + source.split if source.split else 'carved, seeded'})"
    origin: Origin = "official train" if source.split else "carved"
    return TaskSpec(
        name=name, title=name, fmt="entail" if source.text_b else "classify", labels=labels,
        metric=metric, metrics=tuple(dict.fromkeys((metric, "acc"))), mirror_dir="",
        sources={s: f"{s} of {where}" for s in SPLITS},
        origins={"train": origin, "dev": origin if source.split else "carved",
                 "test": "official test" if source.split else "carved"},
        mirror=None, hub=None, custom=source)


def register_custom(specs: Mapping[str, TaskSpec]) -> None:
    """Make the custom tasks of the params being loaded known by name (TASKS), replacing the
    custom tasks of params loaded before; a paper task's name is refused by the params."""
    for name in [n for n in TASKS if n not in PAPER_TASKS and n not in specs]:
        del TASKS[name]
    TASKS.update(specs)


def get_task(name: str) -> TaskSpec:
    """The TaskSpec named `name`; KeyError lists the known names."""
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; known: {', '.join(TASKS)}") from None
