"""Model serving: a saved gpt1 model as an MLflow pyfunc model (models-from-code: rebuilt from
its files, never unpickled), logged and registered from the open stage run. gpt1.checkpoint,
gpt1.generate and gpt1.predict are imported inside the functions: none of them imports
gpt1.tracking, and the stages load this module without loading torch models."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd  # at module level: MLflow resolves the predict type hint through it

from gpt1.errors import Gpt1Error
from gpt1.tracking.runs import active
from gpt1.tracking.store import URI_ENV, bound_http_retries, check_uri

log = logging.getLogger(__name__)

# What a logged model's code imports when it is loaded and asked (a fresh process; the test
# tests/unit/tracking/test_pyfunc.py checks the list against one), pinned to this environment's
# versions. Given to MLflow instead of its inference, which loads the model once more in a
# subprocess (5-6 s per logged model) and, measured, left out torch, tokenizers and spaCy.
SERVING_PACKAGES = ("gpt1", "mlflow", "torch", "tokenizers", "safetensors", "numpy", "pandas",
                    "pyarrow", "pydantic", "pyyaml", "ftfy", "spacy", "scipy", "tqdm", "psutil")


def pip_requirements() -> list[str]:
    """SERVING_PACKAGES pinned to the installed versions (public part: torch's `+cpu` build tag
    is an index's, not a version pip can find on PyPI)."""
    from importlib.metadata import version

    from packaging.version import Version

    return [f"{name}=={Version(version(name)).public}" for name in SERVING_PACKAGES]


_PYFUNC_CODE = (
    "# MLflow models-from-code entry: the model is rebuilt from its files, never unpickled.\n"
    "import mlflow.models\n"
    "from gpt1.tracking.pyfunc import pyfunc_model\n"
    "mlflow.models.set_model(pyfunc_model())\n"
)


def pyfunc_model() -> Any:
    """The mlflow PythonModel serving a model logged by `log_model`: a pre-trained LM scores
    each `text` (its mean next-token loss, nats); a fine-tuned model answers as `gpt1 predict`
    does (the same `gpt1.predict.classify`): `label` and `probabilities` (a list in the order
    of the task's labels) for `text` plus
    the task's `text_b` / `choices` (a list, or a JSON list), or a `score` for a regression
    task. Inputs are raw text, standardised as in training."""
    import mlflow.pyfunc

    class Gpt1Model(mlflow.pyfunc.PythonModel):  # type: ignore[misc,name-defined]
        loaded: Any

        def load_context(self, context: Any) -> None:
            self.load(context.artifacts["model"], context.artifacts["tokenizer"])

        def load(self, model_dir: str, tok_dir: str) -> None:
            from gpt1 import checkpoint, generate, predict

            self.task = checkpoint.read_model_meta(Path(model_dir)).get("task")
            if self.task:
                self.loaded = predict.load_task_model(model_dir, tok_dir)
            else:
                self.loaded = generate.load_lm(model_dir, tok_dir)

        # pd.DataFrame: a hint MLflow takes as "no schema from the hint" (the logged
        # signature says what the model reads); it must resolve from this module's globals.
        def predict(self, context: Any, model_input: pd.DataFrame,
                    params: Any = None) -> pd.DataFrame:
            from gpt1 import generate, predict

            frame = pd.DataFrame(model_input)
            if not self.task:
                lm, tok = self.loaded
                return pd.DataFrame({"loss": generate.score_texts(
                    lm, tok, [str(t) for t in frame["text"]])})
            model, tok, spec, saved = self.loaded
            preds = predict.classify(model, tok, spec, saved, predict.frame_rows(frame))
            if spec.regression:
                return pd.DataFrame({"score": [p["score"] for p in preds]})
            return pd.DataFrame({"label": [p["label"] for p in preds],
                                 "probabilities": [list(p["probabilities"].values())
                                                   for p in preds]})

    return Gpt1Model()


def log_model(model_dir: str | Path, tokenizer_dir: str | Path, registered_name: str,
              example: list[dict[str, Any]], description: str) -> str | None:
    """Log a saved gpt1 model (model.json + model.safetensors of model_dir, and the tokenizer
    files) as an MLflow pyfunc model of the innermost open run, with the signature MLflow
    infers from `example` (rows of the task's input columns, gpt1.predict.input_columns) and
    the model's answer to it, and register it as `registered_name` (described by
    `description`, alias `current`). Returns the model URI (None when no run is open, or when
    the store is away: the model is then kept for `gpt1 relog`)."""
    run = active()
    if run is None:
        return None
    from gpt1 import checkpoint

    uri: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(tmp) / "model"
        files.mkdir()
        for name in (checkpoint.MODEL_META, checkpoint.MODEL_FILE):  # not the checkpoints
            shutil.copy2(Path(model_dir) / name, files / name)
        # the model answers its example before the store is asked: a model that cannot
        # answer is an error of its own, never taken for a lost store
        sig = signature(files, Path(tokenizer_dir), example)
        run.attempt(
            lambda lost: {"op": "model", "model": lost.keep(files),
                          "tokenizer": lost.keep(tokenizer_dir),
                          "registered_name": registered_name, "example": example,
                          "description": description},
            lambda: uri.append(log_model_files(run.client.tracking_uri, run.run_id, files,
                                               Path(tokenizer_dir), registered_name, example,
                                               description, sig)))
    return uri[0] if uri else None


def signature(files: Path, tokenizer_dir: Path, example: list[dict[str, Any]]) -> Any:
    """MLflow's `infer_signature` of the example and the model's own answer to it; columns
    the task may leave out (gpt1.predict.input_columns) are marked optional."""
    from mlflow.models import ModelSignature, infer_signature
    from mlflow.types import ColSpec, Schema

    from gpt1 import checkpoint
    from gpt1.tasks.registry import TASKS

    model = pyfunc_model()
    model.load(str(files), str(tokenizer_dir))
    frame = pd.DataFrame(example)
    inferred = infer_signature(frame, model.predict(None, frame))
    task = checkpoint.read_model_meta(files).get("task")
    if task is None:
        return inferred
    from gpt1.predict import input_columns

    required = input_columns(TASKS[task])
    inputs = Schema([ColSpec(c.type, c.name, required=required.get(str(c.name), c.required))
                     for c in inferred.inputs.inputs])
    return ModelSignature(inputs=inputs, outputs=inferred.outputs)


def log_pyfunc(files: Path, tokenizer_dir: Path, sig: Any, example: list[dict[str, Any]],
               requirements: list[str] | None, registered_name: str | None = None) -> Any:
    """mlflow.pyfunc.log_model of the model in `files` and `tokenizer_dir` into the active
    MLflow run (models-from-code; `requirements` None: MLflow infers them); its ModelInfo."""
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        code = Path(tmp) / "gpt1_pyfunc.py"
        code.write_text(_PYFUNC_CODE, encoding="utf-8")
        return mlflow.pyfunc.log_model(
            name="model", python_model=str(code),
            artifacts={"model": str(files), "tokenizer": str(tokenizer_dir)},
            signature=sig, input_example=pd.DataFrame(example),
            pip_requirements=requirements, registered_model_name=registered_name)


def log_model_files(tracking_uri: str, run_id: str, files: Path, tokenizer_dir: Path,
                    registered_name: str, example: list[dict[str, Any]],
                    description: str, sig: Any = None) -> str:
    """Log the model in `files` (model.json + model.safetensors) and `tokenizer_dir` as the
    pyfunc model of run `run_id` with signature `sig` (None: `signature` of the example),
    register it (description, alias `current` on the new version); returns the model URI."""
    import mlflow
    from mlflow import MlflowClient

    sig = signature(files, tokenizer_dir, example) if sig is None else sig
    mlflow.set_tracking_uri(tracking_uri)
    with mlflow.start_run(run_id=run_id):
        info = log_pyfunc(files, tokenizer_dir, sig, example, pip_requirements(),
                          registered_name)
    client = MlflowClient(tracking_uri)
    version = str(info.registered_model_version)
    client.update_registered_model(registered_name, description=description)
    client.update_model_version(registered_name, version,
                                description=f"logged by run {run_id}")
    client.set_registered_model_alias(registered_name, "current", version)
    log.info("MLflow model %s registered as %s version %s (alias current)", info.model_uri,
             registered_name, version)
    return str(info.model_uri)


def download_model(uri: str, tracking_uri: str | None, dest: Path) -> tuple[Path, Path]:
    """The model and tokenizer folders of a logged gpt1 model (models:/name/version,
    models:/name@alias, runs:/id/model), downloaded into `dest`."""
    store_uri = tracking_uri or os.environ.get(URI_ENV)
    if not store_uri:
        raise Gpt1Error(f"--model {uri}: no tracking store to read it from; set {URI_ENV}")
    check_uri(store_uri, f"--model {uri}: tracking store {store_uri!r}", existing=True)
    bound_http_retries()
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        root = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(dest),
                                                        tracking_uri=store_uri))
    except MlflowException as err:
        first = next(iter(str(err).strip().splitlines()), "")
        raise Gpt1Error(f"--model {uri}: {first}", store_uri) from None
    model, tok = root / "artifacts" / "model", root / "artifacts" / "tokenizer"
    if not model.is_dir():
        raise Gpt1Error(f"--model {uri}: not a gpt1 pyfunc model (no artifacts/model)", root)
    return model, tok
