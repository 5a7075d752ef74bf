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
from gpt1.config import (
    MAX_EXTENDS,
    MAX_YAML_DEPTH,
    PRESET_DIR,
    ConfigError,
    PipelineConfig,
    available_presets,
    load_config,
    load_preset_dict,
    merge,
)
from gpt1.pretrain import stage as pretrain_stage
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


def as_merge_key(tmp: Path, key: str, value: Any) -> tuple[str, list[str]] | None:
    """The value brought in by a YAML merge key (`<<:`, YAML 1.1), as users share defaults between sections."""
    section, _, name = key.partition(".")
    if not name:
        return None
    path = tmp / "merge.yaml"
    path.write_text(f"extends: {BASE}\n{section}:\n  <<: {_flow({name: value})}\n", encoding="utf-8")
    return str(path), []


def as_section_override(tmp: Path, key: str, value: Any) -> tuple[str, list[str]] | None:
    """The value inside a mapping override of its section (`--set model={n_layer: 2}`)."""
    section, _, name = key.partition(".")
    return (BASE, [f"{section}={_flow({name: value})}"]) if name else None


WAYS = {
    "preset": as_preset,
    "--set": as_override,
    "merge key": as_merge_key,
    "--set section": as_section_override,
}


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
        if (given := way(tmp, key, value)) is not None:
            OUTCOMES[klass, outcome(*given, key, value, refuse_only)] += 1


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


# A tracking store MLflow can use: a server or an SQLite file (gpt1.config.tracking_uri_problem refuses the rest).
TRACKING_URIS = st.one_of(
    st.builds("http://{}:{}".format, st.sampled_from(["127.0.0.1", "mlflow.internal"]), st.integers(1, 65535)),
    st.text("abcdefgh-_", min_size=1, max_size=12).map("sqlite:///{}.db".format),
)


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
        options.append(TRACKING_URIS if key.endswith("_uri") else st.text("abcdefgh-_/", min_size=1, max_size=20))
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
    for name, way in WAYS.items():
        if (given := way(tmp_path_factory.mktemp("case"), key, value)) is None:
            continue
        result = outcome(*given, key, value, refuse_only=False)
        assert result == "accepted", f"{key}={value!r} as {name} refused (refused-valid)"
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


def _alias_bomb(levels: int = 9, width: int = 9) -> bytes:
    """About a kilobyte that expands to width**levels values: each level lists the one before `width` times."""
    lines = [f"    l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return ("finetune:\n  task_data:\n" + "\n".join(lines) + "\n").encode()


def _nested_through_aliases() -> bytes:
    """Each anchor nested half the depth limit inside the one before: shallow as written, deep once expanded."""
    half = MAX_YAML_DEPTH // 2
    inner = "[" * half + "x" + "]" * half
    outer = "[" * half + "*a" + "]" * half
    return f"pretrain:\n  curve_steps: &a {inner}\n  eval_every: {outer}\n".encode()


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
    "an alias bomb": (_alias_bomb(), "aliases"),
    "nested too deep": (b"pretrain: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested"),
    "nested too deep through aliases": (_nested_through_aliases(), "nested"),
    "a recursive alias": (b"pretrain:\n  curve_steps: &a [1, *a]\n", "recursive"),
    "a merge key of a number": (b"pretrain:\n  <<: 3\n", "merging"),
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


def _chain(tmp: Path, files: int) -> Path:
    """`files` preset files, each extending the next; the last sets one value. The first one's path."""
    for i in range(files):
        text = f"extends: {tmp / f'p{i + 1}.yaml'}\n" if i < files - 1 else "pretrain: {lr: 0.001}\n"
        (tmp / f"p{i}.yaml").write_text(text, encoding="utf-8")
    return tmp / "p0.yaml"


@pytest.mark.parametrize("files", [MAX_EXTENDS, MAX_EXTENDS + 1, 1200])
def test_an_extends_chain_is_followed_to_its_bound_and_refused_past_it(files, tmp_path):
    top = _chain(tmp_path, files)
    if files <= MAX_EXTENDS:
        assert load_config(str(top)).pretrain.lr == 0.001
        OUTCOMES["preset structure", "accepted"] += 1
        return
    with pytest.raises(ConfigError) as err:
        load_config(str(top))
    message = user_message(err.value)
    assert message is not None and "\n" not in message and str(top) in message and "extends" in message
    OUTCOMES["preset structure", "clear"] += 1


def _outside_the_presets_folder(name: str) -> list[str]:
    """A preset's name as a path would resolve it: up and back into the folder, from elsewhere, into a sub-folder."""
    return [f"../presets/{name}", f"./{name}", str(PRESET_DIR / name), f"{name}/..", f"x/../{name}", f"..{name}"]


@pytest.mark.parametrize(
    "name", [form for preset in available_presets() for form in _outside_the_presets_folder(preset)]
)
def test_a_preset_name_is_never_a_path(name):
    """A name without a .yaml suffix names a file in gpt1/presets/ or nothing: `..` or a separator resolved
    anywhere else would read a file the user never named as one."""
    with pytest.raises(ConfigError) as err:
        load_config(name)
    message = user_message(err.value)
    assert message is not None and repr(name) in message and "preset name" in message, message
    OUTCOMES["preset name", "clear"] += 1


# -- every way of setting a value: one semantics ------------------------------------------------------------------
def _two_valid(data, key: str) -> tuple[Any, Any] | None:
    """Two valid values of the field that differ as written; None where the draw gave one twice (a field with one
    valid value near the preset's: `curve_steps` of a preset that sets none)."""
    kinds = _kinds(FIELDS[key].annotation)
    first, second = (data.draw(valid(key, FIELDS[key], kinds)) for _ in range(2))
    return None if _flow(first) == _flow(second) else (first, second)


SECTION_KEYS = [key for key in FIELDS if "." in key]


@pytest.mark.parametrize("key", SECTION_KEYS)
@settings(FAST, max_examples=examples(2))
@given(data=st.data())
def test_two_settings_of_a_field_that_disagree_are_refused_naming_both(key, data):
    values = _two_valid(data, key)
    if values is None:
        return
    items = [f"{key}={_flow(value)}" for value in values]
    with pytest.raises(ConfigError) as err:
        load_config(BASE, items)
    assert all(repr(item) in str(err.value) for item in items) and key in str(err.value), err.value
    assert load_config(BASE, [items[0], items[0]]) == load_config(BASE, items[:1])  # the same twice agrees
    OUTCOMES["two settings", "clear"] += 1


@pytest.mark.parametrize("section", sorted({key.partition(".")[0] for key in SECTION_KEYS}))
@settings(FAST, max_examples=examples(4))
@given(data=st.data())
def test_a_mapping_override_merges_as_dotted_ones_do(section, data):
    """`--set section={b: ...}` after `--set section.a=...` keeps a, as two dotted overrides and a preset file do
    (or all refuse the pair alike, where the section's own rules do)."""
    keys = [key for key in SECTION_KEYS if key.startswith(f"{section}.")]
    if len(keys) < 2:
        return
    a, b = data.draw(st.lists(st.sampled_from(keys), min_size=2, max_size=2, unique=True))
    va, vb = (data.draw(valid(k, FIELDS[k], _kinds(FIELDS[k].annotation))) for k in (a, b))
    name_b = b.partition(".")[2]
    forms = {
        "dotted": [f"{a}={_flow(va)}", f"{b}={_flow(vb)}"],
        "mapping after dotted": [f"{a}={_flow(va)}", f"{section}={_flow({name_b: vb})}"],
        "mapping before dotted": [f"{section}={_flow({name_b: vb})}", f"{a}={_flow(va)}"],
    }
    results = {}
    for form, items in forms.items():
        try:
            results[form] = load_config(BASE, items)
        except ConfigError as err:
            results[form] = "refused: " + str(err).split(": ", 1)[1]
    assert len({repr(result) for result in results.values()}) == 1, results
    OUTCOMES["mapping override", "accepted" if isinstance(results["dotted"], PipelineConfig) else "clear"] += 1


def _pretrain_args(argv: list[str]):
    parser = cli.build_parser("pretrain")
    return parser.parse_args(["pretrain", "--shards", "s", "--out", "o", "--preset", BASE, *argv])


@pytest.mark.parametrize("flag", list(pretrain_stage.FLAG_SETTINGS))
def test_a_flag_and_a_set_of_its_key_must_agree(flag):
    """`--max-steps 5 --set pretrain.max_steps=yes` is refused naming both, never one of them dropped unread."""
    key = pretrain_stage.FLAG_SETTINGS[flag]
    value = canonical(key)
    if value is None:
        return  # no value of the preset's to give the flag
    args = _pretrain_args([flag, str(value), "--set", f"{key}=yes"])
    with pytest.raises(ConfigError) as err:
        load_config(args.preset, pretrain_stage._overrides(args))
    assert flag in str(err.value) and f"{key}=yes" in str(err.value), err.value
    args = _pretrain_args([flag, str(value), "--set", f"{key}={_flow(value)}"])
    assert load_config(args.preset, pretrain_stage._overrides(args)) == CANONICAL
    OUTCOMES["flag and --set", "clear"] += 1


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
