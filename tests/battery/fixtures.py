"""What the cases start from, built once per battery run through the real commands, each only when first needed.

    sample      `gpt1 sample-data`: books/ and every registered task in its official layout (tasks/<Folder>/...)
    corpus      `gpt1 ingest` of the sample books (the first 300,000 characters)
    tokenizer   `gpt1 train-tokenizer`, 300 merges
    shards      `gpt1 tokenize`, 32-token blocks
    pretrained  `gpt1 pretrain`: 4 updates of a 2-layer, 32-wide model at ZeRO stage 1, checkpoints at 2 and 4
    finetuned   `gpt1 finetune` of SST-2 from `pretrained` (OUT/model is what `gpt1 predict` reads)

Cases copy what they change into their own folder; the fixtures themselves are never modified.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from tests.battery.core import in_process

TINY_MODEL = ["model.n_ctx=32", "model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.d_ff=128"]
PRETRAIN_RECIPE = ["pretrain.global_batch_size=8", "pretrain.micro_batch_size=4", "pretrain.warmup_steps=2",
                   "pretrain.lr=3e-3", "pretrain.log_every=2", "pretrain.eval_every=4", "pretrain.eval_batches=2",
                   "pretrain.probe_every=8", "pretrain.zero_stage=1", "pretrain.precision=fp32"]
# A fine-tune that takes seconds: a few examples, one epoch.
QUICK_FINETUNE = ["finetune.max_train_examples=24", "finetune.max_eval_examples=12", "finetune.epochs=1",
                  "finetune.batch_size=8", "finetune.eval_batch_size=16"]


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


class Fixtures:
    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.tracking_uri = f"sqlite:///{root / 'mlflow.db'}"

    def _build(self, name: str, argv: list) -> Path:
        folder = self.root / "build" / name
        folder.mkdir(parents=True, exist_ok=True)
        done = in_process(argv, folder, {"MLFLOW_TRACKING_URI": self.tracking_uri})
        if done.code != 0:
            raise RuntimeError(f"battery fixture {name}: gpt1 {' '.join(map(str, argv))} exited {done.code}:\n"
                               f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        return folder

    @functools.cached_property
    def sample(self) -> Path:
        out = self.root / "sample"
        self._build("sample", ["sample-data", "--out", out])
        return out

    @property
    def tasks(self) -> Path:
        return self.sample / "tasks"

    @functools.cached_property
    def corpus(self) -> Path:
        out = self.root / "corpus"
        self._build("corpus", ["ingest", "--source", self.sample / "books", "--out", out, "--max-chars", "300000"])
        return out

    @functools.cached_property
    def tokenizer(self) -> Path:
        out = self.root / "tokenizer"
        self._build("tokenizer", ["train-tokenizer", "--corpus", self.corpus, "--out", out, "--merges", "300"])
        return out

    @functools.cached_property
    def shards(self) -> Path:
        out = self.root / "shards"
        self._build("shards", ["tokenize", "--corpus", self.corpus, "--tokenizer", self.tokenizer, "--out", out,
                               "--ctx", "32", "--shard-rows", "256", "--workers", "1"])
        return out

    def pretrain_argv(self, out: Path, steps: int = 4, extra: list[str] = (), shards: Path | None = None) -> list:
        return ["pretrain", "--preset", "smoke", "--shards", shards or self.shards, "--out", out, "--tokenizer",
                self.tokenizer, "--max-steps", str(steps), "--save-every", "2", *sets(TINY_MODEL + PRETRAIN_RECIPE),
                *extra]

    @functools.cached_property
    def pretrained(self) -> Path:
        """The pre-training run folder (checkpoints/, final/)."""
        out = self.root / "pretrained"
        self._build("pretrained", self.pretrain_argv(out))
        return out

    @property
    def model(self) -> Path:
        return self.pretrained / "final"

    def finetune_argv(self, task: str, data: Path | str, out: Path, checkpoint: Path | None = None,
                      extra: list[str] = ()) -> list:
        return ["finetune", "--task", task, "--data", data, "--checkpoint", checkpoint or self.model, "--out", out,
                "--preset", "smoke", "--no-tracking", *sets(QUICK_FINETUNE), *extra]

    @functools.cached_property
    def finetuned(self) -> Path:
        """A finished SST-2 fine-tune (its OUT folder)."""
        out = self.root / "finetuned"
        self._build("finetuned", self.finetune_argv("sst2", self.tasks / "SST-2", out))
        return out

    def copy(self, source: Path, work: Path, name: str | None = None) -> Path:
        """A copy of a fixture folder (or file) in the case's folder, to change."""
        target = work / (name or source.name)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)
        return target
