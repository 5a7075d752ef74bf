"""`python -m tests.battery [--fast] [--only TEXT] [--show CLASS ...] [--work DIR]`: run the failure battery and print
its counts per category and class (tests/battery/__init__.py says what each class means).

Exit status 1 when any case is traceback or silent-wrong, or when 5 or more are cryptic; 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("GPT1_MLFLOW_FLUSH_TIMEOUT", "3")  # runs against a dead server: no 120 s wait at each end
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.battery import catalog  # noqa: E402 - after the environment above
from tests.battery.core import Tally, run_case  # noqa: E402
from tests.battery.fixtures import Fixtures  # noqa: E402

MAX_CRYPTIC = 5


def run(fast: bool, only: str | None, work: Path, report, show: set[str]) -> Tally:
    cases = [c for c in catalog.all_cases() if (c.fast or not fast) and (only is None or only in c.id)]
    fx = Fixtures(work / "fixtures")
    tally = Tally()
    started = time.perf_counter()
    for i, case in enumerate(cases, start=1):
        result = run_case(case, fx, work / "cases")
        tally.results.append(result)
        if result.verdict in show:
            report(f"[{i}/{len(cases)}] {result.verdict:13} {case.id} ({result.outcome.seconds:.1f}s)\n    "
                   + result.why.replace("\n", "\n    "))
    report(f"\n{len(cases)} cases in {time.perf_counter() - started:.0f} s"
           + (" (the CI subset: --fast)" if fast else "") + "\n" + tally.table())
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.battery", description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="only the CI subset")
    parser.add_argument("--only", help="only cases whose id (category/name) contains this text")
    parser.add_argument("--show", nargs="*", default=["cryptic", "traceback", "silent-wrong", "refused-valid"],
                        help="print each case of these classes with why (default: all but clear and accepted)")
    parser.add_argument("--work", type=Path, help="folder for fixtures and cases (default: a temporary one)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpt1-battery-"))
    if (work / "cases").exists():
        shutil.rmtree(work / "cases")  # cases start from empty folders; fixtures are reused
    tally = run(args.fast, args.only, work, lambda text: print(text, flush=True), set(args.show))
    counts = {c: sum(row[c] for row in tally.counts().values()) for c in ("traceback", "silent-wrong", "cryptic")}
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return int(counts["traceback"] > 0 or counts["silent-wrong"] > 0 or counts["cryptic"] >= MAX_CRYPTIC)


if __name__ == "__main__":
    sys.exit(main())
