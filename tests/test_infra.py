"""The Prefect deployments file (pipelines.yaml). The infra/ assets themselves: tests/test_infra_assets.py."""

from __future__ import annotations

import inspect

import pytest
import yaml

from tests.conftest import REPO

DEPLOYMENTS = yaml.safe_load((REPO / "pipelines.yaml").read_text())


def _by_name():
    return {d["name"]: d for d in DEPLOYMENTS["deployments"]}


def test_required_deployments_exist():
    names = _by_name()
    for required in ("full", "smoke", "ablation-no-pretrain", "ablation-no-aux-lm", "ablation-transfer-6", "gpu",
                     "from-checkpoint"):
        assert required in names
    full = names["full"]
    assert full["parameters"]["preset"] == "paper"
    assert full["schedules"][0]["cron"] and full["schedules"][0]["active"] is False
    assert names["smoke"]["work_pool"]["name"] == "gpt1-local"
    assert full["work_pool"]["name"] == "gpt1-gpu"


@pytest.mark.parametrize("name", [d["name"] for d in DEPLOYMENTS["deployments"]])
def test_entrypoints_load_and_parameters_fit(name, monkeypatch):
    from prefect.flows import load_flow_from_entrypoint

    from gpt1.config import load_config

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
    assert flows == {"gpt1", "gpt1-finetune", "gpt1-finetune-all"}
