"""Weight interop, in one place: HF `transformers` openai-gpt and the original OpenAI release <-> `gpt1.model.GPT1`.

    gpt1 convert --from hf SRC --out DIR       # SRC: a folder written by transformers' save_pretrained
    gpt1 convert --from openai SRC --out DIR   # SRC: params_0.npy .. params_9.npy + params_shapes.json
    gpt1 convert --to hf SRC --out DIR         # SRC: a folder written by GPT1.save_pretrained

All three layouts hold the same tensors under different names. Two differences matter:
- HF `Conv1D` and the TF release store projection weights as (in, out) (the release with a leading 1: [1, in, out]);
  `nn.Linear` stores (out, in), so every attention/MLP weight is transposed on the way in and out.
- Vocabulary: the released model and HF's openai-gpt have 40,478 BPE rows and no special tokens. The OpenAI
  loader appends 3 rows ~N(0, 0.02) for `_start_ _delimiter_ _classify_` (ids 40478..40480), as the original
  fine-tuning code did. The HF import keeps the source vocabulary as is (pass `vocab_size=` to
  `GPT1.from_pretrained` to add the specials later). The HF export keeps every row and writes
  `vocab_size` = our vocabulary, so nothing is lost; the extra rows are ids past HF's tokenizer.

Choices where the spec is silent: shapes do not determine the number of heads, so it comes from the HF config
(`n_head`) and, for the OpenAI release (which has no config), is the released model's 12. HF's openai-gpt has no
FFN-width setting (it is always 4 x n_embd), so exporting a model with another `d_ff` is refused.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from gpt1.config import SPECIAL_TOKENS, ModelConfig
from gpt1.io import InputError, atomic_path, read_json, write_text
from gpt1.model import GPT1

log = logging.getLogger(__name__)

# Per-block parameter names, the same in HF and ours (both follow the release), in the release's array order.
_BLOCK_PARAMS = ("attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                 "ln_1.weight", "ln_1.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
                 "mlp.c_proj.bias", "ln_2.weight", "ln_2.bias")
# Projections: stored (in, out) by HF Conv1D and the release, (out, in) by nn.Linear.
_TRANSPOSED = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}
# HF buffers some versions saved (causal mask, position ids): not weights.
_HF_BUFFERS = re.compile(r"(^|\.)(h\.\d+\.attn\.bias|h\.\d+\.attn\.masked_bias|position_ids)$")
_HF_BLOCK_KEY = re.compile(r"^h\.(\d+)\.(.+)$")
RELEASE_N_HEAD = 12  # not recoverable from shapes; the released model's value


# ---------------------------------------------------------------------------------------------------- HF transformers
def from_hf_state_dict(sd: dict[str, torch.Tensor], hf_config: dict | None = None) -> tuple[dict, dict]:
    """HF openai-gpt state dict (+ its config.json dict) -> (ModelConfig-compatible dict, our state dict).

    Keys may carry the `transformer.` prefix (OpenAIGPTLMHeadModel) or not (OpenAIGPTModel). A missing
    hf_config means the released model's settings (HF's OpenAIGPTConfig defaults) for what shapes don't give.
    """
    hf_config = hf_config or {}
    if hf_config.get("afn", "gelu") != "gelu":  # HF maps "gelu" to the tanh approximation, as released
        raise ValueError(f"HF config afn={hf_config['afn']!r}: GPT-1 uses the tanh-approximation GELU ('gelu')")
    if hf_config.get("tie_word_embeddings", True) is False:
        raise ValueError("HF config has tie_word_embeddings=false: GPT-1's LM head is tied to the token embedding")
    src = {k.removeprefix("transformer."): v for k, v in sd.items() if not _HF_BUFFERS.search(k)}
    head = src.pop("lm_head.weight", None)
    for name in ("tokens_embed.weight", "positions_embed.weight"):
        if name not in src:
            raise InputError(f"missing {name!r}: not an openai-gpt state dict", field=name)
    if head is not None and not torch.equal(head, src["tokens_embed.weight"]):
        raise ValueError("lm_head.weight differs from tokens_embed.weight: GPT-1's LM head must be tied")

    ours = {"tokens_embed.weight": src.pop("tokens_embed.weight"),
            "positions_embed.weight": src.pop("positions_embed.weight")}
    for key, tensor in src.items():
        match = _HF_BLOCK_KEY.match(key)
        if not match or match.group(2) not in _BLOCK_PARAMS:
            raise InputError(f"unexpected key {key!r} in an openai-gpt state dict", field=key)
        ours[f"blocks.{match.group(1)}.{match.group(2)}"] = _linear_layout(match.group(2), tensor)
    n_layer = 1 + max((int(k.split(".")[1]) for k in ours if k.startswith("blocks.")), default=-1)
    if not n_layer:
        raise InputError("no transformer blocks (h.N.*) in the state dict", field="h")

    vocab_size, n_embd = ours["tokens_embed.weight"].shape
    cfg = {
        "vocab_size": vocab_size,
        "n_ctx": ours["positions_embed.weight"].shape[0],
        "n_layer": n_layer,
        "n_head": hf_config.get("n_head", RELEASE_N_HEAD),
        "n_embd": n_embd,
        "d_ff": ours["blocks.0.mlp.c_fc.weight"].shape[0],
        "embd_pdrop": hf_config.get("embd_pdrop", 0.1),
        "attn_pdrop": hf_config.get("attn_pdrop", 0.1),
        "resid_pdrop": hf_config.get("resid_pdrop", 0.1),
        "layer_norm_eps": hf_config.get("layer_norm_epsilon", 1e-5),
        "init_std": hf_config.get("initializer_range", 0.02),
    }
    return cfg, ours


def to_hf_state_dict(model: GPT1) -> dict[str, torch.Tensor]:
    """Our model -> `OpenAIGPTLMHeadModel` state dict (with the tied `lm_head.weight`); loads with strict=True."""
    sd = model.state_dict()
    out = {"transformer.tokens_embed.weight": sd["tokens_embed.weight"],
           "transformer.positions_embed.weight": sd["positions_embed.weight"]}
    for i in range(model.config.n_layer):
        for name in _BLOCK_PARAMS:
            out[f"transformer.h.{i}.{name}"] = _linear_layout(name, sd[f"blocks.{i}.{name}"])  # self-inverse
    out["lm_head.weight"] = sd["tokens_embed.weight"]
    return out


def _linear_layout(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """(in, out) <-> (out, in) for projection weights; everything else as is."""
    return tensor.t().contiguous() if name in _TRANSPOSED else tensor


def hf_config_dict(cfg: ModelConfig) -> dict:
    """`OpenAIGPTConfig` keyword arguments for our config."""
    if cfg.d_ff != 4 * cfg.n_embd:
        raise ValueError(f"HF openai-gpt fixes the FFN width at 4 x n_embd = {4 * cfg.n_embd}; this model has "
                         f"d_ff={cfg.d_ff}")
    return {"vocab_size": cfg.vocab_size, "n_positions": cfg.n_ctx, "n_embd": cfg.n_embd, "n_layer": cfg.n_layer,
            "n_head": cfg.n_head, "afn": "gelu", "resid_pdrop": cfg.resid_pdrop, "embd_pdrop": cfg.embd_pdrop,
            "attn_pdrop": cfg.attn_pdrop, "layer_norm_epsilon": cfg.layer_norm_eps,
            "initializer_range": cfg.init_std, "tie_word_embeddings": True}


def load_hf_folder(directory: str | os.PathLike) -> GPT1:
    """A folder written by transformers' `save_pretrained` (safetensors, sharded or not; or pytorch_model.bin)."""
    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"no config.json in {directory} (expected a transformers save_pretrained folder)")
    hf_config = read_json(config_path)
    if hf_config.get("model_type") != "openai-gpt":
        raise InputError(f"model_type is {hf_config.get('model_type')!r}, expected 'openai-gpt'",
                         file=config_path, field="model_type")
    cfg, state = from_hf_state_dict(_read_hf_weights(directory), hf_config)
    return _build(cfg, state, directory)


def _read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").exists():
        return load_file(str(directory / "model.safetensors"))
    index = directory / "model.safetensors.index.json"
    if index.exists():
        sd: dict[str, torch.Tensor] = {}
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise InputError("no 'weight_map' object", file=index, field="weight_map")
        for shard in sorted(set(weight_map.values())):
            sd.update(load_file(str(directory / shard)))
        return sd
    if (directory / "pytorch_model.bin").exists():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"no model.safetensors, model.safetensors.index.json or pytorch_model.bin in {directory}")


def save_hf_folder(model: GPT1, directory: str | os.PathLike) -> Path:
    """Write a folder `transformers.OpenAIGPTLMHeadModel.from_pretrained` loads (config.json + model.safetensors)."""
    from transformers import OpenAIGPTConfig  # heavy import, needed only here

    directory = Path(directory)
    hf_config = OpenAIGPTConfig(**hf_config_dict(model.config), architectures=["OpenAIGPTLMHeadModel"])
    state = {k: v.detach().cpu().contiguous() for k, v in to_hf_state_dict(model).items() if k != "lm_head.weight"}
    with atomic_path(directory / "model.safetensors") as tmp:  # the tied head is implied, as HF itself saves it
        save_file(state, str(tmp), metadata={"format": "pt"})
    write_text(directory / "config.json", hf_config.to_json_string())
    return directory


# ------------------------------------------------------------------------------------------ original OpenAI release
def release_config(shapes: list, n_special: int = len(SPECIAL_TOKENS),
                   source: str | os.PathLike | None = None) -> dict:
    """The ModelConfig-compatible dict implied by params_shapes.json (no arrays needed), specials included."""
    layout = "[positions, tokens, then 12 arrays per block]"
    per_block = len(_BLOCK_PARAMS)
    if not isinstance(shapes, list) or len(shapes) < 2 + per_block or (len(shapes) - 2) % per_block:
        count = len(shapes) if isinstance(shapes, list) else type(shapes).__name__
        raise InputError(f"expected 2 + 12 x n_layer shapes {layout}, got {count}", file=source)
    if not all(isinstance(s, list) and all(isinstance(d, int) and d > 0 for d in s) for s in shapes):
        raise InputError("every shape must be a list of positive integers", file=source)
    c_fc = shapes[2 + _BLOCK_PARAMS.index("mlp.c_fc.weight")]  # first block's, [1, n_embd, d_ff]
    if len(shapes[0]) != 2 or len(shapes[1]) != 2 or len(c_fc) != 3:
        raise InputError(f"unexpected shapes for positions/tokens/c_fc: {shapes[0]}, {shapes[1]}, {c_fc}",
                         file=source)
    (n_ctx, n_embd), vocab = shapes[0], shapes[1][0]
    cfg = {"vocab_size": vocab + n_special, "n_ctx": n_ctx, "n_layer": (len(shapes) - 2) // per_block,
           "n_head": RELEASE_N_HEAD, "n_embd": n_embd, "d_ff": c_fc[2]}
    expected = _release_shapes(ModelConfig(**cfg), vocab)
    for index, (got, want) in enumerate(zip(shapes, expected)):
        if got != want:
            raise InputError(f"array {index} has shape {got}, expected {want} for the layout {layout}", file=source)
    return cfg


def _release_shapes(cfg: ModelConfig, vocab: int) -> list[list[int]]:
    d, f = cfg.n_embd, cfg.d_ff
    block = [[1, d, 3 * d], [3 * d], [1, d, d], [d], [d], [d], [1, d, f], [f], [1, f, d], [d], [d], [d]]
    return [[cfg.n_ctx, d], [vocab, d]] + block * cfg.n_layer


def load_openai_release(directory: str | os.PathLike, seed: int = 0) -> GPT1:
    """The original release (params_*.npy + params_shapes.json) -> GPT1 with 3 special-token rows appended."""
    directory = Path(directory)
    shapes_path = directory / "params_shapes.json"
    if not shapes_path.exists():
        raise FileNotFoundError(f"no params_shapes.json in {directory} (expected the original OpenAI release)")
    shapes = read_json(shapes_path)
    cfg = release_config(shapes, source=shapes_path)
    flat = _read_release_arrays(directory)
    sizes = [int(np.prod(s)) for s in shapes]
    if flat.size != sum(sizes):
        raise InputError(f"params_*.npy hold {flat.size} values, params_shapes.json needs {sum(sizes)}",
                         file=directory)
    arrays = [torch.from_numpy(a.reshape(s).astype(np.float32))  # copies: independent tensors
              for a, s in zip(np.split(flat, np.cumsum(sizes)[:-1]), shapes)]

    specials = torch.randn(len(SPECIAL_TOKENS), cfg["n_embd"], generator=torch.Generator().manual_seed(seed))
    ours = {"positions_embed.weight": arrays[0],
            "tokens_embed.weight": torch.cat([arrays[1], specials * ModelConfig().init_std])}
    for i in range(cfg["n_layer"]):
        for j, name in enumerate(_BLOCK_PARAMS):
            tensor = arrays[2 + i * len(_BLOCK_PARAMS) + j]
            ours[f"blocks.{i}.{name}"] = _linear_layout(name, tensor[0] if name in _TRANSPOSED else tensor)
    return _build(cfg, ours, directory)


def _read_release_arrays(directory: Path) -> np.ndarray:
    """params_0.npy, params_1.npy, ... concatenated flat, in numeric order (never unpickled)."""
    files = sorted(directory.glob("params_*.npy"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        raise FileNotFoundError(f"no params_*.npy in {directory}")
    numbers = [int(p.stem.split("_")[1]) for p in files]
    if numbers != list(range(len(files))):
        raise InputError(f"params files must be numbered 0..{len(files) - 1} without gaps, found {numbers}",
                         file=directory)
    parts = []
    for path in files:
        try:
            parts.append(np.load(path, allow_pickle=False).reshape(-1))
        except ValueError as err:
            raise InputError(f"not a plain numeric .npy array: {err}", file=path) from None
    return np.concatenate(parts)


def _build(cfg: dict, state: dict[str, torch.Tensor], source: str | os.PathLike) -> GPT1:
    with torch.device("meta"):  # weights come from `state`: skip the random init
        model = GPT1(ModelConfig(**cfg))
    model.load_checked_state_dict(state, source=source)
    return model


# ----------------------------------------------------------------------------------------------------------- CLI
def add_cli_args(parser: argparse.ArgumentParser) -> None:
    direction = parser.add_mutually_exclusive_group(required=True)
    direction.add_argument("--from", dest="source_format", choices=("hf", "openai"),
                           help="import: hf = a transformers save_pretrained folder; openai = the original release")
    direction.add_argument("--to", dest="target_format", choices=("hf",),
                           help="export one of our folders (GPT1.save_pretrained) for transformers")
    parser.add_argument("src", help="source folder")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="seed for the special-token rows (--from openai)")


def run_cli(args: argparse.Namespace) -> int:
    src = Path(args.src)
    if not src.is_dir():
        raise NotADirectoryError(f"source folder not found: {src}")
    if args.target_format == "hf":
        model = GPT1.from_pretrained(src)
        save_hf_folder(model, args.out)
    else:
        model = load_hf_folder(src) if args.source_format == "hf" else load_openai_release(src, seed=args.seed)
        model.save_pretrained(args.out)
    fmt = "transformers openai-gpt" if args.target_format else "gpt1"
    log.info("wrote %s (%s format): %d parameters, vocab %d, %d layers", args.out, fmt, model.num_parameters(),
             model.config.vocab_size, model.config.n_layer)
    return 0
