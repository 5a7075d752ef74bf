"""The paper's twelve fine-tuning tasks: what each one is, official-format loaders, input transformations, metrics.

    from gpt1 import tasks
    spec = tasks.get("mnli")                                  # TaskSpec: every fact about the task
    dev = tasks.load("mnli", "glue_data/MNLI", "dev")        # matched + mismatched, tagged by group
    batch = tasks.collate([spec.encode(ex, tokenizer, 512) for ex in dev[:32]])
    tasks.evaluate("mnli", dev, predictions)                  # {"accuracy_matched": ..., "primary": ...}

Modules (imports point down this list, none back up): `examples` (example types, LoadReport), `transforms`
(input transformations, collate), `spec` (TaskSpec), `registry` (the twelve specs), `formats` (official files),
`hub` (Hugging Face ids and exports), `metrics` (metrics, paper numbers, GLUE average), `loading` (load,
evaluate, write_submission). This package never imports training code, nor the rest of gpt1 but `gpt1.io`.
"""

from gpt1.tasks import metrics
from gpt1.tasks.examples import (
    ChoiceExample,
    LoadReport,
    PairExample,
    TaskData,
    TextExample,
    content,
)
from gpt1.tasks.loading import evaluate, load, peek, write_submission
from gpt1.tasks.registry import GLUE_TASKS, REGISTRY, TASKS, get
from gpt1.tasks.spec import TaskSpec
from gpt1.tasks.transforms import Encoded, collate

__all__ = [
    "TASKS",
    "GLUE_TASKS",
    "REGISTRY",
    "TaskSpec",
    "get",
    "load",
    "peek",
    "evaluate",
    "write_submission",
    "metrics",
    "Encoded",
    "collate",
    "TextExample",
    "PairExample",
    "ChoiceExample",
    "LoadReport",
    "TaskData",
    "content",
]
