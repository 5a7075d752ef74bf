"""The Prefect deployments file (pipelines.yaml). The infra/ assets themselves: tests/unit/test_infra_assets.py."""

from __future__ import annotations

import inspect
import re

import pytest
import yaml

from gpt1.config import load_config

from tests.conftest import REPO

DEPLOYMENTS = yaml.safe_load((REPO / "pipelines.yaml").read_text())


def _by_name():
    return {d["name"]: d for d in DEPLOYMENTS["deployments"]}


def test_required_deployments_exist_on_the_right_pools():
    names = _by_name()
    for required in ("full", "smoke", "mini", "ablation-no-pretrain", "ablation-no-aux-lm", "ablation-transfer-6", "gpu",
                     "gpu-node", "from-checkpoint"):
        assert required in names
    full = names["full"]
    assert full["parameters"]["preset"] == "cluster"
    assert full["schedules"][0]["cron"] and full["schedules"][0]["active"] is False
    assert names["smoke"]["work_pool"]["name"] == names["mini"]["work_pool"]["name"] == "gpt1-local"
    assert names["mini"]["parameters"] == {"preset": "mini"}  # the data stay in the preset: a run's overrides add to it
    # The orchestrating flows hold no GPU; pre-training takes whole nodes; a fine-tune one GPU, a few at a time.
    for name in ("full", "ablation-no-pretrain", "ablation-no-aux-lm", "ablation-transfer-6", "from-checkpoint"):
        assert names[name]["work_pool"]["name"] == "gpt1-cpu" and "gpus" not in names[name]["work_pool"].get(
            "job_variables", {}), name
    assert names["gpu-node"]["work_pool"]["name"] == "gpt1-gpu-node"
    assert names["gpu-node"]["work_pool"]["job_variables"]["gpus"] == load_config("cluster").orchestration.pretrain_nproc
    assert names["gpu"]["work_pool"] == {"name": "gpt1-gpu", "work_queue_name": "default", "job_variables": {"gpus": 1}}
    assert names["gpu"]["concurrency_limit"] >= 1
    assert all(d.get("pull") == [] for d in DEPLOYMENTS["deployments"]), "a pull step bakes a folder into a deployment"


@pytest.mark.parametrize("name", [d["name"] for d in DEPLOYMENTS["deployments"]])
def test_entrypoints_load_and_parameters_fit(name, monkeypatch):
    from prefect.flows import load_flow_from_entrypoint

    monkeypatch.chdir(REPO)
    dep = _by_name()[name]
    flow = load_flow_from_entrypoint(dep["entrypoint"])
    params = dep.get("parameters", {})
    signature = inspect.signature(flow.fn)
    assert set(params) <= set(signature.parameters), f"{name}: unknown flow parameters"
    if "preset" in params:  # the preset + overrides must validate before any run is scheduled
        load_config(params["preset"], params.get("overrides"))


def test_flow_names_match_deployment_names():
    from prefect.flows import load_flow_from_entrypoint

    flows = {load_flow_from_entrypoint(d["entrypoint"]).name for d in DEPLOYMENTS["deployments"]}
    assert flows == {"gpt1", "gpt1-pretrain", "gpt1-finetune", "gpt1-finetune-all"}
    cluster = load_config("cluster").orchestration
    assert cluster.pretrain_deployment in {f"gpt1-pretrain/{d['name']}" for d in DEPLOYMENTS["deployments"]}
    assert cluster.finetune_deployment in {f"gpt1-finetune/{d['name']}" for d in DEPLOYMENTS["deployments"]}


def test_a_runs_own_overrides_add_to_the_cluster_preset_and_bad_parameters_are_refused():
    """`prefect deployment run gpt1/full --param overrides='[...]'` replaces the deployment's `overrides` list, so
    cluster settings live in the preset, where a run's overrides only add to them; the parameter schema the
    server validates requests against refuses unknown presets and malformed overrides."""
    import jsonschema
    from prefect.utilities.callables import parameter_schema

    from flows.pipeline import gpt1_pipeline

    full = _by_name()["full"]
    cfg = load_config(full["parameters"]["preset"], ["ingest.source=/data/my-books"])
    assert cfg.ingest.source == "/data/my-books"
    assert cfg.orchestration.fanout == "deployment" and cfg.orchestration.pretrain_nproc == 8
    assert cfg.orchestration.pretrain_deployment == "gpt1-pretrain/gpu-node"
    schema = parameter_schema(gpt1_pipeline).model_dump()
    jsonschema.validate({"preset": "cluster", "overrides": ["ingest.source=/x", "pretrain.lr=1e-4"]}, schema)
    for bad in ({"preset": "clusterr"}, {"overrides": ["ingest.source /x"]}, {"overrides": ["=1"]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_make_demo_deploys_exactly_the_local_pools_deployments():
    """scripts/services.sh deploys LOCAL_DEPLOYMENTS; a deployment on the local pool left out of it would exist in
    pipelines.yaml but never on the demo's server (and one listed there but on another pool could never run)."""
    listed = re.search(r"^LOCAL_DEPLOYMENTS=\(([^)]*)\)", (REPO / "scripts" / "services.sh").read_text(), re.M)
    assert listed, "LOCAL_DEPLOYMENTS=(...) not found in scripts/services.sh"
    local_pool = {d["name"] for d in DEPLOYMENTS["deployments"] if d["work_pool"]["name"] == "gpt1-local"}
    assert set(listed.group(1).split()) == local_pool
    assert {"smoke", "mini"} <= local_pool
