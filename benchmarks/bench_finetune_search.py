"""Fine-tuning settings for `mini` chosen on held-out slices of the train files, never dev: each setting fine-tunes
each task twice from one pre-trained model, once from its weights and once from a random init (the report's
`no_pretrain` twin), and scores both on the slice.

    python benchmarks/bench_finetune_search.py --glue ../shared/data/glue-full --work runs/finetune-search \
        --checkpoint runs/pretrain-search/pretrain/<key>/final base= ep6=finetune.epochs=6 --tasks stsb mrpc

Each task folder gives up the evenly spaced slice of `bench_pretrain_search.HELD_OUT` as its dev file and trains
on the rest (the preset's `finetune.max_train_examples` applies). The checkpoint is best one whose pre-training
never read the slices' text (a `bench_pretrain_search.py` model); a `mini` run's model read every train row's text
(`ingest.task_text`), which flatters the pre-trained side on the slice. Fine-tunes run two at a time, one core each,
through `gpt1 finetune` as a user runs it; a row per setting and task goes to benchmarks/results.md, the score by
the headline's metric (`report.headline_tasks`: MRPC by accuracy).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_pretrain_search import HELD_OUT, proxy_tasks
from results import record

from gpt1.config import headline_metric, load_config

FOLDERS = {"sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B"}
VARIANTS = {"pretrained": [], "scratch": ["finetune.from_scratch=true"]}
METRICS = dict(headline_metric(item) for item in load_config("mini").report.headline_tasks)  # MRPC: accuracy


def finetune(task: str, folder: Path, checkpoint: Path, out: Path, overrides: list[str]) -> float:
    """One `gpt1 finetune` on one core, its log appended beside `out` (a reuse keeps the training's log); its slice
    score by `mini`'s headline metric. A fine-tune already in `out` with the same inputs is reused (the command's
    own up-to-date check)."""
    command = [str(Path(sys.executable).with_name("gpt1")), "finetune", "--task", task, "--data", str(folder),
               "--checkpoint", str(checkpoint), "--out", str(out), "--preset", "mini", "--no-tracking",
               "--device", "cpu", "--set", "finetune.seeds=1"]
    for override in overrides:
        command += ["--set", override]
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.with_suffix(".log")
    with open(log, "a") as stream:
        done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=stream,
                              stderr=subprocess.STDOUT)
    if done.returncode != 0:
        last = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        raise SystemExit(f"bench_finetune_search: {out.name} failed: {' '.join(last)} (log: {log})")
    return json.loads((out / "metrics.json").read_text())["metrics"][METRICS.get(task, "primary")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--glue", type=Path, required=True, help="GLUE task folders (SST-2/, STS-B/, MRPC/)")
    parser.add_argument("--checkpoint", type=Path, required=True, help="a pre-trained model folder (final/)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--tasks", nargs="+", choices=sorted(FOLDERS), default=sorted(FOLDERS))
    parser.add_argument("settings", nargs="+", metavar="NAME=OVERRIDES", help="e.g. lr1e-3=finetune.lr=1e-3")
    args = parser.parse_args()

    missing = [str(args.glue / folder / "train.tsv") for folder in HELD_OUT
               if not (args.glue / folder / "train.tsv").is_file()]
    if missing:
        parser.error(f"--glue: no {', '.join(missing)}")
    tasks = args.work / "tasks"
    proxy_tasks(args.glue, tasks, share=1)
    jobs = [(name, task, variant, [*VARIANTS[variant], *filter(None, overrides.split(","))])
            for name, _, overrides in (spec.partition("=") for spec in args.settings)
            for task in args.tasks for variant in VARIANTS]
    with ThreadPoolExecutor(2) as pool:
        scores = list(pool.map(
            lambda job: finetune(job[1], tasks / FOLDERS[job[1]], args.checkpoint.resolve(),
                                 args.work / "out" / f"{job[0]}-{job[1]}-{job[2]}", job[3]), jobs))
    by_job = {(name, task, variant): score for (name, task, variant, _), score in zip(jobs, scores)}
    for spec in args.settings:
        name, _, overrides = spec.partition("=")
        for task in args.tasks:
            pretrained, scratch = by_job[name, task, "pretrained"], by_job[name, task, "scratch"]
            result = {"setting": name, "overrides": overrides or "(the preset's)", "task": task,
                      "pretrained": pretrained, "scratch": scratch, "gain": pretrained - scratch}
            print(result, flush=True)
            record(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
