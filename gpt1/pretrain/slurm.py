"""Multi-node pre-training as a Slurm job: `sbatch --wait` of infra/multinode/slurm/pretrain.sbatch.

How it maps onto the cluster: the submitting process (the Prefect worker, on a login node) holds the output's
lock, submits and waits; the job validates the config on its batch host (`gpt1 pretrain --dry-run`), then runs
one torchrun per node. The paths it gets (SHARDS, TOKENIZER, TASK_DATA, OUT, PRESET) are read and written by the
compute nodes, so the work dir must be on a filesystem every node mounts at the same path
(infra/multinode/README.md). sbatch's own lines stream as they come; the job's output, OUT/slurm-<id>.out, is
forwarded once the job ends. If the submitter dies, the job runs on: `scancel` it before the stage is re-run.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from gpt1.runtime.processes import stream

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "multinode" / "slurm" / "pretrain.sbatch"


def script() -> Path:
    """The sbatch script of the repository checkout, once it is known that it can be submitted from here."""
    if not SCRIPT.is_file():
        raise RuntimeError(
            f"orchestration.pretrain_launcher=slurm needs the repository checkout: {SCRIPT} not "
            "found (an installed wheel has no infra/)"
        )
    if shutil.which("sbatch") is None:
        raise RuntimeError(
            "orchestration.pretrain_launcher=slurm: `sbatch` is not on PATH; run the Prefect worker "
            "on a Slurm login node"
        )
    return SCRIPT


def run_job(script_path: Path, out: Path, nnodes: int, env: dict[str, str], log_line=print) -> str:
    """`sbatch --wait` `script_path` with `env`; returns the job id once the job has ended well."""
    cmd = [
        "sbatch",
        "--wait",
        f"--nodes={nnodes}",
        f"--output={out}/slurm-%j.out",
        str(script_path),
    ]
    job_ids: list[str] = []

    def relay(line: str) -> None:
        submitted = re.match(r"Submitted batch job (\d+)", line)
        if submitted:
            job_ids.append(submitted.group(1))
        log_line(line)

    code = stream(cmd, relay, env)
    if not job_ids:
        raise RuntimeError(
            f"sbatch did not report a submitted job (exit code {code}); no job output in "
            f"{out}/slurm-%j.out"
        )
    job_id = job_ids[0]
    output = out / f"slurm-{job_id}.out"
    if output.exists():
        log_line(f"pretrain: output of Slurm job {job_id} ({output}):")
        with open(output, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                log_line(line.rstrip())
    if code != 0:
        raise RuntimeError(
            f"Slurm job {job_id} failed (sbatch exit code {code}); its output: {output}"
        )
    if not (out / "final").is_dir():
        raise RuntimeError(
            f"Slurm job {job_id} ended without writing {out / 'final'} (is the work dir on the "
            f"filesystem the nodes share?); its output: {output}"
        )
    return job_id
