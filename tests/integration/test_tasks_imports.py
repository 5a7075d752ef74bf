"""What the light paths import, each in a fresh process: gpt1.tasks alone brings in no training code (no model, torch
or DeepSpeed), nor does `gpt1 --help` or any stage's `gpt1 <stage> --help` (no torch, DeepSpeed or MLflow: they are
imported where a job runs). The task loaders themselves: tests/unit/test_tasks.py."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_tasks_package_imports_no_training_code():
    code = ("import sys, gpt1.tasks; bad = [m for m in ('gpt1.model', 'gpt1.finetune', 'gpt1.pretrain', "
            "'deepspeed', 'torch') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_the_help_of_gpt1_and_of_every_stage_imports_no_training_code():
    code = ("import sys\nfrom gpt1 import cli\ncli.build_parser()\n"
            "stages = [name for name in cli.commands() if name not in cli.TOOLS]\nassert stages\n"
            "for name in stages:\n    cli.build_parser(name)\n"
            "bad = [m for m in ('torch', 'deepspeed', 'mlflow') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
