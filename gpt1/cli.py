"""`gpt1 <command> ...`: every pipeline stage by hand, and the tools around them.

A stage's command is its name (each stage job of the recipe, gpt1.recipe), run by the module that defines its job:
the same job the pipeline runs. The tools are listed below. Each module defines `add_cli_args(parser)` and
`run_cli(args)` and is imported only when its command runs, so `gpt1 --help` stays fast and a broken optional
dependency only affects its own command. `preflight` is the orchestrator's (flows/preflight.py: it checks Prefect
deployments and pools too). Errors follow gpt1.errors: bad input is one line and exit 2 (`gpt1 --debug COMMAND ...`
adds its traceback).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpt1.errors import DEBUG_ENV, OneLineParser, exit_code
from gpt1.runtime.processes import exit_with_parent

TOOLS: dict[str, tuple[str, str]] = {
    "preflight": (
        "flows.preflight",
        "check a run's data, services, pools and disk before it starts",
    ),
    "generate": ("gpt1.model.generate", "continue a prompt with a checkpoint"),
    "predict": ("gpt1.finetune.predict", "score raw task inputs with a fine-tuned model"),
    "convert": (
        "gpt1.model.convert",
        "weight interop: HF transformers openai-gpt, original OpenAI release",
    ),
    "replay-spool": (
        "gpt1.pipeline.replay",
        "deliver the MLflow calls a run could not (its spool files) to the server",
    ),
}


def commands() -> dict[str, tuple[str, str]]:
    """Command -> (module, summary): every stage of the recipe, then the tools."""
    import gpt1.recipe  # noqa: F401 - defines (registers) every stage job the recipe wires
    from gpt1.stages.base import stage_jobs

    return {**{name: (job.__module__, job.summary) for name, job in stage_jobs().items()}, **TOOLS}


INT_LIMIT = 1 << 63  # torch, numpy and the native libraries take no wider whole number
MLFLOW_RUN_ID = re.compile(r"[0-9a-f]{32}")  # what MLflow names a run: uuid4().hex


def _number_flag(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A flag's own type, then the rule every number flag shares: no command takes nan, an infinity, a negative
    number (counts, sizes, seconds, temperatures, seeds) or a whole number wider than 64 bits."""

    @functools.wraps(parse)  # argparse names the type in its message: `invalid int value`
    def checked(text: str) -> Any:
        value = parse(text)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value) or not 0 <= value < INT_LIMIT:
                raise argparse.ArgumentTypeError(
                    f"expected a finite number >= 0 and below 2**63, got {text!r:.60}"
                )
        return value

    return checked


def mlflow_run_id(text: str) -> str:
    if not MLFLOW_RUN_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not an MLflow run id (32 hex digits), got {text!r:.60}")
    return text


def output_path(text: str) -> Path:
    """An `--out` path; a symlink stands for what it points to, which is what gets written, locked and replaced (a
    swap or a removal of the link itself would break the link, or fail: `rmtree` refuses a symlink)."""
    path = Path(text)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _declare_rules(parser: argparse.ArgumentParser) -> None:
    """The rules of a command's flags that hold for every command, added to what its module declared."""
    for action in parser._actions:
        if action.dest.endswith("run_id"):
            action.type = mlflow_run_id
        elif action.dest == "out":
            action.type = output_path
        elif (
            action.type in (int, float)
            or callable(action.type)
            and not isinstance(action.type, type)
        ):
            action.type = _number_flag(action.type)  # Path and other classes parse no numbers


def _repeated(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The first flag whose list names one item twice (`--labels a a`): every list flag names distinct things."""
    for action in parser._actions:
        values = getattr(args, action.dest, None)
        if action.nargs in ("+", "*") and isinstance(values, list):
            twice = next((value for i, value in enumerate(values) if value in values[:i]), None)
            if twice is not None:
                return f"argument {'/'.join(action.option_strings) or action.dest}: {twice} given twice"
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="gpt1", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--debug", action="store_true", help="print the traceback of an error (also in workers)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in commands().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:  # only the chosen command's module is imported
            importlib.import_module(module).add_cli_args(p)
            _declare_rules(p)
            p.set_defaults(command_parser=p)  # for the checks that need every parsed value
    return parser


def main(argv: list[str] | None = None) -> int:
    exit_with_parent()  # started by a pipeline stage: stop when it dies
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if a in commands()), None)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if "--debug" in argv[: argv.index(command) if command else len(argv)]:
        os.environ[DEBUG_ENV] = (
            "1"  # before parsing, so its errors too; the processes it starts inherit it
        )

    def run() -> int:
        parser = build_parser(command)
        args = parser.parse_args(argv)
        sub = getattr(args, "command_parser", None)
        if sub is not None and (problem := _repeated(sub, args)):
            sub.error(problem)
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        # it has a handler of its own: no line twice
        logging.getLogger("huggingface_hub").propagate = False
        if not args.command:
            build_parser().print_help()
            raise ValueError("no command given (the commands are listed above)")
        return importlib.import_module(commands()[args.command][0]).run_cli(args)

    return exit_code(run, prefix=f"gpt1 {command}" if command else "gpt1")


if __name__ == "__main__":
    sys.exit(main())
