"""The report chain end to end on generated data: finetune, ablation presets (scratch / no aux
LM / LSTM body), transfer_layers, zeroshot (both models) and report, each stage function called
as DVC calls it, on a tiny model; the report and Figure 2 come out with our numbers in them."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pandas as pd

from gpt1 import bpe, checkpoint, networks
from gpt1.records import read_metrics
from gpt1.stages import finetune as finetune_stages
from gpt1.stages import lr_pilot as lr_pilot_stages
from gpt1.stages import report as report_stages
from gpt1.stages import zeroshot as zeroshot_stages
from gpt1.tasks.load import write_tables
from tests.helpers.task_tables import sentence, table, write_dprd


def _pretrained(params, kind: str, run_dir: Path, tok) -> None:
    """A 'pre-trained' run dir as the pretrain stage leaves it: final + zero-shot weights."""
    model = networks.build_model(kind, params, tok.vocab_size)
    for step in (0, 4, 16):
        checkpoint.save_weights(checkpoint.zeroshot_path(Path(run_dir), step), model)
    checkpoint.write_model(Path(run_dir), model, {
        "kind": kind, "vocab_size": tok.vocab_size, "tokenizer_hash": tok.hash,
        "params": params.as_dict(), "step": 16})


def test_report_chain_on_generated_data(make_params, tmp_path: Path) -> None:
    params = make_params({
        "finetune": {"tasks": ["rte", "mnli", "race", "cola", "sst2"], "seeds": [0],
                     "max_train_examples": 12, "max_eval_examples": 8},
        "ablations": {"tasks": ["rte"], "pilot": {"dev_examples": 4}},
        "curves": {"tasks": ["rte"]},  # each in ablations.tasks
        "layers": {"tasks": ["mnli"], "layers_transferred": [0, 1, 2],
                   "max_train_examples": 10, "max_eval_examples": 6},
        "zeroshot": {"max_examples": 8},
        "report": {"confirmatory_tasks": ["sst2"]},  # a task some stage prepares
        "pretrain": {"precision": "fp32"},
        "bpe": {"n_merges": 20},
    })
    rng = random.Random(0)
    tok = bpe.train_bpe([sentence(rng, 30) for _ in range(50)], params.bpe,
                        params.paths.tokenizer)
    _pretrained(params, "transformer", checkpoint.pretrain_dir(params, "transformer"), tok)
    _pretrained(params, "lstm", checkpoint.pretrain_dir(params, "lstm"), tok)
    for task in params.finetune.tasks:
        write_tables({s: table(task, 16, rng) for s in ("train", "dev", "test")},
                     Path(params.paths.tasks) / task)
    write_dprd(params.paths.mirror_dir)

    for variant in params.ablations.pilot.variants:  # first: finetune reads full's, if piloted
        lr_pilot_stages.lr_pilot(params, "rte", variant)
    finetune_stages.finetune(params, "rte")
    for variant in params.ablations.variants:
        finetune_stages.ablation(params, "rte", variant)
    for k in params.layers.layers_transferred:
        finetune_stages.transfer_layers(params, "mnli", k)
    zeroshot_stages.zeroshot(params)
    zeroshot_stages.zeroshot_lstm(params)
    out = report_stages.report(params)

    metrics = Path(params.paths.metrics)
    records = read_metrics(metrics)  # each metrics file merged with its sidecar
    lstm = records["finetune_lstm_rte_p1234"]
    assert (lstm["variant"], lstm["body"], lstm["init"]) == ("lstm", "lstm", "pretrained")
    no_aux = records["finetune_no_aux_rte_p1234"]
    assert no_aux["lm_coef"] == 0.0
    layers = records["layers_mnli_2_p1234"]
    assert layers["metric"] in layers["scores"] and layers["n_train"] == 10
    assert layers["layers_transferred"] == 2 and set(layers["predictions"]) == {"test"}
    zs = records["zeroshot_lstm_p1234"]
    assert [c["step"] for c in zs["checkpoints"]] == zs["steps"] == [0, 4, 16]
    assert zs["n_examples"]["dprd"] == 2

    text = Path(out["outputs"]["report"]).read_text()
    assert "another config hash" not in text  # every file carries the expected hash
    rte = 100 * lstm["scores"]["acc"]["mean"]
    lstm_rows = text.split("| LSTM w/ aux LM | paper |")[1].splitlines()
    assert lstm_rows[1].rstrip().endswith(f"| {rte:.1f} |")  # one seed: no "± sd"
    assert re.search(r"\| \[\d+\.\d, \d+\.\d\] \|$", lstm_rows[2].rstrip())  # CI from predictions
    assert "- **(a) paper: \"pre-training helps\" (rows 1 vs 2):" in text
    assert "(no per-example" not in text
    assert Path(zs["predictions"]).is_file()
    assert "MNLI scored-split accuracy goes from" in text and "Transformer: mean normalised" in text
    assert Path(out["outputs"]["figure"]).read_bytes()[:4] == b"\x89PNG"
    left = pd.read_csv(out["outputs"]["figure2_left_mnli"])  # one file per layers.tasks entry
    assert left["layers"].tolist() == [0, 1, 2] and left["dev"].notna().all()
