"""Follow a flow run in the terminal: the one way to watch any run of this project's deployments.

    python scripts/watch_run.py gpt1/smoke [--params '{"overrides": ["finetune.epochs=1"]}']   # start one, follow it
    python scripts/watch_run.py --flow-run crimson-falcon                                      # follow one (id or name)
    make watch RUN=gpt1/smoke [PARAMS='{...}']        make watch RUN=crimson-falcon

It prints what `prefect deployment run --watch` does not: who is picking the run up and why it waits (no worker on
the pool, Late), each step as it starts and ends with its own time (or as reused, when an earlier run's output
served), pre-training's step, loss and ETA, fine-tunes' epochs, each score as it lands, warnings and errors; and
when nothing new happened for QUIET seconds, what is still running and how far it is; at the end, the results table
the run published. A deployment or flow run that does not exist is named with the command that creates it.
Everything is read from the Prefect API (the flow run, its child flow runs, their task runs and logs), so it works
for any worker and imports none of the library (only flows.prefect_api). Exit code: 0 when the flow run completes, 1
when it ends otherwise, 2 when there is nothing to follow (no server, deployment or flow run).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from flows.prefect_api import RESULTS_ARTIFACT, REUSED, api_problem

REPO = Path(__file__).resolve().parents[1]
STEP = re.compile(r"step (\d+)/(\d+) loss ([\d.]+).*?(?:ETA (\S+))?$")
UPDATE = re.compile(r"\w+: update (\d+)/(\d+) \(epoch (\d+)/(\d+)\).*ETA (\S+)")
EPOCH = re.compile(r"\w+ epoch (\d+)/(\d+): train loss [\d.]+, (.*?)(?: \([\d.]+ examples/s\))?$")
SCORE = re.compile(r"\[(\S+)\] .*?(\w+): (\w+) = (-?[\d.]+) on (\w+) \(majority baseline (-?[\d.]+)\)")
COMPILE = re.compile(r"Building extension module|Emitting ninja build file|Loading extension module")
SAY_EVERY = 10.0  # seconds between two progress lines of one step
QUIET = 12.0  # seconds without a line after which the follower says what is still running
POLL = 3.0  # seconds between two reads of the API (each read costs the server CPU the run would use)
PAGE = 200  # log records per request: the most a Prefect server returns (PREFECT_API_DEFAULT_LIMIT)
LOCAL_POOL = "gpt1-local"  # the pool `make demo` deploys to and starts a worker for


def clock(start: float) -> str:
    seconds = int(time.monotonic() - start)
    return f"[{seconds // 60:02d}:{seconds % 60:02d}]"


class Follower:
    """What has been said about one flow run, and what to say next (fed task runs, log records and states)."""

    def __init__(self, start: float):
        self.start = start
        self.states: dict = {}
        self.names: dict = {}  # task run id -> name
        self.started: dict = {}  # task run id -> its start time (UTC)
        self.progress: dict = {}  # task run id -> its latest progress, for the quiet-time summary
        self.progress_said: dict = {}  # task run id -> when its last progress line was said
        self.compile_said = False
        self.reused: set = set()  # task run ids whose step an earlier run's output served
        self.first_step: tuple[float, int] | None = None
        self.said = time.monotonic()

    def say(self, text: str) -> None:
        print(f"{clock(self.start)} {text}", flush=True)
        self.said = time.monotonic()

    def task_run(self, run) -> None:
        self.names[run.id] = run.name
        if run.start_time:
            self.started[run.id] = run.start_time
        state = run.state.type.value if run.state else "?"
        if self.states.get(run.id) == state:
            return
        self.states[run.id] = state
        seconds = (run.end_time - run.start_time).total_seconds() if run.end_time and run.start_time else None
        if state == "RUNNING":
            self.say(f"> {run.name}")
        elif state == "COMPLETED":
            how = "reused" if run.id in self.reused else f"{seconds:.0f} s" if seconds is not None else None
            self.say(f"  {run.name} done" + (f" ({how})" if how else ""))
            self.progress.pop(run.id, None)
        elif state in ("FAILED", "CRASHED"):
            self.say(f"  {run.name} FAILED: {run.state.message or state}")
            self.progress.pop(run.id, None)
        elif state == "CANCELLED":
            self.say(f"  {run.name} cancelled")
            self.progress.pop(run.id, None)

    def log(self, record) -> None:
        message, owner = record.message, getattr(record, "task_run_id", None)
        name = self.names.get(owner, "")
        if name and message.startswith(f"{name}: {REUSED}"):
            self.reused.add(owner)
            self.say(f"  {name} {REUSED}")
        elif step := STEP.search(message):
            done, total, loss, eta = int(step[1]), int(step[2]), float(step[3]), step[4]
            now = time.monotonic()
            if self.first_step is None:
                self.first_step = (now, done)
            began, first = self.first_step
            rate = (done - first) / max(now - began, 1e-9)
            eta = eta or (f"{int((total - done) / rate)}s" if rate > 0 and done < total else None)
            text = f"step {done}/{total}, loss {loss:.3f}" + (f", ETA {eta}" if eta and done < total else "")
            self.progress_line(owner, f"{name or 'pre-training'} {text}", force=done == total)
        elif update := UPDATE.search(message):
            done, total, epoch, epochs, eta = update.groups()
            self.progress[owner] = f"update {done}/{total}, epoch {epoch}/{epochs}, ETA {eta}"
        elif epoch := EPOCH.search(message):
            parts = [part for part in epoch[3].split(", ") if " " in part]  # "dev/accuracy 71.00"
            scores = ", ".join(part.replace("/", " ", 1) for part in parts  # the headline ones, once each
                               if not ("_" in part.split(" ")[0] or part.split(" ")[0].endswith(("/loss", "/primary"))))
            self.progress_line(owner, f"{name} epoch {epoch[1]}/{epoch[2]}" + (f": {scores}" if scores else ""))
        elif score := SCORE.search(message):
            label, task, metric, value, split, majority = score.groups()
            self.say(f"  {label}: {metric} {float(value):.1f} on {split} (majority class {float(majority):.1f})")
        elif COMPILE.search(message) and not self.compile_said:
            self.compile_said = True
            self.say("  DeepSpeed is compiling a C++ op (first run on this machine only)")
        elif record.level >= 30:
            self.say(f"  {'ERROR' if record.level >= 40 else 'warning'}: {message.splitlines()[0][:200]}")

    def progress_line(self, owner, text: str, force: bool = False) -> None:
        """A step's progress: said at most every SAY_EVERY seconds per step, always kept for `quiet`."""
        self.progress[owner] = text.split(" ", 1)[1] if " " in text else text
        now = time.monotonic()
        if force or now - self.progress_said.get(owner, 0.0) >= SAY_EVERY:
            self.progress_said[owner] = now
            self.say(f"  {text}")

    def quiet(self, waiting: str | None = None) -> None:
        """After QUIET seconds without a line: what is going on (`waiting`: why the flow has not started yet)."""
        if time.monotonic() - self.said < QUIET:
            return
        if waiting:
            self.say(f"  ... {waiting}")
            return
        now = datetime.now(timezone.utc)
        running = []
        for i, state in self.states.items():
            if state == "RUNNING" and i in self.names:
                how = [f"{int((now - self.started[i]).total_seconds())} s"] if i in self.started else []
                running.append(f"{self.names[i]} ({', '.join([*how, *filter(None, [self.progress.get(i)])])})")
        self.say("  ... running: " + (", ".join(running) if running else "the flow (between steps)"))


# -- the run to follow ----------------------------------------------------------------------------------------------
class CannotFollow(Exception):
    """Nothing to follow; the message says why and what to do."""


def deployments_in_yaml() -> dict[str, str]:
    """flow/deployment -> work pool of the deployments pipelines.yaml defines (empty when it cannot be read)."""
    try:
        import yaml

        spec = yaml.safe_load((REPO / "pipelines.yaml").read_text(encoding="utf-8"))
        flows = {"flows.pipeline:gpt1_pipeline": "gpt1", "flows.pipeline:pretrain_flow": "gpt1-pretrain",
                 "flows.pipeline:finetune_one": "gpt1-finetune", "flows.pipeline:finetune_all": "gpt1-finetune-all"}
        return {f"{flows.get(d['entrypoint'], '?')}/{d['name']}": d["work_pool"]["name"] for d in spec["deployments"]}
    except Exception:  # noqa: BLE001 - only used to say which command creates a deployment
        return {}


def missing_deployment(name: str, client) -> str:
    flows = {flow.id: flow.name for flow in client.read_flows()}
    known = sorted(f"{flows.get(d.flow_id, '?')}/{d.name}" for d in client.read_deployments())
    pool = deployments_in_yaml().get(name)
    if pool == LOCAL_POOL:
        how = f"`make demo` deploys it (with the other deployments of the local pool {LOCAL_POOL})"
    elif pool:
        how = (f"it runs on the cluster pool {pool}: on a cluster, `prefect --no-prompt deploy --prefect-file "
               f"pipelines.yaml -n {name.split('/', 1)[1]}` creates it (docs/cluster.md); on this machine, "
               "`make rehearse` runs the whole cluster topology on stand-in pools")
    else:
        how = "pipelines.yaml defines no such deployment; `prefect deployment ls` lists what there is"
    return (f"no deployment {name} on the Prefect server {client.api_url}: {how}. "
            f"Deployed there: {', '.join(known) or 'none'}")


def find_flow_run(client, wanted: str):
    from uuid import UUID

    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_flow_run(UUID(wanted))
    except (ValueError, ObjectNotFound):
        pass
    found = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[wanted])), limit=1)
    if not found:
        raise CannotFollow(f"no flow run {wanted} on the Prefect server {client.api_url} (give its id or name, as "
                           "`prefect flow-run ls` lists them)")
    return found[0]


def pool_problem(client, pool_name: str | None) -> str | None:
    """Why no worker would pick up a run of this pool, with what to do; None when one is online."""
    if not pool_name:
        return None
    from prefect.exceptions import ObjectNotFound

    start = (f"`make demo` starts one (or `prefect worker start --pool {pool_name} --type process`)"
             if pool_name == LOCAL_POOL else f"start a worker for it (`prefect worker start --pool {pool_name}`; "
                                            "on Kubernetes, docs/cluster.md)")
    try:
        pool = client.read_work_pool(pool_name)
    except ObjectNotFound:
        return f"the work pool {pool_name} does not exist: {start}"
    if pool.is_paused:
        return f"the work pool {pool_name} is paused: `prefect work-pool resume {pool_name}`"
    workers = client.read_workers_for_work_pool(pool_name)
    if not any(w.status and w.status.value == "ONLINE" for w in workers):
        return f"no worker is polling the work pool {pool_name}, so nothing will run this flow run: {start}"
    return None


def waiting_reason(run, pool_name: str | None, pool_trouble: str | None, seconds: int) -> str:
    """What the flow run waits for before its flow starts."""
    state = run.state
    if state.name == "Late" or pool_trouble:
        return f"the flow run is {state.name} after {seconds} s: " + (pool_trouble or f"no worker of {pool_name} "
                                                                      "has picked it up yet")
    if state.type.value == "PENDING":
        return (f"a worker picked it up and is starting the flow's process (it imports Prefect, torch and MLflow "
                f"before the first step): {seconds} s")
    return f"the flow run is {state.name}, waiting for a worker of {pool_name or 'its pool'}: {seconds} s"


def parent_run_link(client, flow_run_id) -> str | None:
    """The flow run's MLflow parent run, as flows.pipeline links it from the run's artifacts."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    found = client.read_artifacts(artifact_filter=ArtifactFilter(
        key=ArtifactFilterKey(any_=["mlflow-parent-run"]), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    link = re.search(r"\((http[^)]+)\)", str(found[0].data)) if found else None
    return link[1] if link else None


def results_markdown(client, flow_run_id) -> str | None:
    """The results table the flow run published (flows.pipeline, its report step), as markdown."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterType

    found = client.read_artifacts(artifact_filter=ArtifactFilter(
        type=ArtifactFilterType(any_=["markdown"]), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return next((str(a.data) for a in found if (a.key or "").startswith(RESULTS_ARTIFACT)), None)


def follow(client, run, follower: Follower, pool_name: str | None) -> object:
    """Print the run's story until it ends; returns its last state."""
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId,
                                                LogFilter, LogFilterFlowRunId, LogFilterTimestamp)
    from prefect.client.schemas.sorting import LogSort

    seen_after, seen = datetime(2000, 1, 1, tzinfo=timezone.utc), set()
    flow_state, pool_checked, pool_trouble, created = None, 0.0, None, time.monotonic()
    while True:
        run = client.read_flow_run(run.id)
        if run.state.name != flow_state:
            flow_state = run.state.name
            if run.state.type.value == "RUNNING":
                follower.say(f"flow run {run.name}: running")
            elif not run.state.is_final():
                follower.say(f"flow run {run.name}: {flow_state}")
        if run.state.type.value in ("SCHEDULED", "PENDING"):
            if time.monotonic() - pool_checked > 10:  # workers heartbeat every 30 s: no need to ask more often
                pool_checked = time.monotonic()
                trouble = pool_problem(client, pool_name)
                if trouble and trouble != pool_trouble:
                    follower.say(f"  ! {trouble}")
                pool_trouble = trouble
            follower.quiet(waiting_reason(run, pool_name, pool_trouble, int(time.monotonic() - created)))
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id])))
        ids = [run.id, *(c.id for c in children)]
        task_runs = sorted(client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids))),
                           key=lambda t: t.start_time or t.expected_start_time)
        for task_run in task_runs:
            follower.names[task_run.id] = task_run.name
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids),
                                                     timestamp=LogFilterTimestamp(after_=seen_after)),
                                sort=LogSort.TIMESTAMP_ASC, limit=PAGE)
        for record in logs:
            if record.id not in seen:  # `after_` includes the boundary: a record may come twice
                seen.add(record.id)
                follower.log(record)
            seen_after = max(seen_after, record.timestamp)
        for task_run in task_runs:
            follower.task_run(task_run)
        if run.state.is_final() and len(logs) < PAGE:
            return run
        if run.state.type.value == "RUNNING":
            follower.quiet()
        time.sleep(POLL if len(logs) < PAGE else 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deployment", nargs="?", help="flow/deployment to run, e.g. gpt1/smoke")
    parser.add_argument("--params", default="{}", help="JSON object of flow parameters for the new run")
    parser.add_argument("--flow-run", help="follow this flow run (id or name) instead of starting one")
    args = parser.parse_args()
    if bool(args.deployment) == bool(args.flow_run):
        parser.error("give a deployment to run (e.g. gpt1/smoke) or --flow-run ID_OR_NAME, not both")
    try:
        params = json.loads(args.params)
    except json.JSONDecodeError as err:
        parser.error(f"--params: not JSON ({err.msg} at character {err.pos}): {args.params}")

    from prefect import get_client
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    follower = Follower(time.monotonic())
    try:
        with get_client(sync_client=True) as client:
            if (problem := api_problem(client)) is not None:
                raise CannotFollow(f"{problem} (the demo's servers: `make demo`, then `source .demo/env`; the team "
                                   "stack's: `source .stack/env`)")
            if args.flow_run:
                run = find_flow_run(client, args.flow_run)
                where = f"{run.name}"
            else:
                try:
                    deployment = client.read_deployment_by_name(args.deployment)
                except ObjectNotFound:
                    raise CannotFollow(missing_deployment(args.deployment, client)) from None
                run = run_deployment(args.deployment, parameters=params, timeout=0, as_subflow=False)
                where = f"{run.name} of {args.deployment}"
            pool_name = run.work_pool_name or (deployment.work_pool_name if not args.flow_run else None)
            ui = str(client.api_url).rstrip("/").removesuffix("/api")
            follower.say(f"flow run {where} (Prefect UI: {ui}/runs/flow-run/{run.id})")
            run = follow(client, run, follower, pool_name)
            link = parent_run_link(client, run.id)
            results = results_markdown(client, run.id)
    except CannotFollow as why:
        print(f"watch_run: {why}", file=sys.stderr)
        return 2
    follower.say(f"flow run {run.name}: {run.state.name}" + (f" ({run.state.message})" if run.state.message else ""))
    if link:
        follower.say(f"MLflow: {link}")
    if results:
        print(f"\n{results}", flush=True)
    return 0 if run.state.is_completed() else 1


if __name__ == "__main__":
    sys.exit(main())
