"""The `gpt1/mini` deployment from an empty work folder, timed, with its verdict: the figures docs/mini.md gives.

    make demo && source .demo/env        # the local Prefect and MLflow servers and a worker
    python benchmarks/bench_mini.py --books ../shared/data/books --glue ../shared/data/glue-full --work runs/mini
    python benchmarks/bench_mini.py ... --deployment gpt1/mini-books     # the same recipe without the task text

It starts the deployment through scripts/watch_run.py, as a user would, with the offline copies as overrides
(`ingest.source`, `finetune.data`) and the flow's `work_dir` set to WORK, which must be empty: nothing an earlier
run computed is reused. When the run ends it reads the report (WORK/report/<key>/results.json) and the stages'
timings, writes WORK/summary.md and adds a row to benchmarks/results.md: the wall time against the 75-minute
budget, the headline mean difference with its interval and verdict, each seed's and each task's difference beside
the task's non-neural baseline, the language model's validation loss beside the bigram's, and what the corpus
was made of. Measure on a quiet machine (load under 0.5 before it starts): the pre-training shares nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 75 * 60


def start(deployment: str, overrides: list[str], work: Path, log: Path) -> tuple[int, float]:
    """Run the deployment and follow it to its end (watch_run.py); its exit code and wall seconds."""
    params = json.dumps({"overrides": overrides, "work_dir": str(work)})
    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.call([sys.executable, str(REPO / "scripts" / "watch_run.py"), deployment, "--params", params],
                               stdout=out, stderr=subprocess.STDOUT)
    return code, time.perf_counter() - started


def stage_seconds(work: Path, report: dict) -> dict[str, float]:
    """Pre-training's seconds (from its resolved config, written at its start, to its final training.json) and the
    fine-tunes' (each one's wall_seconds), summed."""
    found = {}
    for final in work.glob("pretrain/*/final/training.json"):
        found["pretrain"] = round(final.stat().st_mtime - (final.parent.parent / "config.json").stat().st_mtime, 1)
    found["finetunes"] = round(sum(task.get("wall_seconds") or 0.0 for run in report["runs"].values()
                                   for task in run["tasks"].values()), 1)
    found["finetune_count"] = sum(len(run["tasks"]) for run in report["runs"].values())
    return found


def summarise(report: dict) -> dict:
    """The figures of the report's first comparison (the full run against its from-scratch twin)."""
    compared = report["comparisons"][0]
    mean = compared["headline"]
    found = {"headline": {k: mean.get(k) for k in ("difference", "low", "high", "verdict", "pretrained",
                                                   "from_scratch", "baseline")},
             "tasks": {task: {k: entry.get(k) for k in ("metric", "pretrained", "from_scratch", "difference", "low",
                                                        "high", "baseline")}
                       for task, entry in compared["tasks"].items() if "difference" in entry},
             "per_seed": {f"seed_{s['seed']}": s.get("difference") for s in compared.get("per_seed", [])}}
    pretraining = compared.get("pretraining") or {}
    if pretraining.get("language_model"):
        model = pretraining["language_model"]
        found["lm"] = {k: model[k] for k in ("val_loss", "bigram_loss", "unigram_loss", "beats_bigram_by")}
    if pretraining.get("corpus"):
        corpus = pretraining["corpus"]
        found["corpus"] = {**{f"tokens_{k}": v for k, v in corpus["train_tokens"].items()},
                           "blocks_starting_a_document": corpus["blocks_starting_a_document"],
                           **({f"leak_removed_{k}": v for k, v in corpus["leak_check"]["sentences_removed"].items()}
                              if corpus.get("leak_check") else {})}
    found["pretraining_tokens"] = pretraining.get("tokens_seen")
    return found


def markdown(deployment: str, seconds: float, figures: dict, stages: dict[str, float]) -> str:
    mean = figures["headline"]
    lines = [f"# {deployment}: {seconds / 60:.1f} min (budget {BUDGET_S // 60})", "",
             f"Headline mean difference {mean['difference']:+.1f} [{mean['low']:+.1f}, {mean['high']:+.1f}]: "
             f"{mean['verdict']}.", "", "| task | metric | pre-trained | from scratch | difference | 95% interval | "
             "non-neural |", "|---|---|---:|---:|---:|---:|---:|"]
    for task, t in figures["tasks"].items():
        bar = "—" if t["baseline"] is None else f"{t['baseline']:.1f}"
        lines.append(f"| {task} | {t['metric']} | {t['pretrained']:.1f} | {t['from_scratch']:.1f} | "
                     f"{t['difference']:+.1f} | [{t['low']:+.1f}, {t['high']:+.1f}] | {bar} |")
    if figures["per_seed"]:
        lines += ["", "Per seed: " + ", ".join(f"{k} {v:+.1f}" for k, v in figures["per_seed"].items())]
    if "lm" in figures:
        lm = figures["lm"]
        lines += ["", f"Validation loss {lm['val_loss']:.3f}, interpolated bigram {lm['bigram_loss']:.3f}, unigram "
                      f"{lm['unigram_loss']:.3f} nats/token."]
    lines += ["", f"Pre-training {stages.get('pretrain', 0):,.0f} s; {stages['finetune_count']} fine-tunes "
              f"{stages['finetunes']:,.0f} s together (each on one core, two at a time)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--books", required=True, type=Path, help="a folder of .txt books (ingest.source)")
    parser.add_argument("--glue", required=True, type=Path, help="a folder of GLUE task folders (finetune.data)")
    parser.add_argument("--work", required=True, type=Path, help="the run's work folder: absent or empty")
    parser.add_argument("--deployment", default="gpt1/mini", help="gpt1/mini (default) or gpt1/mini-books")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="more overrides (a reduced budget for a check of the mechanics)")
    args = parser.parse_args()
    if not os.environ.get("PREFECT_API_URL"):
        parser.error("no PREFECT_API_URL: run `make demo` (it starts the servers and a worker), then "
                     "`source .demo/env`")
    work = args.work.resolve()
    if work.exists() and any(work.iterdir()):
        parser.error(f"--work {work} is not empty: the run must start from nothing")
    work.mkdir(parents=True, exist_ok=True)
    overrides = [f"ingest.source={args.books.resolve()}", f"finetune.data={args.glue.resolve()}", *args.overrides]
    load = os.getloadavg()[0]
    code, seconds = start(args.deployment, overrides, work, work / "watch.log")
    if code != 0:
        print(f"{args.deployment} ended with exit {code}; see {work / 'watch.log'}", file=sys.stderr)
        return 1
    [report_json] = sorted(work.glob("report/*/results.json"))
    report = json.loads(report_json.read_text(encoding="utf-8"))
    figures = summarise(report)
    stages = stage_seconds(work, report)
    (work / "summary.md").write_text(markdown(args.deployment, seconds, figures, stages), encoding="utf-8")
    print((work / "summary.md").read_text(encoding="utf-8"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    from results import record

    record({"deployment": args.deployment, "seconds": round(seconds), "budget_s": BUDGET_S,
            "load_before": round(load, 2), **figures, "stage_seconds": stages})
    return 0


if __name__ == "__main__":
    sys.exit(main())
