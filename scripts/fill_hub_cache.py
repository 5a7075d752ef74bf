"""Fill the Hugging Face cache with the task data a run reads from the hub, before the cluster goes offline.

    python scripts/fill_hub_cache.py --preset paper [--set KEY=VALUE ...]      # where there is network
    python scripts/fill_hub_cache.py --preset paper --check                    # offline: what the cache lacks

The cluster's processes read the hub from the cache only (`HF_HUB_OFFLINE=1`, `HF_DATASETS_OFFLINE=1` in the image,
the pools, the multi-node Job and the Slurm script): a node never waits on the network mid-run. Run this once, with
`HF_HOME` pointing at the cache the cluster mounts (`/cache/huggingface` on the `gpt1-cache` claim), from any
machine with network and this repository's environment. Each split a fine-tune reads (train, dev, the paper's
evaluation splits and test) is loaded through gpt1's own task loader, so the cache holds exactly what the run
asks for, at the pinned revision. With `--check` nothing is fetched: the offline switches are set and every split
must load from the cache (what `gpt1 preflight` does for hub tasks when offline).

A hub corpus (`ingest.source=hf:...`) is streamed at ingestion, and a stream is not cached: give the cluster a local
copy instead (`ingest.source=DIR`); this script says so for a run that names one. Exit status: 0 when every split
loaded, 2 when one did not (each named on its own line).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpt1 import tasks
from gpt1.config import load_config
from gpt1.errors import exit_code, one_line
from gpt1.finetune.train import held_out_splits
from gpt1.recipe.experiment import Experiment
from gpt1.stages.base import add_config_args

OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def hub_splits(experiment: Experiment) -> list[tuple[str, str, str]]:
    """(task, hub reference, split) for every split the run's fine-tunes read from the hub."""
    wanted = []
    for task in experiment.tasks:
        spec = tasks.get(task)
        where = "" if experiment.reads_samples(task) else experiment.task_source(task)
        if where.startswith("hf:") and not spec.hf_manual:
            wanted += [(task, where, s) for s in ["train", *held_out_splits(spec)]]
    return wanted


def fill(preset: str, overrides: list[str], check_only: bool) -> int:
    cfg = load_config(preset, overrides)
    # the switches are read when the hub libraries are imported, which the first load does
    if {"datasets", "huggingface_hub"} & set(sys.modules):
        raise RuntimeError("the hub libraries were imported before the offline switches were set")
    for name in OFFLINE_SWITCHES:
        if check_only:
            os.environ[name] = "1"
        else:
            os.environ.pop(name, None)
    failed = 0
    wanted = hub_splits(Experiment(cfg, Path(os.devnull)))
    for task, where, split in wanted:
        try:
            data = tasks.load(task, where, split)
        except Exception as err:  # noqa: BLE001 - each split's outcome is reported, then the next is tried
            failed += 1
            print(f"missing  {task}/{split} from {where}: {one_line(err)}")
        else:
            print(f"cached   {task}/{split} from {where}: {len(data.examples)} examples")
    if cfg.ingest.source.startswith("hf:"):
        print(
            f"note: ingest.source {cfg.ingest.source} is streamed at ingestion and not cached: give the "
            "cluster a local copy (ingest.source=DIR of .txt/.jsonl/.parquet files)"
        )
    print(f"{len(wanted) - failed} of {len(wanted)} hub task splits in the cache")
    return 2 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_args(parser, example="finetune.tasks=[sst2]")
    parser.add_argument(
        "--check", action="store_true", help="fetch nothing: check each split loads from the cache"
    )
    args = parser.parse_args(argv)
    return exit_code(lambda: fill(args.preset, args.overrides, args.check), prefix="fill_hub_cache")


if __name__ == "__main__":
    sys.exit(main())
