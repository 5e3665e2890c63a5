"""Model serving: a saved gpt1 model as an MLflow pyfunc model (models-from-code: rebuilt from
its files, never unpickled), logged and registered from the open stage run. gpt1.checkpoint,
gpt1.generate and gpt1.predict are imported inside the functions: none of them imports
gpt1.tracking, and the stages load this module without loading torch models."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gpt1.tracking.runs import active

log = logging.getLogger(__name__)

_PYFUNC_CODE = (
    "# MLflow models-from-code entry: the model is rebuilt from its files, never unpickled.\n"
    "import mlflow.models\n"
    "from gpt1.tracking.pyfunc import pyfunc_model\n"
    "mlflow.models.set_model(pyfunc_model())\n"
)


def pyfunc_model() -> Any:
    """The mlflow PythonModel serving a model logged by `log_model`: a pre-trained LM scores
    each `text` (its mean next-token loss, nats); a fine-tuned model returns `label` and
    `probabilities` (JSON) for `text` (+ optional `text_b`, `choices` as a JSON list), or a
    `score` for a regression task. Inputs are raw text, standardised as in training."""
    import mlflow.pyfunc
    import pandas as pd

    class Gpt1Model(mlflow.pyfunc.PythonModel):  # type: ignore[misc,name-defined]
        loaded: Any

        def load_context(self, context: Any) -> None:
            from gpt1 import checkpoint, generate, predict

            model_dir, tok_dir = context.artifacts["model"], context.artifacts["tokenizer"]
            self.task = checkpoint.read_model_meta(Path(model_dir)).get("task")
            if self.task:
                self.loaded = predict.load_task_model(model_dir, tok_dir)
            else:
                self.loaded = generate.load_lm(model_dir, tok_dir)

        def predict(self, context: Any, model_input: pd.DataFrame,
                    params: Any = None) -> pd.DataFrame:
            from gpt1 import generate, predict

            frame = pd.DataFrame(model_input)
            texts = [str(t) for t in frame["text"]]
            if not self.task:
                lm, tok = self.loaded
                return pd.DataFrame({"loss": generate.score_texts(lm, tok, texts)})
            model, tok, spec, saved = self.loaded
            rows = [{"text_a": t, "text_b": str(frame.get("text_b", [""] * len(texts))[i] or ""),
                     "choices": json.loads(frame["choices"][i]) if "choices" in frame else []}
                    for i, t in enumerate(texts)]
            preds = predict.classify(model, tok, spec, saved, rows)
            if spec.regression:
                return pd.DataFrame({"score": [p["score"] for p in preds]})
            return pd.DataFrame({"label": [p["label"] for p in preds],
                                 "probabilities": [json.dumps(p["probabilities"]) for p in preds]})

    return Gpt1Model()


def log_model(model_dir: str | Path, tokenizer_dir: str | Path, registered_name: str,
              example: list[str], outputs: dict[str, str]) -> str | None:
    """Log a saved gpt1 model (model.json + model.safetensors of model_dir, and the tokenizer
    files) as an MLflow pyfunc model of the innermost open run, with a signature (input
    `text`; `outputs` column -> type) and an input example, and register it as
    `registered_name`. Returns the model URI (None when no run is open, or when the store is
    away: the model is then kept for `gpt1 relog`)."""
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
        run.attempt(
            lambda lost: {"op": "model", "model": lost.keep(files),
                          "tokenizer": lost.keep(tokenizer_dir),
                          "registered_name": registered_name, "example": example,
                          "outputs": outputs},
            lambda: uri.append(log_model_files(run.client.tracking_uri, run.run_id, files,
                                               Path(tokenizer_dir), registered_name, example,
                                               outputs)))
    return uri[0] if uri else None


def log_model_files(tracking_uri: str, run_id: str, files: Path, tokenizer_dir: Path,
                    registered_name: str, example: list[str], outputs: dict[str, str]) -> str:
    """Log the model in `files` (model.json + model.safetensors) and `tokenizer_dir` as the
    pyfunc model of run `run_id` and register it; returns the model URI."""
    import mlflow
    import pandas as pd
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    signature = ModelSignature(
        inputs=Schema([ColSpec("string", "text")]),
        outputs=Schema([ColSpec(kind, name) for name, kind in outputs.items()]))
    with tempfile.TemporaryDirectory() as tmp:
        code = Path(tmp) / "gpt1_pyfunc.py"
        code.write_text(_PYFUNC_CODE, encoding="utf-8")
        mlflow.set_tracking_uri(tracking_uri)
        with mlflow.start_run(run_id=run_id):
            info = mlflow.pyfunc.log_model(
                name="model", python_model=str(code),
                artifacts={"model": str(files), "tokenizer": str(tokenizer_dir)},
                signature=signature, input_example=pd.DataFrame({"text": example}),
                registered_model_name=registered_name)
    log.info("MLflow model %s registered as %s", info.model_uri, registered_name)
    return str(info.model_uri)
