"""Orchestration: wall time by stage, the fine-tune fan-out vs the tasks one after another, and what Prefect adds
on top of calling `gpt1.pipeline` directly.

Runs of one config on this machine, one after the other, each in its own work dir (`--runs`, default the first
three):

  plain        the `gpt1.pipeline` stage functions called in order, fine-tunes one at a time in one reused
               worker process, as the flow runs them (no Prefect)
  plain-sub    the same with every fine-tune in a fresh Python process of its own (what a worker saves)
  flow-1       the `gpt1` Prefect flow, orchestration.finetune_concurrency=1 (same work as `plain`)
  flow-n       the same flow with finetune_concurrency=N, its upstream stages copied from `flow-1` (so cached:
               only the fan-out and the report run)
  fresh-n      the flow at finetune_concurrency=N from an empty work dir: what a user waits for end to end,
               pre-training and the fan-out included (and whatever of the two overlaps)

Stage times are read from each stage's `.done` marker (the seconds the stage itself measured); the fan-out's wall
time is first fine-tune start to last fine-tune end, from the same markers. Orchestration overhead = `flow x1`
total minus `plain` total (Prefect task runs, stage child runs in MLflow, result persistence), as a share of `plain`.
The runs go in this order, so `plain` pays cold caches (file cache, first imports): read a small negative
overhead as "not resolvable", not as Prefect being faster. Prefect runs in-process against a temporary local server (`prefect_test_harness`); MLflow logs to a local sqlite
store in every run. Fine-tunes run in processes of their own, so the fan-out's parallelism is real, bounded by
the cores. For each flow run the summary also gives pre-training's span and how many fine-tunes started before it
ended.

    python benchmarks/bench_pipeline.py --set pretrain.max_steps=100 --set finetune.epochs=1
    python benchmarks/bench_pipeline.py --runs fresh-n --set pretrain.max_steps=200 --set finetune.epochs=1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flows.pipeline import WORKER_PRELOAD
from gpt1.config import load_config
from gpt1.io import read_json
from gpt1 import recipe
from gpt1.recipe import experiment as P
from gpt1.pipeline.run import InWorker, run_step
from gpt1.runtime.workers import WorkerPool
from results import record

UPSTREAM = ("sample-data", "ingest", "train-tokenizer", "tokenize", "pretrain")


def run_plain(preset: str, overrides: list[str], work: Path, uri: str, subprocesses: bool = False) -> float:
    """Every stage in order without Prefect; fine-tunes sequential, in one reused worker process (as the flow
    runs them) or, with `subprocesses`, each in a fresh process of its own."""
    plan = recipe.plan(load_config(preset, [*overrides, f"tracking.tracking_uri={uri}"]), work)
    started = time.perf_counter()
    quiet = lambda line: None  # noqa: E731 - subprocess output is not what is measured
    with contextlib.nullcontext() if subprocesses else WorkerPool(1, preload=WORKER_PRELOAD) as workers:
        for name, step in plan.steps.items():
            if subprocesses and step.stage == "finetune":
                once = "import pickle, sys; sys.exit(pickle.load(sys.stdin.buffer)())"
                subprocess.run([sys.executable, "-c", once], input=pickle.dumps(InWorker(step.job, step.out, name)),
                               capture_output=True, check=True)
            else:
                run_step(plan, name, workers=workers, log_line=quiet)
    return time.perf_counter() - started


def run_flow(preset: str, overrides: list[str], work: Path) -> float:
    from flows.pipeline import gpt1_pipeline

    started = time.perf_counter()
    gpt1_pipeline(preset=preset, overrides=overrides, work_dir=str(work))
    return time.perf_counter() - started


def stage_seconds(work: Path) -> dict[str, float]:
    """Seconds each finished stage took, from its `.done` marker (fine-tunes summed)."""
    out: dict[str, float] = {}
    for marker in sorted(work.glob("*/*/.done")) + sorted(work.glob("finetune/*/*/*/.done")):
        info = read_json(marker)
        name = "finetune (sum of tasks)" if info.get("stage") == "finetune" else info.get("stage", marker.parent.name)
        out[name] = out.get(name, 0.0) + float(info.get("seconds", 0.0))
    return out


def spans(work: Path, stage: str) -> list[tuple[float, float]]:
    """(start, end) epoch seconds of every finished directory of `stage`, from the `.done` markers."""
    markers = work.glob("finetune/*/*/*/.done") if stage == "finetune" else work.glob(f"{stage}/*/.done")
    return [(i["finished"] - i["seconds"], i["finished"]) for i in map(read_json, markers) if i.get("stage") == stage]


def fanout_wall(work: Path) -> tuple[float, int]:
    """First fine-tune start to last fine-tune end, and how many fine-tunes ran."""
    tasks = spans(work, "finetune")
    if not tasks:
        raise RuntimeError(f"{work}: no finished fine-tunes")
    return max(end for _, end in tasks) - min(start for start, _ in tasks), len(tasks)


def overlap(work: Path) -> dict[str, float] | None:
    """Pre-training's span, the fine-tunes started before it ended, and the fan-out's wall time after it."""
    pretrain, tasks = spans(work, "pretrain"), spans(work, "finetune")
    if not pretrain or not tasks:
        return None
    start, end = pretrain[0]
    return {"pretrain_s": end - start, "started_during_pretrain": sum(s < end for s, _ in tasks),
            "after_pretrain_s": max(e for _, e in tasks) - end}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--concurrency", type=int, default=2, help="N of flow-n and fresh-n (default 2)")
    parser.add_argument("--runs", default="plain,flow-1,flow-n", help="comma-separated, of plain, plain-sub, flow-1, "
                        "flow-n, fresh-n (default: plain,flow-1,flow-n)")
    parser.add_argument("--work", help="keep the work dirs here (default: a temporary folder, removed)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    runs = args.runs.split(",")
    unknown = set(runs) - {"plain", "plain-sub", "flow-1", "flow-n", "fresh-n"}
    if unknown or ("flow-n" in runs and "flow-1" not in runs):
        parser.error(f"--runs {args.runs}: unknown {sorted(unknown)}" if unknown else
                     "--runs: flow-n takes its upstream stages from flow-1")
    from prefect.testing.utilities import prefect_test_harness

    root = Path(args.work or tempfile.mkdtemp(prefix="bench-pipeline-"))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    sequential = [*args.overrides, "orchestration.finetune_concurrency=1"]
    parallel = [*args.overrides, f"orchestration.finetune_concurrency={args.concurrency}"]
    totals: dict[str, float] = {}
    try:
        if "plain" in runs:
            totals["plain"] = run_plain(args.preset, sequential, root / "plain", uri)
        if "plain-sub" in runs:
            totals["plain-sub"] = run_plain(args.preset, sequential, root / "plain-sub", uri, subprocesses=True)
        with prefect_test_harness(server_startup_timeout=120):
            if "flow-1" in runs:
                totals["flow-1"] = run_flow(args.preset, sequential, root / "flow-1")
            if "flow-n" in runs:
                upstream = recipe.plan(load_config(args.preset, parallel), root / "flow-n")
                for stage in UPSTREAM:
                    source = root / "flow-1" / stage / upstream.ref(stage).key
                    if source.exists():
                        shutil.copytree(source, upstream.dir(stage))
                totals["flow-n"] = run_flow(args.preset, parallel, root / "flow-n")
            if "fresh-n" in runs:
                totals["fresh-n"] = run_flow(args.preset, parallel, root / "fresh-n")
        flows = [r for r in runs if not r.startswith("plain")]
        stages = stage_seconds(root / flows[0]) if flows else {}
        fanouts = {r: fanout_wall(root / r) for r in flows}
        overlaps = {r: overlap(root / r) for r in flows if r != "flow-n"}  # flow-n's pre-training is a copy
    finally:
        if not args.work:
            shutil.rmtree(root, ignore_errors=True)

    print(f"{args.preset} + {args.overrides or 'no overrides'}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    if stages:
        print(f"\nstage seconds ({flows[0]}, from the stages' .done markers)")
        for name, seconds in stages.items():
            print(f"  {name:26s} {seconds:8.1f}")
    print()
    for name, total in totals.items():
        line = f"{name:8s} end to end {total:7.1f} s"
        if name in fanouts:
            wall, tasks = fanouts[name]
            line += f"; fan-out of {tasks} fine-tunes {wall:6.1f} s wall (first start to last end)"
        if overlaps.get(name):
            o = overlaps[name]
            line += (f"; pre-training {o['pretrain_s']:.1f} s, {o['started_during_pretrain']} fine-tunes started "
                     f"during it, fan-out after it {o['after_pretrain_s']:.1f} s")
        print(line)
    if "plain" in totals and "plain-sub" in totals:
        plain, sub = totals["plain"], totals["plain-sub"]
        print(f"fine-tunes in one reused worker vs a process each: plain {plain:.1f} s vs plain-sub {sub:.1f} s "
              f"end to end ({sub - plain:+.1f} s)")
    if "plain" in totals and "flow-1" in totals:
        plain, flow_1 = totals["plain"], totals["flow-1"]
        print(f"orchestration overhead: flow-1 - plain = {flow_1 - plain:+.1f} s ({(flow_1 - plain) / plain:+.1%})")
    if "flow-1" in fanouts and "flow-n" in fanouts:
        (fan_1, _), (fan_n, _) = fanouts["flow-1"], fanouts["flow-n"]
        print(f"fan-out: sequential {fan_1:.1f} s, concurrency {args.concurrency} {fan_n:.1f} s -> {fan_1 / fan_n:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "runs": runs, "overrides": args.overrides, "concurrency": args.concurrency, "stages": stages,
            "totals_s": totals, "fanouts": {r: {"wall_s": w, "finetunes": n} for r, (w, n) in fanouts.items()},
            "overlaps": overlaps, "loadavg": os.getloadavg()}, indent=2))
    figures: dict = {"totals_s": totals, "fanout_wall_s": {r: w for r, (w, _) in fanouts.items()}}
    if "plain" in totals and "flow-1" in totals:
        figures["overhead_flow1_vs_plain"] = (totals["flow-1"] - totals["plain"]) / totals["plain"]
    if "plain" in totals and "plain-sub" in totals:
        figures["reused_worker_saves_s"] = totals["plain-sub"] - totals["plain"]
    if "flow-1" in fanouts and "flow-n" in fanouts:
        figures[f"fanout_speedup_{args.concurrency}"] = fanouts["flow-1"][0] / fanouts["flow-n"][0]
    record(figures)

if __name__ == "__main__":
    main()
