"""Cases, how they run (in this process, as a subprocess, or as a Python API call) and how an outcome is classified.

A case's `act(fx, work)` does the thing in its own empty folder `work` and returns an `Outcome`; `refuse` (words the
one error line must hold, case-insensitive; a tuple inside means any one of them) or `check` (a problem with an
accepted result, or None) says what correct is. A refusal may also have a `check`: what must still hold after it
(the previous output intact, no planted code run); a failed check then makes the case silent-wrong.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

REPO = Path(__file__).resolve().parents[2]
CLASSES = ("clear", "accepted", "cryptic", "traceback", "silent-wrong", "refused-valid")
TRACEBACK = "Traceback (most recent call last)"
SUBPROCESS_TIMEOUT = 600


@dataclass
class Outcome:
    """What happened: the exit code (None for an API call that returned), the text the user saw, and for an API
    call the exception it raised or the value it returned."""

    code: int | None
    stdout: str = ""
    stderr: str = ""
    error: BaseException | None = None
    value: Any = None
    seconds: float = 0.0

    def error_line(self) -> str | None:
        """The error the user was given: the `...: error: ...` line of a command, an API exception's message."""
        if self.error is not None:
            return str(self.error)
        lines = [line for line in self.stderr.splitlines() if ": error: " in line]
        return lines[-1] if lines else None


Check = Callable[[Any, Path, Outcome], "str | None"]
Words = Sequence["str | tuple[str, ...]"]


@dataclass
class Case:
    category: str
    name: str
    act: Callable[[Any, Path], Outcome]
    refuse: Words | None = None  # a refusal is correct, naming these; None: an acceptance is correct
    check: Check | None = None
    fast: bool = False  # in the CI subset
    expect_traceback: bool = False  # `--debug`: the traceback is what was asked for

    @property
    def id(self) -> str:
        return f"{self.category}/{self.name}"


@dataclass
class Result:
    case: Case
    outcome: Outcome
    verdict: str
    why: str = ""


def _holds(line: str, words: Words) -> list[str]:
    """The words (or groups of alternatives) that `line` lacks, case-insensitively."""
    lower = line.lower()
    missing = []
    for word in words:
        options = word if isinstance(word, tuple) else (word,)
        if not any(option.lower() in lower for option in options):
            missing.append(" | ".join(options))
    return missing


def classify(case: Case, outcome: Outcome, fx, work: Path) -> tuple[str, str]:
    """(class, why) of one outcome against what the case says is correct."""
    shown = outcome.stdout + outcome.stderr
    if TRACEBACK in shown and not case.expect_traceback:
        return "traceback", shown[shown.index(TRACEBACK):][-3000:]
    if isinstance(outcome.error, BaseException) and not _user_error(outcome.error):
        return "traceback", "".join(traceback.format_exception(outcome.error))[-1500:]
    refused = outcome.error is not None or outcome.code not in (0, None)
    if case.refuse is None and refused:
        return "refused-valid", outcome.error_line() or _last_lines(outcome.stderr)
    problem = case.check(fx, work, outcome) if case.check else None
    if case.refuse is None:
        return ("silent-wrong", problem) if problem else ("accepted", "")
    if not refused:
        return "silent-wrong", "accepted what must be refused" + (f"; {problem}" if problem else "")
    if problem:
        return "silent-wrong", f"refused, but {problem}"
    line = outcome.error_line()
    if line is None:
        return "cryptic", "no error line: " + _last_lines(outcome.stderr)
    if outcome.error is None:
        last = outcome.stderr.strip().splitlines()[-1]
        if last != line:
            return "cryptic", f"not one line: the error is followed by {last!r}"
        if outcome.code != 2:
            return "cryptic", f"exit {outcome.code}: {line}"
    elif "\n" in line.strip():
        return "cryptic", f"not one line: {line!r}"
    missing = _holds(line, case.refuse)
    if case.expect_traceback and TRACEBACK not in shown:
        missing.append("a traceback (--debug)")
    return ("cryptic", f"lacks {missing}: {line}") if missing else ("clear", line)


def _user_error(err: BaseException) -> bool:
    """An API refusal: one the CLI would also show as a user error (gpt1.errors), or a TypeError for an argument."""
    from gpt1.errors import user_message

    return user_message(err) is not None or isinstance(err, TypeError)


def _last_lines(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


# -- running -----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def isolated(work: Path, env: dict[str, str] | None = None):
    """This process as a fresh `gpt1` process would be: cwd `work`, the environment plus `env` (restored after),
    logging re-configured by the command itself."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = []
    os.environ.update(env or {})
    os.chdir(work)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        root.handlers, root.level = saved_handlers, saved_level


def in_process(argv: list[str], work: Path, env: dict[str, str] | None = None) -> Outcome:
    """`gpt1 ARGV` through gpt1.cli.main in this process, its stdout/stderr captured."""
    from gpt1.cli import main

    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with isolated(work, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return Outcome(code, out.getvalue(), err.getvalue(), seconds=time.perf_counter() - started)


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
            "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO), **(extra or {})}


def as_subprocess(argv: list[str], work: Path, env: dict[str, str] | None = None,
                  preexec: Callable[[], None] | None = None) -> Outcome:
    """`python -m gpt1.cli ARGV` in its own process (cwd `work`)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpt1.cli", *map(str, argv)], cwd=work, env=subprocess_env(env),
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, preexec_fn=preexec)
    return Outcome(done.returncode, done.stdout, done.stderr, seconds=time.perf_counter() - started)


def api_call(call: Callable[[], Any], work: Path) -> Outcome:
    """A Python API call: its return value, or the exception it raised."""
    started = time.perf_counter()
    with isolated(work), contextlib.redirect_stderr(io.StringIO()):
        try:
            value = call()
        except Exception as err:  # noqa: BLE001 - classified by the caller
            return Outcome(None, error=err, seconds=time.perf_counter() - started)
    return Outcome(None, value=value, seconds=time.perf_counter() - started)


# -- case builders -----------------------------------------------------------------------------------------------
def cli(category: str, name: str, argv: Callable[[Any, Path], list], *, prepare: Callable[[Any, Path], None] = None,
        env: dict[str, str] | None = None, subprocess_: bool = False, **kwargs) -> Case:
    """A case that runs `gpt1 ARGV` (after `prepare` set up its folder)."""

    def act(fx, work: Path) -> Outcome:
        if prepare:
            prepare(fx, work)
        runner = as_subprocess if subprocess_ else in_process
        return runner(argv(fx, work), work, env)

    return Case(category, name, act, **kwargs)


def api(category: str, name: str, call: Callable[[Any, Path], Any], **kwargs) -> Case:
    """A case that calls the Python API `call(fx, work)`."""
    return Case(category, name, lambda fx, work: api_call(lambda: call(fx, work), work), **kwargs)


# -- the run -----------------------------------------------------------------------------------------------------
@dataclass
class Tally:
    results: list[Result] = field(default_factory=list)

    def counts(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = table.setdefault(r.case.category, dict.fromkeys(CLASSES, 0))
            row[r.verdict] += 1
        return table

    def table(self) -> str:
        counts = self.counts()
        width = max([len("category"), *map(len, counts)]) + 2
        head = "category".ljust(width) + "".join(c.rjust(14) for c in (*CLASSES, "total"))
        lines = [head, "-" * len(head)]
        totals = dict.fromkeys(CLASSES, 0)
        for category, row in counts.items():
            lines.append(category.ljust(width) + "".join(str(row[c]).rjust(14) for c in CLASSES)
                         + str(sum(row.values())).rjust(14))
            for c in CLASSES:
                totals[c] += row[c]
        lines.append("-" * len(head))
        lines.append("all".ljust(width) + "".join(str(totals[c]).rjust(14) for c in CLASSES)
                     + str(sum(totals.values())).rjust(14))
        return "\n".join(lines)


def run_case(case: Case, fx, root: Path) -> Result:
    work = root / case.category / case.name
    work.mkdir(parents=True, exist_ok=False)
    outcome = case.act(fx, work)
    verdict, why = classify(case, outcome, fx, work)
    return Result(case, outcome, verdict, why)
