"""The smoke Job's command, run as the Job runs it (torchrun, one process per rank) on two CPU ranks over gloo:
what it prints and its exit status. On GPUs the same module takes NCCL; that has not run on this project's
machines (no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml

from tests.conftest import REPO

SMOKE_JOB = REPO / "infra/multinode/k8s/nccl-smoke-job.yaml"


def test_two_ranks_run_the_smoke_job_s_command_and_agree():
    (container,) = yaml.safe_load(SMOKE_JOB.read_text())["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[0] == "torchrun" and command[-2:] == ["-m", "gpt1.runtime.collectives"]
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            *command[-2:], "--megabytes", "4", "--repeats", "2", "--backend", "gloo"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert out[0] == "collectives: gloo on 2 ranks (cpu)" and out[-1] == "collectives: ok"
    assert [line.split()[0] for line in out[1:-1]] == ["all_reduce", "broadcast"]
