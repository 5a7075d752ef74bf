"""What a key holds: the settings and inputs its job reads, no more, each setting only while it is off its default.
Generated from the recipe and the config: every stage the recipe plans (a stage added to the recipe is covered),
every section of the config, every task of the run; a folder (`WORK/<stage>/<key>`, a fine-tune's
`WORK/finetune/<variant key>/<task>/<data key>`) is checked with its key.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, create_model

from gpt1 import recipe
from gpt1.config import PipelineConfig, load_config
from gpt1.pipeline.plan import Plan, paths_read
from gpt1.stages.base import stage_jobs

# every variant kind the recipe plans: ablations (one from a random init), a curve point, a second seed
RUN = ["orchestration.ablations=[no_pretrain,no_aux_lm,transfer_layers]", "pretrain.curve_steps=[500]",
       "finetune.seeds=2", "report.headline_tasks=[sst2]"]


def planned(plan: Plan) -> dict[str, tuple[str, Path]]:
    """Each planned step's key and folder."""
    return {name: (step.job.key(), step.out) for name, step in plan.planned.items()}


def sections() -> list[str]:
    return [name for name, f in PipelineConfig.model_fields.items()
            if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)]


def with_a_new_setting(cfg: PipelineConfig, value: int) -> PipelineConfig:
    """`cfg` as a later version would read it: each section has one more setting (default 0), set to `value`."""
    later = {}
    for section in sections():
        current = getattr(cfg, section)
        model = create_model(f"Later{type(current).__name__}", __base__=type(current), added_later=(int, 0))
        later[section] = model.model_validate({**current.model_dump(), "added_later": value})
    return cfg.model_copy(update=later)


def test_the_recipe_plans_every_stage(tmp_path):
    """So that the tests below, which compare the recipe's plans, cover every stage of the pipeline."""
    ours = {name for name, job in stage_jobs().items() if job.__module__.startswith("gpt1.")}
    assert {step.stage for step in recipe.plan(load_config("smoke", RUN), tmp_path).planned.values()} == ours


def test_a_setting_added_at_its_default_moves_no_key_and_no_folder(tmp_path):
    cfg = load_config("smoke", RUN)
    before = planned(recipe.plan(cfg, tmp_path))
    after = planned(recipe.plan(with_a_new_setting(cfg, 0), tmp_path))
    assert {name for name in before if after.get(name) != before[name]} == set()
    # off its default it is keyed wherever its section is read: the comparison above can fail
    moved = planned(recipe.plan(with_a_new_setting(cfg, 1), tmp_path))
    assert {step.split("-")[0] for step in before if moved[step] != before[step]} >= {"pretrain", "finetune"}


def test_adding_a_task_moves_only_what_reads_it(tmp_path):
    """Each task of the run, left out or added with its own `finetune.task_data` entry: a step keeps its key and
    folder unless it reads the task's files or the output of a step that moved (through the references the plan
    draws its edges from)."""
    cfg = load_config("smoke")
    for task in cfg.finetune.tasks:
        others = ",".join(t for t in cfg.finetune.tasks if t != task)
        without = planned(recipe.plan(load_config("smoke", [f"finetune.tasks=[{others}]"]), tmp_path))
        elsewhere = tmp_path / "elsewhere" / task
        plan = recipe.plan(load_config("smoke", [f"finetune.task_data={{{task}: {elsewhere}}}"]), tmp_path)
        changed = [elsewhere]
        for name, step in plan.planned.items():
            if without.get(name) == (step.job.key(), step.out):
                continue
            reads = paths_read(step.job)
            assert any(p == c or c in p.parents or p in c.parents for p in reads for c in changed), (task, name)
            changed.append(step.out)
        assert any(name.endswith(f"-{task}") for name in plan.planned if name not in without), task


def test_a_child_run_given_its_parents_data_keys_plans_the_parents_folders(tmp_path):
    """A fan-out's child flow run plans again from the config; a task file repaired between the parent's plan and a
    retry must not send the child to another folder than the one the parent waits on (the parent passes its keys)."""
    data = tmp_path / "SST-2"
    data.mkdir()
    (data / "train.tsv").write_text("sentence\tlabel\nbroken\tmaybe\n")
    cfg = load_config("smoke", [f"finetune.task_data={{sst2: {data}}}"])
    parent = recipe.plan(cfg, tmp_path / "work")
    (data / "train.tsv").write_text("sentence\tlabel\nrepaired\t1\n")
    keys = {task: parent.task_data(task)[1] for task in parent.tasks}
    assert planned(recipe.plan(cfg, tmp_path / "work", data_keys=keys)) == planned(parent)
    # without them the child plans by the files' new content: the comparison above can fail
    assert planned(recipe.plan(cfg, tmp_path / "work"))["finetune-full-sst2"] != planned(parent)["finetune-full-sst2"]
