"""What the pipeline records in MLflow for a step: a child run of the pipeline's parent run per step of a stage
that does not log its own (its settings, numeric results, inputs and output as datasets, its record files), and,
for those that do, the reuse of an earlier run's output. Cached steps are logged too, tagged `gpt1.cached=true`,
so every run shows every stage."""

from __future__ import annotations

from gpt1.config import flatten
from gpt1.pipeline.plan import Plan
from gpt1.stages.base import Result, Step
from gpt1.tracking.logger import RunLogger
from gpt1.tracking.runs import stage_tags


def log_step(plan: Plan, step: Step, result: Result, parent_run_id: str | None) -> None:
    section = step.job.section
    if step.job.logs_itself:
        step.job.log_reuse(result, parent_run_id)
        return
    cfg = plan.cfg
    run = RunLogger(
        step.name,
        experiment=cfg.tracking.experiment,
        uri=cfg.tracking.tracking_uri,
        parent_run_id=parent_run_id,
        tags=stage_tags(step.stage, key=result.key, preset=cfg.preset, cached=result.cached),
    )
    if section:
        run.log_params(
            {f"{section}.{k}": v for k, v in flatten(getattr(cfg, section).model_dump()).items()}
        )
    numbers = {
        k: v
        for k, v in flatten(result.marker).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    run.log_metrics({k.replace("[", "_").replace("]", ""): v for k, v in numbers.items()})
    for name, (key, source) in step.job.lineage_inputs().items():
        run.log_dataset(name, key, source, context="input")
    run.log_dataset(
        f"{step.stage}-output",
        result.key,
        str(result.path),
        context="output",
        profile=step.job.output_profile(result),
    )
    for record in sorted(result.path.glob("*.json")):
        run.log_artifact(record)
    run.end()
    resolved = step.job.resolved_params(result)
    if resolved and parent_run_id:
        parent = RunLogger("parent", uri=cfg.tracking.tracking_uri, run_id=parent_run_id)
        parent.log_params(resolved)
        parent.flush()
