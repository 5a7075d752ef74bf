"""Pre-training settings for `mini` chosen on held-out train text, never dev: each candidate's validation loss on a
quarter-size proxy of the recipe, with the same number of passes over its text.

    python benchmarks/bench_pretrain_search.py --books ../shared/data/books --glue ../shared/data/glue-full \
        --work runs/pretrain-search base= d0=model.embd_pdrop=0,model.attn_pdrop=0,model.resid_pdrop=0 \
        lr2e-3=pretrain.lr=2e-3 lr5e-4=pretrain.lr=5e-4

The proxy: the `mini` preset with a quarter of its books (`ingest.max_chars`) and of each headline task's train rows
(every 4th), and a quarter of its updates, so the passes over the unique tokens match. Each task's train file first
gives up an evenly spaced slice that stands in for dev (SST-2 2,000 rows, STS-B 1,000, MRPC 600): those rows never
reach pre-training, and the leak check removes their sentences from the books too. The score is the validation
loss on the held-out books and task rows, beside the unigram and bigram models of the same tokens. Each setting
(NAME=override[,override...]) runs ingest, tokenizer, tokenize and pre-training through the recipe's own steps in
WORK (what they share is built once); a row per setting goes to benchmarks/results.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from results import record

HELD_OUT = {"SST-2": 2000, "STS-B": 1000, "MRPC": 600}  # rows per task folder that stand in for dev
SHARE = 4  # the proxy keeps 1 in SHARE of the books, the train rows and the updates


def proxy_tasks(glue: Path, out: Path, share: int = SHARE) -> None:
    """Each task folder as the proxy sees it: train.tsv every `share`-th row left after the held-out slice, which
    becomes dev.tsv (a header kept)."""
    for folder, held_rows in HELD_OUT.items():
        lines = (glue / folder / "train.tsv").read_text(encoding="utf-8").splitlines()
        header, rows = lines[:1], lines[1:]
        step = len(rows) / held_rows
        held = {int(i * step) for i in range(held_rows)}
        kept = [row for i, row in enumerate(rows) if i not in held]
        (out / folder).mkdir(parents=True, exist_ok=True)
        (out / folder / "train.tsv").write_text("\n".join(header + kept[::share]) + "\n", encoding="utf-8")
        dev = [row for i, row in enumerate(rows) if i in held]
        (out / folder / "dev.tsv").write_text("\n".join(header + dev) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--books", type=Path, required=True, help="a folder of .txt books")
    parser.add_argument("--glue", type=Path, required=True, help="GLUE task folders (SST-2/, STS-B/, MRPC/)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("settings", nargs="+", metavar="NAME=OVERRIDES", help="e.g. d0=model.resid_pdrop=0")
    args = parser.parse_args()

    from gpt1.config import load_config
    from gpt1.io import read_json
    from gpt1.pipeline.run import run_step
    from gpt1.recipe import plan as make_plan

    mini = load_config("mini")
    proxy_tasks(args.glue, args.work / "tasks")
    base = [
        f"ingest.source={args.books.resolve()}",
        f"finetune.data={(args.work / 'tasks').resolve()}",
        f"ingest.max_chars={mini.ingest.max_chars // SHARE}",
        f"pretrain.max_steps={mini.pretrain.max_steps // SHARE}",
        f"pretrain.eval_every={mini.pretrain.max_steps // SHARE // 5}",
        f"pretrain.save_every={mini.pretrain.max_steps // SHARE}",
        f"pretrain.probe_every={mini.pretrain.max_steps}",  # no zero-shot probes: the loss is the score
        f"tracking.tracking_uri=sqlite:///{(args.work / 'mlflow.db').resolve()}",
    ]
    for spec in args.settings:
        name, _, overrides = spec.partition("=")
        plan = make_plan(load_config("mini", [*base, *filter(None, overrides.split(","))]), args.work)
        started = time.perf_counter()
        for step in ("ingest", "train-tokenizer", "tokenize", "pretrain"):
            run_step(plan, step, log_line=lambda line: None)
        lm = read_json(plan.dir("pretrain") / "final" / "training.json")["language_model"]
        result = {"setting": name, "overrides": overrides or "(the preset's)", **lm,
                  "seconds": round(time.perf_counter() - started)}
        print(result, flush=True)
        record(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
