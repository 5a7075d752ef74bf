"""A fine-tuned task model as an MLflow 3 logged pyfunc model: raw task inputs in, predictions out.

    model = mlflow.pyfunc.load_model("models:/gpt1-smoke-sst2@champion")   # or models:/<model_id>, runs:/<run>/sst2
    model.predict(pd.DataFrame([{"premise": "A man plays.", "hypothesis": "Someone plays."}]))
    mlflow models serve -m models:/gpt1-smoke-sst2@champion --env-manager local      # then POST /invocations

`GPT1TaskModel` wraps `gpt1.finetune.predict.TaskPredictor`: the tokenizer, the task's input transformation and the
fine-tuned network with its head. Input columns are the task's raw fields (`gpt1.finetune.predict.input_columns`):
`sentence` (CoLA, SST-2); `premise, hypothesis` (MNLI, SNLI, SciTail); `sentence1, sentence2` (RTE, MRPC, STS-B);
`question1, question2` (QQP); `question, sentence` (QNLI); `context, question, options` (RACE, Story Cloze; the
question may be empty). An optional `id` column is passed through. Output columns: `prediction` (the label as the
task files write it, or the STS-B score) and, except for STS-B, `probabilities` (one per label/candidate, in the
order of `task.json`'s labels). `gpt1 predict` runs the same predictor without MLflow.

Packaging (choices where the spec is silent):
- A logged model of the fine-tune's run (`log_model`): it has a model id, appears in the run's "Logged models" and
  the experiment's Models tab, carries the run's params, and the metrics the run logged at the final update are
  linked to it. It is made by `mlflow.models.Model.log(flavor=mlflow.pyfunc, run_id=...)`, the function behind
  `mlflow.pyfunc.log_model`, which itself only logs to the fluent active run (ending that run would end ours).
- "Models from code": MLflow stores this file and executes it to load the model (it ends with `set_model`), so no
  pickle is involved. The `gpt1` package travels with the model (`code_paths`), so it loads in an environment
  without gpt1 installed; the weights, tokenizer and task.json are the `model` artifact (the folder
  `gpt1 finetune` wrote).
- pip requirements are pinned to the versions installed here instead of being inferred (inference re-imports the
  model in a subprocess); the signature is inferred from the input example (two held-out examples as raw inputs)
  and the model's own predictions on it.
- The model is built when the run's logging queue reaches it (gpt1.tracking), from the task model folder, so an
  unreachable tracking server delays it like any other call, and `gpt1 replay-spool` can build it later.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import mlflow
import mlflow.pyfunc
import pandas as pd
from mlflow.pyfunc.model import PythonModel  # where it is defined: mypy cannot see the re-export

from gpt1.finetune.predict import TaskPredictor

ARTIFACT_PATH = "model"  # the task model folder inside the MLflow model
MODEL_TYPE = "gpt1-task"  # the logged models' model_type (searchable in the Models tab)
# Distributions the predictor imports (directly or through gpt1.tokenizer / gpt1.tasks).
REQUIREMENTS = (
    "mlflow",
    "torch",
    "numpy",
    "pandas",
    "safetensors",
    "tokenizers",
    "pydantic",
    "pyyaml",
    "ftfy",
    "scipy",
    "scikit-learn",
    "tqdm",
)


class GPT1TaskModel(PythonModel):
    """pyfunc wrapper: DataFrame of raw task inputs -> DataFrame with `prediction` (+ `probabilities`)."""

    def __init__(self, predictor=None):
        self.predictor = predictor  # set by load_context when MLflow loads the model

    def load_context(self, context) -> None:
        self.predictor = TaskPredictor(context.artifacts[ARTIFACT_PATH])

    def predict(
        self, context, model_input: pd.DataFrame, params: dict | None = None
    ) -> pd.DataFrame:
        records = self.predictor.predict_records(
            model_input.to_dict(orient="records"), source="model input"
        )
        columns = (
            ["prediction"] if self.predictor.spec.regression else ["prediction", "probabilities"]
        )
        return pd.DataFrame([{k: r[k] for k in columns} for r in records], columns=columns)


def pinned_requirements() -> list[str]:
    pins = []
    for name in REQUIREMENTS:
        try:
            pins.append(f"{name}=={metadata.version(name).split('+')[0]}")  # no local label (+cpu)
        except metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def log_model(
    run,
    model_dir: str | os.PathLike,
    input_example: list[dict],
    *,
    name: str,
    step: int = 0,
    tags: dict[str, str] | None = None,
) -> None:
    """Log the fine-tuned model folder `model_dir` as logged model `name` of `run` (a `gpt1.tracking.logger.RunLogger`),
    linked to the metrics `run` logged at `step`."""
    model_dir = str(Path(model_dir).resolve())
    own_tags = dict(tags or {})
    record = {
        "kind": "task",
        "model_dir": model_dir,
        "input_example": input_example,
        "step": step,
        "tags": own_tags,
    }

    def make(run, attempt: dict) -> str:
        from mlflow.models import Model

        from gpt1.tracking.models import process_uri

        predictor = TaskPredictor(model_dir)
        example = pd.DataFrame(input_example)
        signature = mlflow.models.infer_signature(
            example, GPT1TaskModel(predictor).predict(None, example)
        )
        client = run.client
        if (
            "model_id" not in attempt
        ):  # created here, so that a retry completes it rather than adding another
            params = dict(client.get_run(run.run_id).data.params)
            attempt["model_id"] = client.create_logged_model(
                run.experiment_id,
                name=name,
                source_run_id=run.run_id,
                params=params,
                model_type=MODEL_TYPE,
                tags={**run.tags, **own_tags},
            ).model_id
        with process_uri(run.uri):  # Model.log's fluent helpers use the process-wide URI
            info = Model.log(
                artifact_path=None,
                name=name,
                flavor=mlflow.pyfunc,
                run_id=run.run_id,
                model_id=attempt["model_id"],
                step=step,
                python_model=str(Path(__file__).resolve()),
                artifacts={ARTIFACT_PATH: model_dir},
                code_paths=[str(Path(__file__).resolve().parent)],
                signature=signature,
                input_example=example,
                pip_requirements=pinned_requirements(),
                metadata={"task": predictor.spec.name, "input_columns": list(predictor.columns)},
            )
        return info.model_id

    run.log_model(name, make, record)


# MLflow "models from code": loading a logged model executes this file, which declares the model here.
mlflow.models.set_model(GPT1TaskModel())
