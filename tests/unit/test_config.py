"""Strict params loading: unknown / missing keys and bad values fail in one line naming the key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpt1.config import ParamsError, load_params, parse_params
from tests.helpers.repo import REPO
from tests.helpers.spec_doc import keyed_values, sections, spec_text


def _raw() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def test_presets_load() -> None:
    demo = load_params(REPO / "params.yaml")
    paper = load_params(REPO / "configs" / "paper.yaml")
    study = load_params(REPO / "configs" / "cpu-study.yaml")
    gpu = load_params(REPO / "configs" / "gpu-study.yaml")
    assert demo.model.arch == paper.model.arch == study.model.arch == gpu.model.arch == "gpt1"
    assert len({demo.digest(), paper.digest(), study.digest(), gpu.digest()}) == 4
    assert [p.report.preset for p in (demo, study, gpu, paper)] == [
        "demo", "study", "gpu-study", "paper"]


def test_every_preset_has_the_demo_keys() -> None:
    """A preset is the demo's file with values changed: same sections, same keys (a preset
    that drifted behind params.yaml fails here, not an hour into a run)."""
    def keys(tree: dict, prefix: str = "") -> set[str]:
        out = set()
        for k, v in tree.items():
            out.add(prefix + k)
            if isinstance(v, dict) and k not in {"overrides", "presets", "paper", "columns",
                                                 "paper_ablations", "norm", "glue",
                                                 "truncation_overrides", "dev_examples",
                                                 "fresh_examples", "scored_ids", "row_labels",
                                                 "paper_figure2"}:
                out |= keys(v, prefix + k + ".")
        return out
    demo = keys(_raw())
    for name in ("cpu-study.yaml", "gpu-study.yaml", "paper.yaml", "paper-finetune.yaml"):
        other = keys(yaml.safe_load((REPO / "configs" / name).read_text()))
        assert other == demo, (name, sorted(other ^ demo))


def test_unknown_key_named_with_suggestion() -> None:
    raw = _raw()
    raw["bpe"]["n_mergez"] = raw["bpe"].pop("n_merges")
    expected = r"bpe\.n_mergez: unknown key \(did you mean 'n_merges'\?\)"
    with pytest.raises(ParamsError, match=expected):
        parse_params(raw, "p.yaml")


def test_missing_key_named() -> None:
    raw = _raw()
    del raw["pretrain"]["lr_max"]
    with pytest.raises(ParamsError, match=r"pretrain\.lr_max: missing key"):
        parse_params(raw, "p.yaml")


@pytest.mark.parametrize(
    ("section", "key", "value", "needle"),
    [
        ("model", "resid_pdrop", -0.1, "model.resid_pdrop"),
        ("bpe", "n_merges", 0, "bpe.n_merges"),
        ("pretrain", "lr_max", "fast", "pretrain.lr_max"),
        ("model", "n_head", 3, "model.n_head"),
        ("pretrain", "micro_batch_seqs", 7, "pretrain.micro_batch_seqs"),
        ("shard", "val_frac", 1.0, "shard.val_frac"),
        ("pretrain", "seeds", [], "pretrain.seeds"),
        ("pretrain", "seeds", [7, 7], "pretrain.seeds"),
        ("finetune", "select", "best", "finetune.select"),
    ],
)
def test_bad_values_named(section: str, key: str, value: object, needle: str) -> None:
    raw = _raw()
    raw[section][key] = value
    with pytest.raises(ParamsError) as info:
        parse_params(raw, "p.yaml")
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("device", "compile_", "needle"), [
    ("auto", False, "pretrain.cuda_graphs: true needs pretrain.compile: true"),
    ("cpu", True, "pretrain.cuda_graphs: true needs a GPU, and device is cpu"),
])
def test_cuda_graphs_refused_where_they_cannot_run(device: str, compile_: bool,
                                                   needle: str) -> None:
    raw = _raw()
    raw["device"] = device
    raw["pretrain"].update(cuda_graphs=True, compile=compile_)
    with pytest.raises(ParamsError, match=rf"^p.yaml: {needle}"):
        parse_params(raw, "p.yaml")
    raw["device"], raw["pretrain"]["compile"] = "cuda", True
    assert parse_params(raw, "p.yaml").pretrain.cuda_graphs  # a GPU and compiled: accepted


@pytest.mark.parametrize(("pilot", "needle"), [
    ({"lr_grid": [1e-4]}, "ablations.pilot.lr_grid"),
    ({"lr_grid": [1e-4, -1.0]}, "ablations.pilot.lr_grid"),
    ({"variants": ["scratch"]}, "ablations.pilot.variants: ['scratch'] not in ablations.variants"),
    ({"variants": ["bogus"]}, "not in ablations.presets"),
    ({"dev_examples": 0}, "ablations.pilot.dev_examples"),
])
def test_bad_lr_pilot_named(pilot: dict[str, object], needle: str) -> None:
    raw = _raw()
    raw["ablations"]["variants"] = ["no_aux"]  # a pilot of a row that does not run: refused
    raw["ablations"]["pilot"].update(pilot)
    with pytest.raises(ParamsError) as info:
        parse_params(raw, "p.yaml")
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_full_is_refused_as_an_ablation_row() -> None:
    """`full` is the finetune stage's row: as an ablations.variants row it would render
    lr_pilot@full-<task> beside lr_pilot_full@<task> (same outputs) and ablation@full-... with
    no preset to read."""
    raw = _raw()
    raw["ablations"]["variants"] = ["full", *raw["ablations"]["variants"]]
    with pytest.raises(ParamsError) as info:
        parse_params(raw, "p.yaml")
    assert "ablations.variants: 'full'" in str(info.value) and "\n" not in str(info.value)
    raw["ablations"]["variants"].remove("full")
    raw["ablations"]["pilot"]["variants"] = ["full"]  # piloting the recipe stays allowed
    assert parse_params(raw, "p.yaml").ablations.pilot.variants == ("full",)


def test_float_exponent_without_dot(tmp_path: Path) -> None:
    text, n = re.subn(r"lr_max: \S+", "lr_max: 1e-3", (REPO / "params.yaml").read_text())
    assert n >= 1
    (tmp_path / "p.yaml").write_text(text)
    assert load_params(tmp_path / "p.yaml").pretrain.lr_max == pytest.approx(1e-3)


def test_cli_misspelled_key_exits_nonzero_one_line(tmp_path: Path) -> None:
    text = (REPO / "params.yaml").read_text().replace("n_merges:", "n_merge:")
    bad = tmp_path / "params.yaml"
    bad.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "gpt1", "--params", str(bad), "train_bpe"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "bpe.n_merge: unknown key" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("finetune.seeds", [0, 0], "must not repeat a value, got [0]"),
        ("finetune.seeds", [-1], "must be non-negative, got [-1]"),
        ("finetune.seeds", [], "must list at least one value"),
        ("layers.layers_transferred", [2, 2], "must not repeat a value, got [2]"),
        ("layers.layers_transferred", [], "must list at least one value"),
        ("orchestrate.devices", [1, 1], "must not repeat a value, got [1]"),
        ("orchestrate.devices", "all", "must be auto or a list of device indices, got 'all'"),
        ("orchestrate.max_parallel_stages", 0, "must be auto or a positive integer, got 0"),
    ],
)
def test_seed_and_id_lists_refused(key: str, value: list[int], needle: str) -> None:
    """A repeated seed would report one run as two, a negative one fails in numpy, an empty
    list runs nothing: each is one line naming the key, at load."""
    raw = _raw()
    section, name = key.split(".")
    raw[section][name] = value
    with pytest.raises(ParamsError) as info:
        parse_params(raw, "p.yaml")
    assert str(info.value).startswith(f"p.yaml: {key}: {needle}")
    assert "\n" not in str(info.value) and "Value error" not in str(info.value)


@pytest.mark.parametrize(("key", "value"), [
    ("ablations.pilot.lr_grid", [2.5e-4, 0.00025]),
    ("ablations.pilot.warmup_grid", [0.1, 0.1]),
    ("ablations.floor.c_grid", [1.0, 4.0, 1.0]),
    ("finetune.tasks", ["rte", "rte"]),
    ("ablations.tasks", ["cola", "sst2", "cola"]),
    ("ablations.pilot.variants", ["full", "full"]),
    ("curves.arms", ["full", "full"]),
    ("zeroshot.tasks", ["sst2", "sst2"]),
    ("orchestrate.io_stages", ["download_corpus", "download_corpus"]),
    ("bpe.special_tokens", ["_start_", "_start_"]),
])
def test_a_grid_or_list_with_a_repeated_value_is_refused(key: str, value: list) -> None:
    """A grid point or a task listed twice would run twice and count as two (a pilot grid of
    "at least two" lrs would try one): one line naming the key, at load."""
    raw = _raw()
    *path, name = key.split(".")
    section = raw
    for part in path:
        section = section[part]
    section[name] = value
    with pytest.raises(ParamsError) as info:
        parse_params(raw, "p.yaml")
    assert str(info.value).startswith(f"p.yaml: {key}: must not repeat a value, got "
                                      f"[{value[-1]!r}] more than once"), info.value
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("edit", "needle"), [
    ({"ablations": {"floor": {"min_df": 301}}, "curves": {"tasks": []}},
     "ablations.floor.min_df: 301 exceeds the 300 training texts of the capped training "
     "sample of cola (finetune.max_train_examples)"),
    ({"ablations": {"floor": {"min_df": 251}}, "finetune": {"max_train_examples": None}},
     "ablations.floor.min_df: 251 exceeds the 250 training texts of curve_floor@sst2-250 "
     "(curves.ns)"),
])
def test_a_floor_min_df_above_its_training_texts_is_refused_at_load(edit: dict,
                                                                    needle: str) -> None:
    from tests.helpers.params import deep_merge

    raw = deep_merge(_raw(), edit)
    raw["finetune"]["overrides"] = {}
    with pytest.raises(ParamsError) as info:
        parse_params(raw, "p.yaml")
    assert str(info.value).startswith(f"p.yaml: {needle}"), info.value
    raw["ablations"]["floor"]["min_df"] = 250
    parse_params(raw, "p.yaml")


DOSE = {"curves": {"dose_tokens": [500000, 1000000], "dose_tasks": ["sst2"]}}
"""A dose curve on the demo: two budgets below its 3 M tokens (122 and 244 updates of 4,096
tokens, past its 100 warm-up updates) and the main run, on a task of ablations.tasks."""


def test_the_dose_curve_is_off_in_the_demo_and_paper_and_on_in_the_study() -> None:
    study = load_params(REPO / "configs" / "cpu-study.yaml").curves
    assert study.dose_tasks == ("qnli",) and study.checkpoints == ()  # no mid-run curve
    assert len(study.dose_tokens) >= 2 and study.dose_tokens[-1] < 6_000_000
    for preset in ("params.yaml", "configs/paper.yaml", "configs/paper-finetune.yaml"):
        curves = load_params(REPO / preset).curves
        assert curves.dose_tokens == curves.dose_tasks == (), preset
    from tests.helpers.params import deep_merge

    dose = parse_params(deep_merge(_raw(), DOSE), "p.yaml")
    assert dose.curves.dose_tokens == (500000, 1000000)


@pytest.mark.parametrize(("edit", "needle"), [
    ({"curves": {"dose_tasks": []}}, "curves.dose_tokens: the dose curve needs both "
     "dose_tokens and dose_tasks, or neither"),
    ({"curves": {"dose_tokens": [], "dose_tasks": ["sst2"]}}, "curves.dose_tokens: the dose "
     "curve needs both"),
    ({"curves": {"dose_tokens": [1000000]}}, "curves.dose_tokens: at least two budgets below "
     "the main run's (three with it), got [1000000]"),
    ({"curves": {"dose_tokens": [1000000, 500000]}}, "curves.dose_tokens: must rise strictly"),
    ({"curves": {"dose_tokens": [500000, 500000]}}, "curves.dose_tokens: must rise strictly"),
    ({"curves": {"dose_tokens": [0, 500000]}}, "curves.dose_tokens: must be positive"),
    ({"curves": {"dose_tokens": [500000, 3000000]}}, "curves.dose_tokens: 3000000 is not "
     "below pretrain.max_tokens (3000000), the main run, which is the curve's top dose"),
    ({"curves": {"dose_tokens": [409600, 1000000]}}, "curves.dose_tokens: 409600 tokens are "
     "100 updates of 4096, not more than pretrain.warmup_steps (100)"),
    ({"pretrain": {"epochs": 1.0, "max_tokens": None}}, "curves.dose_tokens: the dose curve "
     "pre-trains runs of its own beside the main one, which needs pretrain.max_tokens"),
    ({"pretrain": {"import_hf": "models/openai-gpt"}}, "curves.dose_tokens: the dose curve "
     "pre-trains runs of its own"),
    ({"curves": {"dose_tasks": ["qnli"]}}, "curves.dose_tasks: 'qnli' not in ablations.tasks"),
    ({"ablations": {"pilot": {"variants": ["full", "no_aux"]}}}, "curves.dose_tokens: the dose "
     "curve needs ablations.variants to list 'scratch' and ablations.pilot.variants to list "
     "'full' and 'scratch'"),
    ({"ablations": {"presets": {"scratch": {"init": "pretrained"}}}}, "curves.dose_tokens: "
     "dose 0 is ablations.presets.scratch, whose init must be scratch"),
])
def test_a_dose_curve_outside_its_range_is_refused_at_load(edit: dict, needle: str) -> None:
    """Each budget a complete run below the main one, past its warm-up, on a task whose full
    and scratch rows (the top dose and dose 0) are piloted: else one line naming the key."""
    from tests.helpers.params import deep_merge

    with pytest.raises(ParamsError) as info:
        parse_params(deep_merge(deep_merge(_raw(), DOSE), edit), "p.yaml")
    assert str(info.value).startswith(f"p.yaml: {needle}"), info.value
    assert "\n" not in str(info.value)


def _cli_finetune(tmp_path: Path, pattern: str, replacement: str
                  ) -> subprocess.CompletedProcess[str]:
    """`gpt1 finetune --task rte` in tmp_path on params.yaml with one edit (GPUs hidden)."""
    text, n = re.subn(pattern, replacement, (REPO / "params.yaml").read_text())
    assert n == 1
    (tmp_path / "params.yaml").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "gpt1", "--params", "params.yaml", "finetune", "--task", "rte"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )


def test_cli_empty_seed_list_exits_2_before_any_output(tmp_path: Path) -> None:
    proc = _cli_finetune(tmp_path, r"seeds: \[0[^\]]*\]", "seeds: []")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("gpt1 finetune: error: params.yaml: finetune.seeds: must "
                                   "list at least one value, got []")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written


def test_cli_unprepared_zeroshot_task_exits_2_naming_the_key_before_any_output(
        tmp_path: Path) -> None:
    """zeroshot.tasks names RACE, which no prepare_task stage prepares (finetune.tasks lacks
    it): the zero-shot stage stops at load, one line naming the key, nothing written."""
    demo = (REPO / "params.yaml").read_text()
    text, n = re.subn(r"(?m)^(  tasks: \[snli, .*)race, ", r"\1", demo)  # finetune.tasks
    assert n == 1
    (tmp_path / "params.yaml").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "gpt1", "zeroshot"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "gpt1 zeroshot: error: params.yaml: zeroshot.tasks: 'race' is not prepared by any "
        "stage (prepare_task runs for finetune.tasks ['snli', 'mnli', 'qnli', 'rte', "
        "'scitail', 'story_cloze', 'mrpc', 'qqp', 'stsb', 'sst2', 'cola']); add it there or "
        "drop it here")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing run


@pytest.mark.parametrize("key", ["layers.tasks", "ablations.tasks", "report.confirmatory_tasks"])
def test_every_task_list_names_prepared_tasks(key: str) -> None:
    raw = _raw()
    section, name = key.split(".")
    raw["finetune"]["tasks"] = ["sst2", "qnli", "cola", "mnli", "race"]
    raw["finetune"]["overrides"] = {}
    raw["zeroshot"]["tasks"] = ["sst2", "dprd"]  # DPRD: read from the mirror, not prepared
    for other in ("layers.tasks", "ablations.tasks", "report.confirmatory_tasks"):
        raw[other.split(".")[0]][other.split(".")[1]] = ["sst2"]
    parse_params(raw, "p.yaml")
    raw[section][name] = ["sst2", "rte"]
    with pytest.raises(ParamsError, match=rf"^p.yaml: {key}: 'rte' is not prepared by any stage"):
        parse_params(raw, "p.yaml")


# spec §1-2 and §5, one row per value the paper preset holds: (dotted key in configs/paper.yaml,
# the paper's or the original release's value). docs/paper.md's key tables must say the same.
PAPER_VALUES = [
    ("bpe.n_merges", 40000),
    ("bpe.lowercase", True),
    ("bpe.end_of_word_suffix", "</w>"),
    ("bpe.special_tokens", ["_start_", "_delimiter_", "_classify_"]),
    ("model.arch", "gpt1"),
    ("model.n_layer", 12),
    ("model.n_embd", 768),
    ("model.n_head", 12),
    ("model.n_inner", 3072),
    ("model.n_positions", 512),
    ("model.afn", "gelu"),
    ("model.initializer_range", 0.02),
    ("model.resid_pdrop", 0.1),
    ("model.embd_pdrop", 0.1),
    ("model.attn_pdrop", 0.1),
    ("model.layer_norm_epsilon", 1e-5),
    ("pretrain.lr_max", 2.5e-4),
    ("pretrain.warmup_steps", 2000),
    ("pretrain.lr_schedule", "cosine"),
    ("pretrain.batch_seqs", 64),
    ("pretrain.seq_len", 512),
    ("pretrain.epochs", 100),
    ("pretrain.weight_decay", 0.01),
    ("pretrain.adam_beta1", 0.9),
    ("pretrain.adam_beta2", 0.999),
    ("pretrain.adam_eps", 1e-8),
    ("pretrain.grad_clip", 1),
    ("finetune.clf_pdrop", 0.1),
    ("finetune.lr", 6.25e-5),
    ("finetune.batch_size", 32),
    ("finetune.epochs", 3),
    ("finetune.warmup_frac", 0.002),
    ("finetune.lm_coef", 0.5),
    ("tasks.truncation", "half"),
    ("tasks.truncate_keep", "head"),
    ("tasks.dev_examples.story_cloze", 374),
]


def _get(cfg: object, dotted: str) -> object:
    for part in dotted.split("."):
        cfg = cfg[part] if isinstance(cfg, dict) else getattr(cfg, part)
    return list(cfg) if isinstance(cfg, tuple) else cfg


@pytest.fixture(scope="module")
def spec_values() -> dict[str, object]:
    """configs/paper.yaml key -> value, as docs/paper.md's §1, §2 and §5 tables give them."""
    by_section = sections(spec_text())
    return {k: v for n in (1, 2, 5) for k, v in keyed_values(by_section[n]).items()}


@pytest.mark.parametrize(("key", "value"), PAPER_VALUES, ids=[v[0] for v in PAPER_VALUES])
def test_paper_preset_holds_spec_values(
    key: str, value: object, spec_values: dict[str, object]
) -> None:
    """Each value of spec §1-2 (and §5's parity values) is in configs/paper.yaml, and
    docs/paper.md gives the same value for the same key."""
    assert key in spec_values, f"docs/paper.md: no table row names {key}"
    assert spec_values[key] == value, f"docs/paper.md gives {key} = {spec_values[key]!r}"
    paper = load_params(REPO / "configs" / "paper.yaml")
    assert _get(paper, key) == value


def test_spec_key_tables_are_all_checked(spec_values: dict[str, object]) -> None:
    """A key added to docs/paper.md's tables is checked too: the list above names every one."""
    assert set(spec_values) == {key for key, _ in PAPER_VALUES}


def test_paper_preset_special_tokens_and_lstm() -> None:
    """spec §5 (parity): the three special tokens follow the vocabulary in this order."""
    paper = load_params(REPO / "configs" / "paper.yaml")
    assert list(paper.bpe.special_tokens) == ["_start_", "_delimiter_", "_classify_"]
    assert paper.lstm.hidden_size == 2048 and paper.lstm.n_layer == 1   # Table 5's LSTM


def test_cli_device_cuda_without_a_gpu_exits_2_before_any_output(tmp_path: Path) -> None:
    """`device: cuda` where torch sees no GPU (a CPU build here; on a GPU host the GPUs are
    hidden) stops at start in one line naming the torch build and the fix, writing nothing."""
    proc = _cli_finetune(tmp_path, r"(?m)^device: auto", "device: cuda")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line
    assert re.match(r"gpt1 finetune: error: device: cuda, but torch \S+ (is a CPU-only build|"
                    r"\(CUDA [\d.]+\) sees no GPU)", line), line
    assert "bash setup.sh" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written


def test_the_gate_margins_cover_every_confirmatory_task_and_stay_in_range() -> None:
    """report.gate_margins: in every preset, a margin per confirmatory
    task; a missing one or one out of [0, 0.5) fails naming the key."""
    for preset in ("params.yaml", "configs/cpu-study.yaml", "configs/gpu-study.yaml",
                   "configs/paper.yaml", "configs/paper-finetune.yaml"):
        report = load_params(REPO / preset).report
        assert set(report.confirmatory_tasks) <= set(report.gate_margins), preset
    raw = _raw()
    raw["report"]["gate_margins"] = {"sst2": 0.03}
    with pytest.raises(ParamsError, match=r"^p.yaml: report.gate_margins: no margin for "
                                          r"confirmatory task 'qnli'"):
        parse_params(raw, "p.yaml")
    raw["report"]["gate_margins"] = {"sst2": 0.03, "qnli": 0.7}
    with pytest.raises(ParamsError, match=r"report.gate_margins.qnli"):
        parse_params(raw, "p.yaml")
