"""Weight interop: HF transformers openai-gpt <-> ours (same logits), the original OpenAI release layout, hub ids
read from a local hub cache, the tokenizer that travels with the weights, the CLI. `gpt1 convert` as a process of
its own, its hub cache and offline mode from its environment: tests/integration/test_convert_process.py."""

from __future__ import annotations

import hashlib
import json
import math
import os

import numpy as np
import pytest
import torch

from gpt1.tokenizer import bpe
from gpt1.cli import main
from gpt1.config import ModelConfig
from gpt1.model.convert import from_hf_state_dict, load_openai_release, release_config, to_hf_state_dict
from gpt1.io import InputError
from gpt1.model.transformer import GPT1

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

HF_TINY = dict(vocab_size=53, n_positions=24, n_embd=16, n_layer=2, n_head=4, afn="gelu")
CORPUS_TEXTS = ["The lowest towers were lower.", "She said: 'I'll see the NEWEST towers at 3:30!'", "unknown: \u2603"]


def hf_tiny(seed: int = 0, **overrides):
    """A random OpenAIGPTLMHeadModel with non-trivial values everywhere (LN gains, biases), in eval mode."""
    torch.manual_seed(seed)
    model = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(**{**HF_TINY, **overrides}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def ids(vocab: int = 53, batch: int = 2, T: int = 17) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, T), generator=torch.Generator().manual_seed(3))


def ours_from_hf(hf) -> GPT1:
    cfg, state = from_hf_state_dict(hf.state_dict(), hf.config.to_dict())
    model = GPT1(ModelConfig(**cfg))
    model.load_state_dict(state)
    return model.eval()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.fixture(scope="module")
def trained() -> bpe.GPT1Tokenizer:
    corpus = ["The lowest towers were lower than the newest ones, and the newer towers were the lowest.",
              "She said: 'I'll see the towers at 3:30 p.m. tomorrow.' Then she left!"] * 3
    return bpe.train(corpus, merges=30, show_progress=False)


def bpe_vocab(tokenizer: bpe.GPT1Tokenizer) -> int:
    return tokenizer.vocab_size - 3  # without the specials, as the release and HF's openai-gpt have it


def write_release_vocab(tokenizer, directory, names=("encoder_bpe_40000.json", "vocab_40000.bpe")) -> None:
    """A tokenizer's vocabulary in the release's two files (HF's openai-gpt: vocab.json, merges.txt)."""
    model = json.loads(tokenizer.to_json())["model"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / names[0]).write_text(json.dumps(model["vocab"]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (directory / names[1]).write_text("#version: 0.2\n" + "\n".join(merges) + "\n")


def test_hf_to_ours_and_back_give_the_same_logits():
    hf = hf_tiny()
    ours = ours_from_hf(hf)
    x = ids()
    with torch.no_grad():
        reference = hf(x).logits
        assert reference.std() > 0.1  # a model whose logits mean something
        assert max_diff(ours(x).logits, reference) <= 1e-4
        back = transformers.OpenAIGPTLMHeadModel(hf.config).eval()
        back.load_state_dict(to_hf_state_dict(ours))  # strict: every HF key present, none extra
        assert max_diff(back(x).logits, reference) <= 1e-4
    assert ours.config.n_head == 4 and ours.config.vocab_size == 53 and ours.config.n_ctx == 24


def test_hf_conv1d_weights_are_transposed_into_linear_layout():
    hf = hf_tiny()
    ours = ours_from_hf(hf)
    torch.testing.assert_close(ours.blocks[1].mlp.c_fc.weight, hf.transformer.h[1].mlp.c_fc.weight.T)
    assert hf.transformer.h[0].attn.c_attn.weight.shape == (16, 48)  # Conv1D: (in, out)
    assert ours.blocks[0].attn.c_attn.weight.shape == (48, 16)  # nn.Linear: (out, in)


def test_hf_base_model_keys_without_prefix_are_accepted():
    hf = hf_tiny()
    cfg, state = from_hf_state_dict(hf.transformer.state_dict(), hf.config.to_dict())  # OpenAIGPTModel keys
    assert set(state) == set(GPT1(ModelConfig(**cfg)).state_dict())


def test_hf_import_refuses_what_gpt1_is_not():
    hf = hf_tiny()
    with pytest.raises(ValueError, match="afn"):
        from_hf_state_dict(hf.state_dict(), {**hf.config.to_dict(), "afn": "relu"})
    sd = dict(hf.state_dict())
    sd["lm_head.weight"] = sd["lm_head.weight"] + 1
    with pytest.raises(ValueError, match="tied"):
        from_hf_state_dict(sd, hf.config.to_dict())
    sd = dict(hf.state_dict(), **{"transformer.h.0.attn.extra.weight": torch.zeros(1)})
    with pytest.raises(InputError, match="unexpected key"):
        from_hf_state_dict(sd, hf.config.to_dict())


def test_cli_converts_hf_folder_to_ours_and_back(trained, tmp_path, caplog):
    hf = hf_tiny(vocab_size=bpe_vocab(trained))
    hf.save_pretrained(tmp_path / "hf")  # weights and config only, like HF's own openai-gpt minus its tokenizer
    assert main(["convert", "--from", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ours")]) == 0
    assert "no tokenizer" in caplog.text
    ours = GPT1.from_pretrained(tmp_path / "ours").eval()
    x = ids(vocab=bpe_vocab(trained))
    with torch.no_grad():
        reference = hf(x).logits
        assert max_diff(ours(x).logits, reference) <= 1e-4

    # Our model with the 3 special tokens appended: the export keeps every row.
    ours.resize_token_embeddings(trained.vocab_size)
    ours.save_pretrained(tmp_path / "ours_specials")
    assert main(["convert", "--to", "hf", str(tmp_path / "ours_specials"), "--out", str(tmp_path / "hf2"),
                 "--tokenizer", str(trained.save(tmp_path / "tok"))]) == 0
    back = transformers.OpenAIGPTLMHeadModel.from_pretrained(tmp_path / "hf2").eval()
    assert back.config.vocab_size == trained.vocab_size
    assert back.lm_head.weight.data_ptr() == back.transformer.tokens_embed.weight.data_ptr()  # still tied
    specials = [trained.start_id, trained.delimiter_id, trained.classify_id]
    x_specials = torch.cat([x, torch.tensor([specials] * 2)], dim=1)
    with torch.no_grad():
        assert max_diff(back(x_specials).logits, ours(x_specials).logits) <= 1e-4
        assert max_diff(back(x).logits[..., :bpe_vocab(trained)], reference) <= 1e-4

    # ... and back again: the same weights, the tokenizer exactly as it was.
    assert main(["convert", "--from", "hf", str(tmp_path / "hf2"), "--out", str(tmp_path / "again")]) == 0
    again = GPT1.from_pretrained(tmp_path / "again")
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), ours.state_dict().values()))
    assert bpe.load(tmp_path / "again").sha256 == trained.sha256


def test_cli_to_hf_takes_the_tokenizer_beside_the_weights(trained, tmp_path, capsys):
    cfg = ModelConfig(vocab_size=trained.vocab_size, n_ctx=8, n_layer=1, n_head=2, n_embd=8, d_ff=32)
    GPT1(cfg).save_pretrained(tmp_path / "m")
    assert main(["convert", "--to", "hf", str(tmp_path / "m"), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "no tokenizer" in err and "--tokenizer" in err and err.count("\n") == 1
    assert not (tmp_path / "hf").exists()
    trained.save(tmp_path / "m")  # as pre-training's final/ holds it
    (tmp_path / "m" / "training.json").write_text(json.dumps({"steps": 1200, "tokens_seen": 4915200}))
    assert main(["convert", "--to", "hf", str(tmp_path / "m"), "--out", str(tmp_path / "hf")]) == 0
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "Pre-trained by gpt1-pipeline for 1,200 steps (4,915,200 tokens)." in card
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert hf_tokenizer("The towers.")["input_ids"] == [trained.start_id, *trained.encode("The towers.")]


def test_export_refuses_an_ffn_width_hf_cannot_express(trained, tmp_path, capsys):
    cfg = ModelConfig(vocab_size=trained.vocab_size, n_ctx=8, n_layer=1, n_head=2, n_embd=8, d_ff=24)
    GPT1(cfg).save_pretrained(tmp_path / "m")
    trained.save(tmp_path / "m")
    assert main(["convert", "--to", "hf", str(tmp_path / "m"), "--out", str(tmp_path / "hf")]) == 2
    assert "d_ff=24" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


def test_cli_reports_bad_sources(tmp_path, capsys):
    assert main(["convert", "--from", "hf", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "source folder not found" in capsys.readouterr().err
    assert main(["convert", "--from", "hf", "--to", "hf", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "nothing to convert" in capsys.readouterr().err
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert main(["convert", "--from", "hf", str(tmp_path / "gpt2"), "--out", str(tmp_path / "o")]) == 2
    assert "model_type" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ original OpenAI release
TINY_DIMS = {512: 8, 768: 24, 2304: 72, 3072: 96, 40478: 30}  # real dim -> tiny stand-in (12 heads of 2)


def tiny_release(real_shapes: list, directory, n_layer: int = 2, n_files: int = 10, seed: int = 0,
                 vocab: int = TINY_DIMS[40478]) -> list:
    """The real params_shapes.json layout with tiny dims: arrays concatenated flat, split into params_N.npy."""
    dims = {**TINY_DIMS, 40478: vocab}
    shapes = [[dims.get(d, d) for d in s] for s in real_shapes[: 2 + 12 * n_layer]]
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(0, 0.3, s).astype(np.float32) for s in shapes]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "params_shapes.json").write_text(json.dumps(shapes))
    for i, part in enumerate(np.array_split(np.concatenate([a.ravel() for a in arrays]), n_files)):
        np.save(directory / f"params_{i}.npy", part)
    return arrays


def original_forward(arrays: list, tokens: np.ndarray, n_head: int, n_layer: int) -> np.ndarray:
    """The released TF model, transcribed to numpy: conv1d is x @ w[0] + b, post-LN blocks, tied output."""
    def norm(x, g, b, e=1e-5):
        u = x.mean(-1, keepdims=True)
        s = ((x - u) ** 2).mean(-1, keepdims=True)
        return (x - u) / np.sqrt(s + e) * g + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    positions, we = arrays[0], arrays[1]
    T, d = tokens.shape[-1], we.shape[1]
    h = we[tokens] + positions[:T]
    mask = np.tril(np.ones((T, T)))
    for layer in range(n_layer):
        c_attn_w, c_attn_b, c_proj_w, c_proj_b, g1, b1, fc_w, fc_b, proj_w, proj_b, g2, b2 = \
            arrays[2 + 12 * layer: 14 + 12 * layer]
        q, k, v = np.split(h @ c_attn_w[0] + c_attn_b, 3, axis=-1)
        split = lambda t: t.reshape(*t.shape[:-1], n_head, d // n_head).swapaxes(-2, -3)  # noqa: E731
        w = split(q) @ split(k).swapaxes(-1, -2) / math.sqrt(d // n_head)
        w = w * mask + -1e9 * (1 - mask)
        w = np.exp(w - w.max(-1, keepdims=True))
        a = (w / w.sum(-1, keepdims=True)) @ split(v)
        a = a.swapaxes(-2, -3).reshape(*h.shape) @ c_proj_w[0] + c_proj_b
        n = norm(h + a, g1, b1)
        m = gelu(n @ fc_w[0] + fc_b) @ proj_w[0] + proj_b
        h = norm(n + m, g2, b2)
    return h @ we.T


def test_openai_release_loads_and_computes_the_original_function(openai_vocab, tmp_path):
    real_shapes = json.loads((openai_vocab / "params_shapes.json").read_text())
    arrays = tiny_release(real_shapes, tmp_path / "release")
    model = load_openai_release(tmp_path / "release").eval()
    assert model.config.vocab_size == 30 + 3 and model.config.n_layer == 2 and model.config.n_ctx == 8

    torch.testing.assert_close(model.positions_embed.weight, torch.from_numpy(arrays[0]))
    torch.testing.assert_close(model.tokens_embed.weight[:30], torch.from_numpy(arrays[1]))
    specials = model.tokens_embed.weight[30:]
    assert specials.shape == (3, 24) and 0.005 < specials.std().item() < 0.05  # ~N(0, 0.02), ids 30..32

    x = np.random.default_rng(1).integers(0, 30, size=(2, 8))
    with torch.no_grad():
        ours = model(torch.from_numpy(x)).logits[..., :30].numpy()
    reference = original_forward(arrays, x, n_head=model.config.n_head, n_layer=2)
    assert np.abs(ours - reference).max() <= 1e-4


def test_real_release_shapes_parse_into_the_paper_config(openai_vocab):
    shapes = json.loads((openai_vocab / "params_shapes.json").read_text())
    assert len(shapes) == 146
    cfg = release_config(shapes)
    paper = ModelConfig()
    assert ModelConfig(**cfg) == paper  # 12 x 768, 12 heads, FFN 3072, ctx 512, vocab 40,478 + 3 specials
    with torch.device("meta"):  # the 117M model, never allocated
        n_params = GPT1(paper).num_parameters()
    assert n_params == sum(math.prod(s) for s in shapes) + 3 * 768


def test_release_layout_errors_are_reported(openai_vocab, tmp_path):
    real_shapes = json.loads((openai_vocab / "params_shapes.json").read_text())
    tiny_release(real_shapes, tmp_path / "short")
    (tmp_path / "short" / "params_9.npy").unlink()
    (tmp_path / "short" / "params_8.npy").rename(tmp_path / "short" / "params_9.npy")
    with pytest.raises(InputError, match="without gaps"):
        load_openai_release(tmp_path / "short")

    tiny_release(real_shapes, tmp_path / "few", n_files=3)
    np.save(tmp_path / "few" / "params_2.npy", np.zeros(5, dtype=np.float32))
    with pytest.raises(InputError, match="params_shapes.json needs"):
        load_openai_release(tmp_path / "few")

    swapped = [list(s) for s in real_shapes]
    swapped[4], swapped[8] = swapped[8], swapped[4]  # c_proj and c_fc exchanged: not the released layout
    with pytest.raises(InputError, match="array 4 has shape"):
        release_config(swapped, source="params_shapes.json")
    with pytest.raises(InputError, match="2 \\+ 12 x n_layer"):
        release_config(real_shapes[:-1])


def test_cli_converts_openai_release(openai_vocab, trained, tmp_path):
    real_shapes = json.loads((openai_vocab / "params_shapes.json").read_text())
    tiny_release(real_shapes, tmp_path / "release", vocab=bpe_vocab(trained))
    write_release_vocab(trained, tmp_path / "release")  # the release folder holds its vocabulary files too
    assert main(["convert", "--from", "openai", str(tmp_path / "release"), "--out", str(tmp_path / "ours")]) == 0
    loaded = GPT1.from_pretrained(tmp_path / "ours")
    direct = load_openai_release(tmp_path / "release")  # same default seed: same special rows
    for (name, a), (_, b) in zip(direct.state_dict().items(), loaded.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    assert bpe.load(tmp_path / "ours").encode_batch(CORPUS_TEXTS) == trained.encode_batch(CORPUS_TEXTS)


def test_cli_converts_openai_release_to_a_transformers_folder(openai_vocab, trained, tmp_path):
    real_shapes = json.loads((openai_vocab / "params_shapes.json").read_text())
    tiny_release(real_shapes, tmp_path / "release", vocab=bpe_vocab(trained))
    write_release_vocab(trained, tmp_path / "release")
    assert main(["convert", "--from", "openai", str(tmp_path / "release"), "--to", "hf",
                 "--out", str(tmp_path / "hf")]) == 0
    assert "original OpenAI GPT-1 release" in (tmp_path / "hf" / "README.md").read_text()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    direct = load_openai_release(tmp_path / "release").eval()
    x = torch.tensor([hf_tokenizer(CORPUS_TEXTS[0])["input_ids"]])
    assert x[0].tolist() == [trained.start_id, *trained.encode(CORPUS_TEXTS[0])]
    with torch.no_grad():
        assert max_diff(hf_model(x[:, :8]).logits, direct(x[:, :8]).logits) <= 1e-4


# ---------------------------------------------------------------------------------- hub ids, from the local cache
COMMITS = ("a" * 40, "b" * 40)


def hub_cache(root, repo_id: str, snapshots: dict, main_commit: str) -> None:
    """The hub's cache layout: models--OWNER--NAME/{blobs/<hash>, snapshots/<commit>/<file> -> blob, refs/main}."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    for commit, folder in snapshots.items():
        for file in folder.iterdir():
            data = file.read_bytes()
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
            link = repo / "snapshots" / commit / file.name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(main_commit)


@pytest.fixture
def hub(trained, tmp_path):
    """Two revisions of a tiny openai-gpt as the hub holds it: config, safetensors, transformers' own BERT-style
    tokenizer.json and the release's vocabulary as vocab.json + merges.txt; main is the second."""
    revisions = {}
    for seed, commit in enumerate(COMMITS):
        folder = tmp_path / f"repo-{seed}"
        model = hf_tiny(seed=seed, vocab_size=bpe_vocab(trained))
        model.save_pretrained(folder)
        write_release_vocab(trained, folder, names=("vocab.json", "merges.txt"))
        vocab = json.loads((folder / "vocab.json").read_text())
        merges = [tuple(line.split()) for line in (folder / "merges.txt").read_text().splitlines()[1:]]
        transformers.OpenAIGPTTokenizer(vocab=vocab, merges=merges).save_pretrained(folder)
        revisions[commit] = model
    cache = tmp_path / "hub"
    for repo_id in ("openai-community/openai-gpt", "openai-gpt"):
        hub_cache(cache, repo_id, {c: tmp_path / f"repo-{i}" for i, c in enumerate(COMMITS)}, COMMITS[1])
    return cache, revisions


@pytest.fixture
def offline_hub(hub, monkeypatch):
    """HF_HUB_CACHE / HF_HUB_OFFLINE=1 as huggingface_hub read them at import."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub[0]))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hub


@pytest.mark.parametrize("source, commit", [("openai-community/openai-gpt", COMMITS[1]), ("openai-gpt", COMMITS[1]),
                                            (f"openai-community/openai-gpt@{COMMITS[0]}", COMMITS[0])])
def test_cli_converts_a_hub_id_from_the_local_cache(offline_hub, trained, tmp_path, caplog, source, commit):
    _, revisions = offline_hub
    caplog.set_level("INFO", logger="gpt1")
    assert main(["convert", "--from", "hf", source, "--out", str(tmp_path / "ours")]) == 0
    assert f"@{commit}" in caplog.text
    ours = GPT1.from_pretrained(tmp_path / "ours").eval()
    x = ids(vocab=bpe_vocab(trained))
    with torch.no_grad():
        assert max_diff(ours(x).logits, revisions[commit](x).logits) <= 1e-4
    # HF's own tokenizer.json is not ours: the release's vocabulary files are read instead, specials appended.
    assert bpe.load(tmp_path / "ours").encode_batch(CORPUS_TEXTS) == trained.encode_batch(CORPUS_TEXTS)


def test_a_hub_id_missing_offline_is_a_one_line_error(offline_hub, tmp_path, capsys):
    for source in ("nobody/nothing", f"openai-community/openai-gpt@{'c' * 40}"):
        assert main(["convert", "--from", "hf", source, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"gpt1 convert: error: {source}: not a local folder") and err.count("\n") == 1
        assert "Traceback" not in err and not (tmp_path / "o").exists()
