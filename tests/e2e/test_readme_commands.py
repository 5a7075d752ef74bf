"""The README's commands after `make demo`, run as written: its "After `make demo`" block, line by line in one
fresh shell (tests/conftest.py `fresh_shell_env`), in the fresh clone where tests/conftest.py `fresh_demo` ran `make demo`.
The block ends with `make down`, so this module runs after test_e2e_demo.py, which still needs the servers. (`make
rehearse` is in the README's team-stack block: tests/e2e/test_team_stack.py.)"""

from __future__ import annotations

import re
import subprocess

import pytest

from flows.prefect_api import REUSED
from tests.conftest import fresh_shell_env

pytestmark = pytest.mark.slow


def readme_block(readme: str) -> list[str]:
    """The commands of the bash block under "## After `make demo`" (comments dropped)."""
    section = readme.split("## After `make demo`", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)[1]
    return [line for line in block.splitlines() if line.strip()]


def test_every_command_after_make_demo_runs_as_written_in_a_fresh_shell(fresh_demo):
    proc, clone, _ = fresh_demo
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    commands = readme_block((clone / "README.md").read_text(encoding="utf-8"))
    assert commands[0].startswith("source .demo/env") and commands[-1].startswith("make down"), commands
    fresh = fresh_shell_env()  # not even the demo's ports: `source .demo/env` brings them
    script = "set -e\n" + "".join(f"echo '+++ {i}'\n{line}\n" for i, line in enumerate(commands))
    done = subprocess.run(["bash", "-c", script], cwd=clone, env=fresh, capture_output=True, text=True, timeout=3600)
    out = done.stdout
    assert done.returncode == 0, out[-6000:] + done.stderr[-3000:]

    said = dict(zip(range(len(commands)), re.split(r"^\+\+\+ \d+$", out, flags=re.M)[1:]))
    by_command = {commands[i].split("#")[0].strip(): text for i, text in said.items()}
    expected = {"prefect deployment ls": "gpt1/smoke", "gpt1 --help": "usage: gpt1",
                "make down": "stopped worker"}
    for command, text in expected.items():
        assert text in by_command[command], (command, by_command[command][-3000:])
    [predict] = [text for command, text in by_command.items() if "mlflow.pyfunc.load_model" in command]
    assert re.search(r"\b(positive|negative)\b", predict), predict  # a prediction in words, not "1"
    [rerun] = [text for command, text in by_command.items() if "watch_run.py" in command]
    assert "finetune-full-sst2 done" in rerun and "pretrain step" not in rerun, rerun[-3000:]  # pre-training reused
    assert f"pretrain {REUSED}" in rerun and "| ours: full |" in rerun, rerun[-3000:]  # said so; the table at the end
    assert re.search(r"flow run \S+: Completed", rerun), rerun[-3000:]
