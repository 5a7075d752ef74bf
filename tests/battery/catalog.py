"""Every case of the battery, by category module."""

from __future__ import annotations

from tests.battery import artefacts, before_use, commands, environment, python_api, task_files
from tests.battery.core import Case


def all_cases() -> list[Case]:
    cases = task_files.cases() + commands.cases() + artefacts.cases() + environment.cases() + python_api.cases()
    cases += before_use.cases()
    ids = [c.id for c in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"battery case ids must be unique: {duplicates}")
    return cases
