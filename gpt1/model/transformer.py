"""The GPT-1 transformer (Radford et al., 2018) and its fine-tuning heads, exactly as released.

A decoder-only transformer with the original release's choices, which differ from GPT-2-style code:

    h0 = dropout(W_e[tokens] + W_p[positions])
    h  = LN(h + attn(h));  h = LN(h + mlp(h))          # post-LayerNorm, repeated n_layer times
    logits = h @ W_e^T                                  # tied LM head, no final LayerNorm

with masked multi-head self-attention, a tanh-approximation GELU in the position-wise feed-forward network,
learned position embeddings, every weight drawn from N(0, init_std) (biases 0, LayerNorm gains 1), and dropout on
the embeddings, the attention probabilities and both residual branches. Sizes come from `ModelConfig`.

Design choices where the paper is silent:
- Embedding dropout acts on the summed input embeddings (as in HF `transformers`). The TF release applied it to
  the embedding matrix itself, which also perturbed the tied output projection; the expected effect is the same.
- Parameter names follow the release (`c_attn`, `c_proj`, `c_fc`, `ln_1`, `ln_2`) so `gpt1.model.convert` only has to
  transpose; the tied head is computed from `tokens_embed.weight` (one tensor: nothing duplicated on disk).
- `resize_token_embeddings(n)` with n smaller than the vocabulary drops the trailing rows (e.g. the specials).
- `attention="auto"`: `F.scaled_dot_product_attention` (SDPA), except on CPU while attention dropout is active,
  where the manual path is faster (figures in `CausalSelfAttention._use_sdpa`). On CUDA, SDPA's flash and
  memory-efficient kernels apply dropout inside the kernel (not measured here: no GPU on this machine).
- Task heads read the hidden state at `classify_pos` (the `_classify_` token), apply `clf_pdrop` dropout, then
  one linear layer; the similarity head adds the two orderings' states before it (paper section 3.3).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from pathlib import Path
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from pydantic import ValidationError
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.checkpoint import checkpoint

from gpt1.config import ModelConfig
from gpt1.io import (
    InputError,
    atomic_path,
    check_input_file,
    read_json,
    write_error,
    write_json,
)
from gpt1.model.files import (
    CONFIG_NAME,
    EARLIER_CONFIG_NAME,
    EARLIER_WEIGHTS_NAME,
    WEIGHTS_NAME,
)
from gpt1.model.losses import Average, lm_loss
from gpt1.stages.base import verify_input
from gpt1.stages.integrity import verify_beside

# Far above any GPT-1-sized model in fp32; a larger file is not weights this pipeline can hold in memory.
MAX_WEIGHTS_BYTES = 64 << 30

# Config fields that say how the model runs, never what it computes: a saved config may leave them out (a folder
# written before one existed runs with its default).
HOW_IT_RUNS = {"attention", "activation_checkpointing", "compile"}
# Config fields that change speed or regularisation but not any tensor shape: safe to override on load.
_LOAD_OVERRIDABLE = {"embd_pdrop", "attn_pdrop", "resid_pdrop", *HOW_IT_RUNS}
# The sizes a config states and the weights' shapes give: (field, tensor, dimension).
SIZE_FIELDS = (
    ("vocab_size", "tokens_embed.weight", 0),
    ("n_embd", "tokens_embed.weight", 1),
    ("n_ctx", "positions_embed.weight", 0),
    ("d_ff", "blocks.0.mlp.c_fc.weight", 0),
)

TaskHead = Literal["classification", "similarity", "multiple_choice"]

log = logging.getLogger(__name__)


def c_compiler() -> str | None:
    """The C compiler Triton would use: $CC, else gcc, else clang (None: none found)."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")


def cpp_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend would use: $CXX, else g++, else clang++ (None: none found)."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


def compile_problem(cfg: ModelConfig, device_type: str) -> str | None:
    """Why `model.compile=true` cannot work on `device_type` here (no compiler for its generated code), or None.
    Said before training starts: torch.compile would otherwise fail at the first step, after the data and the
    engine are set up."""
    if cfg.compile is not True:
        return None
    if device_type == "cuda" and c_compiler() is None:
        return (
            "model.compile=true, but no C compiler ($CC, gcc or clang) is here for Triton's kernel launcher: "
            "install one, or set model.compile=auto (eager where there is none) or model.compile=false"
        )
    if device_type == "cpu" and cpp_compiler() is None:
        return (
            "model.compile=true, but no C++ compiler ($CXX, g++ or clang++) is here for torch.compile's CPU "
            "code: install one, or set model.compile=false"
        )
    return None


class GPT1Output(NamedTuple):
    # (B, T, V) next-token logits; None when a loss was asked for instead
    logits: torch.Tensor | None
    hidden: torch.Tensor  # (B, T, D) output of the last block
    loss: torch.Tensor | None = None  # LM loss of `targets` (gpt1.model.losses.lm_loss), when given


class TaskOutput(NamedTuple):
    logits: torch.Tensor  # (B, n_outputs), or (B, K) for multiple choice
    lm_logits: torch.Tensor | None  # input_ids.shape + (V,), when asked for
    lm_loss: torch.Tensor | None = (
        None  # the auxiliary LM loss L1 of the sequences, when lm_mask is given
    )


class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention: each position attends to itself and earlier positions only."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.attention = cfg.attention
        # query, key, value projections in one matmul
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_dropout = nn.Dropout(cfg.attn_pdrop)
        self.resid_dropout = nn.Dropout(cfg.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, nh, T, hs)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self._use_sdpa(x.device):
            p = self.attn_dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            y = self._manual_attention(q, k, v)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble the heads side by side
        return self.resid_dropout(self.c_proj(y))

    def _manual_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d_head) + causal mask) v, with dropout on the attention probabilities."""
        T = q.size(2)
        # scale the (T, hs) side, not (T, T)
        att = (q * (1.0 / math.sqrt(q.size(-1)))) @ k.transpose(-2, -1)
        # key after query: masked
        future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        att = att.masked_fill_(future, float("-inf")).softmax(dim=-1)
        return self.attn_dropout(att) @ v

    def _use_sdpa(self, device: torch.device) -> bool:
        if self.attention != "auto":
            return self.attention == "sdpa"
        # PyTorch's fused CPU kernel has no dropout: with attention dropout active SDPA falls back to an unfused
        # path slower than the manual one, while without dropout SDPA is the faster
        # (`benchmarks/bench_model.py --compare-attention`). Hence: manual only for CPU training with dropout.
        dropout_active = self.training and self.attn_dropout.p > 0
        return device.type != "cpu" or not dropout_active


class MLP(nn.Module):
    """Position-wise feed-forward network with the tanh-approximation GELU."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.d_ff)
        self.c_proj = nn.Linear(cfg.d_ff, cfg.n_embd)
        self.dropout = nn.Dropout(cfg.resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    """One transformer block, post-LayerNorm as released: LayerNorm after each residual sum."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn = CausalSelfAttention(cfg)
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.attn(x))
        return self.ln_2(x + self.mlp(x))


class GPT1(nn.Module):
    """The language model: token + position embeddings, n_layer blocks, LM head tied to the token embedding."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg.model_copy()
        self.tokens_embed = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.positions_embed = nn.Embedding(cfg.n_ctx, cfg.n_embd)
        self.drop = nn.Dropout(cfg.embd_pdrop)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.compiled = False  # see compile_for
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            bias = getattr(module, "bias", None)  # an embedding has none
            if isinstance(bias, torch.Tensor):
                nn.init.zeros_(bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        targets: torch.Tensor | None = None,
        loss_mask: torch.Tensor | None = None,
        loss_average: Average = "tokens",
    ) -> GPT1Output:
        """LM logits of (B, T) input_ids; with `targets` (B, T) the LM loss instead (`gpt1.model.losses.lm_loss`, with
        `loss_mask` and `loss_average`), and no logits: the full (B, T, V) logits are never built."""
        hidden = self.hidden_states(input_ids)
        if targets is None:
            return GPT1Output(logits=self.lm_logits(hidden), hidden=hidden)
        loss = lm_loss(hidden, self.tokens_embed.weight, targets, loss_mask, loss_average)
        return GPT1Output(logits=None, hidden=hidden, loss=loss)

    def hidden_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, n_embd) output of the last block (no LM projection)."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, time), got shape {tuple(input_ids.shape)}")
        T = input_ids.size(1)
        if T > self.config.n_ctx:
            raise ValueError(
                f"sequence length {T} exceeds the model context n_ctx={self.config.n_ctx}"
            )
        positions = torch.arange(T, device=input_ids.device)
        x = self.drop(self.tokens_embed(input_ids) + self.positions_embed(positions))
        for block in self.blocks:
            if self.config.activation_checkpointing and self.training:
                # recompute activations in backward: less memory
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits from hidden states through the tied head (the token embedding, transposed)."""
        return F.linear(hidden, self.tokens_embed.weight)

    def compile_for(self, device_type: str) -> bool:
        """Apply `model.compile` for training on `device_type`; returns whether the blocks are now compiled. `auto`
        compiles on CUDA when a C compiler is there for Triton; `true` without the compiler it needs is a
        ValueError (`compile_problem`).

        Regional compilation: every transformer block is compiled in place, and the blocks share one compiled
        graph, so compiling costs one block, not n_layer; parameter names and state_dict keys are unchanged."""
        problem = compile_problem(self.config, device_type)
        if problem:
            raise ValueError(problem)
        if self.config.compile == "auto" and device_type == "cuda" and c_compiler() is None:
            # Triton builds the launcher of its GPU kernels with a C compiler at the first compiled step
            log.warning(
                "model.compile=auto: no C compiler ($CC, gcc or clang) for Triton, so the model is not "
                "compiled (install one, or set model.compile=false to silence this)"
            )
            return False
        if not (
            self.config.compile is True or (self.config.compile == "auto" and device_type == "cuda")
        ):
            return False
        if not self.compiled:
            for block in self.blocks:
                block.compile()
            self.compiled = True
        return True

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def resize_token_embeddings(self, n: int) -> None:
        """Grow (new rows ~ N(0, init_std), e.g. for the special tokens) or shrink the vocabulary to n rows."""
        if n <= 0:
            raise ValueError(f"vocabulary size must be positive, got {n}")
        old = self.tokens_embed.weight
        weight = torch.empty(n, old.size(1), dtype=old.dtype, device=old.device)
        keep = min(n, old.size(0))
        with torch.no_grad():
            weight[:keep] = old[:keep]
            nn.init.normal_(weight[keep:], mean=0.0, std=self.config.init_std)
        self.tokens_embed = nn.Embedding(
            n, old.size(1), _weight=weight, device=old.device, dtype=old.dtype
        )
        self.config = self.config.model_copy(update={"vocab_size": n})

    def redraw_token_embeddings(self, ids: list[int], seed: int) -> None:
        """Draw these rows of the token embedding afresh from N(0, init_std): tokens pre-training never saw as
        input, whose fine-tuning starts them new (the paper's delimiter embeddings). Drawn from their own generator,
        so everything drawn after them (a task head) is the same with or without the redraw."""
        rows = torch.randn(
            len(ids), self.config.n_embd, generator=torch.Generator().manual_seed(seed)
        )
        with torch.no_grad():
            self.tokens_embed.weight[list(ids)] = (rows * self.config.init_std).to(
                self.tokens_embed.weight
            )

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write `gpt1.safetensors` + `gpt1_config.json` (a ModelConfig dump), each atomically; returns the folder."""
        directory = Path(directory)
        save_weights(
            {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()},
            directory / WEIGHTS_NAME,
        )
        # written last: marks a complete folder
        write_json(directory / CONFIG_NAME, self.config.model_dump())
        return directory

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        transfer_layers: int | None = None,
        vocab_size: int | None = None,
        **config_overrides,
    ) -> GPT1:
        """Load what `save_pretrained` (or `gpt1 convert`) wrote.

        transfer_layers=k keeps only the first k blocks (paper Fig. 2 left); vocab_size resizes the token
        embedding (e.g. to add the 3 specials); config_overrides may change dropout, `attention` or
        `activation_checkpointing`, never a shape.
        """
        directory = Path(directory)
        verify_input(directory)  # inside a stage output: its files are the ones the stage recorded
        config_path, weights_path = model_files(directory)
        cfg = load_model_config(config_path, config_overrides)
        state = load_weights(weights_path)
        check_sizes(cfg, state, config_path, weights_path)
        # Last, so that a bad field or size is named as such: a config edited with its shapes intact (n_head)
        # would load as another function.
        verify_beside(config_path)
        if transfer_layers is not None:
            if not 0 < transfer_layers <= cfg.n_layer:
                raise ValueError(
                    f"transfer_layers={transfer_layers} must be in 1..{cfg.n_layer} ({directory})"
                )
            state = {k: v for k, v in state.items() if _block_index(k) < transfer_layers}
            cfg = cfg.model_copy(update={"n_layer": transfer_layers})
        # Built on the CPU and initialised, then overwritten: under torch.device("meta") the init goes through
        # torch's reference ops, whose first use imports torch._dynamo (seconds per process, more than a random
        # init of the 117M model costs).
        model = cls(cfg)
        model.load_checked_state_dict(state, source=weights_path)
        if vocab_size is not None and vocab_size != cfg.vocab_size:
            model.resize_token_embeddings(vocab_size)
        return model

    def load_checked_state_dict(
        self, state: dict[str, torch.Tensor], source: str | os.PathLike
    ) -> None:
        """Load `state` (cast to each parameter's dtype and device; meta parameters take it as is), with an error
        naming the file and every missing, unexpected or misshaped key."""
        current = self.state_dict()
        problems = [f"missing {k}" for k in current if k not in state]
        problems += [f"unexpected {k}" for k in state if k not in current]
        problems += [
            f"{k}: shape {tuple(v.shape)}, expected {tuple(current[k].shape)}"
            for k, v in state.items()
            if k in current and v.shape != current[k].shape
        ]
        if problems:
            shown = "; ".join(problems[:5]) + (
                f"; ... ({len(problems)} problems)" if len(problems) > 5 else ""
            )
            raise InputError(f"weights do not match the config: {shown}", file=source)
        _check_dtypes(state, current, source)
        placed = {
            k: v.to(
                dtype=current[k].dtype, device=v.device if current[k].is_meta else current[k].device
            )
            for k, v in state.items()
        }
        self.load_state_dict(placed, assign=True)


def _check_dtypes(
    state: dict[str, torch.Tensor], current: dict[str, torch.Tensor], source: str | os.PathLike
) -> None:
    """Weights of another float dtype (a folder re-saved in half precision) are cast, with a warning naming it;
    integer or boolean weights are no model's weights and are refused."""
    for name, value in state.items():
        if current[name].is_floating_point() and not value.is_floating_point():
            raise InputError(
                f"{name} holds {value.dtype} values, not floating-point weights", file=source
            )
    cast = {
        f"{v.dtype} to {current[k].dtype}" for k, v in state.items() if v.dtype != current[k].dtype
    }
    if cast:
        log.warning(
            "%s: weights stored in another dtype, cast (%s)", source, ", ".join(sorted(cast))
        )


def _block_index(key: str) -> int:
    """`blocks.3.attn.c_attn.weight` -> 3; -1 for non-block parameters."""
    parts = key.split(".")
    return int(parts[1]) if parts[0] == "blocks" else -1


def model_files(directory: str | os.PathLike) -> tuple[Path, Path]:
    """(config, weights) paths of a folder written by `save_pretrained`, under this version's names or an earlier's.

    A transformers folder (config.json with a `model_type`) is refused with the command that imports it.
    """
    directory = Path(directory)
    config, earlier_config = directory / CONFIG_NAME, directory / EARLIER_CONFIG_NAME
    if config.exists() or not earlier_config.is_file():
        return config, directory / WEIGHTS_NAME
    try:
        model_type = read_json(earlier_config).get("model_type")
    except ValueError:  # not a JSON object: load_model_config says what is wrong with it
        model_type = None
    if model_type is not None:
        raise InputError(
            f"a transformers {model_type!r} folder, not one of ours: import it with "
            f"`gpt1 convert --from hf {directory} --out DIR`",
            file=earlier_config,
        )
    return earlier_config, directory / EARLIER_WEIGHTS_NAME


def missing_model_files(directory: Path, weights: bool = True) -> str | None:
    """What a folder given as a model lacks (its config, and its weights unless `weights` is False), with the next
    step: the folder inside it that holds a model (a fine-tune's OUT/model, a pre-training's OUT/final) when there
    is one. None when nothing is missing."""
    config, weights_path = model_files(directory)
    # a config.json without its weights (a pre-training run's own) is a model of neither layout
    if weights and not weights_path.is_file():
        config, weights_path = directory / CONFIG_NAME, directory / WEIGHTS_NAME
    missing = [p.name for p in (config, *([weights_path] if weights else [])) if not p.is_file()]
    if not missing:
        return None
    inside = sorted(p.parent for p in directory.glob(f"*/{CONFIG_NAME}"))
    step = (
        f"the model in it is {inside[0]}: pass that folder"
        if inside
        else "expected a folder written by `gpt1 pretrain` (final/) or `gpt1 convert`"
    )
    return f"no {' or '.join(missing)} ({step})"


def load_model_config(path: Path, overrides: dict | None = None) -> ModelConfig:
    """Read a ModelConfig dump, applying only shape-preserving overrides; errors name the file and field. Every
    field that decides what the model computes must be there: none is assumed (a missing n_layer is not 12)."""
    if not path.exists():
        raise FileNotFoundError(
            f"no {path.name} in {path.parent} (expected a folder written by save_pretrained)"
        )
    overrides = overrides or {}
    bad = sorted(set(overrides) - _LOAD_OVERRIDABLE)
    if bad:
        raise ValueError(
            f"cannot override {bad} when loading; allowed: {sorted(_LOAD_OVERRIDABLE)}"
        )
    saved = read_json(path)
    if not isinstance(saved, dict):
        raise InputError(
            f"expected a JSON object of model settings, got {type(saved).__name__}", file=path
        )
    missing = sorted(set(ModelConfig.model_fields) - HOW_IT_RUNS - set(saved))
    if missing:
        raise InputError(
            f"missing setting(s) {', '.join(missing)}: a saved model config names each one",
            file=path,
            field=missing[0],
        )
    try:
        return ModelConfig.model_validate({**saved, **overrides})
    except ValidationError as err:
        first = err.errors()[0]
        raise InputError(first["msg"], file=path, field=".".join(map(str, first["loc"]))) from None


def check_sizes(
    cfg: ModelConfig,
    state: dict[str, torch.Tensor],
    config_file: str | os.PathLike,
    weights_file: str | os.PathLike,
    names: dict[str, str] | None = None,
) -> None:
    """Refuse a config whose sizes are not the shapes of the weights read with it (`state`, our layout), naming the
    config file and its field (`names`: what that file calls our fields), and weights missing a whole block."""
    names = names or {}
    weights = Path(weights_file).name
    blocks = {_block_index(key) for key in state} - {-1}
    gaps = sorted(set(range(max(blocks, default=-1) + 1)) - blocks)
    if gaps:
        raise InputError(
            f"no tensors of block {gaps[0]}: a whole layer is missing", file=weights_file
        )
    found = [("n_layer", len(blocks), f"blocks 0..{len(blocks) - 1}")]
    found += [
        (field, state[tensor].shape[dim], f"shape {tuple(state[tensor].shape)} of {tensor}")
        for field, tensor, dim in SIZE_FIELDS
        if tensor in state and state[tensor].dim() > dim
    ]
    for field, size, evidence in found:
        if getattr(cfg, field) != size:
            raise InputError(
                f"{getattr(cfg, field)} here, but {weights} holds {size} ({evidence})",
                file=config_file,
                field=names.get(field, field),
            )


def check_vocabulary(cfg: ModelConfig, tokenizer, config_file: str | os.PathLike) -> None:
    """Refuse a model with fewer embedding rows than `tokenizer` has word ids (the ids below its 3 specials, which
    come last and which fine-tuning adds when they are missing): those words would be read as new, random rows."""
    if cfg.vocab_size < tokenizer.start_id:
        raise InputError(
            f"{cfg.vocab_size} embedding rows, but the tokenizer has {tokenizer.start_id} word ids (and 3 "
            "specials): not the model this tokenizer belongs to",
            file=config_file,
            field="vocab_size",
        )


def save_weights(state: dict[str, torch.Tensor], path: Path) -> None:
    """`state` as a safetensors file, written atomically; a failed write names the file (safetensors' error does
    not)."""
    with atomic_path(path) as tmp:
        try:
            save_file(state, str(tmp), metadata={"format": "pt"})
        except SafetensorError as err:
            raise write_error(path, err) from None


def load_weights(path: Path, record_key: str = "weights_sha256") -> dict[str, torch.Tensor]:
    """A safetensors file's tensors, refused (naming the file) when unreadable, when its bytes are not those the
    record of its folder holds (gpt1.stages.integrity.verify_beside; `record_key`: its field in a record written
    before records listed every file), or when a tensor holds NaN or inf."""
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(
            f"no {path.name} in {path.parent} (expected a folder written by save_pretrained)"
        )
    check_input_file(path, what="weights file", max_bytes=MAX_WEIGHTS_BYTES)
    verify_beside(path, record_key)
    try:
        state = load_file(str(path))
    except SafetensorError as err:
        raise InputError(f"not a readable safetensors file: {err}", file=path) from None
    bad = [
        name
        for name, t in state.items()
        if t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]
    if bad:
        raise InputError(
            f"corrupt weights: {len(bad)} tensor(s) hold NaN or inf ({', '.join(bad[:3])})",
            file=path,
        )
    return state


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token: 6N + 12 * n_layer * n_ctx * n_embd (Kaplan et al. 2020; PaLM appendix B).

    N counts every weight that takes part in a matmul: all parameters except the position embeddings (a lookup).
    The token embedding stays in N because it is also the LM head. 6 = 2 (multiply-add) x 3 (forward, and a
    backward pass twice as expensive). The attention term covers QK^T and attention x V over a full context;
    for shorter sequences pass a config with n_ctx set to the sequence length.
    """
    n_matmul = parameter_count(cfg) - cfg.n_ctx * cfg.n_embd  # less the position embeddings
    return 6.0 * n_matmul + 12.0 * cfg.n_layer * cfg.n_ctx * cfg.n_embd


def parameter_count(cfg: ModelConfig) -> int:
    """The parameters of GPT1(cfg), by arithmetic on its shapes: a check of a config never builds the model it
    checks (a million layers take minutes to build even on the meta device). Per block: the q/k/v and output
    projections (4 d^2 + 4 d), the feed-forward pair (2 d f + f + d) and two LayerNorms (4 d)."""
    d, f = cfg.n_embd, cfg.d_ff
    per_block = 4 * d * d + 2 * d * f + 9 * d + f
    return (cfg.vocab_size + cfg.n_ctx) * d + cfg.n_layer * per_block


def memory_problem(cfg: ModelConfig, available_bytes: int, where: str) -> str | None:
    """Why a model of `cfg` cannot train in `available_bytes`, judged by its fp32 weights alone (gradients and
    Adam's moments need three times more again, so a model refused here could never train there); else None."""
    weights = 4 * parameter_count(cfg)
    if weights <= available_bytes:
        return None
    return (
        f"{weights // 4:,} parameters need {weights / 2**30:,.1f} GiB for their fp32 weights alone, more "
        f"than the {available_bytes / 2**30:,.1f} GiB of {where}: make model.n_embd, model.d_ff, "
        "model.n_layer or model.vocab_size smaller"
    )


class GPT1ForTask(nn.Module):
    """GPT-1 plus the fine-tuning head of paper section 3.3; the linear head is the only new parameter.

    forward(input_ids, classify_pos):
      classification   input (B, T),    classify_pos (B,)    -> logits (B, n_outputs)
      similarity       input (B, 2, T), classify_pos (B, 2)  -> logits (B, n_outputs); the two orderings' states
                                                                 are added before the head (order-symmetric)
      multiple_choice  input (B, K, T), classify_pos (B, K)  -> logits (B, K): one scalar per candidate, for a
                                                                 softmax across candidates; n_outputs must be K
    """

    def __init__(self, base: GPT1, head: TaskHead, n_outputs: int, clf_pdrop: float = 0.1):
        super().__init__()
        if head not in ("classification", "similarity", "multiple_choice"):
            raise ValueError(
                f"unknown head {head!r}; expected classification, similarity or multiple_choice"
            )
        if n_outputs <= 0:
            raise ValueError(f"n_outputs must be positive, got {n_outputs}")
        self.transformer = base
        self.head = head
        self.n_outputs = n_outputs
        self.clf_dropout = nn.Dropout(clf_pdrop)
        self.clf = nn.Linear(base.config.n_embd, 1 if head == "multiple_choice" else n_outputs)
        nn.init.normal_(self.clf.weight, mean=0.0, std=base.config.init_std)
        nn.init.zeros_(self.clf.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        classify_pos: torch.Tensor,
        with_lm_logits: bool = False,
        lm_mask: torch.Tensor | None = None,
    ) -> TaskOutput:
        """with_lm_logits=True also returns the (large) LM logits; lm_mask (input_ids' shape, 1 = real token)
        returns the auxiliary LM loss of the sequences instead: next-token cross-entropy over real targets, per
        sequence then averaged (`gpt1.model.losses.lm_loss`, average="sequences"), without building the logits."""
        self._check_shapes(input_ids, classify_pos)
        if lm_mask is not None and lm_mask.shape != input_ids.shape:
            raise ValueError(
                f"lm_mask {tuple(lm_mask.shape)} must have input_ids' shape {tuple(input_ids.shape)}"
            )
        T = input_ids.size(-1)
        # every sequence independently
        hidden = self.transformer.hidden_states(input_ids.reshape(-1, T))
        rows = torch.arange(hidden.size(0), device=hidden.device)
        # the _classify_ states
        states = hidden[rows, classify_pos.reshape(-1)].view(*classify_pos.shape, -1)
        if self.head == "similarity":
            states = states.sum(dim=1)  # both orderings, added
        logits = self.clf(self.clf_dropout(states))
        if self.head == "multiple_choice":
            logits = logits.squeeze(-1)  # (B, K)
        lm_logits = lm_loss_value = None
        if with_lm_logits:
            lm_logits = self.transformer.lm_logits(hidden).view(*input_ids.shape, -1)
        if lm_mask is not None:
            ids, real = input_ids.reshape(-1, T), lm_mask.reshape(-1, T)
            lm_loss_value = lm_loss(
                hidden[:, :-1],
                self.transformer.tokens_embed.weight,
                ids[:, 1:],
                real[:, 1:],
                average="sequences",
            )
        return TaskOutput(logits=logits, lm_logits=lm_logits, lm_loss=lm_loss_value)

    def _check_shapes(self, input_ids: torch.Tensor, classify_pos: torch.Tensor) -> None:
        want = {"classification": 2, "similarity": 3, "multiple_choice": 3}[self.head]
        if input_ids.dim() != want or tuple(classify_pos.shape) != tuple(input_ids.shape[:-1]):
            raise ValueError(
                f"{self.head} head: expected input_ids with {want} dims and classify_pos shaped "
                f"input_ids.shape[:-1]; got {tuple(input_ids.shape)} and {tuple(classify_pos.shape)}"
            )
        if self.head == "similarity" and input_ids.size(1) != 2:
            raise ValueError(
                f"similarity head: expected the 2 orderings in dim 1, got {input_ids.size(1)}"
            )
        if self.head == "multiple_choice" and input_ids.size(1) != self.n_outputs:
            raise ValueError(
                f"multiple_choice head built for {self.n_outputs} candidates, got {input_ids.size(1)}"
            )
