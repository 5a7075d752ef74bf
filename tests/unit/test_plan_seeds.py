"""finetune.seeds: the plan fans every variant out over seeds; one seed keeps every name, folder and key."""

from __future__ import annotations

from gpt1.config import load_config
from gpt1 import recipe
from gpt1.recipe.experiment import curve_step, unseeded

BASE = ["finetune.tasks=[sst2,rte]", "orchestration.ablations=[no_pretrain]", "pretrain.curve_steps=[500]",
        "report.headline_tasks=[sst2]"]


def test_one_seed_plans_what_it_planned_before_seeds_existed(tmp_path):
    one = recipe.plan(load_config("smoke", BASE), tmp_path)
    assert one.variants == ["full", "no_pretrain", "step_500"]
    assert sorted(n for n in one.steps if n.startswith("finetune-")) == [
        "finetune-full-rte", "finetune-full-sst2", "finetune-no_pretrain-rte", "finetune-no_pretrain-sst2",
        "finetune-step_500-sst2"]
    again = recipe.plan(load_config("smoke", [*BASE, "finetune.seeds=1"]), tmp_path)
    assert {v: again.variant_dir(v) for v in again.variants} == {v: one.variant_dir(v) for v in one.variants}
    assert again.steps["finetune-full-sst2"].job.key() == one.steps["finetune-full-sst2"].job.key()


def test_every_variant_is_fine_tuned_once_per_seed_with_that_seed(tmp_path):
    plan = recipe.plan(load_config("smoke", [*BASE, "finetune.seeds=3", "finetune.seed=4"]), tmp_path)
    assert plan.variants == ["full", "full_seed5", "full_seed6", "no_pretrain", "no_pretrain_seed5",
                             "no_pretrain_seed6", "step_500", "step_500_seed5", "step_500_seed6"]
    seeds = {v: plan.finetune_config(v).seed for v in plan.variants}
    assert seeds["full"] == seeds["no_pretrain"] == 4 and seeds["no_pretrain_seed6"] == 6
    assert plan.finetune_config("no_pretrain_seed5").from_scratch and not plan.finetune_config("full_seed5").from_scratch
    assert curve_step("step_500_seed6") == 500 and unseeded("full_seed5") == ("full", 5)
    assert len({plan.variant_dir(v) for v in plan.variants}) == len(plan.variants)
    assert "finetune-step_500_seed6-sst2" in plan.steps and "finetune-step_500_seed6-rte" not in plan.steps
    # both variants share their settings but the start: the report pairs them seed by seed
    full, scratch = plan.finetune_config("full_seed5"), plan.finetune_config("no_pretrain_seed5")
    assert full.model_dump(exclude={"from_scratch"}) == scratch.model_dump(exclude={"from_scratch"})
    assert plan.steps["report"].job.labels == tuple(plan.variants)
