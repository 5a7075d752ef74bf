"""The plan of one run: every stage's jobs and folders for one config, keys computed before anything runs.

    plan = Plan.make(load_config("smoke"), "runs/")
    for step in plan.steps.values():         # in the graph's order; each after the steps it needs
        run_step(plan, step.name)            # gpt1.pipeline.run; the flows run the same steps as Prefect tasks

Each stage of the graph (gpt1.stages.graph) adds its jobs through its module's `plan(plan)`, in graph order, so a
job can name its inputs' planned folders and keys (`plan.ref("train-tokenizer")`). A job writes
`WORK/<stage>/<key>`, named by the key the job itself computes (gpt1.stages.base): the key hashes the stage's
settings and its inputs' keys, so a changed parameter re-runs exactly what depends on it, and the job, the only
place that decides, skips what is finished. Fine-tunes of a variant (the full run and each ablation of
`orchestration.ablations`, and a curve point per update of `pretrain.curve_steps`: the headline tasks fine-tuned from
the model at that update) share `WORK/finetune/<variant key>/<task>`.

The plan keeps what its last stages need: no pre-training when every variant fine-tunes a random init or a given
checkpoint (`Plan.make(..., checkpoint=)`, whose architecture every variant then starts from), no sample data
when neither the corpus nor the task files are the generated ones. Nothing here imports Prefect.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gpt1 import tasks
from gpt1.config import FinetuneConfig, PipelineConfig
from gpt1.finetune import stage as finetune
from gpt1.finetune.stage import NOT_FINETUNE_SETTINGS
from gpt1.io import size_on_disk, stable_hash
from gpt1.model.transformer import TRAINING_NAME
from gpt1.pretrain.inputs import FINAL, curve_point
from gpt1.stages import graph
from gpt1.stages.base import Ref, StageJob, Step, data_key

VARIANTS = ("full", "no_pretrain", "no_aux_lm", "transfer_layers")  # the paper's Table 5 and Fig. 2 (left)
CURVE_VARIANT = "step_"  # + N: the full run's fine-tunes of the headline tasks from the model at update N
SEED_VARIANT = "_seed"  # + S: a variant fine-tuned with seed S, one of finetune.seeds beside finetune.seed


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


def variant_config(cfg: PipelineConfig, variant: str) -> PipelineConfig:
    """`cfg` with the fine-tune settings of one Table 5 variant: as configured, or one ablation of it, with the
    seed its name carries (registering no model: the first seed's are the variant's). A curve point fine-tunes as
    configured, from an earlier model; it measures, so it registers no model."""
    name, seed = unseeded(variant)
    update = {}
    if seed is not None:  # another seed's models are not registered: the first seed's are the variant's
        update = {"finetune": cfg.finetune.model_copy(update={"seed": seed}),
                  "tracking": cfg.tracking.model_copy(update={"register_models": False})}
    cfg = cfg.model_copy(update=update)
    if curve_step(name) is not None:
        return cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update={"register_models": False})})
    changes = {"full": {}, "no_pretrain": {"from_scratch": True}, "no_aux_lm": {"aux_lm_weight": 0.0},
               "transfer_layers": {"transfer_layers": cfg.orchestration.ablation_transfer_layers}}[name]
    return cfg.model_copy(update={"finetune": cfg.finetune.model_copy(update=changes)})


@dataclass
class Plan:
    """Every step of one run: `steps` (what the run does, in order), `needs` (step -> the steps it waits for) and
    `planned` (every job the stages proposed, including the ones this config does not need)."""

    cfg: PipelineConfig
    work: Path
    checkpoint: Ref | None = None  # fine-tune from this model instead of this plan's pre-training
    given_tokenizer: Ref | None = None  # with `checkpoint`: its tokenizer when the checkpoint holds none
    planned: dict[str, Step] = field(default_factory=dict)
    steps: dict[str, Step] = field(default_factory=dict)
    needs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def make(cls, cfg: PipelineConfig, work: str | os.PathLike, checkpoint: str | os.PathLike | None = None,
             tokenizer: str | os.PathLike | None = None) -> "Plan":
        plan = cls(cfg, Path(work).absolute(), Ref.to(checkpoint) if checkpoint else None,
                   Ref.to(tokenizer) if tokenizer else None)
        for stage in graph.STAGES:
            for step in stage.load().plan(plan):
                if step.name in plan.planned:
                    raise ValueError(f"stage {stage.name}: two jobs named {step.name}")
                plan.planned[step.name] = step
        plan.needs = {name: plan._resolve_needs(step) for name, step in plan.planned.items()}
        plan.steps = {name: plan.planned[name] for name in plan._needed()}
        return plan

    def _resolve_needs(self, step: Step) -> tuple[str, ...]:
        declared = graph.stage(step.stage).inputs
        wanted = declared if step.needs is None else step.needs
        unknown = set(wanted) - set(declared)
        if unknown:
            raise ValueError(f"{step.name} needs {sorted(unknown)}, which are not inputs of {step.stage} in the graph")
        return tuple(name for name, other in self.planned.items() if other.stage in wanted)

    def _needed(self) -> list[str]:
        """The steps of the graph's last stages (those no stage reads) and everything they need, in plan order."""
        read = {name for stage in graph.STAGES for name in stage.inputs}
        keep = {name for name, step in self.planned.items() if step.stage not in read}
        pending = list(keep)
        while pending:
            for need in self.needs[pending.pop()]:
                if need not in keep:
                    keep.add(need)
                    pending.append(need)
        return [name for name in self.planned if name in keep]

    def folder(self, job: StageJob) -> Path:
        """Where a stage's one job writes: `WORK/<stage>/<key>`."""
        return self.work / job.stage / job.key()

    def ref(self, name: str) -> Ref:
        """A step's output as the input of another: its folder and its planned key."""
        step = self.planned[name]
        return Ref(step.out, step.job.key())

    def dir(self, name: str) -> Path:
        return self.planned[name].out

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

    # -- fine-tuning ---------------------------------------------------------------------------------------------
    @property
    def variants(self) -> list[str]:
        """The full run, each ablation, then a curve point per update of pretrain.curve_steps (when this plan
        pre-trains and the full run starts from its model); each once per seed of finetune.seeds."""
        curve = []
        if self.checkpoint is None and not self.cfg.finetune.from_scratch:
            curve = [curve_variant(step) for step in self.cfg.pretrain.curve_steps]
        first = self.cfg.finetune.seed
        seeds = range(first, first + self.cfg.finetune.seeds)
        return [seeded(variant, seed, first) for variant in ["full", *self.cfg.orchestration.ablations, *curve]
                for seed in seeds]

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
        """Fine-tunes a randomly initialised model of this plan's architecture: needs the tokenizer only."""
        return self.finetune_config(variant).from_scratch and self.checkpoint is None

    def start(self, variant: str) -> Ref:
        """What a variant fine-tunes from: the given checkpoint, pre-training's final/, or a random init (shared by
        every from-scratch variant of this architecture and tokenizer)."""
        if self.checkpoint is not None:
            return self.checkpoint
        if curve_step(variant) is not None:
            return self.ref("pretrain").inside(curve_point(curve_step(variant)))
        if self.from_random_init(variant):
            key = stable_hash({"random_init": self.cfg.model.model_dump(exclude={"vocab_size"}),
                               "tokenizer": self.ref("train-tokenizer").key})
            return Ref(self.work / "random-init" / key, key)
        return self.ref("pretrain").inside(FINAL)

    @property
    def tokenizer(self) -> Ref | None:
        """The fine-tunes' tokenizer: this plan's, or with a given checkpoint the one given (None: its own)."""
        return self.given_tokenizer if self.checkpoint is not None else self.ref("train-tokenizer")

    def variant_dir(self, variant: str) -> Path:
        settings = self.finetune_config(variant).model_dump(exclude=NOT_FINETUNE_SETTINGS)
        tokenizer_key = self.tokenizer.key if self.tokenizer else None
        # Where each task's data is read from is in the key: another data folder gets another folder, never one
        # holding a result of other inputs. (Its content is in each task's own stage key: files edited in place
        # are refused there, by name, rather than silently mixing results across a running flow's tasks.)
        data = {task: self.task_source(task) for task in self.tasks}
        return self.work / "finetune" / stable_hash({"start": self.start(variant).key, "finetune": settings,
                                                     "tokenizer": tokenizer_key, "data": data})

    def task_dir(self, task: str, variant: str = "full") -> Path:
        return self.variant_dir(variant) / task

    def task_source(self, task: str) -> str:
        """Where a task's files are: its own `finetune.task_data` entry, else the generated sample data, a folder of
        official layouts, or its hub id (`finetune.data`)."""
        spec, source = tasks.get(task), self.cfg.finetune.data
        if task in self.cfg.finetune.task_data:
            return self.cfg.finetune.task_data[task]
        if source == "sample":
            return str(self.dir("sample-data") / "tasks" / spec.folder)
        return spec.files_in(source)

    def task_data(self, task: str) -> tuple[str, str]:
        """(where a task's files are, their content key)."""
        where = self.task_source(task)
        if self.cfg.finetune.data == "sample" and task not in self.cfg.finetune.task_data:
            return where, self.ref("sample-data").inside(f"tasks/{tasks.get(task).folder}").key  # not written yet
        return where, data_key(where)

    def written_early(self, name: str) -> bool:
        """Whether a curve point's fine-tune may start while pre-training runs on: the model it starts from is
        written (its training.json comes last). The final model's fine-tunes wait for the stage to end."""
        step = self.steps[name]
        variant = name.removeprefix("finetune-").split("-", 1)[0]  # variant names hold no "-"
        return (step.stage == "finetune" and curve_step(variant) is not None
                and (step.job.checkpoint.path / TRAINING_NAME).is_file())

    def finetune_job(self, variant: str, task: str) -> finetune.Job:
        data, data_key = self.task_data(task)
        init = self.cfg.model.model_dump(exclude={"vocab_size"}) if self.from_random_init(variant) else None
        return finetune.Job(task, data, data_key, self.start(variant), self.tokenizer, self.variant_config(variant),
                            run_name=f"finetune-{variant}-{task}", random_init=init)

    def missing_data(self) -> dict[str, str]:
        """Tasks left out because their files are not there (`finetune.missing_data=skip`), and why."""
        if self.cfg.finetune.missing_data != "skip":
            return {}
        missing = {}
        for task in self.cfg.finetune.tasks:
            where = self.task_source(task)
            if not where.startswith("hf:") and not (self.cfg.finetune.data == "sample"
                                                    and task not in self.cfg.finetune.task_data):
                if not Path(where).exists():
                    missing[task] = f"no files at {where}"
        return missing

    @property
    def tasks(self) -> list[str]:
        """The tasks this plan fine-tunes: finetune.tasks but the missing ones it may skip."""
        return [t for t in self.cfg.finetune.tasks if t not in self.missing_data()]

    def tasks_heaviest_first(self) -> list[str]:
        """`tasks`, the likely longest fine-tunes first, so that a fan-out with fewer slots than tasks does not end
        on a long task that started last (RACE did in the demo). The estimate is the bytes of the task's local
        files times its answers per example (each answer is a sequence through the model); a hub source counts
        as one byte, so hub tasks keep their configured order among themselves."""

        def weight(task: str) -> int:
            return (size_on_disk(self.task_source(task)) or 1) * (tasks.get(task).n_choices or 1)

        return sorted(self.tasks, key=weight, reverse=True)  # stable: equal weights keep finetune.tasks' order

    def probe_data(self) -> str | None:
        """Where pre-training's zero-shot probes read task folders (None: the hub, per finetune.data)."""
        source = self.cfg.finetune.data
        return str(self.dir("sample-data") / "tasks") if source == "sample" else None if source == "hf" else source

    def report_dir(self) -> Path:
        return self.work / "report" / stable_hash([str(self.variant_dir(v)) for v in self.variants])
