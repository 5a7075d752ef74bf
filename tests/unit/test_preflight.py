"""`gpt1 preflight`: every problem a run would hit, reported at once before any GPU is held."""

from __future__ import annotations


import pytest

from gpt1.cli import main as cli
from gpt1.config import load_config
from flows.preflight import run_checks
from tests.conftest import shared_path


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))  # no profile with an API URL


def test_the_paper_with_a_missing_task_folder_names_every_problem_at_once(offline, tmp_path, capsys):
    missing = tmp_path / "some" / "missing" / "dir"
    code = cli(["preflight", "--preset", "paper", "--set", f"finetune.data={missing}", "--work", str(tmp_path / "w")])
    out = capsys.readouterr().out
    problems = [line for line in out.splitlines() if line.startswith("problem: ")]
    assert code == 2 and "nothing was started" in out
    assert sum(str(missing) in p for p in problems) == len(load_config("paper").finetune.tasks)  # one line each
    assert any("hf:bookcorpus/bookcorpus" in p and "unreachable" in p for p in problems)  # and the corpus too
    assert "note: ingest.source: hf:bookcorpus/bookcorpus has no pinned @revision" in out


def test_the_smoke_preset_passes_and_says_what_the_run_will_do(offline, tmp_path, capsys):
    assert cli(["preflight", "--preset", "smoke", "--work", str(tmp_path / "w")]) == 0
    out = capsys.readouterr().out
    n_tasks = len(load_config("smoke").finetune.tasks)
    assert "preflight: ok" in out and f"{n_tasks} task(s) x 2 variant(s)" in out
    stages = [line.split()[:3] for line in out.splitlines() if line.startswith("  ")][:7]
    assert stages == [[name, "to", "run"] if name != "finetune" else [name, str(2 * n_tasks), "jobs,"]
                      for name in ("sample-data", "ingest", "train-tokenizer", "tokenize", "pretrain", "finetune",
                                   "report")]
    assert "disk: the run writes about" in out
    assert not (tmp_path / "mlflow.db").exists()  # checked, not created


def test_the_mini_preset_runs_the_tasks_it_finds_and_notes_the_others(offline, tmp_path, capsys):
    """finetune.missing_data=skip (the mini preset): a task folder that is not there is a note, not a problem."""
    books, mrpc = shared_path("books"), shared_path("glue-full", "MRPC")
    glue = tmp_path / "glue"
    glue.mkdir()
    (glue / "MRPC").symlink_to(mrpc)
    argv = ["preflight", "--preset", "mini", "--set", f"ingest.source={books}", "--set", f"finetune.data={glue}",
            "--work", str(tmp_path / "w")]
    assert cli(argv) == 0
    out = capsys.readouterr().out
    assert "preflight: ok" in out
    assert "1 task(s) x 4 variant(s) (full, full_seed1, no_pretrain, no_pretrain_seed1)" in out
    for task, folder in (("sst2", "SST-2"), ("stsb", "STS-B")):
        assert f"note: finetune {task}: not run (no files at {glue / folder}" in out
    assert cli([*argv, "--set", "finetune.missing_data=error"]) == 2
    assert str(glue / "SST-2") in capsys.readouterr().out


def test_the_mini_preset_offline_names_the_overrides_that_give_local_copies(offline, tmp_path, capsys):
    """The preset's data are hub datasets; without the hub or a cached copy, each problem says which override
    gives a local copy instead."""
    assert cli(["preflight", "--preset", "mini", "--work", str(tmp_path / "w")]) == 2
    problems = [line for line in capsys.readouterr().out.splitlines() if line.startswith("problem: ")]
    assert any("hf:deepmind/pg19" in p and "`ingest.source=DIR`" in p for p in problems)
    assert sum("hf:nyu-mll/glue" in p and "`finetune.data=DIR`" in p for p in problems) == len(load_config(
        "mini").finetune.tasks)
    assert any("(DIR/SST-2/ holding its files)" in p for p in problems)


def test_settings_that_cannot_work_together_are_problems(offline, tmp_path):
    found = run_checks(load_config("smoke", ["orchestration.pretrain_nproc=3", "finetune.transfer_layers=9",
                                             "finetune.task_data.storycloze=hf:story_cloze"]),
                       tmp_path / "w", services=False)
    text = "\n".join(found.problems)
    assert "not divisible by the world size 3" in text
    assert "finetune.transfer_layers=9 but the model has model.n_layer=3" in text
    assert "storycloze has no downloadable hub copy" in text and "finetune.task_data.storycloze" in text


def test_a_task_the_sample_data_does_not_hold_is_refused_before_the_run(offline, tmp_path, monkeypatch):
    """A task registered without a sample writer would pass the plan and fail at run time: preflight says so."""
    from gpt1.recipe import preflight

    kept, left_out = preflight.SAMPLE_TASKS[1:], preflight.SAMPLE_TASKS[0]
    monkeypatch.setattr(preflight, "SAMPLE_TASKS", kept)
    found = run_checks(load_config("smoke"), tmp_path / "w", services=False)
    assert [p for p in found.problems if "the sample data has no" in p] == [
        p for p in found.problems if f"has no {left_out} " in p and f"finetune.task_data.{left_out}=PATH" in p]
    assert len([p for p in found.problems if "the sample data has no" in p]) == 1
    given = run_checks(load_config("smoke", [f"finetune.task_data.{left_out}={tmp_path}/nowhere"]), tmp_path / "w",
                       services=False)
    assert not [p for p in given.problems if "the sample data has no" in p]


def test_the_cluster_preset_needs_its_deployments_and_a_shared_work_dir(offline, tmp_path, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)  # a shell that sourced .demo/env names one
    found = run_checks(load_config("cluster", ["ingest.source=sample", "finetune.data=sample"]), "runs")
    text = "\n".join(found.problems)
    assert "no Prefect API configured" in text and "gpt1-finetune/gpu" in text
    assert "absolute path on the shared volume" in text
