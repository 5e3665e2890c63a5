"""Table 5's bag-of-words floor, the model: TF-IDF over word uni+bigrams and logistic regression.

A linear model on word counts is the floor a fine-tuned network has to clear before its score
says anything about pre-training. Per fine-tuning seed f it trains on exactly the training
sample the neural arms of seed f train on (the same seeded subset of the pool), picks the
inverse regularisation C from `ablations.floor.c_grid` by stratified k-fold cross-validation
on that sample only (accuracy; ties to the smaller C, the stronger regulariser), refits on the
whole sample and scores the task's test split, writing the same per-example prediction files
as every arm (the report's bootstrap and flags read them; its record and samples are
gpt1/arms/run.py's `floor_record`, the arms' training samples). No pre-training seed:
one run per fine-tuning seed. A pair task's second text enters as its own words (prefixed),
so the model sees which text a word came from. Classification tasks only (a
regression or multiple-choice task of ablations.tasks records that it does not apply).

The only module that imports scikit-learn (pyproject.toml: per-file ruff exception): task
scores stay gpt1/scoring.py's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpt1 import atomic
from gpt1.config import FloorCfg
from gpt1.errors import Gpt1Error
from gpt1.scoring import aggregate, baselines, score_split
from gpt1.tasks.registry import TaskSpec

VARIANT = "bow"
"""The floor's variant name in records and Table 5 (report.row_labels)."""
PAIR_PREFIX = "b_"


def texts(table: pd.DataFrame) -> list[str]:
    """The model's input per row: text_a, then text_b's words each marked as the second
    text's (`b_word`), so one vocabulary keeps the two apart."""
    out = []
    for a, b in zip(table["text_a"], table["text_b"], strict=True):
        second = " ".join(PAIR_PREFIX + w for w in str(b or "").split())
        out.append(f"{a} {second}".strip())
    return out


def pipeline(cfg: FloorCfg, c: float, seed: int) -> Any:
    """The model: TF-IDF features into a logistic regression (scikit-learn, imported here so
    that importing the stages does not import it)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(
        TfidfVectorizer(ngram_range=(1, cfg.ngram_max), min_df=cfg.min_df, sublinear_tf=True,
                        lowercase=True),
        LogisticRegression(C=c, max_iter=cfg.max_iter, random_state=seed))


def fit(cfg: FloorCfg, c: float, seed: int, x: Sequence[str], y: np.ndarray, what: str) -> Any:
    """The model fitted on (x, y), `what` they are (for the error): a min_df that leaves no
    n-gram in these texts (more than there are, or more than any n-gram is in) is a Gpt1Error
    naming the key, not scikit-learn's ValueError."""
    if cfg.min_df > len(x):
        raise Gpt1Error(f"ablations.floor.min_df: {cfg.min_df} exceeds the {len(x)} texts of "
                        f"the floor's {what}; no n-gram can be in more: lower it")
    try:
        return pipeline(cfg, c, seed).fit(list(x), y)
    except ValueError as err:
        if "no terms remain" not in str(err):
            raise
        raise Gpt1Error(f"ablations.floor.min_df: {cfg.min_df} leaves no n-gram of the "
                        f"{len(x)} texts of the floor's {what} (none is in that many): lower "
                        "it") from None


def choose_c(x: Sequence[str], y: np.ndarray, cfg: FloorCfg, seed: int
             ) -> tuple[float, dict[str, float]]:
    """(chosen C, C -> mean CV accuracy): stratified k-fold CV on (x, y) only, k = cv_folds or
    the smallest class's count if lower. With a class of one example no CV is possible: the
    smallest C of the grid (the strongest regulariser) and no CV scores."""
    counts = np.bincount(y)
    folds = min(cfg.cv_folds, int(counts[counts > 0].min()))
    if folds < 2 or (counts > 0).sum() < 2:
        return float(min(cfg.c_grid)), {}
    from sklearn.model_selection import StratifiedKFold

    split = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    xs = np.asarray(x, dtype=object)
    cv: dict[str, float] = {}
    for c in cfg.c_grid:
        accs = []
        for tr, va in split.split(xs, y):
            model = fit(cfg, c, seed, list(xs[tr]), y[tr], f"{folds}-fold cross-validation")
            accs.append(float(np.mean(model.predict(list(xs[va])) == y[va])))
        cv[f"{c:g}"] = float(np.mean(accs))
    best = max(cfg.c_grid, key=lambda c: (cv[f"{c:g}"], -c))
    return float(best), cv


def predict(x_train: Sequence[str], y: np.ndarray, x_test: Sequence[str], cfg: FloorCfg,
            c: float, seed: int) -> np.ndarray:
    """The refitted model's test predictions; a one-class training sample predicts its class."""
    if len(np.unique(y)) < 2:
        return np.full(len(x_test), int(y[0]), dtype=np.int64)
    return fit(cfg, c, seed, x_train, y, "training sample").predict(list(x_test)).astype(np.int64)


def _write_predictions(path: Path, table: pd.DataFrame, pred: np.ndarray) -> None:
    """One seed's predictions on one scored split (the report's bootstrap reads these rows)."""
    frame = pd.DataFrame({"id": list(table["id"]), "group": list(table["group"]),
                          "label": table["label"].to_numpy(dtype=np.int64), "prediction": pred})
    atomic.write_bytes(path, frame.to_parquet(index=False) or b"")


def fit_and_score(spec: TaskSpec, cfg: FloorCfg, trains: dict[int, pd.DataFrame],
                  test: pd.DataFrame, out_dir: Path, fresh: pd.DataFrame | None = None
                  ) -> dict[str, Any]:
    """Every seed's floor run: choose C, refit, predict the test split (and the `fresh` split
    where given, by the same model); writes predictions_seed<f>.parquet (and
    fresh_predictions_seed<f>.parquet) and train_ids_seed<f>.parquet under out_dir
    (atomically, as one folder). Returns scores aggregated over seeds, baselines, per-seed
    details and, with `fresh`, the fresh split's scores, baselines and size."""
    if spec.regression or spec.fmt == "choice":
        raise Gpt1Error(f"{spec.name}: the bag-of-words floor covers classification tasks, "
                        f"not a {'regression' if spec.regression else 'choice'} task")
    x_test = texts(test)
    x_fresh = [] if fresh is None else texts(fresh)
    y_test = test["label"].to_numpy(dtype=np.int64)
    runs: list[dict[str, Any]] = []
    with atomic.atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for seed, train in trains.items():
            t0 = time.perf_counter()
            y = train["label"].to_numpy(dtype=np.int64)
            c, cv = choose_c(texts(train), y, cfg, seed)
            scored = predict(texts(train), y, x_test + x_fresh, cfg, c, seed)  # one fit
            pred = scored[:len(x_test)]
            _write_predictions(tmp / f"predictions_seed{seed}.parquet", test, pred)
            extra: dict[str, Any] = {}
            if fresh is not None:
                on_fresh = scored[len(x_test):]
                _write_predictions(tmp / f"fresh_predictions_seed{seed}.parquet", fresh,
                                   on_fresh)
                extra = {"fresh_scores": score_split(spec, fresh["label"].to_numpy(
                    dtype=np.int64), on_fresh, list(fresh["group"]))}
            atomic.write_bytes(tmp / f"train_ids_seed{seed}.parquet",
                               pd.DataFrame({"id": list(train["id"])}).to_parquet(index=False)
                               or b"")
            runs.append({"seed": seed, "C": c, "cv_accuracy": cv, "n_train": len(train),
                         "scores": score_split(spec, y_test, pred, list(test["group"])),
                         "seconds": round(time.perf_counter() - t0, 2), **extra})
    first = next(iter(trains.values()))
    y_first = first["label"].to_numpy(dtype=np.int64)
    fresh_part = {} if fresh is None else {"fresh": {
        "scores": aggregate([r["fresh_scores"] for r in runs]),
        "baselines": baselines(spec, y_first, fresh["label"].to_numpy(dtype=np.int64),
                               np.full(len(fresh), spec.n_outputs), list(fresh["group"])),
        "log_loss": [None] * len(runs), "n_eval": len(fresh)}}
    return {"scores": aggregate([r["scores"] for r in runs]),
            "baselines": baselines(spec, y_first, y_test, np.full(len(test), spec.n_outputs),
                                   list(test["group"])),
            "seeds": runs, "n_train": len(first), "n_eval": len(test), **fresh_part}
