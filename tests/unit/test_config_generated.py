"""Config, presets, `--set` and number flags: cases generated from the declared schema (issue 35).

Every field of every section of `PipelineConfig` (read from the pydantic models, never listed here) gets values of
the wrong type, out of its declared bounds, non-finite, empty, huge, and an unknown key beside it, each fed as a
preset file and as `--set KEY=VALUE` through `load_config`. Correct is a one-line user error (exit 2 in gpt1.errors)
naming the field's dotted key, or an acceptance that keeps the value as given. Valid variants (values inside the
bounds, presets with a BOM, CRLF, no final newline) must be accepted and equal the canonical parse. The number
flags of every command are fed nan, infinities, negatives, booleans and huge values through `gpt1.cli.main`.

Hypothesis runs derandomized, so the counts reproduce:

    GPT1_GENERATED=full python -m tests.unit.test_config_generated      # the summary by class
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import types
import typing
from collections import Counter
from pathlib import Path
from typing import Any

import annotated_types
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gpt1 import cli
from gpt1.config import ConfigError, PipelineConfig, load_config, load_preset_dict, merge
from gpt1.errors import user_message

# The unit tier runs a quarter of each class's examples; GPT1_GENERATED=full runs them all (the integration tier:
# tests/integration/test_generated_full.py, and the summary command above).
FULL = os.environ.get("GPT1_GENERATED") == "full"


def examples(full: int) -> int:
    return full if FULL else max(1, full // 4)


BASE = "smoke"  # a preset that extends nothing and sets a few of each kind of field
CANONICAL = load_config(BASE)
OUTCOMES: Counter[tuple[str, str]] = Counter()  # (class, outcome) -> cases, for the summary
FAST = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# -- the schema, walked -----------------------------------------------------------------------------------------
def _fields() -> dict[str, FieldInfo]:
    """Dotted key -> declared field, for every field of every section and the top-level scalars."""
    found = {}
    for name, info in PipelineConfig.model_fields.items():
        section = info.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            found.update({f"{name}.{key}": sub for key, sub in section.model_fields.items()})
        else:
            found[name] = info
    return found


FIELDS = _fields()


def _kinds(annotation: Any) -> set[Any]:
    """The plain types a field takes: int, float, bool, str, list, dict, tuple, or a Literal's values; None."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_kinds(arg) for arg in typing.get_args(annotation)))
    if origin is typing.Literal:
        return set(typing.get_args(annotation))
    if origin is not None:
        return {origin}
    return {annotation}


def _bounds(info: FieldInfo) -> dict[str, float]:
    return {
        kind: getattr(item, kind)
        for item in info.metadata
        for kind in ("gt", "ge", "lt", "le")
        if isinstance(
            item, (annotated_types.Gt, annotated_types.Ge, annotated_types.Lt, annotated_types.Le)
        )
        and hasattr(item, kind)
    }


def canonical(key: str) -> Any:
    node: Any = CANONICAL
    for part in key.split("."):
        node = getattr(node, part)
    return node


# -- feeding a value through the real loader --------------------------------------------------------------------
def _nested(key: str, value: Any) -> dict:
    out: dict = {}
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _flow(value: Any) -> str:
    """The YAML a user types after `--set KEY=` for `value`."""
    return (
        yaml.safe_dump(value, default_flow_style=True, width=math.inf)
        .removesuffix("\n...\n")
        .strip()
    )


def as_preset(tmp: Path, key: str, value: Any) -> tuple[str, list[str]]:
    path = tmp / "case.yaml"
    path.write_text(yaml.safe_dump({"extends": BASE, **_nested(key, value)}), encoding="utf-8")
    return str(path), []


def as_override(tmp: Path, key: str, value: Any) -> tuple[str, list[str]]:
    return BASE, [f"{key}={_flow(value)}"]


WAYS = {"preset": as_preset, "--set": as_override}


def same(given: Any, got: Any) -> bool:
    """The value kept as given: of the same type (a boolean is no 1), an int where a float belongs as that float."""
    if isinstance(given, bool) or isinstance(got, bool):
        return type(given) is type(got) and given == got
    if isinstance(given, int) and isinstance(got, float):
        return float(given) == got
    if isinstance(given, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(given) == len(got) and all(map(same, given, got))
    if isinstance(given, dict) and isinstance(got, dict):
        return given.keys() == got.keys() and all(same(given[k], got[k]) for k in given)
    return type(given) is type(got) and given == got


def outcome(preset: str, overrides: list[str], key: str, value: Any, refuse_only: bool) -> str:
    """'clear' or 'accepted'; anything else fails the case with what happened."""
    try:
        cfg = load_config(preset, overrides)
    except ConfigError as err:
        message = user_message(err)
        assert message is not None and "\n" not in message, f"{key}={value!r}: not one line: {err}"
        assert key in message, f"{key}={value!r}: refused without naming {key}: {message}"
        return "clear"
    except Exception as err:  # noqa: BLE001 - any other exception is the traceback this battery hunts
        raise AssertionError(
            f"{key}={value!r}: traceback class {type(err).__name__}: {err}"
        ) from err
    assert not refuse_only, f"{key}={value!r}: accepted (silent-wrong)"
    got: Any = cfg
    for part in key.split("."):
        got = getattr(got, part, None)
    assert same(value, got), f"{key}={value!r}: accepted as {got!r}"
    return "accepted"


def check(tmp: Path, klass: str, key: str, value: Any, refuse_only: bool = False) -> None:
    for way in WAYS.values():
        preset, overrides = way(tmp, key, value)
        OUTCOMES[klass, outcome(preset, overrides, key, value, refuse_only)] += 1


# -- what to generate for a field --------------------------------------------------------------------------------
NUMBERS = {int, float}
SCALARS = st.one_of(st.integers(-5, 5), st.text("abc xyz", min_size=1, max_size=5), st.booleans())


def wrong_type(kinds: set[Any]) -> st.SearchStrategy:
    """Values of a kind the field does not take."""
    options = []
    if kinds & NUMBERS and bool not in kinds:
        options.append(st.booleans())  # true where a step count belongs
    if kinds & NUMBERS or bool in kinds:
        options.append(st.text("0123456789.e-abc", min_size=1, max_size=8))  # quoted: a string
    if not kinds & {list, tuple, dict}:
        options += [
            st.lists(SCALARS, min_size=1, max_size=3),
            st.dictionaries(st.text("ab", min_size=1), SCALARS),
        ]
    if kinds & {list, tuple, dict}:
        options.append(SCALARS)
    if str not in kinds and not kinds & NUMBERS:
        options.append(st.floats(-10, 10))
    return st.one_of(options)


def out_of_range(bounds: dict[str, float], kinds: set[Any]) -> st.SearchStrategy | None:
    floats = float in kinds
    options = []
    for kind, bound in bounds.items():
        below = kind in ("gt", "ge")
        edge = st.just(bound) if kind in ("gt", "lt") else st.nothing()
        step = st.floats(1e-9, 1e6) if floats else st.integers(1, 10**6)
        options.append(
            st.one_of(edge, step.map(lambda d, b=bound, s=-1 if below else 1: b + s * d))
        )
    return st.one_of(options) if options else None


def huge(kinds: set[Any]) -> st.SearchStrategy:
    options = [st.integers(2**63, 2**200), st.integers(-(2**200), -(2**63) - 1)]
    if float in kinds:
        options.append(st.floats(1e300, 1.7e308))
    if str in kinds:
        options.append(st.text("ab", min_size=5000, max_size=6000))
    return st.one_of(options)


def _section_takes(key: str, value: Any) -> bool:
    """Whether the field's section, as the preset has it but for `value`, passes its own rules (heads that divide
    the width): the cross-field rules bound the valid space the cases are drawn from."""
    section, _, name = key.partition(".")
    model = type(getattr(CANONICAL, section))
    try:
        model.model_validate({**getattr(CANONICAL, section).model_dump(), name: value})
    except ValueError:
        return False
    return True


def valid(key: str, info: FieldInfo, kinds: set[Any]) -> st.SearchStrategy:
    """Values the field's declared type, bounds and its section's rules take, near the preset's own."""
    base, bounds = canonical(key), _bounds(info)
    literals = [kind for kind in kinds if not isinstance(kind, type)]
    options: list[st.SearchStrategy] = [st.just(base)]
    if literals:
        options.append(st.sampled_from(literals))
    if bool in kinds:
        options.append(st.booleans())
    if int in kinds and bool not in kinds:
        low = bounds.get("ge", bounds.get("gt", -1) + 1) if bounds else -(2**31)
        reference = base if isinstance(base, int) and base > 0 else 1
        options.append(st.integers(1, 8).map(lambda k, b=reference: b * k))
        options.append(st.integers(int(low), int(low) + 1000))
    if float in kinds:
        low = bounds.get("ge", bounds.get("gt", 0.0))
        high = bounds.get("lt", bounds.get("le", low + 100.0))
        options.append(
            st.floats(
                low, high, exclude_min="gt" in bounds, exclude_max="lt" in bounds, allow_nan=False
            )
        )
    if str in kinds and not literals:
        options.append(st.text("abcdefgh-_/", min_size=1, max_size=20))
    if list in kinds:
        items = list(base) if isinstance(base, list) else []
        options.append(st.lists(st.sampled_from(items), unique=True) if items else st.just([]))
    if tuple in kinds:
        options.append(st.permutations(list(base)).map(tuple))
    if dict in kinds:
        options.append(st.just({}))
    strategy = st.one_of(options)
    return strategy.filter(lambda value: _section_takes(key, value)) if "." in key else strategy


def invalid(key: str, info: FieldInfo, kinds: set[Any]) -> st.SearchStrategy:
    """(class, value, must be refused) for one field."""
    options = [
        st.tuples(st.just("wrong type"), wrong_type(kinds), st.just(False)),
        st.tuples(st.just("huge"), huge(kinds), st.just(False)),
    ]
    limits = out_of_range(_bounds(info), kinds)
    if limits is not None:
        options.append(st.tuples(st.just("out of range"), limits, st.just(True)))
    if kinds & NUMBERS:
        nonfinite = st.sampled_from([math.nan, math.inf, -math.inf])
        options.append(st.tuples(st.just("non-finite"), nonfinite, st.just(True)))
    empty = [value for kind, value in ((str, ""), (list, []), (dict, {})) if kind in kinds]
    if empty:
        options.append(st.tuples(st.just("empty"), st.sampled_from(empty), st.just(False)))
    return st.one_of(options)


# -- the field cases --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", FIELDS)
@settings(FAST, max_examples=examples(8))
@given(data=st.data())
def test_invalid_values_are_refused_naming_the_field(key, data, tmp_path_factory):
    info = FIELDS[key]
    kinds = _kinds(info.annotation)
    klass, value, refuse_only = data.draw(invalid(key, info, kinds))
    check(tmp_path_factory.mktemp("case"), klass, key, value, refuse_only)


@pytest.mark.parametrize("key", FIELDS)
@settings(FAST, max_examples=examples(6))
@given(data=st.data())
def test_valid_values_are_kept(key, data, tmp_path_factory):
    info = FIELDS[key]
    value = data.draw(valid(key, info, _kinds(info.annotation)))
    if "." not in key:  # `preset` names the config: a preset file sets it from its own name
        value = data.draw(st.text("abcdefgh-_", min_size=1, max_size=20))
    for way in WAYS.values():
        preset, overrides = way(tmp_path_factory.mktemp("case"), key, value)
        result = outcome(preset, overrides, key, value, refuse_only=False)
        assert result == "accepted", f"{key}={value!r} refused (refused-valid)"
        OUTCOMES["valid value", result] += 1


@pytest.mark.parametrize(
    "section",
    [
        name
        for name in PipelineConfig.model_fields
        if "." in next((key for key in FIELDS if key.startswith(f"{name}.")), "")
    ],
)
@settings(FAST, max_examples=examples(3))
@given(name=st.from_regex(r"[a-z][a-z_]{0,15}", fullmatch=True))
def test_unknown_keys_are_refused(section, name, tmp_path_factory):
    key = f"{section}.{name}"
    if key in FIELDS:
        return
    check(tmp_path_factory.mktemp("case"), "unknown key", key, 1, refuse_only=True)


# -- whole preset files -----------------------------------------------------------------------------------------
def _text_variants(text: str) -> dict[str, bytes]:
    body = text.rstrip("\n")
    return {
        "final newline": f"{body}\n".encode(),
        "no final newline": body.encode(),
        "CRLF": f"{body}\n".replace("\n", "\r\n").encode(),
        "BOM": f"\ufeff{body}\n".encode(),
        "BOM + CRLF, no final newline": f"\ufeff{body}".replace("\n", "\r\n").encode(),
    }


@settings(FAST, max_examples=examples(8))
@given(data=st.data())
def test_preset_text_variants_parse_as_the_canonical_file(data, tmp_path_factory):
    keys = data.draw(
        st.lists(st.sampled_from(sorted(k for k in FIELDS if "." in k)), min_size=1, max_size=4)
    )
    tree: dict = {"extends": BASE}
    for key in keys:
        tree = merge(
            tree, _nested(key, data.draw(valid(key, FIELDS[key], _kinds(FIELDS[key].annotation))))
        )
    tmp = tmp_path_factory.mktemp("variants")
    (tmp / "case.yaml").write_text(yaml.safe_dump(tree), encoding="utf-8")
    expected = load_config(str(tmp / "case.yaml"))
    for name, raw in _text_variants(yaml.safe_dump(tree)).items():
        (tmp / "case.yaml").write_bytes(raw)
        assert load_config(str(tmp / "case.yaml")) == expected, name
        OUTCOMES["valid file text", "accepted"] += 1


STRUCTURE: dict[str, tuple[bytes, str]] = {
    # case: (file bytes, what the one-line refusal must name besides the file)
    "extends a list": (b"extends: [smoke, mini]\n", "extends"),
    "extends a number": (b"extends: 3\n", "extends"),
    "extends an empty string": (b"extends: ''\n", "extends"),
    "extends a missing preset": (b"extends: no-such-preset\n", "no-such-preset"),
    "extends itself": (b"extends: {self}\n", "cycle"),
    "not UTF-8": (b"pretrain:\n  lr: 0.001 # caf\xe9\n", "UTF-8"),
    "a list at top level": (b"- pretrain\n- lr\n", "mapping"),
    "a number at top level": (b"3\n", "mapping"),
    "a key given twice": (b"pretrain:\n  lr: 0.001\n  lr: 0.002\n", "twice"),
    "a section given twice": (b"pretrain: {}\npretrain: {}\n", "twice"),
    "not YAML": (b"pretrain: [1, 2\n", "YAML"),
    "NUL bytes": (b"pretrain:\x00\x00\n", "YAML"),
    "a section that is a number": (b"pretrain: 3\n", "pretrain"),
}


@pytest.mark.parametrize("case", STRUCTURE)
def test_preset_structure_is_refused_naming_the_file(case, tmp_path):
    raw, names = STRUCTURE[case]
    path = tmp_path / "case.yaml"
    path.write_bytes(raw.replace(b"{self}", str(path).encode()))
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    message = user_message(err.value)
    assert message is not None and "\n" not in message
    assert str(path) in message or "pretrain" in message, message
    assert names in message, message
    OUTCOMES["preset structure", "clear"] += 1


def test_a_cycle_through_two_files_and_an_empty_file(tmp_path):
    (tmp_path / "a.yaml").write_text(f"extends: {tmp_path / 'b.yaml'}\n")
    (tmp_path / "b.yaml").write_text(f"extends: {tmp_path / 'a.yaml'}\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_preset_dict(str(tmp_path / "a.yaml"))
    OUTCOMES["preset structure", "clear"] += 1
    (tmp_path / "empty.yaml").write_bytes(b"")
    assert load_config(str(tmp_path / "empty.yaml")).model_dump(
        exclude={"preset"}
    ) == PipelineConfig().model_dump(exclude={"preset"})
    OUTCOMES["preset structure", "accepted"] += 1


# -- number flags of the commands --------------------------------------------------------------------------------
def _number_flags() -> list[tuple[str, str]]:
    """(command, flag) for every flag of every command whose type parses a number."""
    found = []
    for command, (module, _) in cli.commands().items():
        parser = argparse.ArgumentParser()
        importlib.import_module(module).add_cli_args(parser)
        for action in parser._actions:
            if (
                not action.option_strings
                or not callable(action.type)
                or isinstance(action.type, type)
                and action.type not in (int, float)
            ):
                continue
            try:
                number = action.type("1")
            except (ValueError, TypeError, argparse.ArgumentTypeError):
                continue
            if isinstance(number, (int, float)):
                found.append((command, action.option_strings[-1]))
    return found


NUMBER_FLAGS = _number_flags()


def _required(command: str) -> list[str]:
    """A placeholder for each argument the command requires (its first choice where it has choices)."""
    parser = argparse.ArgumentParser()
    importlib.import_module(cli.commands()[command][0]).add_cli_args(parser)
    argv = []
    for action in parser._actions:
        if action.option_strings and not action.required:
            continue
        value = str(next(iter(action.choices))) if action.choices else "placeholder"
        argv += [action.option_strings[0], value] if action.option_strings else [value]
    return argv


def _run_flag(command: str, flag: str, text: str, capsys, monkeypatch) -> tuple[int, str]:
    """`gpt1 COMMAND <required> FLAG TEXT` in process, the command itself replaced by nothing: only the parsing
    runs. The exit code and stderr."""
    module = importlib.import_module(cli.commands()[command][0])
    monkeypatch.setattr(module, "run_cli", lambda args: 0)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    capsys.readouterr()
    code = cli.main([command, *_required(command), f"{flag}={text}"])
    return code, capsys.readouterr().err


BAD_NUMBERS = ["nan", "inf", "-inf", "-1", "-0.5", "true", "1e400", str(2**64), "9" * 40, ""]


@pytest.mark.parametrize("command, flag", NUMBER_FLAGS)
@settings(FAST, max_examples=examples(5))
@given(text=st.one_of(st.sampled_from(BAD_NUMBERS), st.integers(-(2**70), -1).map(str)))
def test_number_flags_refuse_nan_negative_and_huge(command, flag, text, capsys, monkeypatch):
    code, err = _run_flag(command, flag, text, capsys, monkeypatch)
    assert code == 2, f"gpt1 {command} {flag} {text!r}: exit {code}: {err}"
    assert err.count("\n") == 1 and flag in err, f"gpt1 {command} {flag} {text!r}: {err!r}"
    OUTCOMES["number flag", "clear"] += 1


@pytest.mark.parametrize("command, flag", NUMBER_FLAGS)
def test_number_flags_take_a_plain_number(command, flag, capsys, monkeypatch):
    code, err = _run_flag(command, flag, "1", capsys, monkeypatch)
    assert code == 0, f"gpt1 {command} {flag} 1: exit {code}: {err}"
    OUTCOMES["number flag (valid)", "accepted"] += 1


def summary(outcomes: Counter[tuple[str, str]]) -> str:
    """The table by class: clear refusals, acceptances (a failing case stops pytest before it is counted)."""
    classes = sorted({klass for klass, _ in outcomes})
    lines = [f"{'class':<22}{'clear':>8}{'accepted':>10}{'total':>8}"]
    for klass in classes:
        clear, accepted = outcomes[klass, "clear"], outcomes[klass, "accepted"]
        lines.append(f"{klass:<22}{clear:>8}{accepted:>10}{clear + accepted:>8}")
    total = sum(outcomes.values())
    valid = sum(n for (klass, _), n in outcomes.items() if "valid" in klass)
    lines.append(
        f"{'all':<22}{sum(outcomes[k, 'clear'] for k in classes):>8}"
        f"{sum(outcomes[k, 'accepted'] for k in classes):>10}{total:>8}"
    )
    lines.append(f"valid variants: {valid} of {total}")
    return "\n".join(lines)


class _Summary:
    """A pytest plugin: the summary of the module pytest ran (its own import, not this `__main__`)."""

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        items = [item for item in session.items if isinstance(item, pytest.Function)]
        if items:
            print("\n" + summary(items[0].module.OUTCOMES))


if __name__ == "__main__":
    import sys

    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", __file__], plugins=[_Summary()]))
