"""What every stage shares: its inputs as keyed references, its one content key, and how it is run.

A stage is a job dataclass (in its component's `stage.py`, wired into the run by gpt1.recipe): the inputs it reads
(`Ref`s) and the settings that decide its output. Its key hashes exactly those, and it is the same key whoever runs
it:

    job = Job(corpus=Ref.to("runs/corpus"), cfg=cfg.train_tokenizer)   # the CLI: keys read from the inputs
    job = Job(corpus=plan.add(ingest_job), cfg=cfg.train_tokenizer)    # the recipe: keys planned ahead
    result = job.run(out, wait=True)                                   # skip, resume or build; then marked

The job class also declares how the pipeline runs it (its name, retries, whether it holds a compute slot, ...):
every defined stage job with a `summary` is registered by its name (`stage_jobs()`), which is how the CLI offers
its command.

An input's key is the key the stage that wrote it recorded in its `.done` marker (for a folder inside a stage's
output, e.g. pre-training's `final/`, a hash of that key and the relative path), once its files are verified
against the record the marker holds (gpt1.stages.integrity: an input edited in place is refused, not keyed as
before); anything else (a user's data folder, a hand-made tokenizer) is keyed by a hash of its bytes. The
pipeline computes the same keys before anything runs, so its folders `WORK/<stage>/<key>` are named by the key the
stage itself will record, and a stage started by the CLI with `--expect-key` checks that they agree.

`job.run` applies the output policy of `gpt1.stages.outputs` (one writer, finished means marked, nothing replaced
by accident) and is the only place that decides whether a stage runs again.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from gpt1.io import sha256_file, sha256_tree, stable_hash
from gpt1.stages import integrity, outputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ref:
    """A stage input: where it is and its content key."""

    path: Path
    key: str

    @classmethod
    def to(cls, path: str | os.PathLike) -> Ref:
        """The input at `path`, keyed from what is on disk (see `input_key`)."""
        return cls(Path(path).absolute(), input_key(path))

    def inside(self, relative: str) -> Ref:
        """A folder inside this input, keyed as `input_key` keys it once this input is written."""
        return Ref(self.path / relative, stable_hash([self.key, relative]))

    def __str__(self) -> str:
        return str(self.path)


def keyed_settings(section: BaseModel, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """A config section's settings as a key holds them: the ones the job reads (all but `exclude`), each only while
    it is not at its default, so that a setting added later, at its default, changes no key and reuses every output
    made before it existed. (A changed default is a change of the code, like any other: it keeps keys.)"""
    return section.model_dump(exclude=set(exclude), exclude_defaults=True)


def data_key(data: str) -> str:
    """The content key of a task's data: a hub reference as written (pin @revision), else its files (a path
    with nothing there yet: its name, so a plan can be made; the stage reading it then names what is missing)."""
    if data.startswith("hf:"):
        return data
    return (
        input_key(data)
        if Path(data).exists()
        else stable_hash(["missing", str(Path(data).absolute())])
    )


def verify_input(path: str | os.PathLike) -> None:
    """Refuse (InputError naming the file) an input inside a stage output whose files changed since the stage
    recorded them (gpt1.stages.integrity); anything else is not a stage's output and has no record."""
    held = integrity.holding_output(path)
    if held is not None:
        integrity.verify(*held)


def input_key(path: str | os.PathLike) -> str:
    """The content key of an input: its stage's recorded key (once its files are verified against the stage's
    record: an input edited in place must not keep its key), else a hash of its bytes."""
    held = integrity.holding_output(path)
    if held is not None:
        integrity.verify(*held)
        _, marker, relative = held
        return marker["key"] if relative == "." else stable_hash([marker["key"], relative])
    path = Path(path).absolute()
    if path.is_file():
        return stable_hash(["bytes", sha256_file(path)])
    if path.is_dir():
        return stable_hash(["bytes", sha256_tree(path)])
    raise FileNotFoundError(f"{path} does not exist")


@dataclass
class Result:
    """What a stage run left: its folder, key and `.done` marker; `cached` when an earlier run had made it."""

    path: Path
    key: str
    marker: dict
    cached: bool


class StageJob:
    """Base of the stage jobs. Subclasses are dataclasses that set `stage` and `summary` and implement `identity`
    and `build`; the module that defines one also defines its command: `add_cli_args(parser)`, `run_cli(args)`."""

    stage: ClassVar[str]  # the CLI command, the work folder, the MLflow and Prefect run name
    summary: ClassVar[str]  # one line, for `gpt1 --help`
    mode: ClassVar[str] = (
        "atomic"  # how the output is written: atomic | resume | restart (gpt1.stages.outputs)
    )
    record_failure: ClassVar[bool] = (
        False  # a failure leaves error.json in the output folder (for the report)
    )
    # How the pipeline runs it:
    section: ClassVar[str | None] = (
        None  # its settings in gpt1.config.PipelineConfig, logged with its MLflow run
    )
    retries: ClassVar[int] = (
        0  # how often the flow retries a failed job (orchestration.retries overrides)
    )
    compute: ClassVar[bool] = (
        False  # holds one of the flow's local compute slots while it runs (training)
    )
    in_worker: ClassVar[bool] = (
        False  # runs in one of the flow's reused worker processes, not the flow's own
    )
    logs_itself: ClassVar[bool] = (
        False  # logs its own MLflow run (else the pipeline logs a child run for it)
    )
    after_failures: ClassVar[bool] = (
        False  # runs once its inputs have ended, even if some failed (the report)
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if (
            "stage" in cls.__dict__ and "summary" in cls.__dict__
        ):  # a stage with a command (a job without a
            _STAGE_JOBS[cls.stage] = cls  # summary runs only from Python)

    def identity(self) -> dict[str, Any]:
        """The input keys and settings that decide the output (what the key hashes)."""
        raise NotImplementedError

    def check(self, out: Path) -> object:
        """Validate the inputs and settings before anything is written (a mistake must not leave a folder that
        blocks the corrected run). The default checks nothing; `build` may check more."""
        return None

    def build(self, out: Path) -> dict | None:
        """Write the stage's output into `out`; returns what goes into the `.done` marker."""
        raise NotImplementedError

    def key(self) -> str:
        return stable_hash({"stage": self.stage, **self.identity()})

    def run(
        self,
        out: str | os.PathLike,
        *,
        wait: bool,
        force: bool = False,
        expect_key: str | None = None,
        log_line=None,
    ) -> Result:
        """Build into `out` unless a finished output of this key is there; see gpt1.stages.outputs."""
        # an input edited since its stage wrote it is refused, so nothing built from it is reused
        for path in self.input_paths().values():
            verify_input(path)
        key = self.key()
        if expect_key is not None and expect_key != key:
            raise ValueError(
                f"{self.stage}: the inputs and settings given hash to key {key}, but the caller "
                f"planned {expect_key} (an input changed since the plan was made?)"
            )
        with outputs.claim(
            out,
            self.stage,
            key,
            wait=wait,
            force=force,
            mode=self.mode,
            info={"inputs": self.input_paths()},
            record_failure=self.record_failure,
            log_line=log_line,
        ) as output:
            if output.done:
                log.info("%s: up to date (%s, key %s)", self.stage, output.path, key)
                return Result(output.path, key, output.marker, cached=True)
            self.check(output.path)
            marker = output.build(self.build)
        return Result(Path(out).absolute(), key, marker, cached=False)

    def input_paths(self) -> dict[str, str]:
        """Where the inputs were read from, for the marker (lineage)."""
        return {name: str(value) for name, value in vars(self).items() if isinstance(value, Ref)}

    # What the pipeline records about a run of this stage in MLflow (gpt1.pipeline.lineage) ---------------------
    def lineage_inputs(self) -> dict[str, tuple[str, Any]]:
        """Each input as (content key, dataset source) for the stage's MLflow run: its `Ref`s by default."""
        return {
            name: (value.key, str(value.path))
            for name, value in vars(self).items()
            if isinstance(value, Ref)
        }

    def output_profile(self, result: Result) -> dict[str, Any] | None:
        """A few numbers MLflow shows beside the stage's output dataset (e.g. what a corpus is made of)."""
        return None

    def resolved_params(self, result: Result) -> dict[str, Any]:
        """Values a finished output fixes for every later stage (e.g. the vocabulary learnt), for the parent run."""
        return {}

    def log_reuse(self, result: Result, parent_run_id: str | None) -> None:
        """For stages that log their own MLflow run: show an output an earlier run made under this parent too."""

    def with_context(self, **context: Any) -> StageJob:
        """This job with how-it-runs values (an MLflow parent run, a log line sink, threads) set on the fields it
        has; those never change its key."""
        job: Any = (
            self  # every stage job is a dataclass (StageJob's subclasses are declared as ones)
        )
        own = {f.name for f in fields(job)}
        return replace(job, **{k: v for k, v in context.items() if k in own})


_STAGE_JOBS: dict[str, type[StageJob]] = {}


def stage_jobs() -> dict[str, type[StageJob]]:
    """Every stage job class defined so far, by stage name, in the order they were defined (gpt1.recipe imports
    the pipeline's)."""
    return dict(_STAGE_JOBS)


@dataclass(frozen=True)
class Step:
    """One job of a pipeline plan: `job.run(out)` once the steps whose outputs it reads are finished."""

    name: str  # unique in its plan: the stage's name, or e.g. "finetune-full-sst2" for one of many
    job: StageJob
    out: Path
    force: bool = (
        False  # replace an output of other inputs in `out` (a folder named before its inputs exist)
    )

    @property
    def stage(self) -> str:
        return self.job.stage


def add_config_args(parser: argparse.ArgumentParser, example: str = "") -> None:
    """`--preset` and repeatable `--set KEY=VALUE` (into `args.overrides`): the run's config, as `load_config`
    takes it."""
    parser.add_argument(
        "--preset", default="paper", help="preset name or YAML file (default: paper)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"config override{f', e.g. {example}' if example else ''} (repeatable)",
    )


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """The output options every stage command shares."""
    group = parser.add_argument_group("output folder")
    group.add_argument(
        "--wait",
        action="store_true",
        help="if another process is writing the same output, wait for it (default: refuse)",
    )
    group.add_argument(
        "--force",
        action="store_true",
        help="replace an output folder that holds something else (another stage's output, other "
        "settings, unknown files)",
    )
    # set by gpt1.pipeline: the key it planned
    group.add_argument("--expect-key", help=argparse.SUPPRESS)


def run_from_args(job: StageJob, args: argparse.Namespace) -> Result:
    return job.run(args.out, wait=args.wait, force=args.force, expect_key=args.expect_key)
