"""An experiment tag written by processes that start together (each flow's preflight, each report's runs view)."""

from __future__ import annotations

import pytest

from gpt1.tracking.logger import tag_experiment


class RacingClient:
    """MLflow on PostgreSQL when another preflight inserted the tag first: the first write fails on the key."""

    def __init__(self, failures: list[str]):
        self.failures, self.tags = failures, {}

    def set_experiment_tag(self, experiment, key, value):
        if self.failures:
            raise RuntimeError(self.failures.pop(0))
        self.tags[key] = value


def test_a_write_that_lost_the_insert_race_is_written_again():
    client = RacingClient(['(psycopg2.errors.UniqueViolation) duplicate key value violates "experiment_tag_pk"'])
    tag_experiment(client, "1", "gpt1.preflight", "smoke")
    assert client.tags == {"gpt1.preflight": "smoke"}


def test_any_other_refusal_is_raised_as_it_was():
    client = RacingClient(["RESOURCE_DOES_NOT_EXIST: no experiment 1"])
    with pytest.raises(RuntimeError, match="RESOURCE_DOES_NOT_EXIST"):
        tag_experiment(client, "1", "gpt1.preflight", "smoke")
    assert client.tags == {}
