"""Which rows a fine-tune trains and is scored on: the evenly spaced subset a cap keeps, the digest of the files
they were read from, and the refusal to score training rows as held-out ones. The report's baselines read the
same rows through the same two functions.

A held-out split whose files are the training files (a single file given as the data: every split is read from
it), or whose examples (all of them, or all of one group, e.g. MNLI matched) are training examples, would give a
score on the rows the model was trained on. Such a run is refused naming the files; with
`finetune.allow_eval_on_train` (`--allow-eval-on-train`) it is scored, with a WARNING, and metrics.json, the
MLflow run and the report label the score as on training rows. A partial overlap is counted and recorded.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from gpt1 import tasks
from gpt1.io import InputError, sha256_file, stable_hash
from gpt1.tasks import TaskSpec

log = logging.getLogger("gpt1.finetune.train")


def evenly_spaced(n: int, k: int | None) -> list[int]:
    """k indices spread over range(n) (all of them when k is None or >= n)."""
    if k is None or k >= n:
        return list(range(n))
    return sorted({(i * n) // k for i in range(k)})


def sources_digest(sources: list[str]) -> str:
    """The content hash of the files a split was read from (its dataset lineage): each file's name and bytes; a
    source that is no file (a hub split) by its name."""
    files = [s for s in sources if Path(s).is_file()]
    return stable_hash([(Path(f).name, sha256_file(f)) for f in files] or sources, length=64)


def check_not_training_rows(
    spec: TaskSpec, split, train, path: str | os.PathLike, allowed: bool
) -> None:
    """Count the training examples of held-out `split` (a gpt1.finetune.train.Split, as is `train`); refuse it when
    it is the training data (module docstring), or with `allowed` warn and mark it `on_training_rows`."""
    in_train = [hash(tasks.content(ex)) in train.contents for ex in split.examples]
    split.training_rows = sum(in_train)
    groups = {ex.group for ex in split.examples}
    whole_group = any(
        all(hit for ex, hit in zip(split.examples, in_train) if ex.group == group)
        for group in groups
    )
    same_files = split.digest == train.digest or set(split.report["sources"]) == set(
        train.report["sources"]
    )
    if not (same_files or whole_group):
        if split.training_rows:
            log.warning(
                "%s/%s: %d of %d examples are also training examples (recorded in metrics.json)",
                spec.name,
                split.name,
                split.training_rows,
                len(split.examples),
            )
        return
    split.training_rows = len(split.examples) if same_files else split.training_rows
    split.on_training_rows = True
    what = (
        f"the {split.name} split is (in part) the training data ({', '.join(split.report['sources'][:3])}), so "
        "its score would be a score on training rows"
    )
    if not allowed:
        raise InputError(
            f"{spec.name}: {what}; give the task's folder (its train and {split.name} files), or "
            "--allow-eval-on-train to score them anyway, labelled as training rows",
            file=path,
        )
    log.warning(
        "%s: %s: SCORING ON TRAINING ROWS (--allow-eval-on-train); metrics.json and the report say so",
        spec.name,
        what,
    )
