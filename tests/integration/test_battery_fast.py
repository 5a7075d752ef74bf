"""The failure battery's CI subset (`python -m tests.battery --fast`): one case or a few of every category, each
classified as the full battery does; none may be a traceback or silent-wrong, none cryptic, none a valid input
refused. The full battery (`make battery`) is the figure docs/failure-behaviour.md quotes.
"""

from __future__ import annotations

from tests.battery import catalog
from tests.battery.core import run_case
from tests.battery.fixtures import Fixtures

CATEGORIES = {"task files", "wrong-task files", "CLI arguments", "--set values", "paths", "corrupted artefacts",
              "planted pickles", "full disks", "unreachable MLflow", "Python API"}


def test_the_fast_subset_covers_every_category_and_every_case_is_clear_or_accepted(tmp_path):
    cases = [c for c in catalog.all_cases() if c.fast]
    assert CATEGORIES <= {c.category for c in cases}
    fx = Fixtures(tmp_path / "fixtures")
    results = [run_case(case, fx, tmp_path / "cases") for case in cases]
    wrong = [f"{r.verdict}: {r.case.id}: {r.why}" for r in results if r.verdict not in ("clear", "accepted")]
    assert not wrong, "\n".join(wrong)


def test_the_full_battery_has_350_cases_with_unique_names():
    cases = catalog.all_cases()
    assert len(cases) >= 350
    assert len({c.id for c in cases}) == len(cases)
