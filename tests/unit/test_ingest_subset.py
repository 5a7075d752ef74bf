"""A deterministic subset of a large corpus (ingest.max_documents / ingest.max_chars), streamed, on local copies in
the hub's layouts: a `save_to_disk` folder and a parquet repo folder (data/<split>-00000-of-00001.parquet).
Here the limits' checks; the subsets ingested: tests/integration/test_ingest_subset_runs.py."""

from __future__ import annotations

import json

import pytest

from gpt1.cli import main as cli_main
from gpt1.config import ConfigError, load_config

TEXTS = [f"Document number {i} has {'a few words ' * (1 + i % 7)}in it." for i in range(3000)]


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory):
    path = tmp_path_factory.mktemp("jsonl") / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    return path


@pytest.mark.parametrize("option", ["--max-documents", "--max-chars"])
def test_cli_and_config_refuse_limits_that_are_not_positive(tmp_path, jsonl, capsys, option):
    assert cli_main(["ingest", "--source", str(jsonl), "--out", str(tmp_path / "out"), option, "0"]) == 2
    assert f"argument {option}: must be > 0, got 0" in capsys.readouterr().err
    field = option[2:].replace("-", "_")
    with pytest.raises(ConfigError, match=f"ingest.{field}"):
        load_config("smoke", [f"ingest.{field}=0"])
    assert getattr(load_config("smoke", [f"ingest.{field}=100"]).ingest, field) == 100
