"""Checks of everything a run needs before any GPU is held, reported all at once (`gpt1 preflight`, and the `gpt1`
flow's first task): the corpus source and every task's files for every split the run reads (local files are opened
and their first rows parsed; hub ids are resolved at their revision when the hub is reachable, else looked up in the
local cache; Story Cloze has no downloadable hub copy and must be supplied through `finetune.task_data.storycloze`),
the MLflow server (reachable, and the experiment writable), processes per node against this machine's GPUs, the
work dir (writable; an absolute path when other pods must see it), the settings that must agree (batch layout for
the world size, transfer layers, cached shards' context), and free disk against an estimate of the run's outputs.
The Prefect deployments and work pools a run hands work to are checked by flows/preflight.py, which runs these
checks too; this package never imports Prefect.

Unpinned hub revisions are notes, not problems: the run works, but a re-run cannot tell if the data moved. The
vocabulary needs no check: the run trains its own tokenizer, and every later stage is keyed by it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gpt1 import tasks
from gpt1.config import PipelineConfig
from gpt1.errors import one_line
from gpt1.io import size_on_disk
from gpt1.model.transformer import parameter_count
from gpt1.pretrain.distributed import batch_layout
from gpt1.recipe.experiment import Experiment, curve_step
from gpt1.recipe.recipe import plan as plan_run
from gpt1.sample_data.tasks import SIZES
from gpt1.stages.base import stage_jobs
from gpt1.stages.outputs import is_done
from gpt1.tasks import hub as task_hub

HUB = "https://huggingface.co"
GIB = 1024**3


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class Context:
    cfg: PipelineConfig
    work: Path
    plan: Experiment
    found: Findings
    shared: bool = True  # the work dir was given as an absolute path (other pods can find it)
    hub_online: bool | None = None  # decided on first use

    def problem(self, text: str) -> None:
        self.found.problems.append(text)

    def note(self, text: str) -> None:
        self.found.notes.append(text)


def run_checks(
    cfg: PipelineConfig,
    work: str | os.PathLike,
    *,
    services: bool = True,
    extra_checks: Iterable[Callable[[Context], None]] = (),
) -> Findings:
    """Every check (see the module docstring), then `extra_checks` (the orchestrator's); `services=False` skips
    the MLflow check (tests, dry planning)."""
    found = Findings()
    try:
        plan = plan_run(cfg, work)
    except (
        OSError,
        ValueError,
    ) as err:  # a local source that cannot be read: the other checks go on without it
        found.problems.append(f"ingest.source: {err}")
        plan = plan_run(
            cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"source": "sample"})}),
            work,
        )
    ctx = Context(cfg, Path(work).absolute(), plan, found, shared=Path(work).is_absolute())
    checks: list[Callable[[Context], None]] = [
        check_corpus,
        check_task_data,
        check_settings,
        check_work_dir,
        check_disk,
    ]
    if services:
        checks.append(check_mlflow)
    checks += extra_checks
    for check in checks:
        try:
            check(ctx)
        except Exception as err:  # noqa: BLE001 - a check that cannot run is itself a problem to report
            ctx.problem(
                f"{check.__name__.removeprefix('check_')}: could not be checked ({type(err).__name__}: {err})"
            )
    describe_run(ctx)
    return found


# -- data ---------------------------------------------------------------------------------------------------------
def _offline() -> bool:
    """The hub libraries are switched to their cache (as on the cluster)."""
    return any(
        os.environ.get(v, "").lower() in ("1", "true", "yes")
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _hub_reachable(ctx: Context) -> bool:
    if ctx.hub_online is None:
        if _offline():
            ctx.hub_online = False
        else:
            try:
                httpx.head(HUB, timeout=5.0)
                ctx.hub_online = True
            except httpx.HTTPError:
                ctx.hub_online = False
    return ctx.hub_online


def _in_hub_cache(repo: str) -> bool:
    from huggingface_hub import constants

    folder = f"datasets--{repo.replace('/', '--')}"
    return any(
        (Path(root) / folder).is_dir()
        for root in {constants.HF_HUB_CACHE, os.environ.get("HF_DATASETS_CACHE", "")}
        if root
    )


def check_hub_dataset(
    ctx: Context, what: str, repo: str, revision: str | None, override: str, layout: str = ""
) -> None:
    """A hub dataset the run reads: its revision found on the hub, or, offline, in the local cache; else a problem
    naming the override that gives a local copy instead (e.g. `ingest.source=DIR`) and the copy's `layout`."""
    if revision is None:
        ctx.note(
            f"{what}: hf:{repo} has no pinned @revision: a re-run cannot tell if the hub copy changed"
        )
    if _hub_reachable(ctx):
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError

        try:
            HfApi().dataset_info(repo, revision=revision, timeout=10)
        except HfHubHTTPError as err:
            ctx.problem(
                f"{what}: hf:{repo}{'@' + revision if revision else ''} not found on the hub ({err})"
            )
    elif not _in_hub_cache(repo):
        ctx.problem(
            f"{what}: hf:{repo} is not in the local Hugging Face cache and the hub is unreachable; give a "
            f"local copy with the override `{override}`{layout} (`--set`, or the flow's overrides) or fill "
            "the cache where there is network (scripts/fill_hub_cache.py)"
        )


def _check_cached_splits(ctx: Context, task: str, where: str) -> None:
    """Offline, a task's cache folder can hold another revision or config than the run's: each split it reads
    must load from the cache."""
    for split in needed_splits(tasks.get(task)):
        try:
            tasks.peek(task, where, split)
        except Exception as err:  # noqa: BLE001 - what the hub libraries raise offline varies by version
            ctx.problem(
                f"finetune {task}/{split}: {where} does not load from the local Hugging Face cache "
                f"({one_line(err)}); fill it where there is network (scripts/fill_hub_cache.py)"
            )
            return


def check_corpus(ctx: Context) -> None:
    source = ctx.cfg.ingest.source
    if source == "sample":
        return
    if source.startswith("hf:"):
        spec = source.removeprefix("hf:")
        ident, _, rest = spec.partition("@")
        revision = rest.partition(":")[0] or None if rest else None
        ident = ident.partition(":")[0]
        if Path(ident).expanduser().is_dir():
            return
        if ident.startswith((".", "/", "~")):
            ctx.problem(f"ingest.source: {source}: no such folder {ident}")
            return
        check_hub_dataset(ctx, "ingest.source", ident, revision, "ingest.source=DIR")
    # local files were read when the plan was made (their content is the ingest key)


def needed_splits(spec: tasks.TaskSpec) -> list[str]:
    """The splits a fine-tune reads: train and the paper's evaluation split(s) (dev when the task has one)."""
    wanted = ["train", *spec.eval_splits, *(["dev"] if "dev" in spec.splits else [])]
    return list(dict.fromkeys(wanted))


def check_task_data(ctx: Context) -> None:
    for task, why in ctx.plan.missing_data().items():
        ctx.note(f"finetune {task}: not run ({why}; finetune.missing_data=skip)")
    for task in ctx.plan.tasks:
        spec = tasks.get(task)
        if ctx.plan.reads_samples(task):  # generated by the run itself, if the sample data has it
            if task not in SAMPLE_TASKS:
                ctx.problem(
                    f"finetune.data=sample: the sample data has no {task} (gpt1/sample_data/tasks.py writes "
                    f"{', '.join(SAMPLE_TASKS)}): give its files as finetune.task_data.{task}=PATH, or leave "
                    "it out of finetune.tasks"
                )
            continue
        where = ctx.plan.task_source(task)
        if where.startswith("hf:"):
            if spec.hf_manual:
                ctx.problem(
                    f"finetune.data=hf: {task} has no downloadable hub copy: {spec.hf_manual}"
                )
                continue
            repo, _config, revision = task_hub.parse_ref(where)
            if task in ctx.cfg.finetune.task_data:
                check_hub_dataset(
                    ctx, f"finetune {task}", repo, revision, f"finetune.task_data.{task}=DIR"
                )
            else:
                check_hub_dataset(
                    ctx,
                    f"finetune {task}",
                    repo,
                    revision,
                    "finetune.data=DIR",
                    f" (DIR/{spec.folder}/ holding its files)",
                )
            if _offline() and _in_hub_cache(repo):
                _check_cached_splits(ctx, task, where)
            continue
        for split in needed_splits(spec):
            try:
                tasks.peek(task, where, split)
            except (OSError, ValueError) as err:
                ctx.problem(f"finetune {task}/{split}: {err}")
                break


SAMPLE_TASKS = tuple(SIZES)  # the tasks the sample data holds


# -- settings, work dir, disk ---------------------------------------------------------------------------------------
def check_settings(ctx: Context) -> None:
    cfg, o = ctx.cfg, ctx.cfg.orchestration
    try:
        batch_layout(cfg.pretrain, o.pretrain_nproc * o.pretrain_nnodes)
    except ValueError as err:
        ctx.problem(f"pretrain: {err}")
    layers = cfg.finetune.transfer_layers
    if layers is not None and layers > cfg.model.n_layer:
        ctx.problem(
            f"finetune.transfer_layers={layers} but the model has model.n_layer={cfg.model.n_layer}"
        )
    if "transfer_layers" in o.ablations and o.ablation_transfer_layers > cfg.model.n_layer:
        ctx.problem(
            f"orchestration.ablation_transfer_layers={o.ablation_transfer_layers} > model.n_layer="
            f"{cfg.model.n_layer}"
        )
    assert ctx.plan.shards is not None  # the recipe plans the tokenized corpus in every run
    shards = ctx.plan.shards.path / "manifest.json"
    if shards.exists():
        from gpt1.data.tokenize import load_manifest

        n_ctx = load_manifest(shards.parent)["n_ctx"]
        if n_ctx != cfg.model.n_ctx:
            ctx.problem(
                f"the cached shards {shards.parent} hold n_ctx={n_ctx} blocks, model.n_ctx={cfg.model.n_ctx}"
            )
    if o.pretrain_launcher == "local" and o.pretrain_deployment is None:
        gpus = local_gpus()
        if gpus and o.pretrain_nproc > gpus:
            ctx.problem(
                f"orchestration.pretrain_nproc={o.pretrain_nproc} but this machine has {gpus} GPU(s)"
            )
        elif not gpus and o.pretrain_nproc > 1:
            ctx.note(
                f"pre-training runs {o.pretrain_nproc} processes on the CPU (gloo): no GPU on this machine"
            )


def local_gpus() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listed = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listed.splitlines())


def check_work_dir(ctx: Context) -> None:
    work = ctx.work
    try:
        work.mkdir(parents=True, exist_ok=True)
        probe = work / f".preflight-{uuid.uuid4().hex}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        ctx.problem(f"work dir {work} is not writable ({err.strerror or err})")
    o = ctx.cfg.orchestration
    if (o.fanout == "deployment" or o.pretrain_deployment) and not ctx.shared:
        ctx.problem(
            f"work dir {work}: give an absolute path on the shared volume when stages run in other pods "
            "(GPT1_WORK_DIR, the flow's work_dir)"
        )


def estimate_bytes(ctx: Context) -> tuple[int, list[str]]:
    """Bytes the run writes that are not there yet, and what they are (rough, generous)."""
    cfg, plan = ctx.cfg, ctx.plan
    vocab = cfg.train_tokenizer.merges + cfg.train_tokenizer.limit_alphabet * 2 + 4
    params = parameter_count(cfg.model.model_copy(update={"vocab_size": vocab}))
    parts: list[tuple[str, int]] = []
    assert plan.corpus is not None  # the recipe plans the ingested corpus in every run
    if not is_done(plan.corpus.path):
        text = size_on_disk(cfg.ingest.source)
        if text is None:
            text = 5 * GIB if cfg.ingest.source.startswith("hf:") else 10**8
        # Parquet text; ~2 bytes per token of ~4 characters
        parts += [
            ("corpus", text),
            ("shards", text),
        ]
    # fp32 weights + Adam moments per kept checkpoint, a model per curve point, final + HF export
    model = plan.model  # None: fine-tunes of a given checkpoint, no pre-training
    if model is not None and plan.writes(model) and not is_done(model.path):
        parts.append(
            (
                "checkpoints",
                params * 16 * cfg.pretrain.keep_last
                + params * 4 * len(cfg.pretrain.curve_steps)
                + params * 8,
            )
        )
    runs = sum(len(plan.variant_tasks(variant)) for variant in plan.variants)
    # the model folder and its MLflow copy
    parts.append(("fine-tuned models", params * 4 * 2 * runs))
    return sum(b for _, b in parts), [f"{name} ~{b / GIB:.1f} GiB" for name, b in parts]


def check_disk(ctx: Context) -> None:
    needed, parts = estimate_bytes(ctx)
    existing = next((p for p in (ctx.work, *ctx.work.parents) if p.exists()), Path("/"))
    free = shutil.disk_usage(existing).free
    line = f"disk: the run writes about {needed / GIB:.1f} GiB ({', '.join(parts)}); {free / GIB:.1f} GiB free"
    if needed > free:
        ctx.problem(line)
    else:
        ctx.found.plan.append(line)


# -- services ------------------------------------------------------------------------------------------------------
def check_mlflow(ctx: Context) -> None:
    """The tracking store answers, takes these credentials, lets this user write the experiment, and (a server that
    proxies artifacts) stores an artifact: each failure one line naming the server and the setting to fix."""
    from mlflow.tracking import MlflowClient

    from gpt1.redact import redact
    from gpt1.tracking.errors import classify
    from gpt1.tracking.logger import experiment_id, tag_experiment, tracking_uri

    try:
        uri = tracking_uri(ctx.cfg.tracking.tracking_uri)
    except ValueError as err:  # a store that can never work, named with its setting
        ctx.problem(one_line(err))
        return
    if uri.startswith("sqlite:///"):
        folder = Path(uri.removeprefix("sqlite:///")).parent
        if not os.access(folder if folder.exists() else folder.parent, os.W_OK):
            ctx.problem(f"MLflow store {uri}: {folder} is not writable")
        ctx.found.plan.append(
            f"tracking: {uri} (a local store: set MLFLOW_TRACKING_URI to a server to share runs)"
        )
        return
    if uri.startswith("http") and (down := unreachable(uri)):
        ctx.problem(
            f"MLflow server {redact(uri)} is not reachable ({redact(down)}): start it, or fix "
            "MLFLOW_TRACKING_URI (tracking.tracking_uri)"
        )
        return
    name = ctx.cfg.tracking.experiment
    try:
        client = MlflowClient(uri)
        experiment = experiment_id(client, name)
        # a write: credentials, permissions
        tag_experiment(client, experiment, "gpt1.preflight", ctx.cfg.preset)
        location = client.get_experiment(experiment).artifact_location
    except Exception as err:  # whatever the store raised: classified, named in one line
        ctx.problem(classify(err, uri).message)
        return
    if location.startswith("mlflow-artifacts:"):
        check_artifact_store(ctx, uri, location)
    ctx.found.plan.append(f"tracking: experiment {name!r} on {redact(uri)}")


def unreachable(uri: str) -> str | None:
    """Why the MLflow server at `uri` does not answer its health URL; None when it does."""
    try:
        httpx.get(f"{uri.rstrip('/')}/health", timeout=10.0).raise_for_status()
    except httpx.HTTPError as err:
        return str(err) or type(err).__name__
    return None


def check_artifact_store(ctx: Context, uri: str, location: str) -> None:
    """Store and delete a probe through the server's artifact proxy: its bucket exists and the server reaches it
    (MLflow's own /health answers 200 with the bucket gone or its S3 server down)."""
    import tempfile

    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    from gpt1.redact import redact

    # this run's server: an mlflow-artifacts: location resolves against the tracking URI given, else the process's
    repository = get_artifact_repository(
        f"{location.rstrip('/')}/gpt1-preflight/{uuid.uuid4().hex}", tracking_uri=uri
    )
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp, "probe.txt")
        probe.write_text("gpt1 preflight\n")
        try:
            repository.log_artifact(str(probe))
            repository.delete_artifacts()
        except Exception as err:  # the proxy answers 500 for any failure of the store behind it
            if unreachable(uri):
                ctx.problem(
                    f"MLflow server {redact(uri)} stopped answering while an artifact was stored: restart it"
                )
                return
            status = getattr(err, "get_http_status_code", lambda: None)()
            ctx.problem(
                f"MLflow server {redact(uri)} could not store an artifact "
                f"({f'HTTP {status}' if status else type(err).__name__}): the bucket "
                "of the server's MLFLOW_ARTIFACTS_DESTINATION must exist and be reachable with its S3 "
                "credentials (MLFLOW_S3_ENDPOINT_URL, AWS_ACCESS_KEY_ID); the server's log names the cause"
            )


# -- what the run will do ------------------------------------------------------------------------------------------
def describe_run(ctx: Context) -> None:
    """Each stage the run needs, in the recipe's order, with its folder and whether it is finished already; then
    the stages it does not need."""
    plan, cfg, o = ctx.plan, ctx.cfg, ctx.cfg.orchestration
    lines = [f"preset {cfg.preset}: work dir {ctx.work} (on {socket.gethostname()})"]
    planned = list(dict.fromkeys(step.stage for step in plan.steps.values()))
    for stage in [*planned, *(name for name in stage_jobs() if name not in planned)]:
        steps = [step for step in plan.steps.values() if step.stage == stage]
        if not steps:
            lines.append(f"  {stage:<16} not needed by this run")
        elif len(steps) == 1:
            state = "finished (reused)" if is_done(steps[0].out) else "to run"
            lines.append(f"  {stage:<16} {state:<18} {steps[0].out}")
        else:
            done = sum(is_done(step.out) for step in steps)
            lines.append(f"  {stage:<16} {len(steps)} jobs, {done} finished (reused)")
    where = (
        f"deployment {o.pretrain_deployment}"
        if o.pretrain_deployment
        else f"Slurm, {o.pretrain_nnodes} node(s)"
        if o.pretrain_launcher == "slurm"
        else "this worker"
    )
    lines.append(
        f"  pre-training: {o.pretrain_nproc} process(es) per node on {where}; {cfg.model.n_layer} layers x "
        f"{cfg.model.n_embd}, ctx {cfg.model.n_ctx}, {cfg.train_tokenizer.merges:,} merges"
    )
    fan = (
        f"one flow run each of {o.finetune_deployment}"
        if o.fanout == "deployment"
        else f"{o.finetune_concurrency} at a time on this worker"
    )
    variants = [v for v in plan.variants if curve_step(v) is None]
    lines.append(
        f"  fine-tunes: {len(plan.tasks)} task(s) x {len(variants)} variant(s) ({', '.join(variants)}), {fan}"
    )
    curve = [v for v in plan.variants if curve_step(v) is not None]
    if curve:
        lines.append(
            f"  the curve: {', '.join(plan.variant_tasks(curve[0]))} fine-tuned from the model at update "
            f"{', '.join(str(curve_step(v)) for v in curve)} of pre-training"
        )
    ctx.found.plan[:0] = lines
