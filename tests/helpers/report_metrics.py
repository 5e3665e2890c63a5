"""A fixture set of metrics records (fine-tuning, ablations, layers, zero-shot) and records
whose prediction files give chosen accuracies: the report tests' inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpt1 import scoring

TABLE_TASKS = ["snli", "mnli", "qnli", "rte", "scitail", "race", "story_cloze", "mrpc", "qqp",
               "stsb", "sst2", "cola"]
SCORES = {"mnli": ["acc_matched"], "race": ["acc", "acc_middle", "acc_high"],
          "mrpc": ["f1", "acc"], "qqp": ["f1", "acc"], "stsb": ["pearson", "spearman"],
          "cola": ["mcc", "acc"]}


def entry(vals: list[float]) -> dict[str, Any]:
    return {"mean": sum(vals) / len(vals), "sd": 0.0, "per_seed": vals}


def scored_on_text(task: str) -> str:
    test = "carved (seeded) part of the official test" if task == "scitail" else "official"
    return f"{test} {task} (fixture)"


def dev_text(task: str) -> str:
    return "carved (seeded) from train" if task in ("mnli", "rte", "scitail") else "official"


def origins(task: str) -> dict[str, str]:
    return {"train": "official train",
            "dev": "carved" if task in ("mnli", "rte", "scitail") else "official dev",
            "test": "carved" if task == "scitail" else "official test"}


def task_json(task: str, variant: str, base: float, seeds: int) -> dict[str, Any]:
    scores = {name: entry([round(base + 0.01 * j + 0.004 * s, 4) for s in range(seeds)])
              for j, name in enumerate(SCORES.get(task, ["acc"]))}
    out = {"task": task, "variant": variant, "metric": next(iter(scores)), "scores": scores,
           "baselines": {name: {"chance": 0.25 + 0.01 * j, "majority": 0.4 + 0.02 * j}
                         for j, name in enumerate(scores)},
           "eval_split": f"test = {scored_on_text(task)}; epoch selected on dev = {dev_text(task)}",
           "scored_on": scored_on_text(task), "origins": origins(task), "n_train": 100,
           "n_eval": 50, "config_hash": "fixture0hash"}
    if task == "mnli":
        out["missing_scores"] = {"acc_mismatched": "MNLI dev_mismatched is not in the mirror"}
    return out


def fixture_metrics(root: Path) -> Path:
    """Finetune (3 seeds), two ablation rows (one partial), layers and zero-shot files."""
    files: dict[str, Any] = {}
    for i, task in enumerate(TABLE_TASKS):
        files[f"finetune_{task}"] = task_json(task, "full", 0.50 + 0.02 * i, 3)
    table5 = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
    for i, task in enumerate(table5):
        files[f"finetune_scratch_{task}"] = task_json(task, "scratch", 0.30 + 0.01 * i, 3)
        if task != "qqp":
            files[f"finetune_no_aux_{task}"] = task_json(task, "no_aux", 0.55 + 0.01 * i, 1)
    for t, task in enumerate(["mnli", "race"]):
        for k in (0, 2, 4):
            files[f"layers_{task}_{k}"] = {
                "task": task, "variant": f"layers_{k}", "layers_transferred": k,
                "scores": {"dev_acc": entry([0.4 + 0.05 * k + 0.1 * t]),
                           "train_acc": entry([0.45 + 0.06 * k + 0.1 * t])},
                "eval_split": f"{task} dev split (fixture)", "n_train": 64, "n_eval": 32,
                "config_hash": "fixture0hash"}
    for stem, model, wiggle in (("zeroshot", "transformer", 0.0), ("zeroshot_lstm", "lstm", 0.1)):
        files[stem] = {"body": model, "config_hash": "fixture0hash", "checkpoints": [
            {"step": step, "scores": {"sst2": 0.5 + 0.01 * j, "cola": 0.02 * j,
                                      "race": 0.25 + 0.01 * j, "dprd": 0.5},
             "normalised": {
                task: round(0.05 * j + 0.02 * n + (wiggle if j % 2 else -wiggle), 4)
                for n, task in enumerate(["sst2", "cola", "race", "dprd"])}}
            for j, step in enumerate([1, 10, 100, 1000])]}
    for n_i, n in enumerate((250, 1000)):  # the labelled-data curve (no prediction files)
        for a_i, arm in enumerate(("full", "scratch")):
            files[f"curve_n_sst2_{n}_{arm}_p1234"] = {
                **task_json("sst2", f"curve_n_{arm}", 0.55 + 0.1 * n_i - 0.03 * a_i, 3),
                "n_train": n}
        files[f"curve_floor_sst2_{n}"] = {**task_json("sst2", "bow", 0.6 + 0.05 * n_i, 3),
                                          "n_train": n}
    for k, (step, correct) in enumerate(((0, [0.5, 0.52]), (30, [0.6, 0.56]),
                                         (732, [0.7, 0.66]))):  # the compute curve
        files[f"curve_step_sst2_{k}_p1234"] = {
            **preds_json(root, f"curve_step{k}", "sst2", correct, 50), "variant": "curve_step",
            "pretrain_step": step}
    files["pretrain"] = {"steps": 732, "tokens": 2998272, "val_ppl": 294.4, "val_loss": 5.68,
                         "config_hash": "fixture0hash", "wall_seconds": 725.4}
    files["finetune_cola"]["wall_seconds"] = 61.0
    files["train_bpe"] = {"vocab_size": 8003, "config_hash": "fixture0hash"}
    files["download_corpus"] = {"source": "mirror", "files": 113, "bytes": 74775519,
                                "config_hash": "0ld0hash"}  # listed as stale
    for stem, body in files.items():
        (root / f"{stem}.json").write_text(json.dumps(body))
    return root


def preds_json(root: Path, variant: str, task: str, correct: list[float], n: int
                ) -> dict[str, Any]:
    """A metrics JSON whose per-seed prediction files are right on correct[s] * n examples of
    a fixed binary eval split (so acc per seed = correct[s]): the first ones for `full`, the
    last ones otherwise (the two rows' errors fall on different examples)."""
    labels = np.arange(n) % 2
    paths = []
    for s, frac in enumerate(correct):
        pred = labels.copy()
        wrong = np.arange(n) >= round(frac * n)
        wrong = wrong if variant == "full" else wrong[::-1]
        pred[wrong] = 1 - pred[wrong]
        path = root / f"{variant}_{task}_seed{s}.parquet"
        pd.DataFrame({"id": [str(i) for i in range(n)], "group": [""] * n, "label": labels,
                      "prediction": pred}).to_parquet(path)
        paths.append(str(path))
    out = task_json(task, variant, 0.0, len(correct))
    score = "mcc" if task == "cola" else "acc"
    vals = [scoring.score(score, labels, pd.read_parquet(p)["prediction"].to_numpy())
            for p in paths]
    out["scores"] = {score: {"mean": float(np.mean(vals)), "sd": 0.0, "per_seed": vals}}
    base = 0.5 if score == "acc" else 0.0  # balanced labels: a constant scores 0.5 / MCC 0
    out["baselines"] = {score: {"chance": base, "majority": base}}
    out["predictions"] = {"test": paths}
    return out
