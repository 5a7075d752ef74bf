"""Reliability of the Prefect orchestration (issue #6): the `gpt1` flow end to end on a tiny config.

1. Content caching: a re-run recomputes nothing; a fine-tune setting redoes fine-tuning only (both variants); a
   stage directory deleted by hand is rebuilt (the `.done` marker on disk decides, never a stale Prefect cache
   entry). The no-pre-training ablation's key ignores pre-training settings, and its fine-tunes start while
   pre-training runs, at most N-1 beside it (N = orchestration.finetune_concurrency).
2. One fine-tune task failing on a corrupted input file: the others finish, are logged and reported; the flow run
   and its MLflow parent run end Failed, naming the task. (The fine-tunes run in reused worker processes; the
   workers themselves are tested in test_stage_processes.py.)
3. SIGKILL of the whole flow process group mid pre-training (a real `prefect server`), then a re-run: finished
   stages are not redone, pre-training resumes from its last complete checkpoint, the final weights are sound.
4. The MLflow server going down while pre-training logs, and coming back later: the flow completes and MLflow
   ends up with every metric, including the ones logged during the outage.

Flows run in this process under `prefect_test_harness` (Prefect results in a temp dir) with MLflow in temp SQLite
stores, except where a test must kill the flow (subprocess) or the tracking server (a real `mlflow server`). The
kill and the outage are driven by polling the stages' files, never by guessed sleeps. All flows share one work
dir, so the deterministic early stages (sample data .. shards) run once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpt1 import recipe
from gpt1.recipe import experiment as P
from gpt1.config import PretrainConfig, load_config
from gpt1.runtime.processes import free_port
from gpt1.io import read_json, sha256_file, sha256_tree
from gpt1.stages.outputs import DONE, is_done
from tests.conftest import REPO, overriding

BIN = Path(sys.executable).parent
EXPERIMENT = load_config("smoke").tracking.experiment
UPSTREAM = ("sample-data", "ingest", "train-tokenizer", "tokenize", "pretrain")
TASKS = ["sst2", "stsb"]  # a classification and a regression task: one round of the fan-out (concurrency 2)
TINY = [
    "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=128", "model.n_ctx=32",
    "train_tokenizer.merges=200",
    "pretrain.max_steps=30", "pretrain.warmup_steps=5", "pretrain.log_every=5", "pretrain.save_every=10",
    "pretrain.eval_every=10", "pretrain.eval_batches=2", "pretrain.probe_every=1000",  # probes once, at the end
    "finetune.epochs=1", "finetune.batch_size=16", "finetune.max_train_examples=32", "finetune.max_eval_examples=32",
    f"finetune.tasks=[{','.join(TASKS)}]",
    "orchestration.ablations=[]", "orchestration.retries={}",  # no retries: a flaky stage must show, not heal
]
if "probe_max_examples" in PretrainConfig.model_fields:
    TINY.append("pretrain.probe_max_examples=16")
FLOW_TIMEOUT = 900
BASE = ["orchestration.ablations=[no_pretrain]"]  # the shared run: fine-tunes from scratch beside pre-training


# -- helpers --------------------------------------------------------------------------------------------------
def overrides(uri: str, extra: list[str] = ()) -> list[str]:
    """TINY on this store, with `extra` in place of what it sets of the same keys."""
    return overriding([*TINY, f"tracking.tracking_uri={uri}"], extra)


def plan_for(work: Path, extra: list[str] = ()) -> P.Experiment:
    return recipe.plan(load_config("smoke", overriding(TINY, extra)), work)


def run_flow(work: Path, uri: str, extra: list[str] = ()):
    """The `gpt1` flow in this process; returns its final Prefect state (never raises)."""
    from flows.pipeline import gpt1_pipeline

    return gpt1_pipeline(preset="smoke", overrides=overrides(uri, extra), work_dir=str(work), return_state=True)


def task_run_spans(flow_run_id) -> dict[str, tuple]:
    """A flow run's task runs by name: (start, end) as Prefect recorded them."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {run.name: (run.start_time, run.end_time) for run in runs}


def done_markers(work: Path) -> dict[str, float]:
    """Every finished stage (and fine-tune task) directory under `work` -> its `.done` `finished` time."""
    return {p.parent.relative_to(work).as_posix(): read_json(p)["finished"] for p in work.rglob(DONE)}


def mlflow_store(root: Path) -> str:
    """A fresh SQLite tracking store whose experiment keeps its artifacts under `root` (not ./mlruns)."""
    from mlflow.tracking import MlflowClient

    root.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    MlflowClient(uri).create_experiment(EXPERIMENT, artifact_location=(root / "artifacts").as_uri())
    return uri


def mlflow_runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id], max_results=1000)


def parent_run(runs: list, flow_run_id) -> object:
    found = [r for r in runs if r.data.tags.get("prefect.flow_run_id") == str(flow_run_id)]
    assert len(found) == 1, f"expected one MLflow parent run for flow run {flow_run_id}, found {len(found)}"
    return found[0]


def child_runs(runs: list, parent) -> dict[str, object]:
    return {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}


def loss_steps(out: Path, strict: bool = False) -> list[int]:
    """Updates recorded in a pretrain stage's metrics.jsonl (a line being written right now is skipped)."""
    path = out / "metrics.jsonl"
    steps = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if strict:
                raise
            continue
        if "loss" in record:
            steps.append(record["step"])
    return steps


def complete_checkpoints(out: Path) -> list[int]:
    from gpt1.pretrain.checkpoint import COMPLETE

    return sorted(int(p.parent.name.split("-")[1]) for p in (out / "checkpoints").glob(f"step-*/{COMPLETE}"))


def wait_for(condition, what: str, timeout: float, alive=lambda: True, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if not alive():
            raise AssertionError(f"gave up waiting for {what}: the run ended first\n{tail(log)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{tail(log)}")
        time.sleep(0.05)


def tail(path: Path | None, n: int = 6000) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-n:] if path and path.exists() else ""


def processes_with(*needles: str) -> list[int]:
    """Live processes whose command line contains every needle (a run's unique temp paths: only our own)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
        except OSError:
            continue
        if cmdline and all(n in cmdline for n in needles):
            pids.append(int(entry.name))
    return pids


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Stop a process started with start_new_session=True and everything in its process group."""
    for signum in (sig, signal.SIGKILL):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group whose leader already exited
    except ProcessLookupError:
        pass
    proc.wait()


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    def up() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    wait_for(up, url, timeout, alive=lambda: proc.poll() is None, log=log)


def service_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **extra}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


# -- fixtures -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stage_env():
    """Stage subprocesses: one thread each (tiny models on 2 cores); no tracking URI leaking in from outside."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        mp.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        yield


@pytest.fixture(scope="module")
def harness(stage_env, tmp_path_factory):
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with temporary_settings({PREFECT_LOCAL_STORAGE_PATH: tmp_path_factory.mktemp("prefect-results")}):
        with prefect_test_harness(server_startup_timeout=120):
            yield


@pytest.fixture(scope="module")
def base(harness, tmp_path_factory):
    """One complete run of the flow; its work dir is shared by every test (each adds its own keys)."""
    root = tmp_path_factory.mktemp("flows").resolve()
    uri = mlflow_store(root / "mlflow")
    state = run_flow(root / "work", uri, BASE)
    assert state.is_completed(), state.message
    return SimpleNamespace(work=root / "work", uri=uri, plan=plan_for(root / "work", BASE), state=state)


@pytest.fixture(scope="module")
def prefect_server(stage_env, tmp_path_factory):
    """A real Prefect server (SQLite) on a free loopback port, state in a temp PREFECT_HOME."""
    home, port = tmp_path_factory.mktemp("prefect-home"), free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = service_env(PREFECT_HOME=str(home), PREFECT_API_URL=url)
    log = home / "server.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                                env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        wait_http(f"{url}/health", proc, log)
        yield SimpleNamespace(url=url, env=env)
    finally:
        stop_group(proc)


class MlflowServer:
    """`mlflow server` as scripts/services.sh runs it, stoppable and restartable on the same port and stores."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = self.root / f"server-{self.starts}.log"
        with open(log, "w") as fh:
            self.proc = subprocess.Popen(
                [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                 "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
                 "--artifacts-destination", str(self.root / "artifacts")],
                env=service_env(), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        wait_http(f"{self.url}/health", self.proc, log)

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
            self.proc = None


# -- 1. caching by content --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_rerun_recomputes_nothing_and_a_finetune_change_redoes_only_finetuning(base):
    work, plan = base.work, base.plan
    done = done_markers(work)
    assert {plan.dir(s).relative_to(work).as_posix() for s in UPSTREAM} <= set(done)
    assert {plan.task_dir(t, v).relative_to(work).as_posix() for t in TASKS for v in plan.variants} <= set(done)
    metrics = {t: (plan.task_dir(t) / "metrics.json").read_bytes() for t in TASKS}

    state = run_flow(work, base.uri, BASE)
    assert state.is_completed(), state.message
    assert done_markers(work) == done, "a re-run with the same parameters recomputed a stage"
    assert {t: (plan.task_dir(t) / "metrics.json").read_bytes() for t in TASKS} == metrics
    # served from cache, yet the run still shows every stage and task in MLflow, marked as cached
    runs = mlflow_runs(base.uri)
    stages = child_runs(runs, parent_run(runs, state.state_details.flow_run_id))
    cached = [*UPSTREAM, *(f"finetune-{v}-{t}" for v in plan.variants for t in TASKS)]
    assert {s: stages[s].data.tags.get("gpt1.cached") for s in cached} == dict.fromkeys(cached, "true")

    changed = [*BASE, "finetune.lr=1e-3"]
    new_plan = plan_for(work, changed)
    assert {s: new_plan.dir(s) for s in UPSTREAM} == {s: plan.dir(s) for s in UPSTREAM}
    assert all(new_plan.variant_dir(v) != plan.variant_dir(v) for v in plan.variants)
    started = time.time()
    state = run_flow(work, base.uri, changed)
    assert state.is_completed(), state.message
    after = done_markers(work)
    assert {k: after[k] for k in done} == done, "changing a fine-tune setting recomputed finished work"
    new = {new_plan.task_dir(t, v).relative_to(work).as_posix() for t in TASKS for v in plan.variants}
    new.add(new_plan.report_dir().relative_to(work).as_posix())
    assert set(after) - set(done) == new, "only the fine-tunes (and their report) are new"
    for task in TASKS:
        assert read_json(new_plan.task_dir(task) / "metrics.json")["finetune_config"]["lr"] == 1e-3
        assert (plan.task_dir(task) / "metrics.json").read_bytes() == metrics[task]  # the old results stay
    report = Path(state.result())
    assert report == new_plan.report_dir() != plan.report_dir()
    assert (report / "results.json").stat().st_mtime >= started
    assert set(read_json(report / "results.json")["runs"]["full"]["tasks"]) == set(TASKS)


@pytest.mark.slow
def test_a_deleted_stage_directory_is_rebuilt_not_taken_from_prefects_cache(base):
    sample = base.plan.dir("sample-data")
    digests = {name: sha256_tree(sample / name) for name in ("books", "tasks")}
    others = {k: v for k, v in done_markers(base.work).items() if not k.startswith("sample-data/")}
    shutil.rmtree(sample)

    state = run_flow(base.work, base.uri, BASE)
    assert state.is_completed(), state.message
    assert is_done(sample), "the deleted stage was not rebuilt (a stale cached result was returned)"
    assert {name: sha256_tree(sample / name) for name in digests} == digests  # deterministic: same bytes again
    after = done_markers(base.work)
    assert {k: after[k] for k in others} == others, "rebuilding one stage recomputed others"


def test_no_pretrain_key_hashes_model_tokenizer_and_finetuning_not_pretraining(tmp_path):
    """The ablation fine-tunes a random init: pre-training settings must not re-run it, its own inputs must."""
    def keys(*change: str) -> tuple[str, str]:
        plan = plan_for(tmp_path, [*BASE, *change])
        return plan.finetune_job("no_pretrain", "sst2").key(), plan.finetune_job("full", "sst2").key()

    (tmp_path / "tasks" / "SST-2").mkdir(parents=True)
    (tmp_path / "tasks" / "SST-2" / "train.tsv").write_text("sentence\tlabel\n")
    scratch, full = keys()
    for change in ("pretrain.lr=5e-4", "pretrain.max_steps=31", "tokenize.shard_rows=128"):
        assert keys(change)[0] == scratch, f"{change} re-runs the no-pre-training fine-tunes"
        assert keys(change)[1] != full, f"{change} does not re-run the fine-tunes from the pre-trained model"
    for change in ("model.n_layer=2", "model.n_ctx=64", "train_tokenizer.merges=300", "finetune.lr=1e-3",
                   "finetune.epochs=2", f"finetune.data={tmp_path / 'tasks'}"):
        assert keys(change)[0] != scratch, f"{change} does not re-run the no-pre-training fine-tunes"
    # Only what a task reads keys it: its own data (here another task's folder changes nothing) and settings.
    assert keys("finetune.tasks=[sst2]") == (scratch, full)
    # The "gpt1/ablation-no-pretrain" deployment: its full run is from scratch, hence as independent.
    assert plan_for(tmp_path, ["finetune.from_scratch=true"]).from_random_init("full")
    # From a given checkpoint (gpt1-finetune-all), the architecture is that checkpoint's: every variant hashes it.
    for name in ("checkpoint", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "weights").write_text(name)
    cfg = load_config("smoke", overriding(TINY, BASE))
    given = recipe.plan(cfg, tmp_path, checkpoint=tmp_path / "checkpoint")
    assert not given.from_random_init("no_pretrain")
    assert given.variant_dir("no_pretrain") != plan_for(tmp_path, BASE).variant_dir("no_pretrain")
    assert given.variant_dir("no_pretrain") != recipe.plan(
        cfg, tmp_path, checkpoint=tmp_path / "other").variant_dir("no_pretrain")


def test_the_fan_out_submits_the_likely_longest_fine_tunes_first(tmp_path):
    """Fewer slots than tasks: the one long task must not start last. Bytes of local files x answers per example;
    a task on the hub (no local size) keeps its configured place after them; a skipped task is not ordered."""
    data = tmp_path / "glue"
    for folder, size in {"CoLA": 1000, "SST-2": 3000, "RTE": 2000, "RACE/train/high": 900}.items():
        (data / folder).mkdir(parents=True)
        (data / folder / "train.tsv").write_bytes(b"x" * size)
    tasks = "finetune.tasks=[cola,qqp,sst2,rte,race,mrpc]"
    plan = plan_for(tmp_path, [f"finetune.data={data}", tasks, "finetune.missing_data=skip",
                               "finetune.task_data={qqp: 'hf:glue/qqp'}"])
    assert plan.tasks == ["cola", "qqp", "sst2", "rte", "race"]  # MRPC has no folder: skipped
    assert plan.tasks_heaviest_first() == ["race", "sst2", "rte", "cola", "qqp"]  # RACE: 900 bytes x 4 answers


@pytest.mark.slow
def test_no_pretrain_finetunes_run_beside_pretraining_in_its_free_slots(base):
    from gpt1.model.transformer import CONFIG_NAME, load_model_config
    from gpt1.tokenizer.bpe import load as load_tokenizer

    plan = base.plan
    info = lambda path: read_json(path / DONE)  # noqa: E731
    span = lambda i: (i["finished"] - i["seconds"], i["finished"])  # noqa: E731
    pretrain = span(info(plan.dir("pretrain")))
    scratch = {t: span(info(plan.task_dir(t, "no_pretrain"))) for t in TASKS}
    full = {t: span(info(plan.task_dir(t))) for t in TASKS}
    # Started beside pre-training: a fine-tune's task run begins once it holds a slot (its worker's start-up and
    # its compute may still come after a short pre-training on a busy machine).
    runs = task_run_spans(base.state.state_details.flow_run_id)
    pretrain_run = next(span for name, span in runs.items() if name.startswith("pretrain"))
    first = min(span[0] for name, span in runs.items() if name.startswith("finetune-no_pretrain-"))
    assert first < pretrain_run[1], runs
    assert all(start >= pretrain[1] for start, _ in full.values()), (pretrain, full)
    # Pre-training holds one of the 2 slots: the fine-tunes beside it never overlap one another.
    beside = sorted((max(s, pretrain[0]), min(e, pretrain[1])) for s, e in [*scratch.values(), *full.values()]
                    if s < pretrain[1] and e > pretrain[0])
    assert all(a[1] <= b[0] for a, b in zip(beside, beside[1:])), (pretrain, beside)

    init = plan.start("no_pretrain").path
    assert sorted(p.name for p in init.iterdir()) == [DONE, CONFIG_NAME]
    vocab = load_tokenizer(plan.dir("train-tokenizer")).vocab_size
    assert load_model_config(init / CONFIG_NAME) == plan.cfg.model.model_copy(update={"vocab_size": vocab})
    for task in TASKS:
        metrics = read_json(plan.task_dir(task, "no_pretrain") / "metrics.json")
        assert metrics["checkpoint"] == str(init) and metrics["ablation"] == "no_pretrain"
        assert metrics["model_config"] == read_json(plan.dir("pretrain") / "final" / CONFIG_NAME)


@pytest.mark.slow
def test_pretraining_gets_a_slot_as_soon_as_its_shards_are_written(base):
    """The from-scratch fine-tunes are ready (tokenizer) before pre-training (shards): they take one slot, not both."""
    spans = task_run_spans(base.state.state_details.flow_run_id)
    [pretrain] = [span for name, span in spans.items() if name.startswith("pretrain")]
    scratch = [span for name, span in spans.items() if name.startswith("finetune-no_pretrain-")]
    events = sorted([(s, 1) for s, _ in scratch if s < pretrain[0]] + [(e, -1) for s, e in scratch if s < pretrain[0]
                                                                      and e <= pretrain[0]])
    running = [sum(step for _, step in events[:i + 1]) for i in range(len(events))]
    assert max(running, default=0) <= 1, (pretrain, scratch)


def test_a_fine_tunes_task_run_is_running_only_while_it_holds_a_slot(base):
    """Fine-tunes are submitted as they get one of the 2 slots (pre-training holds one while it runs): no more
    task runs are Running at once than there are slots, so a fine-tune's time in the Prefect UI is its work,
    not its wait."""
    spans = task_run_spans(base.state.state_details.flow_run_id)
    finetunes = [span for name, span in spans.items() if name.startswith("finetune-")]
    pretrain = [span for name, span in spans.items() if name.startswith("pretrain")]
    assert len(finetunes) == 2 * len(TASKS) and len(pretrain) == 1, sorted(spans)
    events = sorted([(start, 1) for start, _ in finetunes + pretrain] + [(end, -1) for _, end in finetunes + pretrain])
    running = [sum(change for _, change in events[:i + 1]) for i in range(len(events))]
    assert max(running) == 2, (spans, running)  # an end sorts before a start at the same instant


@pytest.mark.slow
def test_the_no_pretrain_deployment_runs_no_pretraining(base):
    """`gpt1/ablation-no-pretrain` (variant no_pretrain): every variant fine-tunes a random init, so the flow runs
    no pre-training at all, not even for a pre-training key nobody has computed."""
    from flows.pipeline import gpt1_pipeline

    extra = [*BASE, "pretrain.max_steps=31"]
    plan = recipe.plan(P.variant_config(load_config("smoke", overriding(TINY, extra)), "no_pretrain"), base.work)
    assert not plan.dir("pretrain").exists()
    state = gpt1_pipeline(preset="smoke", overrides=overrides(base.uri, extra), variant="no_pretrain",
                          work_dir=str(base.work), return_state=True)
    assert state.is_completed(), state.message
    assert not plan.dir("pretrain").exists()
    names = task_run_spans(state.state_details.flow_run_id)
    assert not [n for n in names if n.startswith("pretrain")], names
    assert all(is_done(plan.task_dir(t, v)) for t in TASKS for v in plan.variants), plan.variants


def test_the_cli_keys_a_stage_as_the_plan_does(base):
    """One content key everywhere: a stage run by hand on the plan's folders computes the key the plan named
    them by, and finds them finished (no re-run)."""
    from gpt1.cli import main

    plan = base.plan
    sample, corpus, tok = plan.dir("sample-data"), plan.dir("ingest"), plan.dir("train-tokenizer")
    cfg = plan.cfg
    cli_jobs = {
        "ingest": ["ingest", "--source", str(sample / "books"), "--out", str(corpus), "--val-fraction",
                   str(cfg.ingest.val_fraction)],
        "train-tokenizer": ["train-tokenizer", "--corpus", str(corpus), "--out", str(tok), "--merges",
                      str(cfg.train_tokenizer.merges)],
        "tokenize": ["tokenize", "--corpus", str(corpus), "--tokenizer", str(tok), "--out", str(plan.dir("tokenize")),
                   "--ctx", str(cfg.model.n_ctx), "--shard-rows", str(cfg.tokenize.shard_rows)],
    }
    before = done_markers(base.work)
    for stage, argv in cli_jobs.items():
        assert main([*argv, "--expect-key", plan.ref(stage).key]) == 0, stage
    assert done_markers(base.work) == before, "a stage run by hand re-ran work the pipeline had finished"
    job = plan.finetune_job("full", "sst2")
    argv = ["finetune", "--task", "sst2", "--data", job.data, "--checkpoint", str(job.checkpoint.path),
            "--tokenizer", str(job.tokenizer.path), "--out", str(plan.task_dir("sst2")), "--preset", "smoke",
            *(f"--set={o}" for o in overriding(TINY, BASE)), "--expect-key", job.key()]
    assert main(argv) == 0 and done_markers(base.work) == before


# -- 2. one fine-tune task failing ------------------------------------------------------------------------------
@pytest.mark.slow
def test_one_failing_finetune_fails_the_flow_after_the_others_are_logged_and_reported(base, tmp_path):
    from mlflow.artifacts import download_artifacts

    data = tmp_path / "tasks"
    shutil.copytree(base.plan.dir("sample-data") / "tasks", data)
    bad = data / "RTE" / "train.tsv"
    header, *rows = bad.read_text(encoding="utf-8").splitlines()
    bad.write_text("\n".join([header] + [row.rsplit("\t", 1)[0] + "\tmaybe" for row in rows]) + "\n",
                   encoding="utf-8")  # every label unknown: the loader refuses the file
    extra = [f"finetune.data={data}", "finetune.tasks=[sst2,rte,stsb]"]
    uri = mlflow_store(tmp_path / "mlflow")

    state = run_flow(base.work, uri, extra)
    assert state.is_failed(), state
    assert "finetune-full-rte" in state.message
    assert "finetune-full-sst2" not in state.message and "finetune-full-stsb" not in state.message

    plan = plan_for(base.work, extra)
    for task in ("sst2", "stsb"):
        assert (plan.task_dir(task) / "metrics.json").exists(), f"{task} did not finish beside the failing task"
    assert not (plan.task_dir("rte") / "metrics.json").exists()
    error = read_json(plan.task_dir("rte") / "error.json")["error"]
    assert "train.tsv" in error, error  # the reason names the bad file

    results = read_json(plan.report_dir() / "results.json")["runs"]["full"]
    assert set(results["tasks"]) == {"sst2", "stsb"} and set(results["errors"]) == {"rte"}
    assert "failed" in (plan.report_dir() / "results.md").read_text(encoding="utf-8")

    runs = mlflow_runs(uri)
    parent = parent_run(runs, state.state_details.flow_run_id)
    assert parent.info.status == "FAILED"
    assert parent.data.tags["gpt1.failed_steps"] == "finetune-full-rte"
    failures = json.loads(Path(download_artifacts(run_id=parent.info.run_id, artifact_path="failures.json",
                                                  tracking_uri=uri, dst_path=str(tmp_path / "dl"))).read_text())
    assert set(failures) == {"finetune-full-rte"}
    assert "train.tsv" in failures["finetune-full-rte"], failures  # the cause itself, not only an exit code
    assert {"task/sst2/accuracy", "task/stsb/pearson"} <= set(parent.data.metrics)  # the report reached the parent
    children = child_runs(runs, parent)
    for task in ("sst2", "stsb"):
        child = children[f"finetune-full-{task}"]
        assert child.info.status == "FINISHED"
        assert any(k.startswith(f"task/{task}/") for k in child.data.metrics), f"{task} logged no metrics"
    assert "finetune-full-rte" not in children or children["finetune-full-rte"].info.status == "FAILED"


# -- 3. SIGKILL mid pre-training, then resume ---------------------------------------------------------------------
FLOW_SCRIPT = (
    "import json, sys\n"
    "from flows.pipeline import gpt1_pipeline\n"
    "print('REPORT', gpt1_pipeline(preset='smoke', overrides=json.loads(sys.argv[1]), work_dir=sys.argv[2]))\n"
)
RESUME = ["pretrain.max_steps=300", "pretrain.save_every=20", "pretrain.log_every=20", "pretrain.eval_every=150",
          "finetune.tasks=[sst2]"]


def start_flow(server, work: Path, uri: str, log: Path) -> subprocess.Popen:
    with open(log, "w") as fh:
        return subprocess.Popen([sys.executable, "-c", FLOW_SCRIPT, json.dumps(overrides(uri, RESUME)), str(work)],
                                cwd=REPO, env=server.env, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.slow
def test_killed_flow_resumes_pretraining_from_its_last_checkpoint(base, prefect_server, tmp_path):
    from safetensors import safe_open

    from gpt1.data.tokenize import BlockReader
    from gpt1.model.transformer import GPT1

    work, plan = base.work, plan_for(base.work, RESUME)
    out = plan.dir("pretrain")
    uri = mlflow_store(tmp_path / "mlflow")
    total = plan.cfg.pretrain.max_steps

    first = start_flow(prefect_server, work, uri, tmp_path / "first.log")
    try:
        wait_for(lambda: complete_checkpoints(out), "the first complete checkpoint", FLOW_TIMEOUT,
                 alive=lambda: first.poll() is None, log=tmp_path / "first.log")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the flow process and everything in its process group
        first.wait()
    # pre-training's worker has a session of its own: seeing its launcher gone it stops as on SIGTERM, after a
    # checkpoint at its next logging boundary
    deadline = time.monotonic() + 60
    while (survivors := processes_with(str(out))) and time.monotonic() < deadline:
        time.sleep(0.2)
    kill_pids(survivors)
    assert not survivors, "stage processes outlived the killed flow run (they left its process group)"

    assert not is_done(out), "pre-training finished before the kill: make the run longer"
    done = done_markers(work)
    resume_at = complete_checkpoints(out)[-1]
    assert 0 < resume_at < total

    second = start_flow(prefect_server, work, uri, tmp_path / "second.log")
    try:
        code = second.wait(FLOW_TIMEOUT)
    finally:
        stop_group(second, signal.SIGKILL)
    log = tail(tmp_path / "second.log", 10**7)
    assert code == 0, log[-6000:]

    after = done_markers(work)
    assert {k: after[k] for k in done} == done, "stages finished before the kill were recomputed"
    assert is_done(out)
    resumed = re.findall(r"resumed from \S*step-(\d+) \(update (\d+) of (\d+)\)", log)
    assert resumed == [(f"{resume_at:08d}", str(resume_at), str(total))], resumed
    steps = loss_steps(out, strict=True)
    assert sorted(set(steps)) == list(range(1, total + 1))
    assert all(steps.count(s) == 1 for s in range(1, resume_at + 1)), "updates before the checkpoint were redone"

    final = out / "final"
    GPT1.from_pretrained(final)  # loadable
    with safe_open(final / "gpt1.safetensors", "pt") as now, \
            safe_open(base.plan.dir("pretrain") / "final" / "gpt1.safetensors", "pt") as reference:
        assert set(now.keys()) == set(reference.keys())
    training = read_json(final / "training.json")
    assert training["steps"] == total and training["weights_sha256"] == sha256_file(final / "gpt1.safetensors")
    BlockReader(plan.dir("tokenize"), "train", verify_checksums=True)  # every shard still matches its manifest

    runs = mlflow_runs(uri)
    pretrain = [r for r in runs if r.info.run_name == "pretrain"]
    assert len(pretrain) == 1, "the resumed pre-training did not continue its MLflow run"
    assert pretrain[0].info.status == "FINISHED"
    assert pretrain[0].data.tags.get("resumed_at_step") == str(resume_at)
    from mlflow.tracking import MlflowClient

    logged = {m.step for m in MlflowClient(uri).get_metric_history(pretrain[0].info.run_id, "loss")}
    assert min(logged) <= resume_at < max(logged) == total

    import httpx

    flow_runs = httpx.post(f"{prefect_server.url}/flow_runs/filter", json={}).json()
    assert len(flow_runs) == 2 and sum(r["state_type"] == "COMPLETED" for r in flow_runs) == 1, \
        [(r["name"], r["state_type"]) for r in flow_runs]


# -- 4. MLflow server down during the run -----------------------------------------------------------------------
OUTAGE = ["pretrain.max_steps=80", "pretrain.log_every=5", "pretrain.save_every=40", "pretrain.eval_every=40",
          "finetune.tasks=[sst2,stsb]"]


@pytest.mark.slow
def test_mlflow_outage_during_pretraining_loses_no_metrics(base, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("GPT1_MLFLOW_FLUSH_TIMEOUT", "600")  # far longer than the outage: end() waits it out
    plan = plan_for(base.work, OUTAGE)
    out, log_every, total = plan.dir("pretrain"), plan.cfg.pretrain.log_every, plan.cfg.pretrain.max_steps
    server = MlflowServer(tmp_path / "mlflow")
    server.start()
    flow_done, outage, errors = threading.Event(), {}, []

    def drive() -> None:
        """Pre-training has logged its first update -> pause it, stop the server, let it go on; restart the
        server once at least two more logging windows were written during the outage (or training ended)."""
        try:
            alive = lambda: not flow_done.is_set()  # noqa: E731
            wait_for(lambda: loss_steps(out), "pre-training to start", FLOW_TIMEOUT, alive=alive)
            workers = processes_with("gpt1.pretrain", str(out))
            assert len(workers) == 1, workers
            os.kill(workers[0], signal.SIGSTOP)  # so the outage surely starts before training can end
            try:
                server.stop()
                outage["down"] = max(loss_steps(out))
            finally:
                os.kill(workers[0], signal.SIGCONT)
            wait_for(lambda: max(loss_steps(out)) >= min(outage["down"] + 2 * log_every, total),
                     "pre-training to log during the outage", FLOW_TIMEOUT, alive=alive)
            outage["up"] = max(loss_steps(out))
            server.start()
        except BaseException as err:  # reported by the test below, after the flow returns
            errors.append(err)

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    try:
        state = run_flow(base.work, server.url, OUTAGE)
    finally:
        flow_done.set()
        driver.join(300)
    try:
        assert not errors, errors
        assert state.is_completed(), state.message
        assert outage["down"] < outage["up"], outage

        runs = mlflow_runs(server.url)
        parent = parent_run(runs, state.state_details.flow_run_id)
        assert parent.info.status == "FINISHED"
        assert {"task/sst2/accuracy", "task/stsb/pearson"} <= set(parent.data.metrics)
        children = child_runs(runs, parent)  # (stages Prefect serves from its cache log no child run)
        assert {"pretrain", "finetune-full-sst2", "finetune-full-stsb"} <= set(children), sorted(children)
        pretrain = children["pretrain"]
        assert pretrain.info.status == "FINISHED"
        logged = sorted({m.step for m in MlflowClient(server.url).get_metric_history(pretrain.info.run_id, "loss")})
        assert logged == list(range(log_every, total + 1, log_every)), "logged loss windows were lost"
        assert any(outage["down"] < s <= outage["up"] for s in logged), (outage, logged)
        assert {"val_loss", "tokens_per_s"} <= set(pretrain.data.metrics)
        for task in ("sst2", "stsb"):
            child = children[f"finetune-full-{task}"]
            assert child.info.status == "FINISHED"
            assert any(k.startswith(f"task/{task}/") for k in child.data.metrics), f"{task} logged no metrics"
    finally:
        server.stop()


def test_run_logger_end_waits_for_the_server_then_spools_what_never_arrived(tmp_path, monkeypatch):
    """The library side of 4: `end()` retries for GPT1_MLFLOW_FLUSH_TIMEOUT seconds, delivers everything in order
    if the server returns meanwhile, else writes the undelivered calls to the spool directory."""
    from mlflow.tracking import MlflowClient

    from gpt1.tracking.logger import RunLogger

    monkeypatch.setenv("GPT1_MLFLOW_FLUSH_TIMEOUT", "1.5")
    gone = RunLogger("offline", experiment="t", uri=f"http://127.0.0.1:{free_port()}", spool_dir=tmp_path / "spool")
    gone.log_params({"a": 1})
    gone.log_metrics({"loss": 2.5}, step=7)
    gone.set_tags({"k": "v"})
    started = time.monotonic()
    gone.end("FAILED")
    assert 1.0 <= time.monotonic() - started < 15  # it waited, boundedly
    [spool] = (tmp_path / "spool").glob("mlflow-undelivered-offline-*.json")
    calls = read_json(spool)["calls"]
    assert [c["call"] for c in calls] == ["log_params", "log_metrics", "set_tags", "end"]
    assert calls[0]["params"] == {"a": "1"} and calls[2]["tags"] == {"k": "v"} and calls[3]["status"] == "FAILED"
    assert calls[1]["metrics"] == {"loss": 2.5} and calls[1]["step"] == 7 and gone.pending == 0

    late = RunLogger("late", experiment="t", uri=f"http://127.0.0.1:{free_port()}", spool_dir=tmp_path / "spool2",
                     flush_timeout=60)  # the argument wins over the environment
    late.log_metrics({"loss": 1.0}, step=1)
    late.log_metrics({"loss": 0.5}, step=2)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(store).create_experiment("t", artifact_location=(tmp_path / "artifacts").as_uri())

    def server_returns() -> None:  # as in test_tracking: the same logger now reaches a working store
        late.uri, late._client = store, None

    threading.Timer(2.5, server_returns).start()  # after the 1.5 s of the environment: the argument counts
    late.end()
    got = MlflowClient(store).get_run(late.run_id)
    assert got.info.status == "FINISHED"
    assert [m.step for m in MlflowClient(store).get_metric_history(late.run_id, "loss")] == [1, 2]
    assert not (tmp_path / "spool2").exists()
