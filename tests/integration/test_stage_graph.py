"""The stage graph is the one place the stages are declared: a stage added there (and its module) is planned, run
in order by the flow, listed and described by preflight, and offered by the CLI, with nothing else edited.

The stage added here is `count-tokens`, between `tokenize` and `pretrain`: it reads the shards' manifest and writes
the token counts; pre-training waits for it. This module is the stage's module (job, plan, CLI)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from gpt1.config import load_config
from gpt1.io import read_json, write_json
from gpt1.stages import graph
from gpt1.stages.base import Ref, StageJob, Step, add_output_args, run_from_args

NAME = "count-tokens"


# -- the added stage's module ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job(StageJob):
    stage: ClassVar[str] = NAME
    shards: Ref

    def identity(self) -> dict:
        return {"shards": self.shards.key}

    def build(self, out: Path) -> dict:
        splits = read_json(self.shards.path / "manifest.json")["splits"]
        counts = {split: entry["tokens"] for split, entry in splits.items()}
        write_json(out / "counts.json", counts)
        return {"tokens": counts}


def plan(p) -> list[Step]:
    job = Job(p.ref("tokenize"))
    return [Step(job.stage, job, p.folder(job))]


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    add_output_args(parser)


def run_cli(args: argparse.Namespace) -> int:
    result = run_from_args(Job(Ref.to(args.shards)), args)
    print(json.dumps(result.marker["tokens"]))
    return 0


# -- the one edit: the graph ---------------------------------------------------------------------------------------
@pytest.fixture
def added_stage(monkeypatch):
    stages = []
    for stage in graph.STAGES:
        if stage.name == "pretrain":
            stage = dataclasses.replace(stage, inputs=(*stage.inputs, NAME))
        stages.append(stage)
        if stage.name == "tokenize":
            stages.append(graph.Stage(NAME, __name__, "count the tokens of the shards", inputs=("tokenize",)))
    monkeypatch.setattr(graph, "STAGES", tuple(stages))


TINY = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=128", "model.n_ctx=32",
        "train_tokenizer.merges=200", "pretrain.max_steps=4", "pretrain.warmup_steps=1", "pretrain.log_every=2",
        "pretrain.save_every=4", "pretrain.eval_every=4", "pretrain.eval_batches=1", "pretrain.probe_every=1000",
        "pretrain.probe_max_examples=4", "finetune.epochs=1", "finetune.batch_size=8", "finetune.max_train_examples=8",
        "finetune.max_eval_examples=8", "finetune.tasks=[sst2]", "orchestration.ablations=[]",
        "orchestration.retries={}"]


def test_the_plan_runs_an_added_stage_where_the_graph_puts_it(added_stage, tmp_path):
    from gpt1.pipeline.plan import Plan

    plan = Plan.make(load_config("smoke", TINY), tmp_path / "work")
    order = list(plan.steps)
    assert order[:6] == ["sample-data", "ingest", "train-tokenizer", "tokenize", NAME, "pretrain"]
    assert plan.needs[NAME] == ("tokenize",) and NAME in plan.needs["pretrain"]
    assert plan.dir(NAME) == tmp_path / "work" / NAME / plan.ref(NAME).key


def test_preflight_and_the_cli_see_an_added_stage(added_stage, tmp_path, capsys, monkeypatch):
    from gpt1.cli import main as cli

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert cli(["preflight", "--preset", "smoke", "--no-services", "--work", str(tmp_path / "w"), *(
        f"--set={o}" for o in TINY)]) == 0
    described = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert described[3:6] == ["tokenize", NAME, "pretrain"]
    cli(["--help"])
    assert f"    {NAME}  " in capsys.readouterr().out


def test_the_flow_runs_an_added_stage_between_its_neighbours(added_stage, tmp_path, monkeypatch):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import gpt1_pipeline
    from gpt1.cli import main as cli
    from gpt1.pipeline.plan import Plan
    from gpt1.stages.outputs import read_marker

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with temporary_settings({PREFECT_LOCAL_STORAGE_PATH: tmp_path / "results"}):
        with prefect_test_harness(server_startup_timeout=120):
            state = gpt1_pipeline(preset="smoke", overrides=[*TINY, f"tracking.tracking_uri={uri}"],
                                  work_dir=str(tmp_path / "work"), return_state=True)
            assert state.is_completed(), state.message
            with get_client(sync_client=True) as client:
                runs = client.read_task_runs(flow_run_filter=FlowRunFilter(
                    id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
    spans = {run.name: (run.start_time, run.end_time) for run in runs}
    assert spans["tokenize"][1] <= spans[NAME][0] and spans[NAME][1] <= spans["pretrain"][0], spans
    plan = Plan.make(load_config("smoke", [*TINY, f"tracking.tracking_uri={uri}"]), tmp_path / "work")
    counts = read_json(plan.dir(NAME) / "counts.json")
    assert counts["train"] > 0 and read_marker(plan.dir(NAME))["stage"] == NAME
    # by hand, on the plan's folders: the same key, found finished
    assert cli([NAME, "--shards", str(plan.dir("tokenize")), "--out", str(plan.dir(NAME)),
                "--expect-key", plan.ref(NAME).key]) == 0
