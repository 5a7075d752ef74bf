"""Weight interop, in one place: HF `transformers` openai-gpt and the original OpenAI release <-> `gpt1.model.GPT1`.

    gpt1 convert --from hf SRC --out DIR            # SRC: a transformers folder, or a hub id OWNER/NAME[@REVISION]
    gpt1 convert --from openai SRC --out DIR        # SRC: params_0.npy .. params_9.npy + params_shapes.json
    gpt1 convert --to hf SRC --out DIR              # SRC: a folder written by GPT1.save_pretrained
    gpt1 convert --from openai SRC --to hf --out DIR

A tokenizer travels with the weights: SRC's tokenizer.json (ours), the release's encoder_bpe_40000.json +
vocab_40000.bpe, or in a transformers folder our exported tokenizer or the release's files under HF's names
(vocab.json + merges.txt); `--tokenizer` overrides. A transformers folder (`save_hf_folder`, also pre-training's
`final/hf`) is complete: config.json, model.safetensors, generation_config.json, the tokenizer with the 3 specials
(`bpe.save_transformers`) and a model card, so `AutoTokenizer`, `AutoModelForCausalLM` and
`pipeline("text-generation")` work on it as they are. A hub id is fetched into the local hub cache, or read from it
alone when HF_HUB_OFFLINE=1.

All three layouts hold the same tensors under different names. Two differences matter:
- HF `Conv1D` and the TF release store projection weights as (in, out) (the release with a leading 1: [1, in, out]);
  `nn.Linear` stores (out, in), so every attention/MLP weight is transposed on the way in and out.
- Vocabulary: the released model and HF's openai-gpt have 40,478 BPE rows and no special tokens. The OpenAI
  loader appends 3 rows ~N(0, 0.02) for `_start_ _delimiter_ _classify_` (ids 40478..40480), as the original
  fine-tuning code did. The HF import keeps the source vocabulary as is (`gpt1 finetune` grows it to the
  tokenizer's). The HF export keeps every row and writes `vocab_size` = our vocabulary, so nothing is lost.

Design choices: shapes do not determine the number of heads, so it comes from the HF config
(`n_head`) and, for the OpenAI release (which has no config), is the released model's 12. HF's openai-gpt has no
FFN-width setting (it is always 4 x n_embd), so exporting a model with another `d_ff` is refused. In the exported
folder `_start_` is the bos token (`tokenizer(text)` starts with it, as every pre-training document does) and the
eos token of generation_config.json (generation stops when the model starts a new document, as `gpt1.model.generate`
does).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from pathlib import Path

import numpy as np
import torch
from pydantic import ValidationError

from gpt1.config import SPECIAL_TOKENS, ModelConfig
from gpt1.errors import first_line
from gpt1.io import InputError, atomic_dir, check_input_file, read_json, write_text
from gpt1.model.transformer import (
    GPT1,
    MAX_WEIGHTS_BYTES,
    check_sizes,
    check_vocabulary,
    load_weights,
    save_weights,
)
from gpt1.tokenizer import bpe
from gpt1.tokenizer.bpe import GPT1Tokenizer

log = logging.getLogger(__name__)

# Per-block parameter names, the same in HF and ours (both follow the release), in the release's array order.
_BLOCK_PARAMS = (
    "attn.c_attn.weight",
    "attn.c_attn.bias",
    "attn.c_proj.weight",
    "attn.c_proj.bias",
    "ln_1.weight",
    "ln_1.bias",
    "mlp.c_fc.weight",
    "mlp.c_fc.bias",
    "mlp.c_proj.weight",
    "mlp.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
)
# Projections: stored (in, out) by HF Conv1D and the release, (out, in) by nn.Linear.
_TRANSPOSED = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}
# HF buffers some versions saved (causal mask, position ids): not weights.
_HF_BUFFERS = re.compile(r"(^|\.)(h\.\d+\.attn\.bias|h\.\d+\.attn\.masked_bias|position_ids)$")
_HF_BLOCK_KEY = re.compile(r"^h\.(\d+)\.(.+)$")
RELEASE_N_HEAD = 12  # not recoverable from shapes; the released model's value
RELEASE_VOCAB = ("encoder_bpe_40000.json", "vocab_40000.bpe")  # the release's tokenizer files
HF_RELEASE_VOCAB = ("vocab.json", "merges.txt")  # the same two files in HF's openai-gpt
HF_CONFIG, HF_WEIGHTS = "config.json", "model.safetensors"
# What an import reads from a hub repository (pytorch_model.bin only when there are no safetensors).
_HF_IMPORT_FILES = [
    HF_CONFIG,
    HF_WEIGHTS,
    "model.safetensors.index.json",
    "model-*.safetensors",
    bpe.TOKENIZER_FILE,
    *HF_RELEASE_VOCAB,
]
_HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")
# config.json's settings and ours: an import reads each (transformers writes every one) and assumes none
HF_SETTINGS = {
    "vocab_size": "vocab_size",
    "n_positions": "n_ctx",
    "n_layer": "n_layer",
    "n_head": "n_head",
    "n_embd": "n_embd",
    "embd_pdrop": "embd_pdrop",
    "attn_pdrop": "attn_pdrop",
    "resid_pdrop": "resid_pdrop",
    "layer_norm_epsilon": "layer_norm_eps",
    "initializer_range": "init_std",
}
# our fields as config.json names them; HF's openai-gpt has no FFN width, it is always 4 x n_embd
_HF_NAMES = {
    **{ours: hf for hf, ours in HF_SETTINGS.items()},
    "d_ff": "n_embd (4 x n_embd, the feed-forward width)",
}


# ---------------------------------------------------------------------------------------------------- HF transformers
def from_hf_state_dict(
    sd: dict[str, torch.Tensor], hf_config: dict | None = None
) -> tuple[dict, dict]:
    """HF openai-gpt state dict (+ its config.json dict) -> (ModelConfig-compatible dict, our state dict).

    Keys may carry the `transformer.` prefix (OpenAIGPTLMHeadModel) or not (OpenAIGPTModel). A missing
    hf_config means the released model's settings (HF's OpenAIGPTConfig defaults) for what shapes don't give.
    """
    hf_config = hf_config or {}
    _check_architecture(hf_config)
    src = {k.removeprefix("transformer."): v for k, v in sd.items() if not _HF_BUFFERS.search(k)}
    head = src.pop("lm_head.weight", None)
    for name in ("tokens_embed.weight", "positions_embed.weight"):
        if name not in src:
            raise InputError(f"missing {name!r}: not an openai-gpt state dict", field=name)
    # every tensor of every block before any is read: a missing one named, not a KeyError
    blocks = {int(match.group(1)) for match in map(_HF_BLOCK_KEY.match, src) if match}
    absent = [
        f"h.{i}.{name}"
        for i in range(max(blocks, default=-1) + 1)
        for name in _BLOCK_PARAMS
        if f"h.{i}.{name}" not in src
    ]
    if absent:
        more = f" and {len(absent) - 1} more" if len(absent) > 1 else ""
        raise InputError(
            f"missing {absent[0]!r}{more}: each of the blocks h.0 .. h.{max(blocks)} needs its "
            f"{len(_BLOCK_PARAMS)} tensors",
            field=absent[0],
        )
    if head is not None and not torch.equal(head, src["tokens_embed.weight"]):
        raise ValueError(
            "lm_head.weight differs from tokens_embed.weight: GPT-1's LM head must be tied"
        )

    ours = {
        "tokens_embed.weight": src.pop("tokens_embed.weight"),
        "positions_embed.weight": src.pop("positions_embed.weight"),
    }
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
    out = {
        "transformer.tokens_embed.weight": sd["tokens_embed.weight"],
        "transformer.positions_embed.weight": sd["positions_embed.weight"],
    }
    for i in range(model.config.n_layer):
        for name in _BLOCK_PARAMS:
            # self-inverse
            out[f"transformer.h.{i}.{name}"] = _linear_layout(name, sd[f"blocks.{i}.{name}"])
    out["lm_head.weight"] = sd["tokens_embed.weight"]
    return out


def _linear_layout(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """(in, out) <-> (out, in) for projection weights; everything else as is."""
    return tensor.t().contiguous() if name in _TRANSPOSED else tensor


def hf_config_dict(cfg: ModelConfig) -> dict:
    """`OpenAIGPTConfig` keyword arguments for our config."""
    if cfg.d_ff != 4 * cfg.n_embd:
        raise ValueError(
            f"HF openai-gpt fixes the FFN width at 4 x n_embd = {4 * cfg.n_embd}; this model has "
            f"d_ff={cfg.d_ff}"
        )
    return {
        **{hf: getattr(cfg, ours) for hf, ours in HF_SETTINGS.items()},
        "afn": "gelu",
        "tie_word_embeddings": True,
    }


def _check_architecture(hf_config: dict, path: Path | None = None) -> None:
    """Refuse a config of another function than GPT-1's (`path`: the config.json it was read from)."""
    if hf_config.get("afn", "gelu") != "gelu":  # HF's "gelu" is the tanh approximation, as released
        raise InputError(
            f"afn={hf_config['afn']!r}: GPT-1 uses the tanh-approximation GELU ('gelu')",
            file=path,
            field="afn",
        )
    if hf_config.get("tie_word_embeddings", True) is False:
        raise InputError(
            "tie_word_embeddings is false: GPT-1's LM head is tied to the token embedding",
            file=path,
            field="tie_word_embeddings",
        )


def hf_model_config(hf_config: dict, path: Path) -> ModelConfig:
    """The model a transformers config.json describes, read strictly: every setting present (none is assumed,
    so a config that lost `n_layer` is not read as 12 layers), each valid, named by its config.json name."""
    missing = [name for name in (*HF_SETTINGS, "afn") if name not in hf_config]
    if missing:
        raise InputError(
            f"missing setting(s) {', '.join(missing)}: a transformers openai-gpt config names each one",
            file=path,
            field=missing[0],
        )
    _check_architecture(hf_config, path)
    settings = {ours: hf_config[hf] for hf, ours in HF_SETTINGS.items()}
    try:
        cfg = ModelConfig.model_validate(settings)
    except ValidationError as err:
        first = err.errors()[0]
        # no location: a check across fields, n_embd's division into n_head heads
        field = str(first["loc"][0]) if first["loc"] else "n_embd"
        raise InputError(first["msg"], file=path, field=_HF_NAMES.get(field, field)) from None
    return cfg.model_copy(update={"d_ff": 4 * cfg.n_embd})


def load_hf_folder(directory: str | os.PathLike) -> GPT1:
    """A folder written by transformers' `save_pretrained` (safetensors, sharded or not; or pytorch_model.bin)."""
    directory = Path(directory)
    config_path = directory / HF_CONFIG
    if not config_path.exists():
        raise FileNotFoundError(
            f"no {HF_CONFIG} in {directory} (expected a transformers save_pretrained folder)"
        )
    hf_config = read_json(config_path)
    if hf_config.get("model_type") != "openai-gpt":
        raise InputError(
            f"model_type is {hf_config.get('model_type')!r}, expected 'openai-gpt'",
            file=config_path,
            field="model_type",
        )
    cfg = hf_model_config(hf_config, config_path)
    weights_file, weights = _read_hf_weights(directory)
    try:
        _, state = from_hf_state_dict(weights, hf_config)
    except InputError as err:
        if err.file:
            raise
        raise InputError(
            err.message, file=directory, field=err.field
        ) from None  # the folder it is in
    # the sizes are config.json's, checked against the weights: a wrong one is named, never taken from the shapes
    check_sizes(cfg, state, config_path, weights_file, names=_HF_NAMES)
    return _build(cfg.model_dump(), state, directory)


def _read_hf_weights(directory: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """(the file the weights were read from: the safetensors, the shards' index or pytorch_model.bin; the state)."""
    if (directory / HF_WEIGHTS).exists() or (directory / HF_WEIGHTS).is_symlink():
        return directory / HF_WEIGHTS, load_weights(directory / HF_WEIGHTS)
    index = directory / "model.safetensors.index.json"
    if index.exists():
        sd: dict[str, torch.Tensor] = {}
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(s, str) for s in weight_map.values()
        ):
            raise InputError("no 'weight_map' object of file names", file=index, field="weight_map")
        for shard in sorted(set(weight_map.values())):
            if Path(shard).name != shard or shard in ("", ".", ".."):
                raise InputError(
                    f"shard {shard!r} is not a file name in this folder",
                    file=index,
                    field="weight_map",
                )
            sd.update(load_weights(directory / shard))
        return index, sd
    pickled = directory / "pytorch_model.bin"
    if pickled.exists() or pickled.is_symlink():
        return pickled, _read_pickled_weights(pickled)
    raise FileNotFoundError(
        f"no {HF_WEIGHTS}, model.safetensors.index.json or pytorch_model.bin in {directory}"
    )


def _read_pickled_weights(path: Path) -> dict[str, torch.Tensor]:
    """An older repository's pytorch_model.bin, unpickled with `torch.load(weights_only=True)`: tensors only, so
    a pickle that would run code or hold other objects is refused, naming the file, never run."""
    check_input_file(path, what="weights file", max_bytes=MAX_WEIGHTS_BYTES)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises UnpicklingError, RuntimeError, EOFError, ... by cause
        raise InputError(
            f"not a weights-only PyTorch file: torch.load(weights_only=True) refused it ({first_line(err)}); "
            f"convert it to {HF_WEIGHTS} with a tool you trust",
            file=path,
        ) from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise InputError("expected a dict of named tensors (a state dict)", file=path)
    return state


def hf_folder_tokenizer(directory: Path) -> GPT1Tokenizer | None:
    """A transformers folder's tokenizer: one `save_hf_folder` wrote, or the release's vocabulary under HF's names
    (vocab.json + merges.txt) with the 3 specials appended; None when it holds neither."""
    if (directory / bpe.TOKENIZER_FILE).is_file():
        try:
            return bpe.from_transformers(directory)
        except InputError as err:
            log.debug("%s", err)  # another tokenizer.json, e.g. HF's BERT-style openai-gpt pipeline
    return release_tokenizer(directory, HF_RELEASE_VOCAB)


def resolve_hf_source(source: str) -> tuple[Path, str]:
    """A local transformers folder, or a hub id `OWNER/NAME[@REVISION]` fetched into (or, with HF_HUB_OFFLINE=1,
    read from) the local hub cache. Returns the folder and what it is, e.g. `openai-community/openai-gpt@<commit>`."""
    path = Path(source)
    if path.exists():
        if not path.is_dir():
            raise NotADirectoryError(f"source is not a folder: {path}")
        return path, str(path)
    repo_id, _, revision = source.partition("@")
    if not _HUB_ID.fullmatch(repo_id):
        raise FileNotFoundError(f"source folder not found: {source}")
    from huggingface_hub import snapshot_download  # only for hub ids

    try:
        folder = Path(
            snapshot_download(repo_id, revision=revision or None, allow_patterns=_HF_IMPORT_FILES)
        )
        if not any(
            folder.glob("*.safetensors")
        ):  # older repositories: read by torch.load(weights_only=True)
            folder = Path(
                snapshot_download(
                    repo_id, revision=revision or None, allow_patterns=["pytorch_model.bin"]
                )
            )
    except (
        OSError,
        ValueError,
    ) as err:  # not cached offline, no such repo or revision, invalid id, hub down
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise FileNotFoundError(
            f"{source}: not a local folder, and the hub could not provide it ({reason})"
        ) from None
    return folder, f"{repo_id}@{folder.name}"  # snapshot folders are named by commit


def save_hf_folder(
    model: GPT1, tokenizer: GPT1Tokenizer, directory: str | os.PathLike, made_by: str
) -> Path:
    """Write a complete transformers folder, swapped in whole: config.json, model.safetensors,
    generation_config.json, the tokenizer with the 3 specials and a model card (`made_by`: how the weights came
    about, one sentence). An existing folder is replaced only if it is a transformers folder."""
    from transformers import GenerationConfig, OpenAIGPTConfig  # heavy imports, needed only here

    directory = Path(directory)
    if directory.is_dir() and any(directory.iterdir()) and not (directory / HF_CONFIG).is_file():
        raise InputError(
            "exists and is not a transformers folder: not replacing it", file=directory
        )
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocab_size} ids, the model only {model.config.vocab_size} "
            f"embedding rows"
        )
    start = tokenizer.start_id
    hf_config = OpenAIGPTConfig(
        **hf_config_dict(model.config),
        architectures=["OpenAIGPTLMHeadModel"],
        bos_token_id=start,
        eos_token_id=start,
    )
    state = {
        k: v.detach().cpu().contiguous()
        for k, v in to_hf_state_dict(model).items()
        if k != "lm_head.weight"
    }
    with atomic_dir(directory) as tmp:
        save_weights(state, tmp / HF_WEIGHTS)  # the tied head is implied, as HF saves it
        write_text(tmp / HF_CONFIG, hf_config.to_json_string())
        GenerationConfig(
            bos_token_id=start, eos_token_id=start, pad_token_id=start
        ).save_pretrained(tmp)
        bpe.save_transformers(tokenizer, tmp, model_max_length=model.config.n_ctx)
        write_text(tmp / "README.md", model_card(model, tokenizer, made_by))
    return directory


def model_card(model: GPT1, tokenizer: GPT1Tokenizer, made_by: str) -> str:
    cfg = model.config
    return f"""---
library_name: transformers
pipeline_tag: text-generation
language: en
tags: [gpt1, openai-gpt]
---

# GPT-1, {cfg.n_layer} layers, d={cfg.n_embd}, {model.num_parameters() / 1e6:.1f}M parameters

A GPT-1 language model (Radford et al., 2018, "Improving Language Understanding by Generative Pre-Training") in
transformers' `openai-gpt` format: a decoder-only transformer with post-LayerNorm blocks, {cfg.n_layer} layers x
{cfg.n_head} heads, d={cfg.n_embd}, context {cfg.n_ctx}, LM head tied to the token embedding. Vocabulary
{tokenizer.vocab_size:,}: {tokenizer.num_merges:,} word-level BPE merges (`</w>` ends a word) and the specials
`_start_ _delimiter_ _classify_` (ids {tokenizer.start_id}..{tokenizer.classify_id}).

## How it was made

{made_by} Written by gpt1-pipeline (`gpt1 convert --to hf`, or pre-training's `final/hf`).

## How to load it

```python
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

tokenizer = AutoTokenizer.from_pretrained("THIS_FOLDER")
model = AutoModelForCausalLM.from_pretrained("THIS_FOLDER")
generate = pipeline("text-generation", model="THIS_FOLDER")
prompt = "the old man said"
out = generate(prompt, max_new_tokens=20, do_sample=False, return_full_text=False)  # greedy
print(prompt, out[0]["generated_text"])
```

The pipeline samples unless told `do_sample=False`. Words end in `</w>`, so the space after the prompt belongs to
the prompt's last token: the pipeline decodes only the new tokens, and its `return_full_text=True` would glue them
to the prompt without that space. Join them with one, as above, or decode `model.generate`'s ids whole.

`tokenizer(text)` starts with `_start_`, as every pre-training document did; generation stops when the model
starts a new document (`_start_` is the eos token). Fine-tuning inputs are written with the specials, e.g.
`tokenizer("_start_ premise _delimiter_ hypothesis _classify_", add_special_tokens=False)`.
The tokenizer lower-cases and applies ftfy's character-by-character fixes (quotes, ligatures, fullwidth forms, line
breaks, control characters, NFC); what ftfy repairs from context (mojibake, HTML entities, C1 control characters)
is not in tokenizer.json: pass such text through `ftfy.fix_text` first, as gpt1-pipeline itself does.
"""


# ------------------------------------------------------------------------------------------ original OpenAI release
def release_config(
    shapes: list, n_special: int = len(SPECIAL_TOKENS), source: str | os.PathLike | None = None
) -> dict:
    """The ModelConfig-compatible dict implied by params_shapes.json (no arrays needed), specials included."""
    layout = "[positions, tokens, then 12 arrays per block]"
    per_block = len(_BLOCK_PARAMS)
    if not isinstance(shapes, list) or len(shapes) < 2 + per_block or (len(shapes) - 2) % per_block:
        count = len(shapes) if isinstance(shapes, list) else type(shapes).__name__
        raise InputError(f"expected 2 + 12 x n_layer shapes {layout}, got {count}", file=source)
    if not all(
        isinstance(s, list) and all(isinstance(d, int) and d > 0 for d in s) for s in shapes
    ):
        raise InputError("every shape must be a list of positive integers", file=source)
    c_fc = shapes[2 + _BLOCK_PARAMS.index("mlp.c_fc.weight")]  # first block's, [1, n_embd, d_ff]
    if len(shapes[0]) != 2 or len(shapes[1]) != 2 or len(c_fc) != 3:
        raise InputError(
            f"unexpected shapes for positions/tokens/c_fc: {shapes[0]}, {shapes[1]}, {c_fc}",
            file=source,
        )
    (n_ctx, n_embd), vocab = shapes[0], shapes[1][0]
    cfg = {
        "vocab_size": vocab + n_special,
        "n_ctx": n_ctx,
        "n_layer": (len(shapes) - 2) // per_block,
        "n_head": RELEASE_N_HEAD,
        "n_embd": n_embd,
        "d_ff": c_fc[2],
    }
    expected = _release_shapes(ModelConfig(**cfg), vocab)
    for index, (got, want) in enumerate(zip(shapes, expected)):
        if got != want:
            raise InputError(
                f"array {index} has shape {got}, expected {want} for the layout {layout}",
                file=source,
            )
    return cfg


def _release_shapes(cfg: ModelConfig, vocab: int) -> list[list[int]]:
    d, f = cfg.n_embd, cfg.d_ff
    block = [
        [1, d, 3 * d],
        [3 * d],
        [1, d, d],
        [d],
        [d],
        [d],
        [1, d, f],
        [f],
        [1, f, d],
        [d],
        [d],
        [d],
    ]
    return [[cfg.n_ctx, d], [vocab, d]] + block * cfg.n_layer


def load_openai_release(directory: str | os.PathLike, seed: int = 0) -> GPT1:
    """The original release (params_*.npy + params_shapes.json) -> GPT1 with 3 special-token rows appended."""
    directory = Path(directory)
    shapes_path = directory / "params_shapes.json"
    if not shapes_path.exists():
        raise FileNotFoundError(
            f"no params_shapes.json in {directory} (expected the original OpenAI release)"
        )
    shapes = read_json(shapes_path, expect=list)
    cfg = release_config(shapes, source=shapes_path)
    flat = _read_release_arrays(directory)
    sizes = [int(np.prod(s)) for s in shapes]
    if flat.size != sum(sizes):
        raise InputError(
            f"params_*.npy hold {flat.size} values, params_shapes.json needs {sum(sizes)}",
            file=directory,
        )
    arrays = [
        torch.from_numpy(a.reshape(s).astype(np.float32))  # copies: independent tensors
        for a, s in zip(np.split(flat, np.cumsum(sizes)[:-1]), shapes)
    ]

    specials = torch.randn(
        len(SPECIAL_TOKENS), cfg["n_embd"], generator=torch.Generator().manual_seed(seed)
    )
    ours = {
        "positions_embed.weight": arrays[0],
        "tokens_embed.weight": torch.cat([arrays[1], specials * ModelConfig().init_std]),
    }
    for i in range(cfg["n_layer"]):
        for j, name in enumerate(_BLOCK_PARAMS):
            tensor = arrays[2 + i * len(_BLOCK_PARAMS) + j]
            ours[f"blocks.{i}.{name}"] = _linear_layout(
                name, tensor[0] if name in _TRANSPOSED else tensor
            )
    return _build(cfg, ours, directory)


def _read_release_arrays(directory: Path) -> np.ndarray:
    """params_0.npy, params_1.npy, ... concatenated flat, in numeric order (never unpickled)."""
    files = sorted(directory.glob("params_*.npy"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        raise FileNotFoundError(f"no params_*.npy in {directory}")
    numbers = [int(p.stem.split("_")[1]) for p in files]
    if numbers != list(range(len(files))):
        raise InputError(
            f"params files must be numbered 0..{len(files) - 1} without gaps, found {numbers}",
            file=directory,
        )
    parts = []
    for path in files:
        try:
            parts.append(np.load(path, allow_pickle=False).reshape(-1))
        except ValueError as err:
            raise InputError(f"not a plain numeric .npy array: {err}", file=path) from None
    return np.concatenate(parts)


def release_tokenizer(
    directory: Path, names: tuple[str, str] = RELEASE_VOCAB
) -> GPT1Tokenizer | None:
    """The release's vocabulary (encoder json + merges) in `directory`, 3 specials appended; None if absent."""
    encoder, merges = (directory / name for name in names)
    return bpe.from_openai(encoder, merges) if encoder.is_file() and merges.is_file() else None


def _build(cfg: dict, state: dict[str, torch.Tensor], source: str | os.PathLike) -> GPT1:
    with torch.device("meta"):  # weights come from `state`: skip the random init
        model = GPT1(ModelConfig(**cfg))
    model.load_checked_state_dict(state, source=source)
    return model


# ----------------------------------------------------------------------------------------------------------- CLI
def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="source_format",
        choices=("gpt1", "hf", "openai"),
        default="gpt1",
        help="source: gpt1 = a GPT1.save_pretrained folder (default); hf = a transformers folder or "
        "hub id; openai = the original release",
    )
    parser.add_argument(
        "--to",
        dest="target_format",
        choices=("gpt1", "hf"),
        default="gpt1",
        help="target: gpt1 (default) or hf = a complete transformers folder",
    )
    parser.add_argument(
        "src", help="source folder; with --from hf also a hub id OWNER/NAME[@REVISION]"
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--tokenizer", help="tokenizer.json or its folder, instead of the one found with the source"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed for the special-token rows (--from openai)"
    )


def run_cli(args: argparse.Namespace) -> int:
    source, target = args.source_format, args.target_format
    if source == target:
        raise ValueError(
            f"nothing to convert from {source} to {target}: give --from hf|openai or --to hf"
        )
    if source == "hf":
        folder, origin = resolve_hf_source(args.src)
    else:
        folder = Path(args.src)
        origin = str(folder)
        if not folder.is_dir():
            raise NotADirectoryError(f"source folder not found: {folder}")
    if source == "hf":
        model, found, made_by = (
            load_hf_folder(folder),
            hf_folder_tokenizer(folder),
            f"Converted from {origin}.",
        )
    elif source == "openai":
        model, found = load_openai_release(folder, seed=args.seed), release_tokenizer(folder)
        made_by = (
            f"Converted from the original OpenAI GPT-1 release ({origin}); the 3 special-token rows are "
            f"drawn from N(0, 0.02) with seed {args.seed}, as the original fine-tuning code did."
        )
    else:
        model, found, made_by = (
            GPT1.from_pretrained(folder),
            _gpt1_tokenizer(folder),
            _trained_by(folder),
        )
    tokenizer = bpe.load(args.tokenizer) if args.tokenizer else found
    # a word id past the embedding rows would be read as a new, random row
    if tokenizer is not None:
        check_vocabulary(model.config, tokenizer, folder)
    if target == "hf":
        if tokenizer is None:
            raise FileNotFoundError(
                f"no tokenizer with {origin}: pass --tokenizer (tokenizer.json or its folder)"
            )
        save_hf_folder(model, tokenizer, args.out, made_by)
    else:
        model.save_pretrained(args.out)
        if tokenizer is not None:
            tokenizer.save(args.out)
        else:
            log.warning("no tokenizer with %s: give one to `gpt1 finetune --tokenizer`", origin)
    log.info(
        "wrote %s (%s format) from %s: %d parameters, vocab %d, %d layers%s",
        args.out,
        target,
        origin,
        model.num_parameters(),
        model.config.vocab_size,
        model.config.n_layer,
        ", no tokenizer" if tokenizer is None else "",
    )
    return 0


def _gpt1_tokenizer(folder: Path) -> GPT1Tokenizer | None:
    return bpe.load(folder) if (folder / bpe.TOKENIZER_FILE).is_file() else None


def _trained_by(folder: Path) -> str:
    """How one of our folders came about: pre-training's training.json when it is there."""
    summary = read_json(folder / "training.json") if (folder / "training.json").is_file() else {}
    if isinstance(summary.get("steps"), int) and isinstance(summary.get("tokens_seen"), int):
        return pretrained_by(summary["steps"], summary["tokens_seen"])
    return f"Converted from the gpt1-pipeline model folder {folder}."


def pretrained_by(steps: int, tokens: int) -> str:
    return f"Pre-trained by gpt1-pipeline for {steps:,} steps ({tokens:,} tokens)."
