"""What is checked before it is used, and said in the user's words: structured inputs of the wrong shape, configs
whose checking must not build what they describe, settings given two ways, and errors that must name the flag or
file the user gave (issue 45). Each case sits in the category of what the user touched.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file

from gpt1 import tasks
from gpt1.io import read_json
from tests.battery.core import Case, api, cli
from tests.battery.fixtures import sets

SETTINGS, PATHS, ARTEFACTS, TASKS = "--set values", "paths", "corrupted artefacts", "task files"


def _dry_run(*extra):
    """`gpt1 pretrain --dry-run` on the fixture shards: validation and OUT/config.json, no worker."""
    def argv(fx, work: Path) -> list:
        return [*fx.pretrain_argv(work / "out"), "--dry-run", *extra]
    return argv


def _written_config(check):
    """A check of the config a dry run wrote (OUT/config.json): `check(config)` says what is wrong, or None."""
    def run(fx, work: Path, outcome) -> str | None:
        path = work / "out" / "config.json"
        return check(read_json(path)) if path.is_file() else "no OUT/config.json written"
    return run


def _preset_file(text: str):
    def prepare(fx, work: Path) -> None:
        (work / "case.yaml").write_text(text, encoding="utf-8")
    return prepare


def _alias_bomb() -> str:
    """About a kilobyte that expands to 9**9 values."""
    lines = ["    l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "extends: smoke\nfinetune:\n  task_data:\n" + "\n".join(lines) + "\n"


def setting_cases() -> list[Case]:
    c = lambda name, argv, **kw: cli(SETTINGS, name, argv, **kw)  # noqa: E731
    return [
        # the size check is arithmetic: a million layers refused in seconds, not built for minutes
        c("pretrain/n-layer-million-dry-run",
          lambda fx, w: ["pretrain", "--preset", "smoke", "--shards", fx.shards, "--out", w / "out", "--dry-run",
                         "--set", "model.n_layer=1000000"],
          refuse=["model.n_layer", "parameters", "GiB"], fast=True),
        c("pretrain/set-and-flag-disagree", _dry_run(*sets(["pretrain.max_steps=yes"])),
          refuse=["pretrain.max_steps=yes", "--max-steps"], fast=True),
        # the fixture's own --set model.n_layer=2 and a mapping that says otherwise
        c("pretrain/mapping-disagrees-with-dotted", _dry_run(*sets(["model={n_layer: 1}"])),
          refuse=["model.n_layer=2", "model={n_layer: 1}"]),
        c("pretrain/mapping-keeps-earlier-overrides", _dry_run(*sets(["model={attention: manual}"])),
          check=_written_config(lambda cfg: None if (cfg["model"]["n_embd"], cfg["model"]["attention"])
                                == (32, "manual") else f"model {cfg['model']} (the earlier model.* overrides lost)")),
        c("preset-name-leaves-the-folder", _dry_run("--preset", "../presets/smoke"),
          refuse=["../presets/smoke", "preset name"]),
        c("preset-alias-bomb", _dry_run("--preset", "case.yaml"), prepare=_preset_file(_alias_bomb()),
          refuse=["case.yaml", "aliases"]),
        c("preset-merge-key", _dry_run("--preset", "case.yaml"),
          prepare=_preset_file("extends: smoke\npretrain:\n  <<: {weight_decay: 0.02, adam_eps: 1e-7}\n"
                               "  weight_decay: 0.03\n"),
          check=_written_config(lambda cfg: None if (cfg["pretrain"]["weight_decay"], cfg["pretrain"]["adam_eps"])
                                == (0.03, 1e-7) else f"pretrain {cfg['pretrain']}")),
    ]


def _symlinked_out(fx, work: Path) -> None:
    """`out` is a link to a folder on another "disk" holding someone's file: --force replaces what it points to."""
    real = work / "disk" / "ft"
    real.mkdir(parents=True)
    (real / "notes.txt").write_text("not a fine-tune\n")
    (work / "out").symlink_to(real)


def _finetuned_through_the_link(fx, work: Path, outcome) -> str | None:
    if not (work / "out").is_symlink():
        return "the --out link was replaced"
    return None if (work / "disk" / "ft" / "metrics.json").is_file() else "no metrics.json in the linked folder"


def path_cases() -> list[Case]:
    def finetune(fx, work: Path) -> list:
        return [*fx.finetune_argv("sst2", fx.tasks / "SST-2", work / "out"), "--force"]

    def not_utf8_inputs(fx, work: Path) -> None:
        lines = [json.dumps({"sentence": "a fine film"}), json.dumps({"sentence": "dull"})]
        (work / "inputs.jsonl").write_bytes("\n".join(lines).encode() + b"\n{\"sentence\": \"caf\xe9\"}\n")

    c = lambda name, argv, **kw: cli(PATHS, name, argv, **kw)  # noqa: E731
    return [
        c("finetune-force-out-is-a-symlink", finetune, prepare=_symlinked_out, check=_finetuned_through_the_link),
        c("generate-checkpoint-is-a-finetune-out", lambda fx, w: ["generate", "--checkpoint", fx.finetuned,
                                                                   "--prompt", "the"],
          refuse=["--checkpoint", "gpt1_config.json", str(Path("finetuned") / "model")], fast=True),
        c("predict-input-not-utf8", lambda fx, w: ["predict", "--model", fx.finetuned / "model", "--input",
                                                   w / "inputs.jsonl"],
          prepare=not_utf8_inputs, refuse=["inputs.jsonl:3", "UTF-8"]),
    ]


def _hf_folder(change):
    """A transformers export of the fixture model (`gpt1 convert --to hf`), then `change(folder)`."""
    def prepare(fx, work: Path) -> None:
        from gpt1.cli import main

        assert main(["convert", "--to", "hf", str(fx.model), "--out", str(work / "hf")]) == 0
        change(work / "hf")
    return prepare


def _drop_tensor(name: str):
    def change(folder: Path) -> None:
        state = load_file(str(folder / "model.safetensors"))
        save_file({k: v for k, v in state.items() if k != name}, str(folder / "model.safetensors"))
    return change


def artefact_cases() -> list[Case]:
    convert = lambda fx, w: ["convert", "--from", "hf", w / "hf", "--out", w / "out"]  # noqa: E731
    c = lambda name, change, refuse, **kw: cli(ARTEFACTS, name, convert, prepare=_hf_folder(change),  # noqa: E731
                                               refuse=refuse, **kw)
    return [
        c("hf-config-is-a-list", lambda f: (f / "config.json").write_text("[1, 2]\n"), ["config.json", "array"],
          fast=True),
        c("hf-config-is-null", lambda f: (f / "config.json").write_text("null\n"), ["config.json", "null"]),
        c("hf-block-tensor-missing", _drop_tensor("transformer.h.0.mlp.c_fc.weight"), ["h.0.mlp.c_fc.weight", "hf"]),
    ]


def _copy_task(folder: str, change):
    def prepare(fx, work: Path) -> None:
        change(fx.copy(fx.tasks / folder, work))
    return prepare


def task_cases() -> list[Case]:
    def trailing_blank_lines(folder: Path) -> None:
        with open(folder / "dev.tsv", "a", encoding="utf-8") as fh:
            fh.write("\n\n\n")

    def empty_index(folder: Path) -> None:
        lines = (folder / "dev.tsv").read_text(encoding="utf-8").split("\n")
        lines[2] = lines[2][lines[2].index("\t"):]
        (folder / "dev.tsv").write_text("\n".join(lines), encoding="utf-8")

    def scored(fx, work: Path, outcome) -> str | None:
        return None if (work / "out" / "metrics.json").is_file() else "no metrics.json"

    def load_dev(fx, work: Path):
        _copy_task("QQP", empty_index)(fx, work)
        return tasks.load("qqp", work / "QQP", "dev")

    def counted_at_line_3(fx, work: Path, outcome) -> str | None:
        """Counted and located, never an example keyed by an empty id."""
        bad = [(Path(b.file).name, b.line, b.field, b.reason) for b in outcome.value.report.bad_rows]
        if bad != [("dev.tsv", 3, "id", "missing id")]:
            return f"malformed rows {bad}"
        return "an example with an empty id" if any(not ex.id.strip() for ex in outcome.value) else None

    finetune = lambda fx, w: fx.finetune_argv("qqp", w / "QQP", w / "out")  # noqa: E731
    return [
        cli(TASKS, "qqp/dev-trailing-blank-lines", finetune, prepare=_copy_task("QQP", trailing_blank_lines),
            check=scored),
        api(TASKS, "qqp/dev-row-without-its-id", load_dev, check=counted_at_line_3),
    ]


def cases() -> list[Case]:
    return setting_cases() + path_cases() + artefact_cases() + task_cases()
