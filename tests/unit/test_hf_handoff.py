"""The transformers hand-off: a folder `save_hf_folder` writes (pre-training's final/hf, `gpt1 convert --to hf`) works
with AutoTokenizer, AutoModelForCausalLM and pipeline("text-generation") as our own code does; our own folder
layout is refused by transformers."""

from __future__ import annotations

import json
import shutil

import ftfy
import pytest
import torch

from gpt1.tokenizer import bpe
from gpt1.config import SPECIAL_TOKENS, ModelConfig
from gpt1.model.convert import save_hf_folder
from gpt1.model.generate import continue_text, generate
from gpt1.io import InputError
from gpt1.model.transformer import GPT1

from conftest import shared_path

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

CORPUS = [
    "The lowest towers were lower than the newest ones, and the newer towers were the lowest.",
    "\u201cDon't go,\u201d said Mr. Brown \u2014 he wasn't sure\u2026 It's 3:30 p.m.; they're tired!",
    "Caf\u00e9 na\u00efve: 12 apples, 7.5 kg & 100% sure? (Yes) [no] {maybe} #1 $5 -- fine.",
    "She said: 'I'll see the towers tomorrow.'\n\nThen she left at 10 o'clock.",
] * 3

# Punctuation, capitals, numbers, unicode, and every character fix the export does itself (ligatures, fullwidth
# forms, quotes, line breaks, terminal escapes, control characters, NFC).
TEXTS = [
    "The Lowest TOWERS were lower, newer & newest!",
    "\u201cDon't go,\u201d said Mr. Brown \u2014 it's 3:30 p.m.\u2026 I can't stay.",
    "Caf\u00e9 na\u00efve \u00e9l\u00e8ve: 12 apples at 7.5 kg, 100% (really?) [no] {x} #1 $5, 1,000,000.",
    "Line one\r\nline two\rline three\u2028four\u2029five\n\n\nsix",
    "\u2018single\u2019 \u201cdouble\u201d \u201elow\u201f \u02bcokay \u201bodd",
    "Tabs\tand\u00a0non-breaking spaces,  doubled   and \x1b[1mbold\x1b[0m\x07 bell\x00\ufeff.",
    "Cafe\u0301 composed by NFC; snowman \u2603, emoji \U0001F600, CJK \u4e2d\u6587, <unk> and </w>.",
    "A \ufb01ne \ufb02at \ufb00air; \uff34\uff4f\uff57\uff45\uff52\uff53 in fullwidth\u3000form\uff01",
    "",
]
# What ftfy repairs from context, which the export leaves to ftfy: mojibake, HTML entities, C1 controls.
FTFY_ONLY = [
    "\u00e2\u20ac\u0153Mojibake\u00e2\u20ac\x9d is what they said.",
    "Fish &amp; chips &lt;3",
    "\x93Windows-1252 quotes\x94 read as C1 controls",
]


@pytest.fixture(scope="module")
def trained() -> bpe.GPT1Tokenizer:
    return bpe.train(CORPUS, merges=60, show_progress=False)


def tiny_model(vocab_size: int, n_ctx: int = 32, seed: int = 0) -> GPT1:
    """A random model whose logits are spread out (weights well above the 0.02 init), so greedy choices are clear."""
    torch.manual_seed(seed)
    model = GPT1(ModelConfig(vocab_size=vocab_size, n_ctx=n_ctx, n_layer=2, n_head=2, n_embd=16, d_ff=64))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    model = tiny_model(trained.vocab_size)
    folder = save_hf_folder(model, trained, tmp_path_factory.mktemp("export") / "hf", "Made for a test.")
    return model, folder


def hf_ids(hf_tokenizer, text: str, **kwargs) -> list[int]:
    return hf_tokenizer(text, **kwargs)["input_ids"]


# ------------------------------------------------------------------------------------------------ the folder


def test_the_folder_is_complete(exported, trained):
    model, folder = exported
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json"]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "openai-gpt" and config["vocab_size"] == trained.vocab_size
    assert config["n_positions"] == 32 and config["architectures"] == ["OpenAIGPTLMHeadModel"]
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == generation["bos_token_id"] == trained.start_id
    assert json.loads((folder / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n") and "Made for a test." in card
    assert "2 layers" in card and f"{trained.num_merges:,} word-level BPE merges" in card
    assert 'pipeline("text-generation"' in card and "ftfy.fix_text" in card


def test_the_folder_is_replaced_whole_and_only_if_it_is_a_transformers_folder(exported, trained, tmp_path):
    model, folder = exported
    copy = tmp_path / "hf"
    shutil.copytree(folder, copy)
    (copy / "stale.bin").write_text("from an earlier export")
    save_hf_folder(tiny_model(trained.vocab_size, seed=1), trained, copy, "Again.")
    assert not (copy / "stale.bin").exists() and "Again." in (copy / "README.md").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no temporary folders left

    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    with pytest.raises(InputError, match="not a transformers folder"):
        save_hf_folder(model, trained, other, "No.")
    assert [p.name for p in other.iterdir()] == ["todo.txt"]
    with pytest.raises(ValueError, match="embedding rows"):
        save_hf_folder(tiny_model(trained.vocab_size - 1), trained, tmp_path / "small", "No.")
    assert not (tmp_path / "small").exists()


# ------------------------------------------------------------------------------------------------ AutoTokenizer


@pytest.mark.parametrize("text", TEXTS)
def test_auto_tokenizer_gives_our_ids(exported, trained, text):
    hf = transformers.AutoTokenizer.from_pretrained(exported[1])
    assert hf_ids(hf, text, add_special_tokens=False) == trained.encode(text)
    assert hf_ids(hf, text) == [trained.start_id, *trained.encode(text)]  # as every pre-training document begins
    ours = trained.encode(text)
    assert hf.decode(ours) == trained.decode(ours)


def test_auto_tokenizer_has_the_specials_as_single_ids(exported, trained):
    hf = transformers.AutoTokenizer.from_pretrained(exported[1])
    specials = [trained.start_id, trained.delimiter_id, trained.classify_id]
    assert len(hf) == trained.vocab_size and hf.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == specials
    assert (hf.bos_token, hf.eos_token, hf.model_max_length) == ("_start_", "_start_", 32)
    premise, hypothesis = "The towers were lower.", "They were NOT newer!"
    framed = f"_start_ {premise} _delimiter_ {hypothesis} _classify_"
    assert hf_ids(hf, framed, add_special_tokens=False) == [
        trained.start_id, *trained.encode(premise), trained.delimiter_id, *trained.encode(hypothesis),
        trained.classify_id]
    # Our own `encode` reads typed special strings as text, as the original did; transformers can too.
    assert hf_ids(hf, framed, add_special_tokens=False, split_special_tokens=True) == trained.encode(framed)


@pytest.mark.parametrize("text", FTFY_ONLY)
def test_what_only_ftfy_repairs_is_the_boundary(exported, trained, text):
    hf = transformers.AutoTokenizer.from_pretrained(exported[1])
    assert hf_ids(hf, ftfy.fix_text(text), add_special_tokens=False) == trained.encode(text)
    assert hf_ids(hf, text, add_special_tokens=False) != trained.encode(text)  # without ftfy: other ids


def test_the_exported_tokenizer_comes_back_as_it_was(exported, trained):
    back = bpe.from_transformers(exported[1])
    assert back.sha256 == trained.sha256 and back.encode_batch(TEXTS) == trained.encode_batch(TEXTS)


# ---------------------------------------------------------------------------------- the original GPT-1 vocabulary


@pytest.fixture(scope="module")
def original_export(tmp_path_factory):
    vocab = shared_path("openai-gpt1")
    tokenizer = bpe.from_openai(vocab / "encoder_bpe_40000.json", vocab / "vocab_40000.bpe")
    folder = tmp_path_factory.mktemp("original") / "hf"
    torch.manual_seed(0)
    model = GPT1(ModelConfig(vocab_size=tokenizer.vocab_size, n_ctx=16, n_layer=1, n_head=2, n_embd=8, d_ff=32))
    save_hf_folder(model, tokenizer, folder, "Made for a test.")
    return tokenizer, transformers.AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("text", TEXTS + [f"_start_ {CORPUS[1]} _delimiter_ {CORPUS[2]} _classify_"])
def test_auto_tokenizer_gives_our_ids_with_the_original_vocabulary(original_export, text):
    ours, hf = original_export
    assert hf_ids(hf, text, add_special_tokens=False, split_special_tokens=True) == ours.encode(text)


@pytest.mark.parametrize("text", FTFY_ONLY)
def test_the_ftfy_boundary_with_the_original_vocabulary(original_export, text):
    ours, hf = original_export
    assert hf_ids(hf, ftfy.fix_text(text), add_special_tokens=False) == ours.encode(text)
    assert hf_ids(hf, text, add_special_tokens=False) != ours.encode(text)


# ------------------------------------------------------------------------------ AutoModelForCausalLM, pipeline


def test_auto_model_gives_our_logits(exported, trained):
    model, folder = exported
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert type(hf).__name__ == "OpenAIGPTLMHeadModel"
    assert not any(info.values())  # no missing, unexpected or mismatched weights
    ids = torch.tensor([[trained.start_id, *trained.encode(text)][:20] for text in CORPUS[:4]])
    with torch.no_grad():
        ours = model(ids).logits
        assert ours.std() > 1.0  # logits that mean something
        assert (hf.eval()(ids).logits - ours).abs().max() <= 1e-4  # fp32, same maths in another order


@pytest.mark.parametrize("prompt", ["The lowest towers", "\u201cDon't go,\u201d said Mr. Brown"])
def test_pipeline_greedy_text_generation_matches_ours(exported, trained, prompt):
    model, folder = exported
    generator = transformers.pipeline("text-generation", model=str(folder))
    ours = generate(model, [trained.start_id, *trained.encode(prompt)], 12, temperature=0, stop_id=trained.start_id)
    (out,) = generator(prompt, max_new_tokens=12, do_sample=False, return_tensors=True)
    theirs = out["generated_token_ids"][len(trained.encode(prompt)) + 1:]
    assert theirs[: len(ours)] == ours and theirs[len(ours):] in ([], [trained.start_id])  # stops where ours does
    (text,) = generator(prompt, max_new_tokens=12, do_sample=False, return_full_text=False)
    assert text["generated_text"].strip() == continue_text(model, trained, prompt, 12, temperature=0)


def test_the_model_cards_example_prints_our_greedy_continuation(exported, trained, capsys):
    model, folder = exported
    card = (folder / "README.md").read_text()
    example = card.split("```python\n")[1].split("```")[0].replace("THIS_FOLDER", str(folder))
    exec(example, {})  # the card's code as a user would paste it
    printed = capsys.readouterr().out.strip()
    prompt = "the old man said"
    ours = continue_text(model, trained, prompt, 20, temperature=0)
    assert ours and printed == f"{prompt} {ours}"


# ------------------------------------------------------------------------------------ our own folder layout


def test_transformers_refuses_our_own_folder(exported, trained, tmp_path):
    model, _ = exported
    model.save_pretrained(tmp_path / "ours")
    trained.save(tmp_path / "ours")
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == [
        "gpt1.safetensors", "gpt1_config.json", "tokenizer.json"]
    with pytest.raises(OSError, match="model.safetensors"):
        transformers.OpenAIGPTLMHeadModel.from_pretrained(tmp_path / "ours")
    with pytest.raises(ValueError, match="model_type"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ours")


def test_our_loader_reads_earlier_folders_and_refuses_transformers_ones(exported, tmp_path):
    model, folder = exported
    earlier = tmp_path / "earlier"  # what versions before the rename wrote: transformers' names, our layout
    model.save_pretrained(earlier)
    (earlier / "gpt1.safetensors").rename(earlier / "model.safetensors")
    (earlier / "gpt1_config.json").rename(earlier / "config.json")
    loaded = GPT1.from_pretrained(earlier)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
    with pytest.raises(InputError, match="gpt1 convert --from hf"):
        GPT1.from_pretrained(folder)
