"""A checkpoint volume others can write to runs no code: files planted in a ZeRO-1 run's last checkpoint (the
paper's and the cluster's stage) are refused or ignored, never unpickled, at the end of a run and on resume.

The planted file is a pickle whose unpickling creates a marker file; every case checks the marker never appears.
Runs are real `gpt1 pretrain` processes on CPU (DS_ACCELERATOR=cpu, gloo) on the tiny shards of
tests/integration/test_pretrain_runs.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gpt1.io import read_json, sha256_file, write_json
from gpt1.pretrain.checkpoint import COMPLETE, META, WeightsOnlyLoads, tag_for
from gpt1.stages.outputs import DONE
from tiny_pretraining import data, env, pretrain_args  # noqa: F401 - `data` is a fixture

TIMEOUT = 900
ZERO_1 = ["pretrain.zero_stage=1"]
OPTIM_STATES = "zero_pp_rank_0_mp_rank_00_optim_states.pt"
pytestmark = pytest.mark.slow


def plant_pickle(path: Path, marker: Path) -> None:
    """Write to `path` a torch checkpoint whose unpickling runs `touch marker` (in a separate process: the class
    must not exist in this one)."""
    code = ("import torch\n"
            "class Planted:\n"
            f"    def __reduce__(self):\n        return (open, ({str(marker)!r}, 'w'))\n"
            f"torch.save({{'optimizer_state_dict': Planted()}}, {str(path)!r})\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def zero1_run(data, tmp_path_factory):  # noqa: F811
    """A finished 4-update ZeRO-1 run with checkpoints at updates 2 and 4."""
    out = tmp_path_factory.mktemp("zero1") / "run"
    done = run([*pretrain_args(data, out, steps=4, sets=ZERO_1), "--save-every", "2"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_final_weights_are_the_engines_fp32_weights_gathered_in_memory(zero1_run):
    """At fp32 ZeRO-1 the module's weights are the fp32 master weights: the consolidated file holds them exactly,
    and the checkpoint records every file it holds with its size and hash."""
    last = zero1_run / "checkpoints" / tag_for(4)
    module = WeightsOnlyLoads(None).load(str(last / "mp_rank_00_model_states.pt"))["module"]
    final = load_file(str(zero1_run / "final" / "gpt1.safetensors"))
    assert sorted(final) == sorted(module)
    assert all(torch.equal(final[name], module[name].float()) for name in final)
    recorded = read_json(last / META)["files"]
    assert sorted(recorded) == sorted(p.name for p in last.iterdir() if p.name not in (META, COMPLETE))
    assert OPTIM_STATES in recorded and all(len(r["sha256"]) == 64 for r in recorded.values())


def test_a_planted_optimizer_state_pickle_in_the_last_checkpoint_runs_no_code(data, zero1_run, tmp_path):  # noqa: F811
    marker = tmp_path / "planted-code-ran"
    resume = [*pretrain_args(data, tmp_path / "x", steps=4, sets=ZERO_1), "--save-every", "2", "--resume", "auto"]
    out_at = resume.index("--out") + 1
    unfinished = shutil.ignore_patterns("final", DONE)  # the run as it was before its end: resumable

    # 1. an extra optimizer-state file beside the run's own: refused by name before DeepSpeed opens anything
    extra = tmp_path / "extra"
    shutil.copytree(zero1_run, extra, ignore=unfinished)
    planted = extra / "checkpoints" / tag_for(4) / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    plant_pickle(planted, marker)
    resume[out_at] = str(extra)
    done = run(resume)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and not marker.exists(), done.stderr[-3000:]
    assert "files not written by this run: " + planted.name in last and "Traceback" not in done.stderr

    # 2. the run's own optimizer-state file replaced: its bytes are not the recorded ones
    replaced = tmp_path / "replaced"
    shutil.copytree(zero1_run, replaced, ignore=unfinished)
    plant_pickle(replaced / "checkpoints" / tag_for(4) / OPTIM_STATES, marker)
    resume[out_at] = str(replaced)
    done = run(resume)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and not marker.exists(), done.stderr[-3000:]
    assert f"{OPTIM_STATES} " in last and "recorded" in last

    # 3. replaced, and its record in meta.json rewritten to match: the weights-only load refuses it by name
    rerecorded = tmp_path / "rerecorded"
    shutil.copytree(replaced, rerecorded)
    tag = rerecorded / "checkpoints" / tag_for(4)
    meta = read_json(tag / META)
    meta["files"][OPTIM_STATES] = {"bytes": (tag / OPTIM_STATES).stat().st_size,
                                   "sha256": sha256_file(tag / OPTIM_STATES)}
    write_json(tag / META, meta)
    resume[out_at] = str(rerecorded)
    done = run(resume)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and not marker.exists(), done.stderr[-3000:]
    assert "refused to load it" in last and OPTIM_STATES in last


def test_a_pickle_planted_where_a_running_job_will_write_its_last_checkpoint_runs_no_code(data, tmp_path):  # noqa: F811
    """The tag folder's name is predictable: a folder planted there while the run trains (marked COMPLETE, so pruning
    keeps it) is replaced when the run saves that step, its file never read (the final weights come from memory)
    and never recorded as the run's."""
    out = tmp_path / "run"
    marker = tmp_path / "planted-code-ran"
    planted_bytes = tmp_path / "planted.pt"
    plant_pickle(planted_bytes, marker)
    run = subprocess.Popen([*pretrain_args(data, out, steps=8, sets=ZERO_1), "--save-every", "2"], env=env(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + TIMEOUT
    while not (out / "checkpoints" / tag_for(2) / COMPLETE).exists():
        assert run.poll() is None and time.monotonic() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.05)
    ahead = out / "checkpoints" / tag_for(8)
    ahead.mkdir()
    shutil.copy(planted_bytes, ahead / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    (ahead / COMPLETE).write_text("8\n")
    output, _ = run.communicate(timeout=TIMEOUT)
    assert run.returncode == 0, output[-3000:]
    assert not marker.exists() and (out / "final" / "gpt1.safetensors").is_file()
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" not in read_json(ahead / META)["files"]
    assert not (ahead / "zero_pp_rank_1_mp_rank_00_optim_states.pt").exists()
