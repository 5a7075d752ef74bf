"""The generated input battery in full (the unit tier runs a fixed sample of it): every example of the config and
flag schema cases and every reader x kind-of-file case, in a fresh process, and the config summary by class."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO


def test_every_generated_case_ends_clear_or_accepted_and_a_third_are_valid():
    env = {**os.environ, "GPT1_GENERATED": "full", "MLFLOW_DISABLE_TELEMETRY": "true"}
    done = subprocess.run([sys.executable, "-m", "tests.unit.test_config_generated"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:]
    valid, total = map(int, re.search(r"valid variants: (\d+) of (\d+)", done.stdout).groups())
    assert 3 * valid >= total
    files = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "tests/unit/test_input_files_generated.py"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=1200)
    assert files.returncode == 0, files.stdout[-4000:]
