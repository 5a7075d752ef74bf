"""A plan: the jobs of one run, each with its output folder and content key, and what each waits for.

    plan = Plan(work, cfg)
    corpus = plan.add(ingest_job)                  # a Ref to WORK/ingest/<key>, before anything runs
    tokenizer = plan.add(TrainTokenizer(corpus))   # waits for the ingest step: it reads that folder
    plan.keep_what_makes(report)                  # drop the steps the report does not need

A step waits for the steps whose output folders its job names (a `Ref`, a path, or a folder holding their outputs,
anywhere in the job's fields): the edges of the graph are the references each job holds, declared nowhere else.
Keys are computed as jobs are added, so a job's folder `WORK/<stage>/<key>` is named by the key the job itself will
record (gpt1.stages.base), and a changed setting re-runs exactly what depends on it. What a run is made of is
gpt1.recipe's business; nothing here knows a stage, a task or Prefect.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from gpt1.config import PipelineConfig
from gpt1.stages.base import Ref, StageJob, Step


@dataclass
class Plan:
    """Every step of one run in the order they were added (`steps`) and the steps each waits for (`needs`), with
    the run's config (where its steps log, gpt1.pipeline.lineage). `planned` keeps every step added, also those
    `keep_what_makes` dropped, so their folders can still be named."""

    work: Path
    cfg: PipelineConfig
    steps: dict[str, Step] = field(default_factory=dict)
    planned: dict[str, Step] = field(default_factory=dict)
    needs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def add(
        self,
        job: StageJob,
        *,
        name: str | None = None,
        out: Path | None = None,
        force: bool = False,
    ) -> Ref:
        """Plan `job` as step `name` (default: its stage) writing `out` (default: `WORK/<stage>/<key>`); returns its
        output as the input of later jobs."""
        name = name or job.stage
        if name in self.steps:
            raise ValueError(f"two steps named {name}")
        out = out or self.work / job.stage / job.key()
        read = paths_read(job)
        self.needs[name] = tuple(
            other
            for other, step in self.steps.items()
            if any(_inside(path, step.out) or _inside(step.out, path) for path in read)
        )
        self.steps[name] = self.planned[name] = Step(name, job, out, force)
        return Ref(out, job.key())

    def keep_what_makes(self, *outputs: Ref) -> None:
        """Keep only the steps that write `outputs` and the steps they need, directly or not (in their order)."""
        goals = [
            name
            for name, step in self.steps.items()
            if step.out in {output.path for output in outputs}
        ]
        keep, pending = set(goals), list(goals)
        while pending:
            for need in self.needs[pending.pop()]:
                if need not in keep:
                    keep.add(need)
                    pending.append(need)
        self.steps = {name: step for name, step in self.steps.items() if name in keep}
        self.needs = {name: needs for name, needs in self.needs.items() if name in keep}

    def writes(self, output: Ref | None) -> bool:
        """Whether a step of this plan writes `output`."""
        return output is not None and any(step.out == output.path for step in self.steps.values())

    def ref(self, name: str) -> Ref:
        """A step's output as the input of another: its folder and its planned key."""
        step = self.planned[name]
        return Ref(step.out, step.job.key())

    def dir(self, name: str) -> Path:
        return self.planned[name].out

    def ready_early(self, name: str) -> bool:
        """Whether a step may start while the steps it needs still run, what it reads of them being written
        (gpt1.pipeline.schedule asks). None may here; a plan that knows its jobs says which."""
        return False

    def independent_of(self, name: str) -> list[str]:
        """The steps that neither need `name` (directly or not) nor are needed by it: what may run beside it."""

        def closure(start: str, edges: dict[str, tuple[str, ...]]) -> set[str]:
            seen, pending = set(), [start]
            while pending:
                for other in edges.get(pending.pop(), ()):
                    if other not in seen:
                        seen.add(other)
                        pending.append(other)
            return seen

        needed_by: dict[str, tuple[str, ...]] = {}
        for step, needs in self.needs.items():
            for need in needs:
                needed_by[need] = (*needed_by.get(need, ()), step)
        related = closure(name, self.needs) | closure(name, needed_by) | {name}
        return [step for step in self.steps if step not in related]


def paths_read(value: object) -> list[Path]:
    """Every folder or file a job's fields name: its `Ref`s, paths, and absolute path strings, in tuples, lists,
    dicts and nested dataclasses (not in config objects: a setting is not an input)."""
    if isinstance(value, Ref):
        return [value.path]
    if isinstance(value, Path):
        return [value.absolute()]
    if isinstance(value, str):
        return [Path(value)] if os.path.isabs(value) else []
    if isinstance(value, (tuple, list)):
        return [path for item in value for path in paths_read(item)]
    if isinstance(value, dict):
        return [path for item in value.values() for path in paths_read(item)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            path for f in dataclasses.fields(value) for path in paths_read(getattr(value, f.name))
        ]
    return []


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
