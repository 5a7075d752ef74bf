"""`gpt1 preflight --preset NAME [--set k=v ...] [--work DIR]`: everything a run needs, checked before any GPU is
held, every problem at once (exit 2); exit 0 prints what the run will do. The `gpt1` flow runs the same checks as
its first task, on the CPU pool.

The checks of data, settings, work dir, disk and MLflow are gpt1.recipe.preflight's; this module adds the
orchestrator's, through Prefect's own client (its settings, profiles and credentials): the deployments the run hands
work to exist, each one's work pool exists and has a worker online, its image is not the placeholder the pool
templates ship with, and pre-training's processes per node fit the GPUs its pool gives a job.
"""

from __future__ import annotations

import argparse
import os

from flows.prefect_api import api_problem
from gpt1.config import PipelineConfig, load_config
from gpt1.recipe import preflight
from gpt1.recipe.preflight import Context, Findings
from gpt1.stages.base import add_config_args

PLACEHOLDER_IMAGE = "registry.example.com/"  # the image infra/k8s/work-pools/*.json ship with


def run_checks(cfg: PipelineConfig, work: str | os.PathLike, *, services: bool = True) -> Findings:
    """gpt1's checks and, with `services`, Prefect's."""
    return preflight.run_checks(
        cfg, work, services=services, extra_checks=[check_prefect] if services else []
    )


def wanted_deployments(ctx: Context) -> dict[str, str]:
    """The deployments this run hands work to: name -> what for."""
    o, wanted = ctx.cfg.orchestration, {}
    if o.fanout == "deployment":
        wanted[o.finetune_deployment] = "fine-tunes"
    if o.pretrain_deployment and ctx.plan.writes(ctx.plan.model):
        wanted[o.pretrain_deployment] = "pre-training"
    return wanted


def check_prefect(ctx: Context) -> None:
    """The Prefect API this shell is configured for answers and takes its credentials (whenever one is
    configured: flow runs report to it), and the deployments the run hands work to are there and served."""
    from prefect import get_client
    from prefect.settings import PREFECT_API_URL

    wanted = wanted_deployments(ctx)
    if not PREFECT_API_URL.value():
        if wanted:
            ctx.problem(
                f"no Prefect API configured (PREFECT_API_URL) for the deployments the run uses: {sorted(wanted)}"
            )
        return
    with get_client(sync_client=True) as client:
        if (problem := api_problem(client)) is not None:
            ctx.problem(problem)
            return
        for name, what in wanted.items():
            check_deployment(ctx, client, name, what)


def check_deployment(ctx: Context, client, name: str, what: str) -> None:
    from prefect.exceptions import ObjectNotFound

    try:
        deployment = client.read_deployment_by_name(name)
    except ObjectNotFound:
        ctx.problem(
            f"{what}: deployment {name} does not exist (prefect deploy --prefect-file pipelines.yaml --all)"
        )
        return
    pool_name = deployment.work_pool_name
    try:
        pool = client.read_work_pool(pool_name) if pool_name else None
    except ObjectNotFound:
        pool = None
    if pool is None:
        ctx.problem(f"{what}: deployment {name} uses work pool {pool_name!r}, which does not exist")
        return
    template = (pool.base_job_template or {}).get("variables", {}).get("properties", {})
    job_variables = deployment.job_variables or {}
    image = job_variables.get("image", template.get("image", {}).get("default"))
    if isinstance(image, str) and PLACEHOLDER_IMAGE in image:
        ctx.problem(
            f"{what}: work pool {pool_name} runs the placeholder image {image!r}: set `image` in its base job "
            "template (infra/k8s/work-pools/) or as a job variable of the deployment"
        )
    workers = client.read_workers_for_work_pool(pool_name)
    if not any(str(getattr(w.status, "value", w.status)).upper() == "ONLINE" for w in workers):
        ctx.problem(
            f"{what}: work pool {pool_name} has no worker online: its runs would wait as Late (start one: "
            f"prefect worker start --pool {pool_name})"
        )
    if what == "pre-training":
        gpus = job_variables.get("gpus", template.get("gpus", {}).get("default"))
        nproc = ctx.cfg.orchestration.pretrain_nproc
        if isinstance(gpus, int) and nproc > gpus:
            ctx.problem(
                f"orchestration.pretrain_nproc={nproc} processes per node but {name} gives a job {gpus} GPUs"
            )
        elif isinstance(gpus, int) and nproc < gpus:
            ctx.note(f"pre-training uses {nproc} of the {gpus} GPUs {name} holds per node")
    ctx.found.plan.append(f"{what}: deployment {name} on work pool {pool_name}")


# -- CLI ------------------------------------------------------------------------------------------------------------
def add_cli_args(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument(
        "--work",
        default=os.environ.get("GPT1_WORK_DIR", "runs"),
        help="the run's work dir (default: $GPT1_WORK_DIR, else ./runs)",
    )
    parser.add_argument(
        "--no-services", action="store_true", help="skip the MLflow and Prefect checks"
    )


def run_cli(args: argparse.Namespace) -> int:
    found = run_checks(
        load_config(args.preset, args.overrides), args.work, services=not args.no_services
    )
    for note in found.notes:
        print(f"note: {note}")
    if found.problems:
        for problem in found.problems:
            print(f"problem: {problem}")
        print(f"preflight: {len(found.problems)} problem(s); nothing was started")
        return 2
    print("\n".join(found.plan))
    print("preflight: ok")
    return 0
