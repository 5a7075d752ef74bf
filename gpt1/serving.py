"""A fine-tuned task model as an MLflow pyfunc model: raw task inputs in, predictions out.

    model = mlflow.pyfunc.load_model("runs:/<run_id>/model")
    model.predict(pd.DataFrame([{"premise": "A man plays.", "hypothesis": "Someone plays."}]))
    mlflow models serve -m runs:/<run_id>/model --env-manager local      # then POST /invocations

`GPT1TaskModel` wraps `gpt1.predict.TaskPredictor`: the tokenizer, the task's input transformation and the
fine-tuned network with its head. Input columns are the task's raw fields (`gpt1.predict.input_columns`):
`sentence` (CoLA, SST-2); `premise, hypothesis` (MNLI, SNLI, SciTail); `sentence1, sentence2` (RTE, MRPC, STS-B);
`question1, question2` (QQP); `question, sentence` (QNLI); `context, question, options` (RACE, Story Cloze; the
question may be empty). An optional `id` column is passed through. Output columns: `prediction` (the label as the
task files write it, or the STS-B score) and, except for STS-B, `probabilities` (one per label/candidate, in the
order of `task.json`'s labels). `gpt1 predict` runs the same predictor without MLflow.

Packaging (choices where the spec is silent):
- "Models from code": MLflow stores this file and executes it to load the model (it ends with `set_model`), so no
  pickle is involved. The `gpt1` package travels with the model (`code_paths`), so it loads in an environment
  without gpt1 installed; the weights, tokenizer and task.json are the `model` artifact (the folder
  `gpt1 finetune` wrote).
- pip requirements are pinned to the versions installed here instead of being inferred (inference re-imports the
  model in a subprocess); the signature is inferred from the input example (two held-out examples as raw inputs)
  and the model's own predictions on it.
- The model is built in `OUT/mlflow_model/`, uploaded, and removed; it stays only when the upload could not be
  delivered (tracking server down), where the logger's retry and `mlflow models serve -m` can still use it.
"""

from __future__ import annotations

import logging
import os
import shutil
from importlib import metadata
from pathlib import Path

import mlflow
import pandas as pd

from gpt1.predict import TaskPredictor

log = logging.getLogger(__name__)

ARTIFACT_PATH = "model"
LOCAL_FALLBACK = "mlflow_model"
# Distributions the predictor imports (directly or through gpt1.tokenizer / gpt1.tasks).
REQUIREMENTS = ("mlflow", "torch", "numpy", "pandas", "safetensors", "tokenizers", "pydantic", "pyyaml", "ftfy",
                "scipy", "scikit-learn", "tqdm")


class GPT1TaskModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: DataFrame of raw task inputs -> DataFrame with `prediction` (+ `probabilities`)."""

    def __init__(self, predictor=None):
        self.predictor = predictor  # set by load_context when MLflow loads the model

    def load_context(self, context) -> None:
        self.predictor = TaskPredictor(context.artifacts[ARTIFACT_PATH])

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        records = self.predictor.predict_records(model_input.to_dict(orient="records"), source="model input")
        columns = ["prediction"] if self.predictor.spec.regression else ["prediction", "probabilities"]
        return pd.DataFrame([{k: r[k] for k in columns} for r in records], columns=columns)


def pinned_requirements() -> list[str]:
    pins = []
    for name in REQUIREMENTS:
        try:
            pins.append(f"{name}=={metadata.version(name).split('+')[0]}")  # no local label (+cpu)
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def save_model(model_dir: str | os.PathLike, path: str | os.PathLike, input_example: list[dict]) -> Path:
    """Write the MLflow model of a fine-tuned model folder to `path` (which must not exist yet)."""
    predictor = TaskPredictor(model_dir)
    example = pd.DataFrame(input_example)
    signature = mlflow.models.infer_signature(example, GPT1TaskModel(predictor).predict(None, example))
    mlflow.pyfunc.save_model(
        str(path), python_model=str(Path(__file__).resolve()), artifacts={ARTIFACT_PATH: str(model_dir)},
        code_paths=[str(Path(__file__).resolve().parent)], signature=signature, input_example=example,
        pip_requirements=pinned_requirements(),
        metadata={"task": predictor.spec.name, "input_columns": list(predictor.columns)},
    )
    return Path(path)


def log_model(run, model_dir: str | os.PathLike, input_example: list[dict], out_dir: str | os.PathLike) -> None:
    """Build the MLflow model and upload it to `run` (a `gpt1.tracking.RunLogger`) as the `model` artifact."""
    staging = Path(out_dir) / LOCAL_FALLBACK
    shutil.rmtree(staging, ignore_errors=True)
    save_model(model_dir, staging, input_example)
    run.log_artifact(staging, ARTIFACT_PATH)
    if run.pending:  # queued, not delivered: the retry needs the folder
        log.warning("MLflow model not uploaded yet (tracking server unreachable); kept in %s", staging)
    else:
        shutil.rmtree(staging)


# MLflow "models from code": loading a logged model executes this file, which declares the model here.
mlflow.models.set_model(GPT1TaskModel())
