"""`make rehearse` in CI: the gpt1/full cluster topology at tiny size on local stand-in pools (scripts/rehearse.py
states every check it makes), against the session's shared Prefect and MLflow servers."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_the_cluster_topology_rehearsed_on_stand_in_pools(services):
    done = subprocess.run(["bash", str(REPO / "scripts/rehearse.sh")], cwd=REPO, env=services, capture_output=True,
                          text=True, timeout=2400)
    report = done.stdout[-8000:] + done.stderr[-4000:]
    assert done.returncode == 0, report
    assert "rehearse: all checks passed" in done.stdout, report
    assert " FAIL " not in done.stdout, report
