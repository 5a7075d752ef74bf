"""Orchestration: wall time by stage, the fine-tune fan-out vs the tasks one after another, and what Prefect adds
on top of calling `gpt1.pipeline` directly.

Three runs of one config on this machine, one after the other, each in its own work dir:

  plain        the `gpt1.pipeline` stage functions called in order, fine-tunes one at a time (no Prefect)
  flow x1      the `gpt1` Prefect flow, orchestration.finetune_concurrency=1 (same work as `plain`)
  flow xN      the same flow with finetune_concurrency=N, its upstream stages copied from `flow x1` (so cached:
               only the fan-out and the report run)

Stage times are read from each stage's `.done` marker (the seconds the stage itself measured); the fan-out's wall
time is first fine-tune start to last fine-tune end, from the same markers. Orchestration overhead = `flow x1`
total minus `plain` total (Prefect task runs, stage child runs in MLflow, result persistence), as a share of `plain`.
The runs go in this order, so `plain` pays cold caches (file cache, first imports): read a small negative
overhead as "not resolvable", not as Prefect being faster. Prefect runs in-process against a temporary local server (`prefect_test_harness`); MLflow logs to a local sqlite
store in every run. Fine-tunes are subprocesses, so the fan-out's parallelism is real, bounded by the cores.

    python benchmarks/bench_pipeline.py --set pretrain.max_steps=100 --set finetune.epochs=1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from gpt1 import pipeline as P
from gpt1.config import load_config
from gpt1.io import read_json

UPSTREAM = ("sample", "ingest", "tokenizer", "shards", "pretrain")


def run_plain(preset: str, overrides: list[str], work: Path, uri: str) -> float:
    """Every stage in order without Prefect; fine-tunes sequential."""
    plan = P.Plan.make(load_config(preset, overrides), work)
    started = time.perf_counter()
    quiet = lambda line: None  # noqa: E731 - subprocess output is not what is measured
    if plan.cfg.data.source == "sample" or plan.cfg.finetune.data == "sample":
        P.run_sample_data(plan)
    corpus = P.run_ingest(plan)
    tok = P.run_train_tokenizer(plan, corpus)
    shards = P.run_tokenize(plan, corpus, tok)
    checkpoint = P.run_pretrain(plan, shards, tok, tracking_uri=uri, log_line=quiet)
    for variant in plan.variants:
        for task in plan.cfg.finetune.tasks:
            P.run_finetune(plan, task, checkpoint, tok, variant, tracking_uri=uri, log_line=quiet)
    P.run_report(plan, tracking_uri=uri, log_line=quiet)
    return time.perf_counter() - started


def run_flow(preset: str, overrides: list[str], work: Path) -> float:
    from flows.pipeline import gpt1_pipeline

    started = time.perf_counter()
    gpt1_pipeline(preset=preset, overrides=overrides, work_dir=str(work))
    return time.perf_counter() - started


def stage_seconds(work: Path) -> dict[str, float]:
    """Seconds each finished stage took, from its `.done` marker (fine-tunes summed)."""
    out: dict[str, float] = {}
    for marker in sorted(work.glob("*/*/.done")) + sorted(work.glob("finetune/*/*/.done")):
        info = read_json(marker)
        name = "finetune (sum of tasks)" if info.get("stage") == "finetune" else info.get("stage", marker.parent.name)
        out[name] = out.get(name, 0.0) + float(info.get("seconds", 0.0))
    return out


def fanout_wall(work: Path) -> tuple[float, int]:
    """First fine-tune start to last fine-tune end, and how many fine-tunes ran."""
    spans = [(i["finished"] - i["seconds"], i["finished"])
             for i in map(read_json, work.glob("finetune/*/*/.done")) if i.get("stage") == "finetune"]
    if not spans:
        raise RuntimeError(f"{work}: no finished fine-tunes")
    return max(end for _, end in spans) - min(start for start, _ in spans), len(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--concurrency", type=int, default=2, help="N of `flow xN` (default 2)")
    parser.add_argument("--work", help="keep the work dirs here (default: a temporary folder, removed)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    from prefect.testing.utilities import prefect_test_harness

    root = Path(args.work or tempfile.mkdtemp(prefix="bench-pipeline-"))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    sequential = [*args.overrides, "orchestration.finetune_concurrency=1"]
    parallel = [*args.overrides, f"orchestration.finetune_concurrency={args.concurrency}"]
    try:
        plain = run_plain(args.preset, sequential, root / "plain", uri)
        with prefect_test_harness(server_startup_timeout=120):
            flow_1 = run_flow(args.preset, sequential, root / "flow-1")
            upstream = P.Plan.make(load_config(args.preset, parallel), root / "flow-n")
            for stage in UPSTREAM:
                source = root / "flow-1" / stage / upstream.keys[stage]
                if source.exists():
                    shutil.copytree(source, upstream.dir(stage))
            flow_n = run_flow(args.preset, parallel, root / "flow-n")
        stages = stage_seconds(root / "flow-1")
        (fan_1, tasks), (fan_n, _) = fanout_wall(root / "flow-1"), fanout_wall(root / "flow-n")
    finally:
        if not args.work:
            shutil.rmtree(root, ignore_errors=True)

    print(f"{args.preset} + {args.overrides or 'no overrides'}, {os.cpu_count()} cores")
    print("\nstage seconds (flow x1, from the stages' .done markers)")
    for name, seconds in stages.items():
        print(f"  {name:26s} {seconds:8.1f}")
    print(f"\nend to end: plain {plain:.1f} s, flow x1 {flow_1:.1f} s -> orchestration overhead "
          f"{flow_1 - plain:+.1f} s ({(flow_1 - plain) / plain:+.1%})")
    print(f"fan-out of {tasks} fine-tunes: sequential {fan_1:.1f} s, concurrency {args.concurrency} {fan_n:.1f} s "
          f"-> {fan_1 / fan_n:.2f}x (flow xN total {flow_n:.1f} s with cached upstream stages)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "stages": stages, "plain_s": plain, "flow_1_s": flow_1, "flow_n_s": flow_n, "overhead_s": flow_1 - plain,
            "fanout_sequential_s": fan_1, "fanout_parallel_s": fan_n, "concurrency": args.concurrency,
            "finetunes": tasks}, indent=2))


if __name__ == "__main__":
    main()
