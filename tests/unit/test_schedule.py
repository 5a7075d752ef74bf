"""gpt1.pipeline.schedule on a real plan's steps: which step starts next with two compute slots."""

from gpt1.config import load_config
from gpt1 import recipe
from gpt1.pipeline.schedule import Schedule

TASKS = ["sst2", "stsb", "rte"]


def make_schedule(tmp_path, slots: int = 2) -> Schedule:
    plan = recipe.plan(load_config("smoke", [f"finetune.tasks=[{','.join(TASKS)}]",
                                           "orchestration.ablations=[no_pretrain]"]), tmp_path)
    return Schedule(plan.needs, list(plan.steps), slots,
                    holds_slot=lambda name: plan.steps[name].job.compute,
                    runs_after_failures=lambda name: plan.steps[name].job.after_failures)


def run_until(schedule: Schedule, stop: str) -> None:
    """Start and finish steps in the order the schedule gives until `stop` has started (it keeps running)."""
    while True:
        name, holds = schedule.next_step()
        schedule.start(name, holds)
        if name == stop:
            return
        schedule.finish(name, None)


def start_all_ready(schedule: Schedule) -> list[str]:
    started = []
    while (ready := schedule.next_step()) is not None:
        schedule.start(*ready)
        started.append(ready[0])
    return started


def test_pretraining_gets_a_slot_while_its_shards_are_written(tmp_path):
    schedule = make_schedule(tmp_path)
    run_until(schedule, "tokenize")
    # The from-scratch fine-tunes are ready (tokenizer); pre-training waits on tokenize: one slot is kept for it.
    assert start_all_ready(schedule) == ["finetune-no_pretrain-sst2"]
    schedule.finish("tokenize", None)
    assert start_all_ready(schedule) == ["pretrain"]


def test_from_scratch_fine_tunes_use_the_free_slot_while_pretraining_runs(tmp_path):
    schedule = make_schedule(tmp_path)
    run_until(schedule, "tokenize")
    start_all_ready(schedule)
    schedule.finish("tokenize", None)
    start_all_ready(schedule)  # pre-training
    # Each from-scratch fine-tune that ends beside pre-training hands its slot to the next one, not to the waiting
    # fine-tunes of the pre-trained model (they need pre-training's own slot, which passes on when it ends).
    for finished, following in (("finetune-no_pretrain-sst2", ["finetune-no_pretrain-stsb"]),
                                ("finetune-no_pretrain-stsb", ["finetune-no_pretrain-rte"]),
                                ("finetune-no_pretrain-rte", [])):
        schedule.finish(finished, None)
        assert start_all_ready(schedule) == following
    assert schedule.free == 1
    schedule.finish("pretrain", None)
    assert start_all_ready(schedule) == ["finetune-full-sst2", "finetune-full-stsb"]
    assert schedule.free == 0


def test_a_failed_need_settles_its_dependents_and_the_report_still_runs(tmp_path):
    schedule = make_schedule(tmp_path)
    run_until(schedule, "tokenize")
    start_all_ready(schedule)
    schedule.finish("tokenize", None)
    start_all_ready(schedule)
    schedule.finish("pretrain", "exit 1")
    for name in [n for n in schedule.running if n.startswith("finetune-no_pretrain-")]:
        schedule.finish(name, None)
    while not schedule.finished:
        ready = schedule.next_step()
        schedule.start(*ready)
        schedule.finish(ready[0], None)
    failures = schedule.failures()
    assert failures["pretrain"] == "exit 1"
    assert {f"finetune-full-{t}" for t in TASKS} <= set(failures)
    assert all(failures[f"finetune-full-{t}"] == "not run: pretrain failed" for t in TASKS)
    assert "report" not in failures and schedule.free == 2


def test_a_curve_points_fine_tunes_start_beside_pretraining_once_its_model_is_written(tmp_path):
    plan = recipe.plan(load_config("smoke", ["finetune.tasks=[sst2,rte]", "orchestration.ablations=[no_pretrain]",
                                           "pretrain.curve_steps=[500]", "report.headline_tasks=[sst2]"]), tmp_path)
    schedule = Schedule(plan.needs, list(plan.steps), 2,
                        holds_slot=lambda name: plan.steps[name].job.compute,
                        available=plan.ready_early)
    run_until(schedule, "pretrain")
    for name in [n for n in schedule.running if n != "pretrain"]:
        schedule.finish(name, None)
    while (ready := schedule.next_step()) is not None:  # the from-scratch fine-tunes, one by one beside it
        assert ready[0].startswith("finetune-no_pretrain-")
        schedule.start(*ready)
        schedule.finish(ready[0], None)
    assert schedule.free == 1  # and update 500's model is not written yet
    model = plan.steps["finetune-step_500-sst2"].job.checkpoint.path
    model.mkdir(parents=True)
    (model / "training.json").write_text('{"steps": 500}')
    assert start_all_ready(schedule) == ["finetune-step_500-sst2"]
    schedule.finish("finetune-step_500-sst2", None)
    final = plan.steps["finetune-full-sst2"].job.checkpoint.path
    final.mkdir(parents=True)
    (final / "training.json").write_text('{"steps": 1000}')
    assert start_all_ready(schedule) == [] and schedule.free == 1  # the final model's wait for pre-training's end
    schedule.finish("pretrain", None)
    assert start_all_ready(schedule) == ["finetune-full-sst2", "finetune-full-rte"]


def test_pretraining_alone_holds_every_slot_and_the_from_scratch_fine_tunes_wait_for_it(tmp_path):
    plan = recipe.plan(load_config("smoke", [f"finetune.tasks=[{','.join(TASKS)}]", "orchestration.ablations=[no_pretrain]",
                                           "orchestration.pretrain_alone=true"]), tmp_path)
    slots = plan.cfg.orchestration.finetune_concurrency
    schedule = Schedule(plan.needs, list(plan.steps), slots,
                        holds_slot=lambda name: (slots if name == "pretrain" else
                                                 int(plan.steps[name].job.compute)))
    run_until(schedule, "tokenize")
    assert start_all_ready(schedule) == []  # every slot kept for pre-training, though fine-tunes are ready
    schedule.finish("tokenize", None)
    assert start_all_ready(schedule) == ["pretrain"] and schedule.free == 0
    schedule.finish("pretrain", None)
    assert len(start_all_ready(schedule)) == slots and schedule.free == 0


def test_cluster_fine_tunes_share_pods_in_batches_of_steps_that_become_ready_together(tmp_path):
    """orchestration.finetunes_per_pod: the fine-tunes handed to the GPU pool go in batches of at most that many,
    each batch of steps with the same needs and the same model to start from (ready at one moment), in plan
    order; a task with job variables of its own (RACE's memory) runs alone."""
    from flows.pipeline import _shared_runs

    tasks = ["sst2", "race", "stsb", "rte", "cola"]
    cfg = load_config("cluster", [f"finetune.tasks=[{','.join(tasks)}]", "orchestration.ablations=[no_pretrain]",
                                  "finetune.seeds=2", "orchestration.finetunes_per_pod=3"])
    plan = recipe.plan(cfg, tmp_path)
    shared = _shared_runs(plan)
    fine_tunes = [name for name in plan.steps if name.startswith("finetune-")]
    assert sorted(shared) == sorted(fine_tunes)
    batches = {tuple(run.steps) for run in shared.values()}
    assert all(shared[name] is shared[run[0]] for run in batches for name in run)  # one object per batch
    assert sorted(name for run in batches for name in run) == sorted(fine_tunes)  # each step in exactly one
    assert all(len(run) <= 3 for run in batches)
    for run in batches:
        jobs = [plan.steps[name].job for name in run]
        assert len({plan.needs[name] for name in run}) == 1 and len({job.checkpoint.path for job in jobs}) == 1
        assert list(run) == [name for name in plan.steps if name in run]  # plan order
        assert len(run) == 1 or all(job.task != "race" for job in jobs)
    # 2 variants x 2 seeds x 4 tasks sharing pods -> the 16 in batches of 3 per start model; RACE's 4 alone
    assert sum(len(run) > 1 for run in batches) >= (len(fine_tunes) - 4) // 3
    assert load_config("rehearse").orchestration.finetunes_per_pod > 1  # `make rehearse` shares pods
