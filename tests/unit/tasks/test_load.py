"""Task readers: every mirror format into the canonical schema, bad files, the hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpt1.errors import Gpt1Error
from gpt1.tasks.load import carve, load_task, read_tables, validate_tables, write_tables
from gpt1.tasks.mirror_formats import read_kshot
from gpt1.tasks.registry import CANONICAL_COLUMNS, SPLITS, TASKS
from tests.helpers.repo import SHARED_DATA
from tests.helpers.task_mirror import write_mirror

CARVE = {"tasks": {"dev_examples": {"story_cloze": 3}}}


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    return write_mirror(tmp_path / "mirror")


@pytest.mark.parametrize("name", list(TASKS))
def test_every_format_reads_into_canonical_schema(name: str, mirror: Path, make_params) -> None:
    params = make_params(CARVE)
    spec = TASKS[name]
    tables = load_task(spec, params.tasks, mirror)
    for split in SPLITS:
        df = tables[split]
        assert tuple(df.columns) == CANONICAL_COLUMNS
        assert len(df) > 0 and df["id"].is_unique
        assert (df["text_a"].str.len() > 0).all()
        if spec.fmt == "choice":
            assert set(df["choices"].map(len)) == {spec.n_choices}
    report = validate_tables(tables, spec, mirror / "tasks")
    assert all(report[s]["success"] for s in SPLITS)


def test_quirks(mirror: Path, make_params) -> None:
    cfg = make_params(CARVE).tasks
    rte = load_task(TASKS["rte"], cfg, mirror)
    assert rte["test"]["text_a"].str.endswith('"q').all()  # QUOTE_NONE: quotes are text
    mrpc = load_task(TASKS["mrpc"], cfg, mirror)
    assert mrpc["test"]["id"].iloc[0] == "0-1000"  # BOM stripped from the header
    sts = load_task(TASKS["stsb"], cfg, mirror)["train"]
    assert sts["label"].tolist()[:3] == [0.0, 1.0, 2.0] and sts["text_b"].iloc[1].endswith(".")
    cola = load_task(TASKS["cola"], cfg, mirror)
    assert len(cola["test"]) == 40  # GLUE dev = in-domain + out-of-domain dev
    sc = load_task(TASKS["scitail"], cfg, mirror)
    assert sum(len(sc[s]) for s in SPLITS) == 20
    assert not set(sc["train"]["text_a"]) & set(sc["test"]["text_a"])  # premises kept whole
    story = load_task(TASKS["story_cloze"], cfg, mirror)
    assert len(story["dev"]) == 3 and story["train"]["text_a"].str.contains(", then").all()
    race = load_task(TASKS["race"], cfg, mirror)["test"]
    assert set(race["group"]) == {"middle", "high"} and race["text_b"].str.endswith("?").all()


def test_carve_is_seeded_and_disjoint(mirror: Path, make_params) -> None:
    cfg = make_params(CARVE).tasks
    a = load_task(TASKS["sst2"], cfg, mirror)
    b = load_task(TASKS["sst2"], cfg, mirror)
    assert a["dev"]["id"].tolist() == b["dev"]["id"].tolist()
    assert not set(a["dev"]["id"]) & set(a["train"]["id"])
    assert len(a["dev"]) == 2 and len(a["train"]) == 18
    other = make_params({"tasks": {"carve_seed": 5, "dev_examples": {"story_cloze": 3}}}).tasks
    c = load_task(TASKS["sst2"], other, mirror)
    assert c["dev"]["id"].tolist() != a["dev"]["id"].tolist()
    with pytest.raises(Gpt1Error, match="cannot carve 18 of 18 rows"):
        carve(a["train"], 18, 0)


def test_tables_roundtrip(mirror: Path, make_params, tmp_path: Path) -> None:
    tables = load_task(TASKS["race"], make_params(CARVE).tasks, mirror)
    write_tables(tables, tmp_path / "race")
    back = read_tables(tmp_path / "race")
    assert back["dev"].to_dict("records") == tables["dev"].to_dict("records")
    with pytest.raises(Gpt1Error, match="missing; run the prepare_task stage first"):
        read_tables(tmp_path / "nope")


# ------------------------------------------------------------------ bad files


def _one_line_error(fn, match: str) -> str:
    with pytest.raises(Gpt1Error, match=match) as err:
        fn()
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_label_outside_set_names_file_and_line(mirror: Path, make_params) -> None:
    path = mirror / "tasks/SST-2/train.tsv"
    lines = path.read_text().splitlines()
    lines[3] = lines[3].rsplit("\t", 1)[0] + "\t7"
    path.write_text("\n".join(lines) + "\n")
    msg = _one_line_error(lambda: load_task(TASKS["sst2"], make_params(CARVE).tasks, mirror),
                          r"label '7' not in")
    assert msg.startswith(f"{path}: line 4:")


def test_missing_column_names_file(mirror: Path, make_params) -> None:
    path = mirror / "tasks/RTE/train.tsv"
    text = path.read_text().replace("\tlabel\t", "\tlabl\t", 1)
    path.write_text(text)
    msg = _one_line_error(lambda: load_task(TASKS["rte"], make_params(CARVE).tasks, mirror),
                          r"missing column 'label'")
    assert msg.startswith(f"{path}: line 1:")
    js = mirror / "tasks/MNLI/train_subset_10k/train.json"
    data = json.loads(js.read_text())
    del data["5"]["text_b"]
    js.write_text(json.dumps(data))
    msg = _one_line_error(lambda: load_task(TASKS["mnli"], make_params(CARVE).tasks, mirror),
                          r"missing column 'text_b'")
    assert msg.startswith(f"{js}: line '5':")


def test_empty_text_names_file_and_line(mirror: Path, make_params) -> None:
    path = mirror / "tasks/SNLI/dev_csv/dev.csv"
    lines = path.read_text().splitlines()
    premise = lines[5].split('",', 1)[0] + '"'
    lines[5] = f"{premise},  ,neutral"
    path.write_text("\n".join(lines) + "\n")
    cfg = make_params(CARVE).tasks
    tables = load_task(TASKS["snli"], cfg, mirror)
    msg = _one_line_error(lambda: validate_tables(tables, TASKS["snli"], mirror / "tasks"),
                          r"empty text \(text_b\)")
    assert msg.startswith(f"{path}: line 6:")


@pytest.mark.parametrize(("rel", "task", "edit", "match", "line"), [
    ("SciTail/scitail_test.csv", "scitail", lambda s: s.replace('"', "", 1),
     r"(broken csv quoting|fields)", 2),
    ("QNLI/glue_v1_dev_csv/dev.csv", "qnli", lambda s: s.replace('",', ",", 2),
     r"(quoted field runs on|broken csv quoting)", 2),
    ("SST-2/dev.tsv", "sst2", lambda s: s.replace(" \t", "\t\t", 2),
     r"expected 2 tab-separated", 2),
])
def test_broken_quoting_names_file_and_line(rel, task, edit, match, line, mirror: Path,
                                            make_params) -> None:
    path = mirror / "tasks" / rel
    path.write_text(edit(path.read_text()))
    msg = _one_line_error(lambda: load_task(TASKS[task], make_params(CARVE).tasks, mirror), match)
    assert msg.startswith(f"{path}: line {line}:")


def test_wrong_choice_count_names_article(mirror: Path, make_params) -> None:
    path = mirror / "tasks/RACE/RACE/dev/high/1.txt"
    art = json.loads(path.read_text())
    art["options"][1] = art["options"][1][:3]
    path.write_text(json.dumps(art))
    tables = load_task(TASKS["race"], make_params(CARVE).tasks, mirror)
    msg = _one_line_error(lambda: validate_tables(tables, TASKS["race"], mirror / "tasks"),
                          r"wrong number of choices \(expected 4\)")
    assert msg.startswith(f"{path}: line q1:")


def test_missing_mirror_is_one_line(tmp_path: Path, make_params) -> None:
    _one_line_error(lambda: load_task(TASKS["sst2"], make_params().tasks, tmp_path),
                    "mirror has no tasks/ folder")


# ------------------------------------------------------------------ hub boundary


def test_hub_path_with_injected_loader(make_params) -> None:
    calls = []

    def fake_load_dataset(path: str, name: str | None, split: str) -> list[dict]:
        calls.append((path, name, split))
        n = 30 if split == "train" else 8
        return [{"sentence": f"text {split} {i}", "label": -1 if i == 0 else i % 2, "idx": i}
                for i in range(n)]

    tables = load_task(TASKS["sst2"], make_params().tasks, None, hub_loader=fake_load_dataset)
    assert calls == [("nyu-mll/glue", "sst2", "train"), ("nyu-mll/glue", "sst2", "validation")]
    assert {s: len(tables[s]) for s in SPLITS} == {"train": 26, "dev": 3, "test": 7}
    assert tables["test"]["source"].iloc[0] == "hub:nyu-mll/glue/sst2/validation:1"
    assert validate_tables(tables, TASKS["sst2"], "")["test"]["success"]

    def race_loader(path: str, name: str | None, split: str) -> list[dict]:
        return [{"example_id": f"{split}{i}", "article": "a b c", "question": "q?",
                 "options": ["w", "x", "y", "z"], "answer": "ABCD"[i % 4]} for i in range(12)]

    race = load_task(TASKS["race"], make_params().tasks, None, hub_loader=race_loader)
    assert race["dev"]["label"].tolist()[:4] == [0, 1, 2, 3]
    assert race["test"]["choices"].iloc[0] == ["w", "x", "y", "z"]

    def bad_loader(path: str, name: str | None, split: str) -> list[dict]:
        return [{"article": "a", "question": "q", "options": ["w"] * 4, "answer": "E",
                 "example_id": "x"}]

    _one_line_error(lambda: load_task(TASKS["race"], make_params().tasks, None,
                                      hub_loader=bad_loader), r"row 0: label 'E' not in")


# ------------------------------------------------------------------ the real mirror

# Row counts of the mirror's task files (train + carved dev together where carved).
MANIFEST_ROWS = {
    "snli": {"train": 8999, "dev": 1000, "test": 9831},
    "mnli": {"train+dev": 8999, "test": 1000},
    "qnli": {"train": 8999, "dev": 1000, "test": 5732},
    "rte": {"train+dev": 2490, "test": 277},
    "scitail": {"train+dev+test": 2126},
    "race": {"train": 87866, "dev": 4887, "test": 4934},
    "story_cloze": {"train": 1497, "dev": 374, "test": 1871},
    "mrpc": {"train+dev": 4076, "test": 1725},
    "qqp": {"train+dev": 8999, "test": 1000},
    "stsb": {"train": 5749, "dev": 1500, "test": 1379},
    "sst2": {"train+dev": 67349, "test": 872},
    "cola": {"train+dev": 8551, "test": 1043},
}
# A few label counts from MANIFEST.md: (split(s), label index, count).
MANIFEST_LABELS = {
    "sst2": ("train+dev", 1, 37569), "mrpc": ("test", 1, 1147), "cola": ("test", 1, 719),
    "snli": ("test", 0, 3325), "scitail": ("train+dev+test", 0, 842),
    "story_cloze": ("test", 0, 960), "qqp": ("train+dev", 1, 3252), "rte": ("test", 0, 146),
}


@pytest.mark.parametrize("name", list(TASKS))
@pytest.mark.slow
def test_real_mirror_loads_validates_and_matches_manifest(name: str, make_params) -> None:
    assert (SHARED_DATA / "MANIFEST.md").is_file(), f"needs the real mirror at {SHARED_DATA}"
    spec = TASKS[name]
    tables = load_task(spec, make_params().tasks, SHARED_DATA)
    report = validate_tables(tables, spec, SHARED_DATA / "tasks")
    assert all(report[s]["success"] for s in SPLITS)
    for key, count in MANIFEST_ROWS[name].items():
        assert sum(len(tables[s]) for s in key.split("+")) == count, key
    if name in MANIFEST_LABELS:
        key, label, count = MANIFEST_LABELS[name]
        assert sum(int((tables[s]["label"] == label).sum()) for s in key.split("+")) == count
    if name == "race":
        articles = {s: tables[s]["id"].str.rsplit("-", n=1).str[0].nunique() for s in SPLITS}
        # 25,137 train articles, of which two (train/high/15946, 16528) hold no question.
        assert articles == {"train": 25137 - 2, "dev": 1389, "test": 1407}
        assert (tables["test"]["group"] == "middle").sum() > 0


def test_real_kshot_tsvs(make_params) -> None:
    """The LM-BFF k-shot GLUE TSVs (variable annotator-label columns) read with their counts."""
    root = SHARED_DATA / "tasks"
    nli3 = {"entailment": 0, "neutral": 1, "contradiction": 2}
    cases = [("MNLI", "dev_matched.tsv", ("sentence1", "sentence2"), "gold_label", nli3, 48),
             ("SNLI", "train.tsv", ("sentence1", "sentence2"), "gold_label", nli3, 48),
             ("QQP", "dev.tsv", ("question1", "question2"), "is_duplicate", {"0": 0, "1": 1}, 32),
             ("QNLI", "train.tsv", ("question", "sentence"), "label",
              {"entailment": 0, "not_entailment": 1}, 32)]
    for task, file, cols, label, mapping, n in cases:
        total = 0
        for seed in ("16-13", "16-21", "16-42", "16-87", "16-100"):
            rows = read_kshot(root, task, seed, file, cols, label, mapping)
            assert len(rows) == n and all(r["text_a"] and r["text_b"] for r in rows)
            assert sorted({r["label"] for r in rows}) == sorted(set(mapping.values()))
            total += len(rows)
        assert total == 5 * n


def test_the_fresh_split_is_written_read_and_gated_like_the_others(tmp_path: Path) -> None:
    from gpt1.tasks.load import read_fresh, to_table
    from gpt1.tasks.mirror_formats import row

    spec = TASKS["sst2"]
    good = to_table([row(f"r{i}", f"s {i}", "", i % 2, f"f.tsv:{i}") for i in range(10)], spec)
    tables = {"train": good, "dev": good, "test": good}
    write_tables(tables, tmp_path / "plain")
    assert read_fresh(tmp_path / "plain") is None  # none carved: none read
    write_tables({**tables, "fresh": good[:4]}, tmp_path / "carved", {"fresh": {"source": "x"}})
    fresh = read_fresh(tmp_path / "carved")
    assert fresh is not None and fresh[0]["id"].tolist() == ["r0", "r1", "r2", "r3"]
    assert fresh[1] == "x" and set(read_tables(tmp_path / "carved")) == set(SPLITS)
    (tmp_path / "carved" / "fresh.json").unlink()
    with pytest.raises(Gpt1Error, match="names the fresh split's origin"):
        read_fresh(tmp_path / "carved")
    bad = good.copy()
    bad.loc[2, "label"] = 7
    report = validate_tables({**tables, "fresh": good}, spec, tmp_path)
    assert report["fresh"]["success"] and report["fresh"]["n_rows"] == 10
    with pytest.raises(Gpt1Error, match=r"line 2: label outside .*rows in fresh"):
        validate_tables({**tables, "fresh": bad}, spec, tmp_path)
