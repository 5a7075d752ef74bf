"""The paper's twelve fine-tuning tasks: official-format loaders, input transformations, metrics, registry.

    from gpt1 import tasks
    spec = tasks.get("mnli")
    dev = tasks.load("mnli", "glue_data/MNLI", "dev")        # matched + mismatched, tagged by group
    batch = tasks.collate([spec.encode(ex, tokenizer, 512) for ex in dev[:32]])
    tasks.evaluate("mnli", dev, predictions)                  # {"accuracy_matched": ..., "primary": ...}

Modules: `examples` (example types, LoadReport), `formats` (official files), `hub` (Hugging Face ids and exports),
`transforms` (input transformations, collate), `metrics` (metrics, paper numbers, GLUE average), `registry`.
This package never imports training code.
"""

from gpt1.config import TASKS
from gpt1.tasks import metrics
from gpt1.tasks.examples import ChoiceExample, LoadReport, PairExample, TaskData, TextExample
from gpt1.tasks.registry import REGISTRY, TaskSpec, evaluate, get, load, write_submission
from gpt1.tasks.transforms import Encoded, collate

__all__ = ["TASKS", "REGISTRY", "TaskSpec", "get", "load", "evaluate", "write_submission", "metrics", "Encoded",
           "collate", "TextExample", "PairExample", "ChoiceExample", "LoadReport", "TaskData"]
