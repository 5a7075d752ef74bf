"""GPT-1 architecture facts (post-LN, no final LN, tied head, init, size, attention, dropout, heads) on tiny configs."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import torch.nn.functional as F

from gpt1 import cli
from gpt1.config import ModelConfig
from gpt1.io import InputError
from gpt1.model.transformer import (
    GPT1,
    Block,
    GPT1ForTask,
    flops_per_token,
    memory_problem,
    missing_model_files,
    parameter_count,
)

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(vocab_size=61, n_ctx=32, n_layer=2, n_head=4, n_embd=16, d_ff=64)


def tiny(**overrides) -> ModelConfig:
    return ModelConfig(**{**TINY, **overrides})


def no_dropout(**overrides) -> ModelConfig:
    return tiny(embd_pdrop=0.0, attn_pdrop=0.0, resid_pdrop=0.0, **overrides)


def randomize_(module: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """Non-trivial values everywhere (LN gains != 1, biases != 0) so comparisons can catch misplaced terms."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * std)
    return module


def tokens(batch: int = 3, T: int = 12, vocab: int = TINY["vocab_size"], seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, T), generator=torch.Generator().manual_seed(seed))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def layer_norm(x: torch.Tensor, ln: torch.nn.LayerNorm) -> torch.Tensor:
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def reference_block(block: Block, x: torch.Tensor, n_head: int) -> torch.Tensor:
    """The released block written out by hand: h = LN(x + attn(x)); out = LN(h + mlp(h))."""
    B, T, C = x.shape
    hs = C // n_head
    qkv = x @ block.attn.c_attn.weight.T + block.attn.c_attn.bias
    q, k, v = (t.reshape(B, T, n_head, hs).permute(0, 2, 1, 3) for t in qkv.split(C, dim=-1))
    scores = q @ k.transpose(-1, -2) / math.sqrt(hs)
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    a = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(B, T, C)
    a = a @ block.attn.c_proj.weight.T + block.attn.c_proj.bias
    h = layer_norm(x + a, block.ln_1)
    m = gelu_tanh(h @ block.mlp.c_fc.weight.T + block.mlp.c_fc.bias) @ block.mlp.c_proj.weight.T + block.mlp.c_proj.bias
    return layer_norm(h + m, block.ln_2)


def test_forward_shapes_and_outputs_agree():
    model = GPT1(tiny()).eval()
    ids = tokens()
    out = model(ids)
    assert out.logits.shape == (3, 12, 61) and out.hidden.shape == (3, 12, 16)
    torch.testing.assert_close(model.hidden_states(ids), out.hidden)
    torch.testing.assert_close(model.lm_logits(out.hidden), out.logits)


@pytest.mark.parametrize("attention", ["sdpa", "manual"])
def test_block_is_post_layernorm_as_released(attention):
    cfg = no_dropout(attention=attention)
    block = randomize_(Block(cfg)).eval()
    x = torch.randn(2, 9, cfg.n_embd, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(block(x), reference_block(block, x, cfg.n_head), atol=1e-5, rtol=1e-5)
        # A pre-LN block (GPT-2 style) computes something else: the comparison above can tell them apart.
        pre_ln = x + block.attn(block.ln_1(x))
        pre_ln = pre_ln + block.mlp(block.ln_2(pre_ln))
        assert (pre_ln - block(x)).abs().max() > 1e-2


def test_model_is_embeddings_blocks_tied_head_without_final_layernorm():
    model = randomize_(GPT1(no_dropout())).eval()
    ids = tokens()
    with torch.no_grad():
        x = model.tokens_embed.weight[ids] + model.positions_embed.weight[: ids.size(1)]
        for block in model.blocks:
            x = reference_block(block, x, model.config.n_head)
        out = model(ids)
    torch.testing.assert_close(out.hidden, x, atol=1e-5, rtol=1e-5)  # last block output, no extra LayerNorm
    torch.testing.assert_close(out.logits, x @ model.tokens_embed.weight.T, atol=1e-5, rtol=1e-5)
    layer_norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(layer_norms) == 2 * model.config.n_layer


def test_lm_head_is_tied_to_the_token_embedding():
    model = GPT1(no_dropout()).eval()
    vocab_shaped = [n for n, p in model.named_parameters() if p.shape == (61, 16)]
    assert vocab_shaped == ["tokens_embed.weight"]  # no separate head matrix
    ids = tokens()
    before = model(ids).logits
    with torch.no_grad():
        model.tokens_embed.weight[5] += 1.0  # editing the embedding edits the head: one storage
    after = model(ids).logits
    assert not torch.allclose(before[..., 5], after[..., 5])
    # An id absent from the input still gets a gradient, through the head alone.
    unused = sorted(set(range(61)) - set(ids.flatten().tolist()))[0]
    F.cross_entropy(model(ids).logits.flatten(0, 1), ids.flatten()).backward()
    assert model.tokens_embed.weight.grad[unused].abs().sum() > 0


def test_init_follows_the_paper():
    cfg = ModelConfig(vocab_size=500, n_ctx=64, n_layer=2, n_head=4, n_embd=128, d_ff=512)
    torch.manual_seed(0)
    model = GPT1(cfg)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert torch.count_nonzero(p) == 0, name
        elif ".ln_" in name:
            assert torch.all(p == 1), name
        else:
            assert abs(p.std().item() - cfg.init_std) < 0.1 * cfg.init_std, name
            assert abs(p.mean().item()) < 0.1 * cfg.init_std, name
    wide = GPT1(cfg.model_copy(update={"init_std": 0.05}))
    assert abs(wide.blocks[0].mlp.c_fc.weight.std().item() - 0.05) < 0.005


def test_paper_config_has_117m_parameters_counted_without_allocating():
    cfg = ModelConfig()  # the paper's defaults
    with torch.device("meta"):
        model = GPT1(cfg)
    assert all(p.is_meta for p in model.parameters())
    d, f, L = cfg.n_embd, cfg.d_ff, cfg.n_layer
    per_block = (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d) + 2 * (2 * d)
    expected = cfg.vocab_size * d + cfg.n_ctx * d + L * per_block
    assert model.num_parameters() == expected
    assert round(expected / 1e6) == 117  # "117M" (paper's model, with the 3 special-token rows)
    assert flops_per_token(cfg) == 6 * (expected - cfg.n_ctx * d) + 12 * L * cfg.n_ctx * d


@settings(derandomize=True, database=None, deadline=None, max_examples=12)
@given(
    n_layer=st.integers(1, 3),
    heads=st.integers(1, 3),
    head_width=st.integers(1, 4),
    d_ff=st.integers(1, 40),
    vocab_size=st.integers(1, 50),
    n_ctx=st.integers(1, 20),
)
def test_parameter_count_is_the_model_built(n_layer, heads, head_width, d_ff, vocab_size, n_ctx):
    """The arithmetic a size check uses counts exactly the parameters the module has, for any shape."""
    cfg = ModelConfig(n_layer=n_layer, n_head=heads, n_embd=heads * head_width, d_ff=d_ff, vocab_size=vocab_size,
                      n_ctx=n_ctx)
    assert parameter_count(cfg) == GPT1(cfg).num_parameters()  # tiny: built for real (meta's first use costs seconds)


def test_a_model_too_large_is_refused_by_arithmetic_alone():
    """A million layers: refused with the bytes it needs in far less than building it takes (minutes)."""
    huge = ModelConfig(n_layer=10**6)
    problem = memory_problem(huge, 64 << 30, "this machine's memory")
    assert problem is not None and f"{parameter_count(huge):,} parameters" in problem


def test_a_folder_above_a_model_names_the_model_inside(tmp_path, capsys):
    GPT1(tiny()).save_pretrained(tmp_path / "run" / "final")
    (tmp_path / "run" / "config.json").write_text("{}")  # a pre-training run's own config, not a model's
    problem = missing_model_files(tmp_path / "run")
    assert problem is not None and "gpt1_config.json" in problem and str(tmp_path / "run" / "final") in problem
    assert missing_model_files(tmp_path / "run" / "final") is None
    assert "pretrain" in (missing_model_files(tmp_path) or "")  # nothing below: where a model comes from
    capsys.readouterr()
    assert cli.main(["generate", "--checkpoint", str(tmp_path / "run"), "--prompt", "the"]) == 2
    err = capsys.readouterr().err  # the model named, not its tokenizer asked for
    assert "--checkpoint" in err and str(tmp_path / "run" / "final") in err and "--tokenizer" not in err, err


def test_sdpa_and_manual_attention_agree():
    torch.manual_seed(0)
    sdpa = randomize_(GPT1(no_dropout(attention="sdpa")), std=0.1).eval()
    manual = GPT1(no_dropout(attention="manual")).eval()
    manual.load_state_dict(sdpa.state_dict())
    ids = tokens(T=29)
    with torch.no_grad():
        torch.testing.assert_close(manual(ids).logits, sdpa(ids).logits, atol=1e-5, rtol=1e-5)


def test_auto_attention_picks_sdpa_unless_cpu_attention_dropout_is_active():
    attn = GPT1(tiny(attention="auto")).blocks[0].attn
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not attn.train()._use_sdpa(cpu) and attn._use_sdpa(cuda)
    assert attn.eval()._use_sdpa(cpu)
    assert GPT1(tiny(attention="manual")).blocks[0].attn.eval()._use_sdpa(cuda) is False


@pytest.mark.parametrize("attention", ["sdpa", "manual"])
def test_future_tokens_do_not_change_earlier_logits(attention):
    model = randomize_(GPT1(no_dropout(attention=attention)), std=0.1).eval()
    ids = tokens(batch=1, T=20)
    changed = ids.clone()
    changed[0, 12:] = (changed[0, 12:] + 7) % 61
    with torch.no_grad():
        a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[:, :12], b[:, :12])
    assert (a[:, 12:] - b[:, 12:]).abs().max() > 1e-4  # later positions do see the change


@pytest.mark.parametrize("kind", ["embd_pdrop", "attn_pdrop", "resid_pdrop"])
@pytest.mark.parametrize("attention", ["sdpa", "manual"])
def test_each_dropout_acts_in_train_mode_only(kind, attention):
    model = GPT1(no_dropout(attention=attention).model_copy(update={kind: 0.3}))
    ids = tokens()
    with torch.no_grad():
        model.train()
        assert not torch.allclose(model(ids).logits, model(ids).logits)
        model.eval()
        torch.testing.assert_close(model(ids).logits, model(ids).logits)


def test_dropout_sites_are_embeddings_attention_probs_and_both_residual_branches():
    cfg = tiny(embd_pdrop=0.11, attn_pdrop=0.22, resid_pdrop=0.33)
    model = GPT1(cfg)
    sites = {name: m.p for name, m in model.named_modules() if isinstance(m, torch.nn.Dropout)}
    expected = {"drop": 0.11}
    for i in range(cfg.n_layer):
        expected |= {f"blocks.{i}.attn.attn_dropout": 0.22, f"blocks.{i}.attn.resid_dropout": 0.33,
                     f"blocks.{i}.mlp.dropout": 0.33}
    assert sites == expected
    # With every rate 0, train mode computes exactly the eval-mode function.
    quiet = GPT1(no_dropout())
    ids = tokens()
    torch.testing.assert_close(quiet.train()(ids).logits, quiet.eval()(ids).logits)


def test_activation_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    plain = GPT1(tiny())
    ckpt = GPT1(tiny(activation_checkpointing=True))
    ckpt.load_state_dict(plain.state_dict())
    ids = tokens()
    grads = []
    for model in (plain, ckpt):
        torch.manual_seed(1)  # same dropout masks; checkpoint replays the RNG state in its recomputation
        F.cross_entropy(model.train()(ids).logits.flatten(0, 1), ids.flatten()).backward()
        grads.append([p.grad for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_bf16_autocast_forward_and_backward():
    model = GPT1(tiny()).train()
    ids = tokens()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    F.cross_entropy(logits.float().flatten(0, 1), ids.flatten()).backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())


def test_a_few_steps_fit_a_batch():
    torch.manual_seed(0)
    model = GPT1(no_dropout())
    ids = tokens(batch=4, T=16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(model(ids[:, :-1]).logits.flatten(0, 1), ids[:, 1:].flatten())
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert losses[-1] < 0.5 * losses[0]


def test_sequence_longer_than_context_is_refused():
    with pytest.raises(ValueError, match="n_ctx=32"):
        GPT1(tiny())(tokens(T=33))


def test_save_and_load_round_trip(tmp_path):
    model = randomize_(GPT1(tiny()), std=0.1)
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt1.safetensors", "gpt1_config.json"]  # no temp files left
    loaded = GPT1.from_pretrained(tmp_path)
    assert loaded.config == model.config
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    ids = tokens()
    torch.testing.assert_close(loaded.eval()(ids).logits, model.eval()(ids).logits)


def test_weights_saved_in_bf16_load_as_trainable_fp32(tmp_path):
    model = GPT1(tiny()).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    loaded = GPT1.from_pretrained(tmp_path)
    assert all(p.dtype == torch.float32 and p.requires_grad and not p.is_meta for p in loaded.parameters())
    torch.testing.assert_close(loaded.blocks[0].mlp.c_fc.weight, model.blocks[0].mlp.c_fc.weight.float())


def test_from_pretrained_transfer_layers_and_vocab_resize(tmp_path):
    model = randomize_(GPT1(no_dropout(n_layer=3)), std=0.1).eval()
    model.save_pretrained(tmp_path)
    first = GPT1.from_pretrained(tmp_path, transfer_layers=1, vocab_size=64).eval()
    assert len(first.blocks) == 1 and first.config.n_layer == 1 and first.config.vocab_size == 64
    torch.testing.assert_close(first.tokens_embed.weight[:61], model.tokens_embed.weight)
    ids = tokens()
    with torch.no_grad():
        x = model.drop(model.tokens_embed(ids) + model.positions_embed.weight[: ids.size(1)])
        torch.testing.assert_close(first.hidden_states(ids), model.blocks[0](x))
    with pytest.raises(ValueError, match="transfer_layers=4"):
        GPT1.from_pretrained(tmp_path, transfer_layers=4)
    sdpa = GPT1.from_pretrained(tmp_path, attention="sdpa", resid_pdrop=0.2)
    assert sdpa.config.attention == "sdpa" and sdpa.blocks[0].mlp.dropout.p == 0.2
    with pytest.raises(ValueError, match="n_embd"):
        GPT1.from_pretrained(tmp_path, n_embd=32)  # shapes can't be overridden


def test_from_pretrained_reports_bad_files(tmp_path):
    GPT1(tiny()).save_pretrained(tmp_path / "good")
    with pytest.raises(FileNotFoundError, match="gpt1_config.json"):
        GPT1.from_pretrained(tmp_path / "missing")
    bad_config = tmp_path / "good" / "gpt1_config.json"
    bad_config.write_text(bad_config.read_text().replace('"n_head": 4', '"n_head": 5'))
    with pytest.raises(InputError, match="gpt1_config.json"):  # 16 is not divisible by 5
        GPT1.from_pretrained(tmp_path / "good")
    GPT1(tiny(n_embd=8, n_head=2)).save_pretrained(tmp_path / "other")
    bad_config.write_text((tmp_path / "other" / "gpt1_config.json").read_text().replace('"n_embd": 8', '"n_embd": 16'))
    (tmp_path / "good" / "gpt1.safetensors").write_bytes((tmp_path / "other" / "gpt1.safetensors").read_bytes())
    # the config's size is named as such, beside the weights that hold another
    mismatch = r"gpt1_config.json \[n_embd\]: 16 here, but gpt1.safetensors holds 8 \(shape \(\d+, 8\) of tokens_embed"
    with pytest.raises(InputError, match=mismatch):
        GPT1.from_pretrained(tmp_path / "good")


def test_resize_token_embeddings_grows_and_shrinks():
    torch.manual_seed(0)
    model = GPT1(tiny(n_embd=64, n_head=4))
    old = model.tokens_embed.weight.detach().clone()
    model.resize_token_embeddings(61 + 300)
    new = model.tokens_embed.weight
    assert new.shape == (361, 64) and model.config.vocab_size == 361
    torch.testing.assert_close(new[:61], old)
    assert abs(new[61:].std().item() - 0.02) < 0.002
    assert model(tokens(vocab=361)).logits.shape[-1] == 361
    model.resize_token_embeddings(50)
    torch.testing.assert_close(model.tokens_embed.weight, old[:50])


# ------------------------------------------------------------------------------------------------- task heads
def test_head_adds_only_the_linear_layer():
    base = GPT1(tiny())
    task = GPT1ForTask(base, "classification", n_outputs=3, clf_pdrop=0.1)
    base_ids = {id(p) for p in base.parameters()}
    new = [n for n, p in task.named_parameters() if id(p) not in base_ids]
    assert new == ["clf.weight", "clf.bias"] and task.clf.weight.shape == (3, 16)


def test_classification_reads_the_classify_position():
    task = GPT1ForTask(randomize_(GPT1(no_dropout()), std=0.1), "classification", n_outputs=3, clf_pdrop=0.0).eval()
    ids = tokens(batch=2, T=10)
    pos = torch.tensor([6, 9])
    out = task(ids, pos, with_lm_logits=True)
    assert out.logits.shape == (2, 3) and out.lm_logits.shape == (2, 10, 61)
    hidden = task.transformer.hidden_states(ids)
    torch.testing.assert_close(out.logits, task.clf(hidden[torch.arange(2), pos]))
    padded = ids.clone()
    padded[0, 7:] = 0  # right padding after _classify_ changes nothing (causal attention)
    torch.testing.assert_close(task(padded, pos).logits[0], out.logits[0])
    assert task(ids, pos).lm_logits is None  # the LM projection only when asked for


def test_similarity_adds_both_orderings_and_is_order_symmetric():
    task = GPT1ForTask(randomize_(GPT1(no_dropout()), std=0.1), "similarity", n_outputs=1, clf_pdrop=0.1).eval()
    ab, ba = tokens(batch=2, T=10, seed=1), tokens(batch=2, T=10, seed=2)
    ids = torch.stack([ab, ba], dim=1)  # (B, 2, T)
    pos = torch.tensor([[9, 8], [7, 9]])
    out = task(ids, pos, with_lm_logits=True)
    assert out.logits.shape == (2, 1) and out.lm_logits.shape == (2, 2, 10, 61)
    swapped = task(ids.flip(1), pos.flip(1))
    torch.testing.assert_close(swapped.logits, out.logits)
    h = [task.transformer.hidden_states(x) for x in (ab, ba)]
    summed = h[0][torch.arange(2), pos[:, 0]] + h[1][torch.arange(2), pos[:, 1]]
    torch.testing.assert_close(out.logits, task.clf(summed))


def test_multiple_choice_scores_each_candidate():
    task = GPT1ForTask(randomize_(GPT1(no_dropout()), std=0.1), "multiple_choice", n_outputs=4, clf_pdrop=0.1).eval()
    ids = torch.stack([tokens(batch=2, T=10, seed=s) for s in range(4)], dim=1)  # (B, K=4, T)
    pos = torch.tensor([[9, 8, 7, 9], [5, 9, 9, 6]])
    out = task(ids, pos, with_lm_logits=True)
    assert out.logits.shape == (2, 4) and out.lm_logits.shape == (2, 4, 10, 61)
    assert task.clf.weight.shape == (1, 16)  # one scalar per candidate
    alone = task.clf(task.transformer.hidden_states(ids[:, 2])[torch.arange(2), pos[:, 2]]).squeeze(-1)
    torch.testing.assert_close(out.logits[:, 2], alone)
    order = torch.tensor([3, 1, 0, 2])
    torch.testing.assert_close(task(ids[:, order], pos[:, order]).logits, out.logits[:, order])
    assert torch.allclose(out.logits.softmax(-1).sum(-1), torch.ones(2))


def test_heads_refuse_mismatched_shapes():
    base = GPT1(tiny())
    with pytest.raises(ValueError, match="unknown head"):
        GPT1ForTask(base, "regression", n_outputs=1)
    with pytest.raises(ValueError, match="classify_pos"):
        GPT1ForTask(base, "classification", n_outputs=2)(tokens(), torch.zeros(3, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="2 orderings"):
        GPT1ForTask(base, "similarity", n_outputs=1)(tokens().view(3, 1, 12), torch.zeros(3, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="4 candidates, got 3"):
        GPT1ForTask(base, "multiple_choice", n_outputs=4)(tokens().view(1, 3, 12), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="lm_mask"):
        GPT1ForTask(base, "classification", n_outputs=2)(tokens(), torch.zeros(3, dtype=torch.long),
                                                         lm_mask=torch.ones(3, 11))
