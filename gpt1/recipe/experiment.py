"""The experiment's design, each under one spelling: the paper's Table 5 variants, the seeds, the curve points,
the tasks and where their files come from, and the folders of their fine-tunes.

A variant is the full run (`full`), an ablation of it (`no_pretrain`, `no_aux_lm`, `transfer_layers`: the paper's
Table 5 and Fig. 2 left), or a curve point (`step_N`: the headline tasks fine-tuned from the model at update N of
pre-training, `pretrain.curve_steps`); each is fine-tuned once per seed of `finetune.seeds`, the first seed under
the variant's own name and the others as `<variant>_seed<S>`. Fine-tunes of a variant share
`WORK/finetune/<variant key>`, each in `<task>/<data key>`. The recipe (gpt1.recipe.recipe) wires the jobs; this
module answers what they are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gpt1 import tasks
from gpt1.config import FinetuneConfig, PipelineConfig
from gpt1.finetune import stage as finetune
from gpt1.finetune.stage import NOT_FINETUNE_SETTINGS
from gpt1.io import size_on_disk, stable_hash
from gpt1.model.files import TRAINING_NAME
from gpt1.pipeline.plan import Plan
from gpt1.pretrain.inputs import CURVE, FINAL, curve_point
from gpt1.report import stage as report
from gpt1.stages.base import Ref, data_key, keyed_settings

# the paper's Table 5 and Fig. 2 (left)
VARIANTS = (
    "full",
    "no_pretrain",
    "no_aux_lm",
    "transfer_layers",
)
CURVE_VARIANT = (
    "step_"  # + N: the full run's fine-tunes of the headline tasks from the model at update N
)
SEED_VARIANT = (
    "_seed"  # + S: a variant fine-tuned with seed S, one of finetune.seeds beside finetune.seed
)


def curve_variant(step: int) -> str:
    return f"{CURVE_VARIANT}{step}"


def seeded(variant: str, seed: int, first_seed: int) -> str:
    """The variant fine-tuned with `seed`: its own name for the first seed (finetune.seed), else `<name>_seed<S>`."""
    return variant if seed == first_seed else f"{variant}{SEED_VARIANT}{seed}"


def unseeded(variant: str) -> tuple[str, int | None]:
    """(the variant's name without its seed, the seed it names or None for the first seed)."""
    name, sep, seed = variant.partition(SEED_VARIANT)
    return (name, int(seed)) if sep and seed.isdigit() else (variant, None)


def curve_step(variant: str) -> int | None:
    """N of a curve variant `step_N` (pretrain.curve_steps, any seed), else None."""
    name = unseeded(variant)[0]
    return int(name.removeprefix(CURVE_VARIANT)) if name.startswith(CURVE_VARIANT) else None


def finetune_step(variant: str, task: str) -> str:
    """The plan's name of a variant's fine-tune of a task (variant names hold no "-")."""
    return f"finetune-{variant}-{task}"


def finetune_variant_task(step: str) -> tuple[str, str]:
    """(variant, task) of a fine-tune's step name (`finetune_step`)."""
    variant, task = step.removeprefix("finetune-").split("-", 1)
    return variant, task


def variant_config(cfg: PipelineConfig, variant: str) -> PipelineConfig:
    """`cfg` with the fine-tune settings of one Table 5 variant: as configured, or one ablation of it, with the
    seed its name carries (registering no model: the first seed's are the variant's). A curve point fine-tunes as
    configured, from an earlier model; it measures, so it registers no model."""
    name, seed = unseeded(variant)
    update = {}
    if (
        seed is not None
    ):  # another seed's models are not registered: the first seed's are the variant's
        update = {
            "finetune": cfg.finetune.model_copy(update={"seed": seed}),
            "tracking": cfg.tracking.model_copy(update={"register_models": False}),
        }
    cfg = cfg.model_copy(update=update)
    if curve_step(name) is not None:
        return cfg.model_copy(
            update={"tracking": cfg.tracking.model_copy(update={"register_models": False})}
        )
    changes: dict[str, dict[str, object]] = {
        "full": {},
        "no_pretrain": {"from_scratch": True},
        "no_aux_lm": {"aux_lm_weight": 0.0},
        "transfer_layers": {"transfer_layers": cfg.orchestration.ablation_transfer_layers},
    }
    return cfg.model_copy(update={"finetune": cfg.finetune.model_copy(update=changes[name])})


class Experiment(Plan):
    """The plan of one GPT-1 run (gpt1.recipe.recipe adds its steps) and the design its fine-tunes follow.

    `checkpoint`: fine-tune from this model instead of pre-training one (with `given_tokenizer` when the checkpoint
    holds none). The recipe sets the outputs (`samples`, `corpus`, ...) as it adds the steps that write them."""

    def __init__(
        self,
        cfg: PipelineConfig,
        work: str | os.PathLike,
        checkpoint: str | os.PathLike | None = None,
        tokenizer: str | os.PathLike | None = None,
        data_keys: Mapping[str, str] | None = None,
    ):
        super().__init__(Path(work).absolute(), cfg)
        # each task's content key as the run that started this one planned it: a child flow run of its fan-out
        # plans the parent's folders even when a task file changed since (a corrupt file repaired for a retry)
        self.data_keys = dict(data_keys or {})
        self.checkpoint = Ref.to(checkpoint) if checkpoint else None
        self.given_tokenizer = Ref.to(tokenizer) if tokenizer else None
        self.samples: Ref | None = None  # the generated sample books and task files
        self.corpus: Ref | None = None  # the ingested corpus
        self.tokenizer_out: Ref | None = None  # the tokenizer this run trains
        self.shards: Ref | None = None  # the tokenized corpus
        self.model: Ref | None = None  # this run's pre-training
        self._task_data: dict[str, tuple[str, str]] = {}  # each task's files and key, hashed once

    # -- the variants -----------------------------------------------------------------------------------------------
    @property
    def variants(self) -> list[str]:
        """The full run, each ablation, then a curve point per update of pretrain.curve_steps (when this run
        pre-trains and the full run starts from its model); each once per seed of finetune.seeds."""
        curve = []
        if self.checkpoint is None and not self.cfg.finetune.from_scratch:
            curve = [curve_variant(step) for step in self.cfg.pretrain.curve_steps]
        first = self.cfg.finetune.seed
        seeds = range(first, first + self.cfg.finetune.seeds)
        return [
            seeded(variant, seed, first)
            for variant in ["full", *self.cfg.orchestration.ablations, *curve]
            for seed in seeds
        ]

    def variant_tasks(self, variant: str) -> list[str]:
        """The tasks a variant fine-tunes: every task, but a curve point only the headline ones (the curve is of
        the headline mean)."""
        headline = self.cfg.report.headline()
        if curve_step(variant) is None or headline is None:
            return self.tasks
        return [task for task in self.tasks if task in {name for name, _ in headline}]

    def finetune_config(self, variant: str) -> FinetuneConfig:
        return variant_config(self.cfg, variant).finetune

    def variant_config(self, variant: str) -> PipelineConfig:
        return variant_config(self.cfg, variant)

    def from_random_init(self, variant: str) -> bool:
        """Fine-tunes a randomly initialised model of this run's architecture: needs the tokenizer only."""
        return self.finetune_config(variant).from_scratch and self.checkpoint is None

    def start(self, variant: str) -> Ref:
        """What a variant fine-tunes from: the given checkpoint, pre-training's final/ (or the model at a curve
        point), or a random init (shared by every from-scratch variant of this architecture and tokenizer)."""
        if self.checkpoint is not None:
            return self.checkpoint
        if self.from_random_init(variant):
            # without a checkpoint, this run's tokenizer: the recipe plans it before any fine-tune
            assert self.tokenizer is not None
            key = stable_hash(
                {
                    "random_init": keyed_settings(self.cfg.model, exclude={"vocab_size"}),
                    "tokenizer": self.tokenizer.key,
                }
            )
            return Ref(self.work / "random-init" / key, key)
        # the recipe plans pre-training whenever no checkpoint is given
        assert self.model is not None
        step = curve_step(variant)
        return self.model.inside(curve_point(step) if step is not None else FINAL)

    @property
    def tokenizer(self) -> Ref | None:
        """The fine-tunes' tokenizer: this run's, or with a given checkpoint the one given (None: its own)."""
        return self.given_tokenizer if self.checkpoint is not None else self.tokenizer_out

    def finetune_job(self, variant: str, task: str) -> finetune.Job:
        data, key = self.task_data(task)
        init = (
            self.cfg.model.model_dump(exclude={"vocab_size"})
            if self.from_random_init(variant)
            else None
        )
        return finetune.Job(
            task,
            data,
            key,
            self.start(variant),
            self.tokenizer,
            self.variant_config(variant),
            run_name=finetune_step(variant, task),
            random_init=init,
        )

    def ready_early(self, name: str) -> bool:
        """A curve point's fine-tune may start while pre-training runs on, once the model it starts from is
        written (its training.json comes last); the final model's fine-tunes wait for the stage to end."""
        job = self.steps[name].job
        return (
            isinstance(job, finetune.Job)
            and job.checkpoint.path.parent.name == CURVE
            and (job.checkpoint.path / TRAINING_NAME).is_file()
        )

    # -- folders ----------------------------------------------------------------------------------------------------
    def variant_dir(self, variant: str) -> Path:
        """`WORK/finetune/<variant key>`: keyed by what every task of the variant reads alike (its start, its
        fine-tune settings, the tokenizer), not by the tasks there are: adding one moves no other."""
        settings = keyed_settings(self.finetune_config(variant), exclude=NOT_FINETUNE_SETTINGS)
        tokenizer_key = self.tokenizer.key if self.tokenizer else None
        key = stable_hash(
            {"start": self.start(variant).key, "finetune": settings, "tokenizer": tokenizer_key}
        )
        return self.work / "finetune" / key

    def task_dir(self, task: str, variant: str = "full") -> Path:
        """`<variant folder>/<task>/<data key>`: the task's own data names its folder, so other data (another
        folder, files edited, a new hub pin) gets another folder and never meets a result of the old."""
        return self.variant_dir(variant) / task / self.task_data(task)[1]

    def report_job(self) -> report.Job:
        """The report of every variant's fine-tunes (failed ones as failed, skipped tasks as not run)."""
        return report.Job(
            tuple(self.variant_dir(v) for v in self.variants),
            tuple(self.variants),
            tuple(sorted(self.missing_data().items())),
            self.cfg.report.headline(),
            tracking_uri=self.cfg.tracking.tracking_uri,
            # this run's folders only: a variant folder also holds the tasks' results on other data
            tasks=tuple(
                tuple(
                    self.task_dir(t, v).relative_to(self.variant_dir(v)).as_posix()
                    for t in self.variant_tasks(v)
                )
                for v in self.variants
            ),
        )

    def report_dir(self) -> Path:
        return self.work / "report" / stable_hash([str(self.variant_dir(v)) for v in self.variants])

    # -- the tasks and their files ----------------------------------------------------------------------------------
    @property
    def tasks(self) -> list[str]:
        """The tasks this run fine-tunes: finetune.tasks but the missing ones it may skip."""
        return [t for t in self.cfg.finetune.tasks if t not in self.missing_data()]

    def reads_samples(self, task: str) -> bool:
        """Whether a task's files are the generated sample data's."""
        return self.cfg.finetune.data == "sample" and task not in self.cfg.finetune.task_data

    def task_source(self, task: str) -> str:
        """Where a task's files are: its own `finetune.task_data` entry, else the generated sample data, a folder of
        official layouts, or its hub id (`finetune.data`)."""
        spec = tasks.get(task)
        if task in self.cfg.finetune.task_data:
            return self.cfg.finetune.task_data[task]
        if self.reads_samples(task):
            # the recipe plans the sample data when finetune.data reads it
            assert self.samples is not None
            return str(self.samples.path / "tasks" / spec.folder)
        return spec.files_in(self.cfg.finetune.data)

    def task_data(self, task: str) -> tuple[str, str]:
        """(where a task's files are, their content key)."""
        if task not in self._task_data:
            where = self.task_source(task)
            if self.reads_samples(task):
                assert self.samples is not None  # as in task_source
                # not written yet
                key = self.samples.inside(f"tasks/{tasks.get(task).folder}").key
            else:
                key = self.data_keys.get(task) or data_key(where)
            self._task_data[task] = (where, key)
        return self._task_data[task]

    def missing_data(self) -> dict[str, str]:
        """Tasks left out because their files are not there (`finetune.missing_data=skip`), and why."""
        if self.cfg.finetune.missing_data != "skip":
            return {}
        missing = {}
        for task in self.cfg.finetune.tasks:
            if self.reads_samples(task):
                continue
            where = self.task_source(task)
            if not where.startswith("hf:") and not Path(where).exists():
                missing[task] = f"no files at {where}"
        return missing

    def tasks_heaviest_first(self) -> list[str]:
        """`tasks`, the likely longest fine-tunes first, so that a fan-out with fewer slots than tasks does not end
        on a long task that started last (RACE did in the demo). The estimate is the bytes of the task's local
        files times its answers per example (each answer is a sequence through the model); a hub source counts
        as one byte, so hub tasks keep their configured order among themselves."""

        def weight(task: str) -> int:
            return (size_on_disk(self.task_source(task)) or 1) * (tasks.get(task).n_choices or 1)

        # stable: equal weights keep finetune.tasks' order
        return sorted(self.tasks, key=weight, reverse=True)

    def probe_data(self) -> str | None:
        """Where pre-training's zero-shot probes read task folders (None: the hub, per finetune.data)."""
        source = self.cfg.finetune.data
        if source == "sample":
            # the recipe plans the sample data when finetune.data reads it
            assert self.samples is not None
            return str(self.samples.path / "tasks")
        return None if source == "hf" else source
