"""gpt1-pipeline: the GPT-1 paper's two-stage recipe as reproducible, restartable stages.

Pure Python/torch; no Prefect imports here (orchestration lives in `flows/`).
"""

__version__ = "0.1.0"
