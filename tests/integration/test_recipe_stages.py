"""Adding a stage is its module and one line in the recipe (with the line that imports it): the added stage is
planned where the recipe puts it, waited for by the job that reads its output, run in order by the flow, listed and
described by preflight and offered by the CLI, with nothing else edited.

The stage added here is `count-tokens`, between `tokenize` and `pretrain`: it writes the token counts of the shards
beside a copy of them, and pre-training reads its copy. Its module is written below as a user would write it; the
recipe is the repository's own gpt1/recipe/recipe.py with the two lines inserted after the tokenize step."""

from __future__ import annotations

import ast
import importlib
import sys

import pytest

from gpt1.config import load_config
from gpt1.io import read_json
import gpt1.recipe.recipe as recipe_module
from gpt1.stages import base
from tests.conftest import REPO

NAME = "count-tokens"

STAGE_MODULE = '''
"""Stage `count-tokens`: the shards' token counts, beside a copy of the shards that later stages read."""

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gpt1.io import read_json, write_json
from gpt1.stages.base import Ref, StageJob, add_output_args, run_from_args


@dataclass(frozen=True)
class Job(StageJob):
    stage: ClassVar[str] = "count-tokens"
    summary: ClassVar[str] = "count the tokens of the shards"
    shards: Ref

    def identity(self) -> dict:
        return {"shards": self.shards.key}

    def build(self, out: Path) -> dict:
        for item in self.shards.path.iterdir():
            if not item.name.startswith("."):  # the tokenize stage's own records stay its own
                (shutil.copytree if item.is_dir() else shutil.copy2)(item, out / item.name)
        counts = {split: entry["tokens"] for split, entry in read_json(out / "manifest.json")["splits"].items()}
        write_json(out / "counts.json", counts)
        return {"tokens": counts}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    add_output_args(parser)


def run_cli(args: argparse.Namespace) -> int:
    result = run_from_args(Job(Ref.to(args.shards)), args)
    print(json.dumps(result.marker["tokens"]))
    return 0
'''

ADDED_LINES = ["import count_tokens", "shards = x.shards = x.add(count_tokens.Job(shards))"]


@pytest.fixture
def added_stage(tmp_path, monkeypatch):
    """The stage's module importable, and the recipe with the stage's two lines, for this test only."""
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "count_tokens.py").write_text(STAGE_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "modules"))
    monkeypatch.setattr(base, "_STAGE_JOBS", dict(base._STAGE_JOBS))  # the stage registers here, then is gone
    monkeypatch.delitem(sys.modules, "count_tokens", raising=False)
    source = (REPO / "gpt1" / "recipe" / "recipe.py").read_text(encoding="utf-8")
    tokenize_step = next(node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Assign)
                         and "tokenize.Job" in ast.unparse(node.value))
    lines = source.splitlines()
    indent = " " * tokenize_step.col_offset
    lines[tokenize_step.end_lineno:tokenize_step.end_lineno] = [indent + line for line in ADDED_LINES]
    edited = importlib.util.module_from_spec(importlib.util.spec_from_loader("recipe_with_count_tokens", None))
    exec(compile("\n".join(lines), str(tmp_path / "recipe.py"), "exec"), edited.__dict__)
    monkeypatch.setattr(recipe_module, "recipe", edited.recipe)
    yield
    sys.modules.pop("count_tokens", None)


TINY = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=128", "model.n_ctx=32",
        "train_tokenizer.merges=200", "pretrain.max_steps=4", "pretrain.warmup_steps=1", "pretrain.log_every=2",
        "pretrain.save_every=4", "pretrain.eval_every=4", "pretrain.eval_batches=1", "pretrain.probe_every=1000",
        "pretrain.probe_max_examples=4", "finetune.epochs=1", "finetune.batch_size=8", "finetune.max_train_examples=8",
        "finetune.max_eval_examples=8", "finetune.tasks=[sst2]", "orchestration.ablations=[]",
        "orchestration.retries={}"]


def test_the_plan_runs_an_added_stage_where_the_recipe_puts_it(added_stage, tmp_path):
    from gpt1.recipe import plan as plan_run

    plan = plan_run(load_config("smoke", TINY), tmp_path / "work")
    order = list(plan.steps)
    assert order[order.index("tokenize") + 1] == NAME and order[order.index(NAME) + 1] == "pretrain"
    assert plan.needs[NAME] == ("tokenize",)
    assert NAME in plan.needs["pretrain"] and "tokenize" not in plan.needs["pretrain"]  # it reads the copy
    assert plan.dir(NAME) == tmp_path / "work" / NAME / plan.ref(NAME).key


def test_preflight_and_the_cli_see_an_added_stage(added_stage, tmp_path, capsys, monkeypatch):
    from gpt1.cli import main as cli

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert cli(["preflight", "--preset", "smoke", "--no-services", "--work", str(tmp_path / "w"), *(
        f"--set={o}" for o in TINY)]) == 0
    described = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    at = described.index(NAME)
    assert described[at - 1:at + 2] == ["tokenize", NAME, "pretrain"]
    cli(["--help"])
    assert f"    {NAME}  " in capsys.readouterr().out


def test_the_flow_runs_an_added_stage_between_its_neighbours(added_stage, tmp_path, monkeypatch):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import gpt1_pipeline
    from gpt1.cli import main as cli
    from gpt1.recipe import plan as plan_run
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
    plan = plan_run(load_config("smoke", [*TINY, f"tracking.tracking_uri={uri}"]), tmp_path / "work")
    counts = read_json(plan.dir(NAME) / "counts.json")
    assert counts["train"] > 0 and read_marker(plan.dir(NAME))["stage"] == NAME
    assert read_json(plan.dir("pretrain") / "config.json")  # pre-training ran on the copy
    # by hand, on the plan's folders: the same key, found finished
    assert cli([NAME, "--shards", str(plan.dir("tokenize")), "--out", str(plan.dir(NAME)),
                "--expect-key", plan.ref(NAME).key]) == 0


def test_neither_the_recipe_nor_the_flows_spell_a_stage_name():
    """The recipe wires jobs by the references `add` returns, the flows ask a step's job class: no stage's name is
    a string in either, so a stage renamed or added changes neither."""
    names = set(base.stage_jobs())
    for path in [REPO / "gpt1" / "recipe" / "recipe.py", *sorted((REPO / "flows").glob("*.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        spelled = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in names]
        assert not spelled, (path.name, spelled)
