"""Model configs are read strictly, ours (gpt1_config.json) and transformers' (config.json): every field present,
none assumed, each size compared with the weights' shapes and the vocabulary with the tokenizer, a refusal naming
the file and the field. The cases come from the declarations (ModelConfig's fields, `HOW_IT_RUNS`, `SIZE_FIELDS`,
`HF_SETTINGS`), so a new field is covered without a new case.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpt1.cli import main
from gpt1.config import ModelConfig
from gpt1.io import InputError, read_json, write_json
from gpt1.model.convert import (
    HF_CONFIG,
    HF_SETTINGS,
    HF_WEIGHTS,
    hf_config_dict,
    load_hf_folder,
    to_hf_state_dict,
)
from gpt1.model.transformer import (
    CONFIG_NAME,
    GPT1,
    HOW_IT_RUNS,
    SIZE_FIELDS,
    WEIGHTS_NAME,
    save_weights,
)
from gpt1.tokenizer import bpe

TINY = ModelConfig(vocab_size=40, n_ctx=16, n_layer=2, n_head=2, n_embd=8, d_ff=32)


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ours")
    torch.manual_seed(0)
    GPT1(TINY).save_pretrained(folder)
    return folder


def hf_folder(folder: Path, model: GPT1, **config) -> Path:
    """A transformers openai-gpt folder of `model` (its weights as HF saves them), config.json changed by `config`
    (None: the field left out)."""
    folder.mkdir()
    save_weights({k: v for k, v in to_hf_state_dict(model).items() if k != "lm_head.weight"}, folder / HF_WEIGHTS)
    settings = {**hf_config_dict(model.config), "model_type": "openai-gpt", **config}
    write_json(folder / HF_CONFIG, {k: v for k, v in settings.items() if v is not None})
    return folder


def edited(source: Path, target: Path, **fields) -> Path:
    """A copy of our model folder whose gpt1_config.json has `fields` changed (None: left out)."""
    target.mkdir()
    (target / WEIGHTS_NAME).write_bytes((source / WEIGHTS_NAME).read_bytes())
    saved = {**read_json(source / CONFIG_NAME), **fields}
    write_json(target / CONFIG_NAME, {k: v for k, v in saved.items() if v is not None})
    return target


def refused(load, folder: Path, file: str, field: str) -> str:
    with pytest.raises(InputError) as err:
        load(folder)
    said = str(err.value)
    assert str(folder / file) in said and f"[{field}]" in said and "\n" not in said, said
    return said


def test_every_field_that_decides_the_model_is_required_in_our_config(ours, tmp_path):
    for field in ModelConfig.model_fields:
        folder = edited(ours, tmp_path / field, **{field: None})
        if field in HOW_IT_RUNS:  # how it runs, never what it computes: a folder older than the field loads
            assert GPT1.from_pretrained(folder).config == TINY
        else:  # never a default: a missing n_layer is not 12 layers, blamed on the weights
            assert "missing" in refused(GPT1.from_pretrained, folder, CONFIG_NAME, field)


def test_each_size_in_our_config_is_compared_with_the_weights(ours, tmp_path):
    for field in ["n_layer", *(size for size, _, _ in SIZE_FIELDS)]:
        folder = edited(ours, tmp_path / field, **{field: 2 * getattr(TINY, field)})
        said = refused(GPT1.from_pretrained, folder, CONFIG_NAME, field)
        assert f"{2 * getattr(TINY, field)} here, but {WEIGHTS_NAME} holds {getattr(TINY, field)}" in said


def test_every_transformers_setting_is_required_and_none_assumed(tmp_path):
    model = GPT1(TINY)
    assert load_hf_folder(hf_folder(tmp_path / "complete", model)).config == TINY
    for field in [*HF_SETTINGS, "afn"]:
        refused(load_hf_folder, hf_folder(tmp_path / field, model, **{field: None}), HF_CONFIG, field)
    # present, but another function than GPT-1's
    for field, value in (("afn", "relu"), ("tie_word_embeddings", False)):
        refused(load_hf_folder, hf_folder(tmp_path / f"{field}-{value}", model, **{field: value}), HF_CONFIG, field)


def test_each_transformers_size_is_compared_with_the_weights(tmp_path):
    model = GPT1(TINY)
    sizes = {hf for hf, ours in HF_SETTINGS.items() if ours in {"n_layer", *(f for f, _, _ in SIZE_FIELDS)}}
    assert sizes == {"vocab_size", "n_positions", "n_layer", "n_embd"}
    for field in sorted(sizes):
        wrong = hf_folder(tmp_path / field, model, **{field: 2 * hf_config_dict(TINY)[field]})
        assert HF_WEIGHTS in refused(load_hf_folder, wrong, HF_CONFIG, field)


def test_a_whole_layer_missing_from_the_weights_is_named(tmp_path):
    folder = hf_folder(tmp_path / "hf", GPT1(TINY))
    state = {k: v for k, v in to_hf_state_dict(GPT1(TINY)).items() if ".h.1." not in k and k != "lm_head.weight"}
    save_weights(state, folder / HF_WEIGHTS)  # the last block gone: its shapes alone would say 1 layer
    said = refused(load_hf_folder, folder, HF_CONFIG, "n_layer")
    assert "2 here, but model.safetensors holds 1" in said


def test_a_model_with_fewer_rows_than_its_tokenizer_has_words_is_not_converted(tmp_path, capsys):
    text = "the cat sat on the mat . a dog ran in the park . " * 20
    tokenizer = bpe.train([text], merges=20, show_progress=False)
    small = GPT1(TINY.model_copy(update={"vocab_size": tokenizer.start_id - 1}))
    folder = hf_folder(tmp_path / "hf", small)
    tokenizer.save(tmp_path / "tok")
    argv = ["convert", "--from", "hf", str(folder), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"[vocab_size]: {tokenizer.start_id - 1} embedding rows, but the tokenizer has {tokenizer.start_id}" in err
    assert not (tmp_path / "o").exists()
    # the specials alone missing is the released model's case: fine-tuning adds them
    exact = GPT1(TINY.model_copy(update={"vocab_size": tokenizer.start_id}))
    argv[3] = str(hf_folder(tmp_path / "release-like", exact))
    assert main(argv) == 0
    assert json.loads((tmp_path / "o" / CONFIG_NAME).read_text())["vocab_size"] == tokenizer.start_id
