"""The failure battery: what a user can get wrong, tried against the real commands, each outcome classified.

    python -m tests.battery            # every case; prints counts per category and class (make battery)
    python -m tests.battery --fast     # the CI subset (tests/integration/test_battery_fast.py runs it under pytest)

A case is one thing a user (or a hostile environment) does: a bad task file for one of the registered tasks, a bad
CLI argument or `--set` value, a wrong path, a corrupted artefact, a killed process, a full disk, an unreachable
MLflow server, a planted pickle, a Python API call. Each declares what correct means: a refusal whose one error
line holds given words (the file, line or field, and the cause), or an acceptance with a check of the result.
Its outcome is one class (`core.CLASSES`):

    clear          refused as expected: exit 2, one line naming what the case says it must
    accepted       accepted as expected: exit 0 (or a return value) and the case's own check passes
    cryptic        refused, but the line lacks the name or cause, is not one line, or came with exit 1
    traceback      a Python traceback reached the user (or the API raised a non-user error)
    silent-wrong   exit 0 where a refusal was due, or the check of an accepted result failed
    refused-valid  a valid input was refused (counted apart: it is neither silent nor a crash)

Cases run in this process through `gpt1.cli.main` where that is what the command does, and as subprocesses where a
process boundary matters (killed processes, full disks, planted pickles in pre-training). They share fixtures
built once through the real commands (`fixtures.Fixtures`): sample data, corpus, tokenizer, shards, a 4-update
ZeRO-1 pre-training run and a fine-tuned model.
"""
