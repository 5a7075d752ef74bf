"""Every stage's settings in one pydantic tree: the single source of truth.

The field defaults ARE the paper (Radford et al., 2018, and its original code release where the paper is silent);
named presets in `gpt1/presets/<name>.yaml` override only what differs (e.g. `smoke`: a tiny model on sample
data). Anything derived (the DeepSpeed config, a stage's cache key) is computed from this tree, never kept beside it.

    cfg = load_config("smoke", overrides=["pretrain.lr=1e-3", "finetune.aux_lm_weight=0"])

Unknown keys and bad values raise `ConfigError` naming the dotted path of the offending field.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gpt1.io import InputError, check_input_file
from gpt1.redact import redact
from gpt1.tasks.registry import (
    REGISTRY,
    TASKS,
)  # the one list of tasks (gpt1.tasks never imports config)

PRESET_DIR = Path(__file__).parent / "presets"
PRESET_MAX_BYTES = 1 << 20  # a preset is a page of YAML; anything larger is not one
# Every whole number ends in torch, numpy or a native library, none of which takes more than 64 bits.
INT_LIMIT = 1 << 63

SPECIAL_TOKENS = ("_start_", "_delimiter_", "_classify_")


class ConfigError(ValueError):
    """A config problem, with the dotted path of each offending field in the message."""


def _whole_numbers(value: Any) -> list[int]:
    """The ints in a field's value (in its lists and dicts too), booleans aside."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [number for item in value for number in _whole_numbers(item)]
    return []


class _Section(BaseModel):
    # inf and nan are refused everywhere: `pretrain.lr=inf` would otherwise train a model of NaNs to the end.
    # Strict: a boolean is no step count and `"5"` no number (lax pydantic takes `true` as 1, 5.0 as 5).
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True
    )

    @field_validator("*")
    @classmethod
    def _fits_64_bits(cls, value: Any) -> Any:
        if any(not -INT_LIMIT <= number < INT_LIMIT for number in _whole_numbers(value)):
            raise ValueError("a whole number of more than 64 bits (torch and numpy take no more)")
        return value


def _distinct(items: list) -> list:
    """A list that names a set (tasks, ablations): an item named twice is a typo, not a weight."""
    repeated = sorted({str(item) for item in items if items.count(item) > 1})
    if repeated:
        raise ValueError(f"{', '.join(repeated)} named more than once")
    return items


Text = Annotated[
    str, Field(min_length=1)
]  # a name or a place: empty means nothing, never a default


def _adam_betas(betas: tuple[float, float]) -> tuple[float, float]:
    """Adam's decay rates must be in [0, 1): torch checks them only when the optimizer is built, in a worker."""
    if not all(0 <= beta < 1 for beta in betas):
        raise ValueError("each beta must be >= 0 and < 1")
    return betas


# YAML and JSON have no tuples: the pair comes as a list (strict mode would refuse it)
AdamBetas = Annotated[
    tuple[float, float],
    BeforeValidator(lambda value: tuple(value) if isinstance(value, list) else value),
    AfterValidator(_adam_betas),
]


class ModelConfig(_Section):
    """The transformer (paper section 4.1 and the released code)."""

    vocab_size: int = Field(
        40478 + len(SPECIAL_TOKENS), gt=0, description="BPE vocab + the 3 specials"
    )
    n_ctx: int = Field(512, gt=0)
    n_layer: int = Field(12, gt=0)
    n_head: int = Field(12, gt=0)
    n_embd: int = Field(768, gt=0)
    d_ff: int = Field(3072, gt=0)
    embd_pdrop: float = Field(0.1, ge=0, lt=1)
    attn_pdrop: float = Field(0.1, ge=0, lt=1)
    resid_pdrop: float = Field(0.1, ge=0, lt=1)
    layer_norm_eps: float = Field(1e-5, gt=0)
    init_std: float = Field(0.02, gt=0)
    # Systems choices, not hyperparameters: they change speed/memory, never the function computed.
    attention: Literal["auto", "sdpa", "manual"] = "auto"
    activation_checkpointing: bool = False
    compile: bool | Literal["auto"] = Field(
        "auto",
        description="torch.compile the transformer blocks for training (true/false); auto: on CUDA, when "
        "a C compiler is there for Triton (gpt1/model/transformer.py)",
    )

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        return self


class SampleDataConfig(_Section):
    """The `sample-data` stage: the generated offline corpus and task files."""

    seed: int = Field(0, description="the same seed writes byte-identical files")


class IngestConfig(_Section):
    """The `ingest` stage: a text source -> cleaned, deduplicated documents split into train/val."""

    source: Text = Field(
        "hf:bookcorpus/bookcorpus:train",
        description="dir/glob of .txt, .jsonl/.parquet, hf:id[@rev][:split], or 'sample' (generated offline corpus)",
    )
    text_column: Text = "text"
    rows_per_doc: int | None = Field(
        None,
        ge=1,
        description="rows joined per document for row sources; None = 1000 for hub BooksCorpus, else 1",
    )
    val_fraction: float = Field(
        0.01, ge=0, lt=1, description="share of documents held out for validation"
    )
    split_seed: int = 0
    min_doc_chars: int = Field(1, ge=0)
    unwrap_lines: bool = Field(
        True,
        description="join the lines of hard-wrapped prose paragraphs; verse, lists and headings keep theirs",
    )
    max_documents: int | None = Field(
        None,
        gt=0,
        description="subset: the first N documents (after cleaning and dedup) in source order; the "
        "source is read no further",
    )
    max_chars: int | None = Field(
        None,
        gt=0,
        description="subset: whole documents in source order up to this many characters in all",
    )
    max_doc_chars: int | None = Field(
        None,
        gt=0,
        description="cut each record (a book) into documents of at most this many characters at "
        "paragraph boundaries, after the train/val split (None: a record is a document)",
    )
    task_text: bool = Field(
        False,
        description="add the unlabelled text of the train split of every task the run fine-tunes "
        "(finetune.tasks, from finetune.data) to the corpus, one document per row",
    )
    leak_check: bool = Field(
        False,
        description="remove from the corpus and the task text every sentence of 8 or more words that is "
        "also in a dev or test file of a task the run fine-tunes; counted in stats.json",
    )


class TrainTokenizerConfig(_Section):
    """The `train-tokenizer` stage: word-level BPE on the ingested corpus."""

    merges: int = Field(40000, gt=0, description="BPE merges to learn (paper: 40,000)")
    min_frequency: int = Field(2, ge=1)
    max_train_chars: int | None = Field(
        None, gt=0, description="cap on corpus characters fed to BPE training"
    )
    limit_alphabet: int = Field(
        1000, gt=0, description="base alphabet: the most frequent characters, rest -> <unk>"
    )


class TokenizeConfig(_Section):
    """The `tokenize` stage: the corpus packed into Arrow shards of model.n_ctx + 1 tokens (inputs + targets)."""

    shard_rows: int = Field(8192, gt=0, description="packed blocks per Arrow shard")
    workers: int = Field(2, gt=0, description="tokenizer processes; changes speed, never the bytes")
    align_documents: bool = Field(
        False,
        description="start every document of at least one block at a block's first position (its "
        "`_start_` where fine-tuning has it); the shorter rest of each document packed together",
    )


class PretrainConfig(_Section):
    """Unsupervised pre-training (paper 4.1; Adam settings from the released code)."""

    lr: float = Field(2.5e-4, gt=0)
    warmup_steps: int = Field(2000, ge=0)
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    epochs: int = Field(100, gt=0)
    max_steps: int | None = Field(None, gt=0, description="stop after this many optimizer updates")
    global_batch_size: int = Field(
        64, gt=0, description="sequences per optimizer update, all ranks"
    )
    micro_batch_size: int | None = Field(
        None, gt=0, description="per rank per forward; default: global / world"
    )
    weight_decay: float = Field(0.01, ge=0)
    adam_betas: AdamBetas = (0.9, 0.999)
    adam_eps: float = Field(1e-8, gt=0)
    grad_clip: float = Field(1.0, ge=0)
    precision: Literal["fp32", "bf16", "fp16"] = "bf16"
    zero_stage: int = Field(1, ge=0, le=3)
    collective_timeout_minutes: float = Field(
        15.0,
        gt=0,
        description="a collective that waits longer (a hung or lost rank) fails the run, with each rank's NCCL "
        "flight-recorder dump in OUT/nccl-trace/; above the longest step rank 0 takes alone (a probe, an "
        "evaluation, a checkpoint's hashing)",
    )
    stop_grace_seconds: float = Field(
        300.0,
        gt=0,
        description="after SIGTERM (an eviction, a preemption), the time the ranks have to agree on a stop, "
        "write a checkpoint and exit before they are killed: torchrun's shutdown timeout, and the pods' "
        "termination grace in infra/ (docs/cluster.md)",
    )
    offload_optimizer: bool = False
    seed: int = 0
    log_every: int = Field(
        10,
        gt=0,
        description="updates per logged window: the loop waits for the device at its end "
        "(and before evaluations, probes and checkpoints), not each update",
    )
    eval_every: int = Field(1000, gt=0)
    eval_batches: int = Field(50, gt=0)
    probe_every: int = Field(1000, gt=0)
    probe_max_examples: int = Field(200, gt=0, description="examples per zero-shot probe task")
    save_every: int = Field(1000, gt=0)
    keep_last: int = Field(3, gt=0)
    curve_steps: list[int] = Field(
        default_factory=list,
        description="updates at which the whole model is also written (OUT/curve/step-N), "
        "each fine-tuned on the headline tasks: the report's gain against "
        "pre-training tokens",
    )
    # GPU speed: minutes instead of updates (gpt1/pretrain/cadence.py), checked at the log_every boundaries
    eval_every_minutes: float | None = Field(
        None, gt=0, description="evaluate every this many minutes instead"
    )
    probe_every_minutes: float | None = Field(
        None, gt=0, description="run the probes every this many minutes instead"
    )
    save_every_minutes: float | None = Field(
        None, gt=0, description="checkpoint every this many minutes instead"
    )

    @field_validator("curve_steps")
    @classmethod
    def _increasing_positive(cls, steps: list[int]) -> list[int]:
        if any(step <= 0 for step in steps) or steps != sorted(set(steps)):
            raise ValueError("updates must be positive and increasing, each named once")
        return steps

    @model_validator(mode="after")
    def _curve_before_the_end(self) -> PretrainConfig:
        late = [step for step in self.curve_steps if self.max_steps and step >= self.max_steps]
        if late:
            raise ValueError(
                f"curve_steps {late}: not before max_steps {self.max_steps} (the final model is the "
                "curve's last point already)"
            )
        return self


class FinetuneConfig(_Section):
    """Supervised fine-tuning (paper 4.1 "Fine-tuning details")."""

    tasks: Annotated[list[str], AfterValidator(_distinct)] = Field(
        default_factory=lambda: list(TASKS)
    )
    data: Text = Field(
        "hf",
        description="'hf' (hub ids), 'sample' (generated offline data) or a folder of task dirs",
    )
    missing_data: Literal["error", "skip"] = Field(
        "error",
        description="a task whose files are not found: an error (preflight, fine-tune), or skipped and "
        "listed in the report as not run",
    )
    task_data: dict[str, str] = Field(
        default_factory=dict,
        description="per task, where its files are instead (a folder, a file or hf:<id>), "
        "e.g. storycloze: the manual download while the rest come from the hub",
    )
    lr: float = Field(6.25e-5, gt=0)
    batch_size: int = Field(32, gt=0)
    micro_batch_size: int | None = Field(
        None,
        gt=0,
        description="examples per forward; batch_size is reached by gradient accumulation (RACE at GPT-1 shape)",
    )
    forward_sequences: int = Field(
        64,
        gt=0,
        description="most sequences per forward (an example is 1, a similarity pair 2, a K-way choice K); a "
        "batch with more is split and its gradients accumulated: bounds memory (RACE: 32 x 4)",
    )
    epochs: int = Field(3, gt=0)
    warmup_fraction: float = Field(0.002, ge=0, lt=1)
    weight_decay: float = Field(0.01, ge=0)
    adam_betas: AdamBetas = (0.9, 0.999)  # the release's Adam settings, as pre-training's
    adam_eps: float = Field(1e-8, gt=0)
    grad_clip: float = Field(1.0, ge=0)
    clf_pdrop: float = Field(0.1, ge=0, lt=1)
    aux_lm_weight: float = Field(
        0.5, ge=0, description="lambda in L3 = L2 + lambda * L1; 0 disables"
    )
    transfer_layers: int | None = Field(
        None, gt=0, description="keep only the first k pre-trained blocks"
    )
    redraw_specials: bool = Field(
        False,
        description="draw the `_delimiter_` and `_classify_` embeddings afresh from N(0, init_std) before "
        "fine-tuning pre-trained weights, as the paper's new parameters; off, they keep the rows "
        "pre-training left (docs/data.md says why that is the default)",
    )
    from_scratch: bool = Field(
        False, description="ablation: random init instead of the pre-trained weights"
    )
    max_train_examples: int | None = Field(None, gt=0)
    max_eval_examples: int | None = Field(None, gt=0)
    eval_batch_size: int = Field(64, gt=0)
    max_bad_row_fraction: float = Field(
        0.01, ge=0, le=1, description="malformed rows tolerated per file"
    )
    allow_eval_on_train: bool = Field(
        False,
        description="score a held-out split that is the training data (a single file as the data) instead "
        "of refusing; the score is labelled as on training rows",
    )
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 autocast with TF32 matmuls on CUDA, fp32 on a CPU"
    )
    seed: int = 0
    seeds: int = Field(
        1,
        gt=0,
        description="fine-tunes of each task and variant, with seeds seed, seed + 1, ...; "
        "the report averages them inside each bootstrap resample",
    )


def headline_metric(item: str) -> tuple[str, str]:
    """A `report.headline_tasks` entry, `task` or `task:metric`, as (task, metric); `primary` when no metric is
    named. Raises ValueError naming the known tasks or the task's metrics."""
    task, _, metric = item.partition(":")
    if task not in REGISTRY:
        raise ValueError(f"unknown task {task!r}; known: {list(TASKS)}")
    spec = REGISTRY[task]
    known = ["primary", *spec.metrics, *(f"accuracy_{group}" for group in spec.groups)]
    if metric and metric not in known:
        raise ValueError(f"{task} has no metric {metric!r}; its metrics: {known}")
    return task, metric or "primary"


class ReportConfig(_Section):
    """The `report` stage: which tasks make the run's verdict on pre-training."""

    headline_tasks: Annotated[list[str], AfterValidator(_distinct)] | None = Field(
        None,
        description="the tasks whose mean pre-trained minus from-scratch difference is the headline, each "
        "`task` (its primary metric) or `task:metric` (e.g. mrpc:accuracy); None: every task run",
    )

    @field_validator("headline_tasks")
    @classmethod
    def _known_tasks_and_metrics(cls, items: list[str] | None) -> list[str] | None:
        for item in items or []:
            headline_metric(item)
        return items

    def headline(self) -> tuple[tuple[str, str], ...] | None:
        """The headline tasks as (task, metric) pairs; None: every task the run fine-tunes, on its primary metric."""
        return (
            None
            if self.headline_tasks is None
            else tuple(headline_metric(item) for item in self.headline_tasks)
        )


# MLflow tracking stores by URI scheme (a dialect may follow: postgresql+psycopg2://); a scheme MLflow does not
# have would only fail inside the run, where its calls are spooled for a server that can never answer. Its file
# store (`file:`, a bare path) is refused by MLflow 3.17 at the first call (maintenance mode).
TRACKING_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks")
_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def tracking_uri_problem(uri: str) -> str | None:
    """Why MLflow can never use `uri` as its tracking store (None: it may), checked from the text alone; the
    message shows the URI with its credentials redacted."""
    shown = redact(uri)
    if uri == "databricks":  # the default Databricks profile
        return None
    if not uri.strip() or any(c.isspace() for c in uri):
        return f"{shown!r}: a tracking URI holds no spaces"
    scheme = uri.partition(":")[0].lower() if _URI_SCHEME.match(uri) else ""
    if scheme in ("", "file"):
        return (
            f"{shown}: a path or `file:` URI is MLflow's file store, which MLflow 3.17 refuses (maintenance "
            "mode): use sqlite:///PATH.db or a server's http(s)://host:port"
        )
    if scheme.split("+", 1)[0] not in TRACKING_SCHEMES:
        return f"{shown}: not an MLflow tracking URI (schemes: {', '.join(TRACKING_SCHEMES)})"
    if "://" not in uri:
        return f"{shown}: not a URI ({scheme}://...)"
    if scheme in ("http", "https"):
        return _server_uri_problem(uri, shown)
    if scheme == "sqlite" and not uri.partition(":///")[2]:
        return f"{shown}: no database file (sqlite:///relative.db, sqlite:////absolute.db)"
    return None


def _server_uri_problem(uri: str, shown: str) -> str | None:
    parts = urlsplit(uri)
    try:
        parts.port  # noqa: B018 - parsing it is the check
    except ValueError:
        return f"{shown}: the port is not a number"
    if not parts.hostname:
        return f"{shown}: no host (http(s)://host:port)"
    if parts.query or parts.fragment:
        # MLflow appends its API paths to the URI as it is: `?token=...` would end up inside every path
        return (
            f"{shown}: MLflow cannot send a query or fragment to its server: give a token as "
            "MLFLOW_TRACKING_TOKEN, a user and password as MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD"
        )
    return None


class TrackingConfig(_Section):
    experiment: Text = "gpt1"
    tracking_uri: str | None = Field(
        None, description="default: $MLFLOW_TRACKING_URI, else local sqlite"
    )

    @field_validator("tracking_uri")
    @classmethod
    def _usable_store(cls, uri: str | None) -> str | None:
        if uri is not None and (problem := tracking_uri_problem(uri)):
            raise ValueError(problem)
        return uri

    upload_checkpoints: bool = Field(
        False, description="upload large checkpoints instead of logging references"
    )
    register_models: bool = Field(
        True, description="register fine-tuned task models in the Model Registry"
    )


class OrchestrationConfig(_Section):
    """How the stages are run (Prefect): never changes what is computed, so it is not part of any cache key."""

    finetune_concurrency: int = Field(
        2, gt=0, description="local fan-out: fine-tunes running at once"
    )
    fanout: Literal["local", "deployment"] = Field(
        "local",
        description="local: subprocesses on this worker; deployment: one flow run per task on a work pool",
    )
    finetune_deployment: Text = Field(
        "gpt1-finetune/gpu", description="used when fanout=deployment"
    )
    finetune_job_variables: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="fanout=deployment: work-pool job variables per task (e.g. more memory)",
    )
    finetunes_per_pod: int = Field(
        1,
        gt=0,
        description="fanout=deployment: fine-tunes that become ready together share one child flow run (one "
        "pod, one GPU), each in its own process; a task with job variables of its own runs alone",
    )
    pretrain_deployment: str | None = Field(
        None,
        description="run pre-training as this deployment (its own work pool, e.g. gpt1-pretrain/gpu-node) "
        "instead of in the flow's process",
    )
    pretrain_nproc: int = Field(
        1, gt=0, description="processes per node for the DeepSpeed launcher"
    )
    pretrain_alone: bool = Field(
        False,
        description="local pre-training holds every compute slot: it runs alone on all the cores and the "
        "from-scratch fine-tunes wait for it (false: they run beside it, on its share of cores)",
    )
    pretrain_launcher: Literal["local", "slurm"] = Field(
        "local",
        description="local: `gpt1 pretrain` on this worker; slurm: sbatch the job in infra/multinode/slurm/",
    )
    pretrain_nnodes: int = Field(
        1, gt=0, description="nodes of the Slurm job (pretrain_launcher=slurm)"
    )
    ablations: Annotated[
        list[Literal["no_pretrain", "no_aux_lm", "transfer_layers"]], AfterValidator(_distinct)
    ] = Field(
        default_factory=list,
        description="extra fine-tune fan-outs beside the full run (paper Table 5)",
    )
    ablation_transfer_layers: int = Field(6, gt=0)
    retries: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="per stage name: how often a failed job is retried (default: its job "
        "class's `retries`)",
    )
    retry_delay_seconds: float = Field(
        10.0, ge=0, description="first retry delay; doubles each retry"
    )
    preflight: bool = Field(
        True, description="check data, services, pools and disk before any stage runs"
    )


class PipelineConfig(_Section):
    preset: str = "paper"
    model: ModelConfig = Field(default_factory=ModelConfig)
    sample_data: SampleDataConfig = Field(default_factory=SampleDataConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    train_tokenizer: TrainTokenizerConfig = Field(default_factory=TrainTokenizerConfig)
    tokenize: TokenizeConfig = Field(default_factory=TokenizeConfig)
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig)
    finetune: FinetuneConfig = Field(default_factory=FinetuneConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    orchestration: OrchestrationConfig = Field(default_factory=OrchestrationConfig)

    @model_validator(mode="after")
    def _known_tasks(self) -> PipelineConfig:
        for field, names in (
            ("finetune.tasks", self.finetune.tasks),
            ("finetune.task_data", self.finetune.task_data),
            ("orchestration.finetune_job_variables", self.orchestration.finetune_job_variables),
        ):
            unknown = sorted(set(names) - set(TASKS))
            if unknown:
                raise ValueError(f"{field}: unknown task(s) {unknown}; known: {list(TASKS)}")
        return self


MERGE_TAG = "tag:yaml.org,2002:merge"
# A preset's name is a file in PRESET_DIR, never a path: `--preset ../x` would read a file outside it.
PRESET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
YAML_SUFFIXES = (".yaml", ".yml")  # what tells a preset file's path from a preset's name
MAX_EXTENDS = 32  # presets in one chain of `extends` (the shipped ones chain at most 3)
# A preset or `--set` value, aliases and merge keys expanded: the config tree nests 5 deep and a page of YAML holds a
# few hundred values; a kilobyte of nested aliases expands to billions, and PyYAML composes recursively.
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000


class _Unbounded(Exception):
    """A YAML document past MAX_YAML_DEPTH or MAX_YAML_NODES, at `mark`."""

    def __init__(self, message: str, mark: yaml.Mark):
        super().__init__(message)
        self.line = mark.line + 1


class _Loader(yaml.SafeLoader):
    """YAML as a person writes a preset: `1e-3` is a number (YAML 1.2; PyYAML's 1.1 rules read it as text, which
    a float field now refuses), a key written twice is an error (PyYAML keeps the last without a word), and a merge
    key (`<<: *defaults`, YAML 1.1) brings in the keys of an anchored mapping, which the mapping's own override.
    Nesting is bounded while composing: PyYAML composes recursively, so a deep `[[[...` would exhaust the stack."""

    depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.depth >= MAX_YAML_DEPTH:
            raise _Unbounded(
                f"nested more than {MAX_YAML_DEPTH} levels deep", self.peek_event().start_mark
            )
        self.depth += 1
        try:
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue  # flattened by SafeLoader below: defaults, not a key of this mapping
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            if not isinstance(key, (str, int, float)):
                continue  # unhashable: PyYAML's own check below names it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
# `lr=inf` and `nan` as Python writes them are numbers too, so that the refusal says what is wrong with them
# (not finite) rather than that they are text
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:inf|nan)$", re.IGNORECASE), list("-+iInN")
)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_expansion(root: yaml.Node) -> None:
    """Raise _Unbounded when the document, its aliases and merge keys expanded, holds more than MAX_YAML_NODES
    values or nests deeper than MAX_YAML_DEPTH, or when an alias is inside the node it names. An alias is the node
    it names, so each node is measured once: linear in the text, however far it would expand."""
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth), expanded
    open_nodes: set[int] = (
        set()
    )  # the nodes whose children are being measured: the path from the root
    stack = [(root, False)]
    while stack:
        node, children_measured = stack.pop()
        if id(node) in measured:
            continue
        children = _children(node)
        if not children_measured:
            open_nodes.add(id(node))
            stack.append((node, True))
            for child in children:
                if id(child) in open_nodes:
                    raise _Unbounded(
                        "an alias inside the node it names (a recursive alias)", child.start_mark
                    )
                stack.append((child, False))
            continue
        open_nodes.discard(id(node))
        values = 1 + sum(measured[id(child)][0] for child in children)
        depth = 1 + max((measured[id(child)][1] for child in children), default=0)
        if values > MAX_YAML_NODES:
            raise _Unbounded(
                f"more than {MAX_YAML_NODES:,} values once its aliases (*name) and merge keys (<<) are expanded",
                node.start_mark,
            )
        if depth > MAX_YAML_DEPTH:
            raise _Unbounded(
                f"nested more than {MAX_YAML_DEPTH} levels deep once its aliases are expanded",
                node.start_mark,
            )
        measured[id(node)] = (values, depth)


def _load_yaml(text: str, where: str) -> Any:
    """The YAML document in `text`, measured before it is built: one that nests too deep or expands too far
    (`_check_expansion`) raises ConfigError naming `where` and the line; YAML errors propagate."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except _Unbounded as err:
        raise ConfigError(f"{where}: line {err.line}: {err}") from None
    finally:
        loader.dispose()


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


@dataclass(frozen=True)
class Setting:
    """One value set on top of the preset, and how the user wrote it (what a refusal names): `--set` items and a
    flow's `overrides` are `key=value` text (`Setting.parse`), a command's own flags are Settings."""

    key: str  # dotted: pretrain.max_steps
    value: Any
    origin: str  # `pretrain.max_steps=5`, `--max-steps 5`

    @classmethod
    def parse(cls, item: str) -> Setting:
        """`a.b.c=value`; the value is parsed as YAML (numbers, bools, lists, mappings)."""
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key.path=value")
        key, raw = item.split("=", 1)
        path = [p for p in key.strip().split(".") if p]
        if not path:
            raise ConfigError(f"override {item!r}: empty key")
        try:
            value = _load_yaml(raw, f"override {item!r:.60}") if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        return cls(".".join(path), value, repr(item))


Override = str | Setting


def merge(base: dict, update: dict) -> dict:
    """Recursive dict merge; `update` wins. Neither input is modified."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _settings(overrides: Sequence[Override] | dict | None) -> list[Setting]:
    if isinstance(
        overrides, dict
    ):  # one per section: its keys may hold dots (job variables' label names)
        return [Setting(str(key), value, "the overrides dict") for key, value in overrides.items()]
    return [item if isinstance(item, Setting) else Setting.parse(item) for item in overrides or []]


def _leaves(path: tuple, value: Any) -> Iterator[tuple[tuple, Any]]:
    """(path, value) of each value inside mappings: what a setting sets, a mapping being the keys it holds."""
    if not isinstance(value, dict) or not value:
        yield (
            path,
            value,
        )  # an empty mapping too: it merges as one, adding nothing, and a value may not be one
        return
    for key, inner in value.items():
        yield from _leaves((*path, key), inner)


def _same(a: Any, b: Any) -> bool:
    """Equal as written: `true` is not 1, nor 1 the same as 1.0."""
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(
        b, sort_keys=True, default=repr
    )


def _overrides_to_dict(overrides: Sequence[Override] | dict | None) -> dict:
    """The settings as one nested dict. A mapping value merges into its section as a preset's does (never dropping
    what other settings put there); two settings of one key that differ, or one that makes a value of another's
    section, are refused naming both."""
    nested: dict = {}
    given: dict[tuple, tuple[Setting, Any]] = {}  # each value set: by which setting, to what
    for setting in _settings(overrides):
        for path, value in _leaves(tuple(setting.key.split(".")), setting.value):
            for other_path, (other, other_value) in given.items():
                if other_path == path:
                    clash = not _same(value, other_value)
                else:  # one inside the other: only an empty mapping holds a section's keys
                    inside = (
                        other_path[: len(path)] == path or path[: len(other_path)] == other_path
                    )
                    outer = value if len(path) < len(other_path) else other_value
                    clash = inside and outer != {}
                if clash:
                    where = ".".join(
                        map(str, path[: min(len(path), len(other_path))])
                    )  # the shorter
                    raise ConfigError(
                        f"{other.origin} and {setting.origin} both set {where}, differently: give one of them"
                    )
            given[path] = setting, value
            node = nested
            for part in path[:-1]:
                node = node.setdefault(part, {})
            if value != {} or not isinstance(node.get(path[-1]), dict):
                node[path[-1]] = value
    return nested


def _format_errors(err: ValidationError, origin: str) -> str:
    """One line: `invalid config (origin): field: problem (got value); field: ...` (no pydantic URLs)."""
    problems = []
    for e in err.errors():
        where = f"{'.'.join(str(p) for p in e['loc'])}: " if e["loc"] else ""
        got = (
            f" (got {redact(e['input'])!r:.60})"
            if "input" in e and not isinstance(e["input"], dict)
            else ""
        )
        problems.append(f"{where}{e['msg'].removeprefix('Value error, ')}{got}")
    return f"invalid config ({origin}): " + "; ".join(problems)


def _read_yaml(path: Path) -> Any:
    """The YAML document in `path`; anything that is not a small regular file of UTF-8 YAML of bounded size
    raises ConfigError naming the file (and line)."""
    try:
        check_input_file(path, what="preset file", max_bytes=PRESET_MAX_BYTES)
        text = path.read_text(encoding="utf-8-sig")  # -sig: a BOM written by an editor is not a key
        return _load_yaml(text, str(path))
    except InputError as err:
        raise ConfigError(str(err)) from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" line {mark.line + 1}:" if mark else ""
        problem = " ".join(f"{err.context or ''} {err.problem or ''}".split())
        raise ConfigError(f"{path}:{where} not valid YAML ({problem})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None


def _preset_path(name: str) -> Path:
    """The file of a preset: a NAME is gpt1/presets/NAME.yaml; a path ending in .yaml or .yml is that file."""
    if Path(name).suffix.lower() in YAML_SUFFIXES:
        if not os.path.lexists(name):
            raise ConfigError(f"config file not found: {name}")
        return Path(name)
    if not PRESET_NAME.fullmatch(name):
        raise ConfigError(
            f"preset {name!r}: not a preset name (letters, digits, '-' and '_'; available: "
            f"{available_presets()}); give a preset file by its path, ending in .yaml"
        )
    path = PRESET_DIR / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"unknown preset {name!r}; available: {available_presets()}")
    return path


def _preset_file(path: Path) -> tuple[dict, str | None]:
    """A preset file's own values (`preset`: its name unless it says) and the preset it extends, if any."""
    data = _read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    data.setdefault("preset", path.stem)
    base = data.pop("extends", None)
    if base is not None and (not isinstance(base, str) or not base.strip()):
        raise ConfigError(
            f"{path}: extends: expected the name or YAML file of one preset, got {base!r:.60}"
        )
    return data, base


def load_preset_dict(name_or_path: str) -> dict:
    """The raw override dict of a preset name (gpt1/presets/NAME.yaml) or a YAML file path. A preset may start
    from another (`extends: NAME`): its own values win, merged as `merge` does, and `preset` is its own name. The
    chain is followed without recursion, at most MAX_EXTENDS files long; a problem names the file whose `extends`
    led to it."""
    chain: list[dict] = []
    names: list[str] = []  # as written, for the message of a cycle
    seen: set[Path] = set()
    name: str | None = name_or_path
    referrer: Path | None = None  # the file whose `extends` names `name`
    while name is not None:
        names.append(name)
        try:
            if len(chain) == MAX_EXTENDS:
                raise ConfigError(
                    f"more than {MAX_EXTENDS} presets in one chain of `extends` (from {name_or_path})"
                )
            path = _preset_path(name)
            if path.resolve() in seen:
                raise ConfigError(f"`extends: {name}` makes a cycle ({' -> '.join(names)})")
            seen.add(path.resolve())
            data, base = _preset_file(path)
        except ConfigError as err:
            raise (ConfigError(f"{referrer}: extends: {err}") if referrer else err) from None
        chain.append(data)
        name, referrer = base, path
    merged: dict = {}
    for data in reversed(chain):
        merged = merge({k: v for k, v in merged.items() if k != "preset"}, data)
    return merged


def load_config(
    preset: str = "paper", overrides: Sequence[Override] | dict | None = None
) -> PipelineConfig:
    """Preset (name or YAML path) + overrides (`["a.b=1"]` or Settings, or a nested dict) -> validated config.
    Overrides merge into the preset as an `extends` chain's files merge into each other."""
    data = merge(load_preset_dict(preset), _overrides_to_dict(overrides))
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, f"preset {preset!r} + overrides")) from None


def config_from_dict(data: dict) -> PipelineConfig:
    """Validate a full config dict (e.g. one saved beside a checkpoint)."""
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, "dict")) from None


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: how configs are logged as MLflow params."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out
