"""The `mini` preset's claim on real data, from the CLI stages: fine-tuned after pre-training vs the same model
fine-tuned from a random init (the paper's Table 5 "no pre-training") vs the majority class, on the complete
train/dev files of CoLA, SST-2, MRPC, STS-B and RTE, at several pre-training budgets of one run (the curve).

    python benchmarks/bench_mini.py --work runs/mini                          # the preset as it is
    python benchmarks/bench_mini.py --work runs/mini --budgets 0.25 0.5 1     # the curve: gain vs pre-training tokens
    python benchmarks/bench_mini.py --work runs/ci --set pretrain.max_steps=40 --tasks rte   # mechanics only

Stages, each a `gpt1` subprocess (skipped when its output is already in WORK, so an interrupted run continues):
ingest -> train-tokenizer -> tokenize -> pretrain (for each budget b < 1 the model at update b x max_steps written
as it passes, `pretrain.curve_steps`) -> `gpt1 finetune` of every task from every budget's model and from a random
init (`finetune.from_scratch=true`), `--workers` at a time with `--threads` threads each -> `gpt1 report` of every
budget beside the ablation (its curve) -> WORK/summary.md + summary.json.

The peer of every pre-trained score is its no-pre-training twin in the same run (same shape, tokenizer, data and
fine-tuning settings); the claim checked is the paper's Table 5 shape: the pre-trained model beats the twin on
the mean of the tasks' primary metrics and on all but at most one task. Only train.tsv and dev.tsv are read:
WORK/taskdata/<Task>/ links to them, so the test files are never opened (scores are on dev, as the paper tuned).

Measured per stage: wall seconds, CPU seconds of its process tree and the peak RSS of its largest process
(os.wait4), and the load average before and after it. With `--overlap` the from-scratch fine-tunes start as soon
as the shards exist and share the machine with pre-training, as the local flow runs them; without it (default)
pre-training runs alone, which is what its time should be read from.

Choices: a budget b < 1 is a point on the cosine schedule of the full run, not a run annealed to that budget (its
lr has not decayed), so it likely understates what a run of that length gives.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpt1.config import load_config
from gpt1.pretrain.inputs import curve_point
from gpt1.io import read_json, write_json, write_text

TASK_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE"}
SCRATCH = "no_pretrain"


def run_stage(name: str, args: list[str], log_dir: Path, threads: int, timings: dict, lock: threading.Lock) -> None:
    """`gpt1 ARGS` with its output in LOG_DIR/NAME.log; records wall/CPU seconds, peak RSS and load; raises on
    failure with the log's tail."""
    log_path = log_dir / f"{name.replace('/', '_')}.log"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MLFLOW_DISABLE_TELEMETRY": "true",
           "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu")}
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gpt1.cli", *args], stdout=log, stderr=subprocess.STDOUT,
                                env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    record = {"wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
              "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "load_before": round(load_before, 2),
              "load_after": round(os.getloadavg()[0], 2), "threads": threads}
    with lock:
        timings[name] = record
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise RuntimeError(f"stage {name} exited {code}; {log_path}:\n" + "\n".join(tail))
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {record}", flush=True)


def task_data(source: Path, work: Path, tasks: list[str]) -> Path:
    """WORK/taskdata/<Task>/{train,dev}.tsv as links to SOURCE's files: the test files are never opened."""
    root = work / "taskdata"
    for task in tasks:
        folder = root / TASK_FOLDERS[task]
        folder.mkdir(parents=True, exist_ok=True)
        for split in ("train.tsv", "dev.tsv"):
            target = (source / TASK_FOLDERS[task] / split).resolve()
            if not target.is_file():
                raise FileNotFoundError(f"{target}: missing ({task} needs train.tsv and dev.tsv)")
            link = folder / split
            if not link.is_symlink():
                link.symlink_to(target)
    return root


def write_random_init(cfg, vocab_size: int, tokenizer_dir: Path, out: Path) -> Path:
    """A model folder with the preset's shape (config.json + tokenizer): what from-scratch fine-tuning reads."""
    from gpt1.data.train_tokenizer import bpe
    from gpt1.io import write_json as write

    write(out / "config.json", cfg.model.model_copy(update={"vocab_size": vocab_size}).model_dump())
    bpe.load(tokenizer_dir).save(out)
    return out


def primary(result_dir: Path) -> tuple[float, float] | None:
    path = result_dir / "metrics.json"
    if not path.is_file():
        return None
    metrics = read_json(path)
    return metrics["metrics"]["primary"], metrics["majority"]["primary"]


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "—" if value is None else format(value, spec)


def mean(values: list[float | None]) -> float | None:
    return sum(values) / len(values) if values and None not in values else None


def summarise(work: Path, budgets: list[float], steps: dict[float, int], tokens_per_step: int, tasks: list[str],
              timings: dict) -> dict:
    """summary.md + summary.json: per budget the primary metrics, their mean, the wins over no pre-training."""
    scratch = {t: primary(work / "finetune" / SCRATCH / t) for t in tasks}
    base = [scratch[t][0] if scratch[t] else None for t in tasks]
    majority = [scratch[t][1] if scratch[t] else None for t in tasks]
    lines = ["Primary metrics on the complete dev sets (CoLA MCC, SST-2 acc, MRPC F1, STS-B Pearson, RTE acc), %.", "",
             "| variant | pre-training tokens | " + " | ".join(TASK_FOLDERS[t] for t in tasks) +
             " | mean | wins vs no pre-training |", "|" + "---|" * (len(tasks) + 4)]
    rows = []
    for budget in sorted(budgets):
        scores = [primary(work / "finetune" / f"budget_{budget:g}" / t) for t in tasks]
        full = [s[0] if s else None for s in scores]
        wins = sum(1 for f, b in zip(full, base) if f is not None and b is not None and f > b)
        gain = None if mean(full) is None or mean(base) is None else mean(full) - mean(base)
        rows.append({"budget": budget, "steps": steps[budget], "tokens": steps[budget] * tokens_per_step,
                     "scores": dict(zip(tasks, full)), "mean": mean(full), "wins": wins, "gain": gain})
        lines.append(f"| pre-trained ({budget:g} of the run) | {steps[budget] * tokens_per_step:,} | " +
                     " | ".join(map(fmt, full)) + f" | {fmt(mean(full), '.2f')} | {wins}/{len(tasks)} |")
    lines.append("| no pre-training | 0 | " + " | ".join(map(fmt, base)) + f" | {fmt(mean(base), '.2f')} | |")
    lines.append("| majority class | | " + " | ".join(map(fmt, majority)) + f" | {fmt(mean(majority), '.2f')} | |")
    final = rows[-1]
    shape = final["gain"] is not None and final["gain"] > 0 and final["wins"] >= len(tasks) - 1
    curve = ", ".join(f"{r['tokens']:,} tokens {fmt(r['gain'], '+.2f')} ({r['wins']}/{len(tasks)})" for r in rows)
    lines += ["", f"Mean gain over no pre-training (wins) by pre-training tokens: {curve}",
              f"Table 5 shape at the largest budget (mean gain > 0 and wins on >= {len(tasks) - 1} of {len(tasks)}): "
              f"{'yes' if shape else 'no'}", "",
              "Stages: wall s / CPU s / peak RSS MB (largest process) / load average before -> after / threads", ""]
    lines += [f"- {name}: {t['wall_s']} / {t['cpu_s']} / {t['peak_rss_mb']} / {t['load_before']} -> "
              f"{t['load_after']} / {t['threads']}" for name, t in timings.items()]
    summary = {"rows": rows, "no_pretrain": dict(zip(tasks, base)), "majority": dict(zip(tasks, majority)),
               "table5_shape": shape, "timings": timings}
    write_json(work / "summary.json", summary)
    write_text(work / "summary.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, type=Path, help="folder for every stage's output")
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--source", help="corpus source (default: the preset's ingest.source)")
    parser.add_argument("--data", type=Path, help="folder of GLUE task folders (default: the preset's finetune.data "
                                                  "when it is a folder; the mini preset reads the hub, so give one)")
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASK_FOLDERS), help="default: the preset's five")
    parser.add_argument("--budgets", nargs="+", type=float, default=[1.0],
                        help="fractions of pretrain.max_steps to fine-tune from (1 = the final weights)")
    parser.add_argument("--workers", type=int, default=2, help="fine-tunes at once")
    parser.add_argument("--threads", type=int, default=1, help="OMP threads of each fine-tune")
    parser.add_argument("--pretrain-threads", type=int, default=2)
    parser.add_argument("--overlap", action="store_true",
                        help="start the from-scratch fine-tunes beside pre-training (as the local flow does)")
    args = parser.parse_args()

    cfg = load_config(args.preset, [*args.overrides, "pretrain.curve_steps=[]"])  # the budgets set the curve
    if not cfg.pretrain.max_steps:
        parser.error("the preset must set pretrain.max_steps (budgets are fractions of it)")
    if any(not 0 < b <= 1 for b in args.budgets):
        parser.error("--budgets: fractions in (0, 1]")
    if args.data is None and cfg.finetune.data in ("hf", "sample"):
        parser.error(f"--data: the preset's finetune.data is {cfg.finetune.data!r}; give a folder of GLUE task folders "
                     "(this benchmark links their train.tsv and dev.tsv)")
    tasks = args.tasks or [t for t in cfg.finetune.tasks if t in TASK_FOLDERS]
    work = args.work.resolve()
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    timings_path = work / "timings.json"
    timings: dict = read_json(timings_path) if timings_path.is_file() else {}
    lock = threading.Lock()
    data = task_data(args.data or Path(cfg.finetune.data), work, tasks)

    def stage(name: str, argv: list[str], done: Path, threads: int) -> None:
        if not done.exists():
            run_stage(name, argv, logs, threads, timings, lock)
            with lock:
                write_json(timings_path, timings)

    max_steps = cfg.pretrain.max_steps
    steps = {b: max(1, round(b * max_steps)) for b in args.budgets}
    curve = sorted({s for s in steps.values() if s != max_steps})
    sets = [a for o in [*args.overrides, f"pretrain.curve_steps={curve}"] for a in ("--set", o)]

    stage("ingest", ["ingest", "--source", args.source or cfg.ingest.source, "--out", str(work / "corpus"),
                     "--val-fraction", str(cfg.ingest.val_fraction), "--no-progress"],
          work / "corpus" / "stats.json", 1)
    stage("train-tokenizer", ["train-tokenizer", "--corpus", str(work / "corpus"), "--out", str(work / "tokenizer"),
                              "--merges", str(cfg.train_tokenizer.merges)], work / "tokenizer" / "tokenizer.json", 1)
    stage("tokenize", ["tokenize", "--corpus", str(work / "corpus"), "--tokenizer", str(work / "tokenizer"),
                       "--out", str(work / "shards"), "--preset", args.preset, "--ctx", str(cfg.model.n_ctx),
                       "--workers", str(cfg.tokenize.workers), "--no-progress"], work / "shards" / "manifest.json",
          cfg.tokenize.workers)
    vocab = read_json(work / "shards" / "manifest.json")["vocab_size"]
    scratch_init = write_random_init(cfg, vocab, work / "tokenizer", work / "models" / "random_init")

    def finetune(variant: str, task: str, checkpoint: Path) -> None:
        out = work / "finetune" / variant / task
        extra = ["--set", "finetune.from_scratch=true"] if variant == SCRATCH else []
        stage(f"finetune/{variant}/{task}",
              ["finetune", "--task", task, "--data", str(data / TASK_FOLDERS[task]), "--checkpoint", str(checkpoint),
               "--out", str(out), "--preset", args.preset, *sets, *extra, "--no-tracking"],
              out / "metrics.json", args.threads)

    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        scratch_jobs = [pool.submit(finetune, SCRATCH, t, scratch_init) for t in tasks] if args.overlap else []
        stage("pretrain", ["pretrain", "--preset", args.preset, *sets, "--shards", str(work / "shards"),
                           "--out", str(work / "pretrain"), "--tokenizer", str(work / "tokenizer"),
                           "--task-data", str(data), "--resume", "auto"],
              work / "pretrain" / "final" / "training.json", args.pretrain_threads)
        start = {b: work / "pretrain" / ("final" if s == max_steps else curve_point(s)) for b, s in steps.items()}
        jobs = scratch_jobs or [pool.submit(finetune, SCRATCH, t, scratch_init) for t in tasks]
        jobs += [pool.submit(finetune, f"budget_{b:g}", t, start[b]) for b in sorted(args.budgets, reverse=True)
                 for t in tasks]
        failures = [j.exception() for j in jobs if j.exception() is not None]
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)

    budgets = [f"budget_{b:g}" for b in sorted(args.budgets)]
    labels = [*budgets[:-1], "full", SCRATCH]  # the report's curve: every budget against the same twin
    headline = ["--headline", *cfg.report.headline_tasks] if cfg.report.headline_tasks else []
    stage("report", ["report", "--results", *(str(work / "finetune" / name) for name in [*budgets, SCRATCH]),
                     "--labels", *labels, *headline, "--out", str(work / "report")],
          work / "report" / "results.md", 1)
    tokens_per_step = cfg.pretrain.global_batch_size * cfg.model.n_ctx
    summary = summarise(work, args.budgets, steps, tokens_per_step, tasks, timings)
    from results import record  # not at the top: tests load this file without benchmarks/ on sys.path

    record({"tasks": "/".join(tasks), "failed_finetunes": len(failures),
            **{f"budget_{r['budget']:g}": {"tokens": r["tokens"], "mean": r["mean"], "gain": r["gain"],
                                           "wins": r["wins"]} for r in summary["rows"]},
            "table5_shape": summary["table5_shape"]})
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
