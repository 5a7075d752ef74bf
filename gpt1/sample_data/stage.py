"""Stage `sample-data`: the offline sample data (generated books + every registered task in its official layout).

    gpt1 sample-data --out DIR [--seed N]

The output depends on the seed and the generator's version only (the same seed writes byte-identical files), so
those are the key. See gpt1.sample_data for what is generated and why.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gpt1.sample_data import GENERATOR_VERSION, write_sample_data
from gpt1.stages.base import StageJob, add_output_args, run_from_args


@dataclass(frozen=True)
class Job(StageJob):
    stage: ClassVar[str] = "sample-data"
    summary: ClassVar[str] = (
        "write the offline sample corpus and the tasks in their official layouts"
    )
    section: ClassVar[str] = "sample_data"
    seed: int = 0

    def identity(self) -> dict:
        return {"seed": self.seed, "generator": GENERATOR_VERSION}

    def build(self, out: Path) -> dict:
        return {"summary": write_sample_data(out, seed=self.seed)}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", required=True, type=Path, help="output directory (books/ and tasks/ go here)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="random seed; the same seed writes identical files"
    )
    add_output_args(parser)


def run_cli(args: argparse.Namespace) -> int:
    result = run_from_args(Job(seed=args.seed), args)
    summary = result.marker["summary"]
    print(
        f"wrote {result.path}/books: {summary['books']['files']} books, {summary['books']['bytes'] / 1e6:.2f} MB"
    )
    for task, splits in summary["tasks"].items():
        print(
            f"wrote {result.path}/tasks {task}: " + ", ".join(f"{k} {v}" for k, v in splits.items())
        )
    return 0
