"""`make venv` run on a venv whose pip and uv only record their arguments: PyTorch's CPU wheel index added when it
answers, skipped (and, on x86-64 Linux, the +cpu build required) when it does not. What it installed:
tests/unit/test_install.py."""

from __future__ import annotations

import functools
import http.server
import platform
import re
import subprocess
import sys
import threading

import pytest

from tests.conftest import REPO
from tests.unit.test_install import LOCK


@pytest.fixture
def fake_venv(tmp_path):
    """A venv whose pip and uv only record their arguments: the Makefile's recipe runs, nothing is installed."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    for tool in ("pip", "uv"):
        (bin_dir / tool).write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / f'{tool}-calls.txt'}\n")
        (bin_dir / tool).chmod(0o755)
    return tmp_path


def make_venv(root, index: str) -> tuple[str, str]:
    """`make venv` with the fake venv; (stdout, the command line that installs the whole lock, after the step that
    installs the servers' packages)."""
    done = subprocess.run(["make", "-s", "-C", str(REPO), "venv", f"VENV={root / 'venv'}", f"TORCH_CPU_INDEX={index}",
                           "COMPOSE="], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "install -q --disable-pip-version-check uv==" in (root / "pip-calls.txt").read_text()
    calls = (root / "uv-calls.txt").read_text().splitlines()
    assert any(("prefect==" in call and "-r " not in call) for call in calls[:1]), calls  # the servers' step first
    return done.stdout, next(call for call in calls if "-r requirements/cpu.lock" in call)


def test_make_venv_adds_the_cpu_index_when_it_answers(fake_venv, tmp_path):
    (tmp_path / "index" / "torch").mkdir(parents=True)
    (tmp_path / "index" / "torch" / "index.html").write_text("<html></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "index"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}"
        out, pip = make_venv(fake_venv, index)
    finally:
        server.shutdown()
    assert f"--extra-index-url {index} " in pip and "does not answer" not in out
    assert pip.endswith("-c requirements/cpu.lock -r requirements/cpu.lock")


def test_make_venv_skips_an_index_that_does_not_answer(fake_venv):
    out, pip = make_venv(fake_venv, "http://127.0.0.1:9")  # the discard port: connection refused at once
    assert "http://127.0.0.1:9 does not answer" in out and "--extra-index-url" not in pip
    if (platform.system(), platform.machine()) == ("Linux", "x86_64"):  # then torch must be a +cpu build
        constraint = fake_venv / "venv" / "torch-cpu.txt"
        assert f"-c {constraint}" in pip
        pinned = re.search(r"^torch==(\S+)$", LOCK.read_text(), re.MULTILINE).group(1)
        assert constraint.read_text() == f"torch=={pinned}+cpu\n"
