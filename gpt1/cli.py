"""`gpt1 <command> ...`: every pipeline stage by hand.

Each command lives beside the code it runs: the module named in COMMANDS defines `add_<cmd>_args(parser)` and
`run_<cmd>(args)` (dashes become underscores). Modules are imported only when their command runs, so
`gpt1 --help` stays fast and a broken optional dependency only affects its own command.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
import time

COMMANDS: dict[str, tuple[str, str]] = {
    "sample-data": ("gpt1.sample", "write the offline sample corpus and the 12 tasks in official layouts"),
    "ingest": ("gpt1.data.ingest", "clean, dedup and split a corpus into Parquet documents + stats.json"),
    "train-tokenizer": ("gpt1.tokenizer", "train the GPT-1 BPE tokenizer on an ingested corpus"),
    "tokenize": ("gpt1.data.shards", "tokenize and pack a corpus into Arrow shards + manifest.json"),
    "pretrain": ("gpt1.pretrain", "pre-train with DeepSpeed (launches workers)"),
    "generate": ("gpt1.generate", "continue a prompt with a checkpoint"),
    "finetune": ("gpt1.finetune", "fine-tune and evaluate one task from a checkpoint"),
    "predict": ("gpt1.finetune", "score raw task inputs with a fine-tuned model"),
    "report": ("gpt1.report", "results table beside the paper's numbers (markdown + PNG)"),
    "convert": ("gpt1.convert", "weight interop: HF transformers openai-gpt, original OpenAI release"),
}


def _handlers(command: str):
    module = importlib.import_module(COMMANDS[command][0])
    name = command.replace("-", "_")
    return getattr(module, f"add_{name}_args"), getattr(module, f"run_{name}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpt1", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:  # only the chosen command's module is imported
            _handlers(name)[0](p)
    return parser


def stop_with_parent() -> None:
    """When started by a pipeline stage (GPT1_PARENT_PID, see `gpt1.pipeline.stream_subprocess`), stop this
    command's process group as soon as that parent is gone (killed worker, OOM): the command runs in a session of
    its own, so nothing else would stop it."""
    parent = os.environ.pop("GPT1_PARENT_PID", None)  # popped: this command's own children watch nothing
    if not parent or os.getppid() != int(parent):
        return

    def watch() -> None:
        while os.getppid() == int(parent):
            time.sleep(1.0)
        logging.getLogger("gpt1").error("parent process %s is gone: stopping", parent)
        os.killpg(os.getpgid(0), signal.SIGTERM)

    threading.Thread(target=watch, name="stop-with-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    stop_with_parent()
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if a in COMMANDS), None)
    args = build_parser(command).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if not args.command:
        build_parser().print_help()
        return 2
    try:
        return int(_handlers(args.command)[1](args) or 0)
    except (ValueError, FileNotFoundError, NotADirectoryError) as err:  # user errors: no traceback
        print(f"gpt1 {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
