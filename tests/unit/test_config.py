"""Config: presets load, paper values are the paper's, overrides apply, bad input names the field."""

from __future__ import annotations

import pytest
import yaml

from gpt1.config import (
    TASKS,
    ConfigError,
    PipelineConfig,
    available_presets,
    config_from_dict,
    flatten,
    load_config,
)
from gpt1.tasks import get as get_task


def test_paper_preset_is_the_paper():
    cfg = load_config("paper")
    m, p, f = cfg.model, cfg.pretrain, cfg.finetune
    assert (m.n_layer, m.n_embd, m.n_head, m.d_ff, m.n_ctx) == (12, 768, 12, 3072, 512)
    assert m.vocab_size == 40478 + 3 and m.layer_norm_eps == 1e-5 and m.init_std == 0.02
    assert (m.embd_pdrop, m.attn_pdrop, m.resid_pdrop) == (0.1, 0.1, 0.1)
    assert cfg.train_tokenizer.merges == 40000
    assert (p.lr, p.warmup_steps, p.schedule, p.epochs, p.global_batch_size) == (2.5e-4, 2000, "cosine", 100, 64)
    assert (p.weight_decay, p.grad_clip) == (0.01, 1.0)
    assert (f.lr, f.batch_size, f.epochs, f.warmup_fraction, f.clf_pdrop, f.aux_lm_weight) == (
        6.25e-5, 32, 3, 0.002, 0.1, 0.5)
    assert set(f.tasks) == {task for task in TASKS if get_task(task).paper}  # those the paper reports


def test_smoke_is_small_and_offline():
    cfg = load_config("smoke")
    assert cfg.preset == "smoke"
    assert cfg.model.n_layer * cfg.model.n_embd <= 1024
    assert cfg.ingest.source == "sample" and cfg.finetune.data == "sample"
    assert {"paper", "smoke", "mini"} <= set(available_presets())


@pytest.mark.parametrize("preset", available_presets())
def test_every_shipped_preset_validates(preset):
    assert load_config(preset).preset == preset


def test_overrides_dotted_and_nested():
    cfg = load_config("smoke", ["pretrain.lr=1e-4", "finetune.tasks=[cola, sst2]", "model.attention=manual"])
    assert cfg.pretrain.lr == 1e-4 and cfg.finetune.tasks == ["cola", "sst2"]
    assert cfg.model.attention == "manual"
    cfg = load_config("smoke", {"finetune": {"aux_lm_weight": 0}})
    assert cfg.finetune.aux_lm_weight == 0 and cfg.finetune.lr == load_config("smoke").finetune.lr


@pytest.mark.parametrize(
    "override, path",
    [
        ("pretrain.lrr=1", "pretrain.lrr"),
        ("pretrain.lr=-1", "pretrain.lr"),
        ("pretrain.precision=fp8", "pretrain.precision"),
        ("model.n_head=5", "model"),
        ("finetune.tasks=[cola, nope]", "finetune.tasks"),
        ("report.headline_tasks=[sst2, nope]", "report.headline_tasks"),
        ("report.headline_tasks=[mrpc:pearson]", "report.headline_tasks"),
        ("bogus.section=1", "bogus"),
    ],
)
def test_bad_values_name_the_field(override, path):
    with pytest.raises(ConfigError) as err:
        load_config("smoke", [override])
    assert path in str(err.value)


def test_headline_tasks_name_a_task_and_optionally_one_of_its_metrics():
    assert load_config("paper").report.headline() is None  # every task the run fine-tunes, on its primary metric
    cfg = load_config("paper", ["report.headline_tasks=[stsb, sst2, mrpc:accuracy, mnli:accuracy_matched]"])
    assert cfg.report.headline() == (("stsb", "primary"), ("sst2", "primary"), ("mrpc", "accuracy"),
                                     ("mnli", "accuracy_matched"))
    with pytest.raises(ConfigError, match=r"mrpc has no metric 'pearson'; its metrics: \['primary', 'f1', "):
        load_config("paper", ["report.headline_tasks=[mrpc:pearson]"])


def test_bad_override_syntax_and_unknown_preset():
    with pytest.raises(ConfigError, match="key.path=value"):
        load_config("smoke", ["pretrain.lr"])
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config("no-such-preset")


def test_yaml_file_preset_round_trip(tmp_path):
    cfg = load_config("smoke", ["pretrain.max_steps=7"])
    path = tmp_path / "resolved.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    again = load_config(str(path))
    assert again == cfg
    assert config_from_dict(cfg.model_dump()) == cfg


def test_flatten_for_mlflow_params():
    flat = flatten(PipelineConfig().model_dump())
    assert flat["pretrain.lr"] == 2.5e-4 and flat["model.n_layer"] == 12
    assert all(not isinstance(v, dict) for v in flat.values())
