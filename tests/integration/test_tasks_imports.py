"""gpt1.tasks imported alone, in a fresh process, brings in no training code (no model, torch or DeepSpeed). The task
loaders themselves: tests/unit/test_tasks.py."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_tasks_package_imports_no_training_code():
    code = ("import sys, gpt1.tasks; bad = [m for m in ('gpt1.model', 'gpt1.finetune', 'gpt1.pretrain', "
            "'deepspeed', 'torch') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
