"""`gpt1 replay-spool DIR`: deliver the MLflow logging calls that runs could not deliver (gpt1.tracking's spool).

    gpt1 replay-spool DIR [--tracking-uri URI] [--timeout SECONDS] [--skip-missing]

A run that could not reach its tracking server before its retries ran out wrote what was left to
`DIR/mlflow-undelivered-<run>-....json` (GPT1_MLFLOW_SPOOL_DIR): its calls in the order they were made. Each file is
replayed through a `RunLogger` attached to its run, so the calls arrive where a live delivery would have put them:
in order, metrics at their original steps and timestamps, artifacts at their paths in that run, models built again
from their folders; a server that goes down during the replay only queues the rest. A file of a run that was never
created names no run id: its run is found as a live logger finds it (gpt1.tracking.logger.RunLogger), by the run key
it recorded (the server stored a create whose answer was lost), else as the run of the same step, whatever its
status (a later attempt of the step made it), else created with the recorded name, tags and parent. The recorded
end is not applied to a run that ended after the file was written: the later attempt that ended it had the last word.

Afterwards a file whose calls were all delivered moves to DIR/replayed/; one with calls left is replaced by a new
spool file of what is left (with the run id, once the run exists), so replaying again never sends a call twice. A
file whose leftovers could not be written stays as it is and counts as not delivered.
`--tracking-uri` sends to another server than the one recorded (e.g. the same store behind a new address).

Before anything is sent, every call of a file is checked: a file that is not a spool file is an error (exit 2), as
is a call that cannot be replayed (an artifact or model folder no longer on disk, a call this version does not
know); `--skip-missing` replays the rest of such a file and lists what was skipped. Exit 0 when everything was
delivered, 1 when calls are left for a later replay.

A spool file is read back like any input, so what it names is confined: a replay uploads only files under the
folder that holds DIR (the spool folder sits in the work dir whose runs wrote it: GPT1_MLFLOW_SPOOL_DIR=WORK/spool)
or under a folder given with `--allow`, symlinks resolved; and it sends only to a store that exists, never creating
one where a file names it (a `sqlite:` URI whose path is absent is refused: give `--tracking-uri`).

A spool file holds no credentials (gpt1.redact): a recorded URI whose credentials were redacted is sent to
$MLFLOW_TRACKING_URI when that is the same URI with them, and refused otherwise (give `--tracking-uri`).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from gpt1.io import InputError, read_json
from gpt1.tracking.logger import ANY_STATUS, RunLogger, tracking_uri
from gpt1.tracking.models import log_files_model, register_model
from gpt1.tracking.runs import publish_runs_view

log = logging.getLogger(__name__)

PATTERN = "mlflow-undelivered-*.json"
REPLAYED = "replayed"
RUN_FIELDS = ("tracking_uri", "experiment", "run_name", "run_id", "parent_run_id", "tags", "calls")
# The fields each call needs; what a call refers to on disk is checked separately (`missing`).
CALL_FIELDS = {
    "log_params": ("params",),
    "log_metrics": ("metrics", "step", "timestamp"),
    "set_tags": ("tags",),
    "log_artifact": ("path",),
    "log_artifacts": ("path",),
    "log_text": ("text", "artifact_file"),
    "log_inputs": ("dataset", "digest", "source_type", "source", "context"),
    "log_model": ("model", "kind"),
    "register_model": ("registered_model", "model", "tags"),
    "runs_view": ("name", "columns"),
    "end": ("status",),
}


def read_spool(path: Path) -> dict:
    """A spool file, checked field by field (errors name the file and the call)."""
    spool = read_json(path)
    if not isinstance(spool, dict) or any(field not in spool for field in RUN_FIELDS):
        raise InputError(
            f"not a gpt1 MLflow spool file (expected the fields {', '.join(RUN_FIELDS)})", file=path
        )
    for i, call in enumerate(spool["calls"]):
        kind = call.get("call") if isinstance(call, dict) else None
        absent = [f for f in CALL_FIELDS.get(kind or "", ()) if f not in call]
        if kind in CALL_FIELDS and absent:
            raise InputError(
                f"call {i} ({kind}) lacks {', '.join(absent)}", file=path, field=f"calls[{i}]"
            )
    return spool


def missing(call: dict, allowed: Sequence[Path]) -> str | None:
    """Why a call cannot be replayed here (None: it can). `allowed`: the folders it may upload from."""
    kind = call.get("call")
    if kind not in CALL_FIELDS:
        return f"unknown call {kind!r}"
    if kind == "log_model" and call["kind"] not in ("task", "files"):
        return f"unknown model kind {call['kind']!r}"
    if kind not in ("log_artifact", "log_artifacts", "log_model"):
        return None
    where = call.get("path") or call.get("model_dir") or call.get("folder")
    if not isinstance(where, str) or not where or not os.path.exists(where):
        return f"{where} no longer exists"
    real = Path(where).resolve()
    if not any(real.is_relative_to(folder) for folder in allowed):
        return (
            f"{where} is outside the folders a replay uploads from "
            f"({', '.join(map(str, allowed))}; --allow adds one)"
        )
    return None


def store_problem(uri: str) -> str | None:
    """Why a replay must not send to the store a spool file names (None: it may): a URI MLflow cannot use, one
    whose credentials this process's environment does not hold (gpt1.tracking.logger.tracking_uri), or a local
    database that does not exist yet (MLflow's file store is refused whatever its path)."""
    try:
        resolved = tracking_uri(uri)
    except ValueError as err:
        return f"{err} (or give --tracking-uri)"
    if not resolved.startswith("sqlite:///") or Path(resolved.removeprefix("sqlite:///")).exists():
        return None  # sqlite:///relative.db, sqlite:////absolute.db
    return f"tracking_uri {uri}: no store there, and a replay does not create one (--tracking-uri names a store)"


def replay_call(run, call: dict) -> None:
    """One spooled call, made again through `run` (a RunLogger)."""
    kind = call["call"]
    if kind == "log_params":
        run.log_params(call["params"])
    elif kind == "log_metrics":
        run.log_metrics(call["metrics"], step=call["step"], timestamp=call["timestamp"])
    elif kind == "set_tags":
        run.set_tags(call["tags"])
    elif kind in ("log_artifact", "log_artifacts"):
        run.log_artifact(call["path"], call.get("artifact_path"))
    elif kind == "log_text":
        run.log_text(call["text"], call["artifact_file"])
    elif kind == "log_inputs":
        from mlflow.data.dataset_source_registry import get_dataset_source_from_json

        source = get_dataset_source_from_json(call["source"], call["source_type"])
        run.log_dataset(
            call["dataset"], call["digest"], source, call["context"], call.get("profile")
        )
    elif kind == "log_model" and call["kind"] == "task":
        from gpt1.finetune.serving import log_model

        log_model(
            run,
            call["model_dir"],
            call["input_example"],
            name=call["model"],
            step=call["step"],
            tags=call.get("tags"),
        )
    elif kind == "log_model":
        log_files_model(
            run,
            call["model"],
            call["folder"],
            upload=call["upload"],
            model_type=call["model_type"],
            params=call.get("params"),
            tags=call.get("tags"),
            step=call.get("step", 0),
        )
    elif kind == "register_model":
        register_model(run, call["registered_model"], call["model"], tags=call["tags"])
    elif kind == "runs_view":
        publish_runs_view(run, call["name"], call["columns"])
    else:
        raise ValueError(f"not a call to replay one by one: {kind}")


def check(
    path: Path, skip_missing: bool, allowed: Sequence[Path], uri: str | None
) -> tuple[dict, set[int]]:
    """The spool file and the calls to skip; an InputError when it cannot be replayed as asked (to `uri`, else the
    store the file names)."""
    spool = read_spool(path)
    if uri is None and isinstance(spool["tracking_uri"], str):
        if why := store_problem(spool["tracking_uri"]):
            raise InputError(why, file=path, field="tracking_uri")
    problems = [
        (i, why) for i, call in enumerate(spool["calls"]) if (why := missing(call, allowed))
    ]
    if problems and not skip_missing:
        i, why = problems[0]
        raise InputError(
            f"{len(problems)} call(s) cannot be replayed, the first: {why} (--skip-missing replays "
            "the others)",
            file=path,
            field=f"calls[{i}]",
        )
    for i, why in problems:
        log.warning("%s: skipping call %d (%s): %s", path.name, i, spool["calls"][i]["call"], why)
    return spool, {i for i, _ in problems}


def replay_file(
    path: Path, uri: str | None, timeout: float, skip_missing: bool, allowed: Sequence[Path]
) -> tuple[int, Path | None]:
    """Replay one spool file; returns (calls replayed, the spool file of what is left, if anything is)."""
    spool, skipped = check(path, skip_missing, allowed, uri)
    run = RunLogger(
        spool["run_name"],
        experiment=spool["experiment"],
        uri=uri or spool["tracking_uri"],
        parent_run_id=spool["parent_run_id"],
        run_id=spool["run_id"],
        tags=spool["tags"],
        spool_dir=path.parent,
        flush_timeout=timeout,
        code_tags=False,
        # the key its run was created with, if it was (older spool files have none: only the step is looked for)
        run_key=spool.get("run_key"),
        # the calls belong to their step's run even when a later attempt has finished it
        continues=ANY_STATUS,
    )
    run.model_ids.update(spool.get("model_ids") or {})
    calls = [call for i, call in enumerate(spool["calls"]) if i not in skipped]
    for call in calls:
        if call["call"] != "end":
            replay_call(run, call)
    ends = [call for call in calls if call["call"] == "end"]
    if ends:
        written = ends[-1].get("unless_ended_after", spool.get("written"))
        left = run.end(ends[-1]["status"], unless_ended_after=written)
    else:
        left = run.deliver()
    if left is None and run.pending:
        # neither delivered nor written anew (the spool folder refused the file): this file is still their record
        log.warning("%s: %d call(s) not delivered; the file is kept", path.name, run.pending)
        return len(calls), path
    if left is None:  # all delivered: keep the file as the record of what was sent, out of the way
        (path.parent / REPLAYED).mkdir(exist_ok=True)
        shutil.move(str(path), path.parent / REPLAYED / path.name)
    else:  # what is left is now in `left`; this file would send the delivered calls twice
        path.unlink()
    return len(calls), left


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "directory", type=Path, metavar="DIR", help="the spool directory (GPT1_MLFLOW_SPOOL_DIR)"
    )
    parser.add_argument(
        "--tracking-uri", help="send to this tracking server instead of the one each file names"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to keep retrying an unreachable server per file (default 60)",
    )
    parser.add_argument(
        "--skip-missing",
        action="store_true",
        help="replay a file's other calls when some cannot be (their files are gone)",
    )
    parser.add_argument(
        "--allow",
        type=Path,
        action="append",
        default=[],
        metavar="FOLDER",
        help="also upload files under this folder (default: only under the folder holding DIR)",
    )


def run_cli(args: argparse.Namespace) -> int:
    if not args.directory.is_dir():
        raise FileNotFoundError(f"{args.directory}: no such directory")
    # oldest first: a run's order
    files = sorted(args.directory.glob(PATTERN), key=lambda p: p.stat().st_mtime)
    if not files:
        print(f"{args.directory}: no spool files ({PATTERN})")
        return 0
    allowed = [folder.resolve() for folder in (args.directory.parent, *args.allow)]
    for path in files:  # every file checked before anything is sent
        check(path, args.skip_missing, allowed, args.tracking_uri)
    failed = []
    for path in files:
        count, left = replay_file(path, args.tracking_uri, args.timeout, args.skip_missing, allowed)
        if left is None:
            print(f"{path.name}: {count} call(s) delivered")
        else:
            failed.append(left)
            print(
                f"{path.name}: not all of {count} call(s) delivered; what is left is in {left.name}"
            )
    if failed:
        raise ValueError(
            f"{len(failed)} of {len(files)} spool file(s) not delivered to "
            f"{args.tracking_uri or 'their tracking servers'}; what is left is in "
            f"{', '.join(str(p) for p in failed)}: run this again when the server answers"
        )
    return 0
