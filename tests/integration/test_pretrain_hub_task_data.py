"""The paper's default `finetune.data=hf` through the real pipeline: pre-training's zero-shot probes read the tasks
from the hub, not from a folder.

The hub is stood in for by a local folder named like the hub repository (`nyu-mll/glue/`, with its README's
`configs:` and Parquet files in the hub's layout) in the working directory: `datasets.load_dataset("nyu-mll/glue",
"sst2")` reads such a folder before it would ask the network, so the pre-training worker loads the probe tasks
through exactly the call it makes on a cluster, offline.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpt1.config import load_config
from gpt1 import recipe
from gpt1.recipe import experiment as P
from gpt1.pipeline.run import run_step

TINY = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=128", "model.n_ctx=32",
        "train_tokenizer.merges=200", "pretrain.max_steps=4", "pretrain.warmup_steps=1", "pretrain.log_every=2",
        "pretrain.save_every=4", "pretrain.eval_every=4", "pretrain.eval_batches=1", "pretrain.probe_every=4",
        "pretrain.probe_max_examples=8", "finetune.data=hf", "finetune.tasks=[sst2]", "orchestration.ablations=[]"]

GLUE_CARD = """---
configs:
- config_name: sst2
  data_files:
  - split: validation
    path: sst2/validation-*
- config_name: cola
  data_files:
  - split: train
    path: cola/train-*
  - split: validation
    path: cola/validation-*
---
A local stand-in for the hub's nyu-mll/glue: only what the zero-shot probes read.
"""


def write_glue_stand_in(root) -> None:
    """SST-2 dev and CoLA train/dev in the hub schema (sentence, label, idx), as the hub's Parquet files."""
    glue = root / "nyu-mll" / "glue"
    sentences = ["the film was a joy from start to end", "a dull and tired story", "the best meal of the year",
                 "nothing in it works", "warm , funny and wise", "the plot falls apart"]
    for config, split in (("sst2", "validation"), ("cola", "train"), ("cola", "validation")):
        (glue / config).mkdir(parents=True, exist_ok=True)
        table = pa.table({"sentence": sentences, "label": [1, 0, 1, 0, 1, 0],
                          "idx": list(range(len(sentences)))},
                         schema=pa.schema([("sentence", pa.string()), ("label", pa.int64()), ("idx", pa.int32())]))
        pq.write_table(table, glue / config / f"{split}-00000-of-00001.parquet")
    (glue / "README.md").write_text(GLUE_CARD)


@pytest.mark.slow
def test_pretraining_with_hub_task_data_runs_its_probes_on_the_hub_tasks(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    write_glue_stand_in(hub)
    monkeypatch.chdir(hub)  # the stand-in is found relative to the working directory, which the worker inherits
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the tasks without a stand-in fail at once instead of waiting
    cfg = load_config("smoke", [*TINY, f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"])
    assert cfg.finetune.data == "hf"
    plan = recipe.plan(cfg, tmp_path / "work")
    for name in plan.steps:  # the data stages, then pre-training, as the flow runs them
        run_step(plan, name, threads="1")
        if name == "pretrain":
            break

    records = [json.loads(line) for line in (plan.dir("pretrain") / "metrics.jsonl").read_text().splitlines()]
    probes = {k: v for record in records for k, v in record.items() if k.startswith("probe/")}
    assert {"probe/sst2_accuracy", "probe/cola_mcc", "probe/winograd_accuracy"} <= set(probes)
    assert 0 <= probes["probe/sst2_accuracy"] <= 100
    assert (plan.dir("pretrain") / "final" / "gpt1.safetensors").is_file()
