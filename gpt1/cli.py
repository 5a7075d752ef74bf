"""`gpt1 <command> ...`: every pipeline stage by hand, and the tools around them.

Each command lives in the module that owns it (COMMANDS): a stage's module in gpt1/stages/ (its inputs, key,
build and arguments: the same code the pipeline runs), or a tool's own module. Each defines `add_cli_args(parser)`
and `run_cli(args)`. Modules are imported only when their command runs, so `gpt1 --help` stays fast and a broken
optional dependency only affects its own command. Errors follow gpt1.errors: bad input is one line and exit 2
(`gpt1 --debug COMMAND ...` adds its traceback).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from gpt1.errors import DEBUG_ENV, OneLineParser, exit_code
from gpt1.runtime.processes import exit_with_parent

COMMANDS: dict[str, tuple[str, str]] = {
    "sample-data": ("gpt1.sample_data.stage", "write the offline sample corpus and the 12 tasks in official layouts"),
    "ingest": ("gpt1.data.ingest.stage", "clean, dedup and split a corpus into Parquet documents + stats.json"),
    "train-tokenizer": ("gpt1.data.train_tokenizer.stage", "train the GPT-1 BPE tokenizer on an ingested corpus"),
    "tokenize": ("gpt1.data.tokenize.stage", "tokenize and pack a corpus into Arrow shards + manifest.json"),
    "pretrain": ("gpt1.pretrain.stage", "pre-train with DeepSpeed (launches workers)"),
    "finetune": ("gpt1.finetune.stage", "fine-tune and evaluate one task from a checkpoint"),
    "report": ("gpt1.report.stage", "results table beside the paper's numbers (markdown + PNG)"),
    "preflight": ("gpt1.pipeline.preflight", "check a run's data, services, pools and disk before it starts"),
    "generate": ("gpt1.model.generate", "continue a prompt with a checkpoint"),
    "predict": ("gpt1.finetune.predict", "score raw task inputs with a fine-tuned model"),
    "convert": ("gpt1.model.convert", "weight interop: HF transformers openai-gpt, original OpenAI release"),
    "replay-spool": ("gpt1.tracking.replay", "deliver the MLflow calls a run could not (its spool files) to the server"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="gpt1", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error (also in workers)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:  # only the chosen command's module is imported
            importlib.import_module(module).add_cli_args(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    exit_with_parent()  # started by a pipeline stage: stop when it dies
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if a in COMMANDS), None)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if "--debug" in argv[: argv.index(command) if command else len(argv)]:
        os.environ[DEBUG_ENV] = "1"  # before parsing, so its errors too; the processes it starts inherit it

    def run() -> int:
        args = build_parser(command).parse_args(argv)
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("huggingface_hub").propagate = False  # it has a handler of its own: no line twice
        if not args.command:
            build_parser().print_help()
            raise ValueError("no command given (the commands are listed above)")
        return importlib.import_module(COMMANDS[args.command][0]).run_cli(args)

    return exit_code(run, prefix=f"gpt1 {command}" if command else "gpt1")


if __name__ == "__main__":
    sys.exit(main())
