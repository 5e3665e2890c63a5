"""What logging a model to MLflow costs: gpt1's pinned requirements against MLflow's inference.

A fine-tuned model `dvc repro` left (`<paths.finetuned>/p<seed>/<task>/model` and the tokenizer,
read from --params) is logged as the finetune stage logs it (gpt1.tracking.pyfunc: models-from-
code, signature, input example) into a throw-away sqlite store, --rounds times each way,
alternating which goes first: with `pip_requirements=pyfunc.pip_requirements()` (what the stage
does) and without (the peer: MLflow infers the requirements by loading the model again in a
subprocess). Registration is left out (the same for both). Prints the medians, their ratio and
each way's requirements.txt.

    .venv/bin/python benchmarks/model_logging.py [--params params.yaml] [--task sst2]
        [--pretrain-seed 1234] [--rounds 3] [--results]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from results_file import add_option, recording

from gpt1.config import load_params
from gpt1.tracking import pyfunc


def log_once(store: str, files: Path, tokenizer: Path, example: list[dict[str, Any]], sig: Any,
             requirements: list[str] | None) -> tuple[float, str]:
    """Seconds of one pyfunc.log_pyfunc call (the stage's, unregistered) in a new run, and the
    requirements.txt it wrote."""
    import mlflow

    mlflow.set_tracking_uri(store)
    with mlflow.start_run():
        began = time.perf_counter()
        info = pyfunc.log_pyfunc(files, tokenizer, sig, example, requirements)
        took = time.perf_counter() - began
    return took, Path(mlflow.pyfunc.get_model_dependencies(info.model_uri)).read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--pretrain-seed", type=int, default=None,
                        help="default: the params' first pre-training seed")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    add_option(parser)
    args = parser.parse_args()
    params = load_params(args.params)
    seed = args.pretrain_seed if args.pretrain_seed is not None else params.pretrain.seeds[0]
    files = Path(params.paths.finetuned) / f"p{seed}" / args.task / "model"
    tokenizer = Path(params.paths.tokenizer)
    if not (files / "model.json").is_file():
        raise SystemExit(f"{files}: no fine-tuned model; run `dvc repro finetune` first")
    example = [{"text": "a very good film"}, {"text": "a dull and tired story"}]
    sig = pyfunc.signature(files, tokenizer, example)
    ways: dict[str, list[str] | None] = {"pinned (the stage)": pyfunc.pip_requirements(),
                                         "inferred (peer)": None}
    times: dict[str, list[float]] = {way: [] for way in ways}
    written: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        for r in range(args.rounds):
            for way in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                took, written[way] = log_once(store, files, tokenizer, example, sig,
                                              ways[way])
                times[way].append(took)
    medians = {way: statistics.median(t) for way, t in times.items()}
    print(f"mlflow.pyfunc.log_model of {files} ({args.task}), median of {args.rounds} rounds")
    for way, median in medians.items():
        print(f"{way:20s} {median:6.2f} s  (rounds: {', '.join(f'{t:.2f}' for t in times[way])})")
    pinned, inferred = medians.values()
    print(f"ratio inferred / pinned: {inferred / pinned:4.1f}x")
    for way, text in written.items():
        print(f"{way} requirements.txt: {' '.join(text.split())}")


if __name__ == "__main__":
    with recording("model-logging"):
        main()
