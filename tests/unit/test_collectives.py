"""The cluster's first check (gpt1.runtime.collectives) in one process: a one-rank gloo group, the values checked,
a corrupted collective named by rank and collective. Its multi-rank run: tests/integration/test_collectives_torchrun.py."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from gpt1.runtime import collectives


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_healthy_group_reports_each_collective(one_rank):
    lines = collectives.check(0, 1, megabytes=1, repeats=2, device=torch.device("cpu"))
    assert [line.split()[0] for line in lines] == ["all_reduce", "broadcast"]
    assert all("bus" in line and "GB/s" in line for line in lines)


def test_a_wrong_value_names_the_rank_and_the_collective(one_rank, monkeypatch):
    real = dist.all_reduce

    def corrupting(tensor, *args, **kwargs):
        out = real(tensor, *args, **kwargs)
        if tensor.numel() > 1:  # the payload, not the error count
            tensor[-1] += 1
        return out

    monkeypatch.setattr(collectives.dist, "all_reduce", corrupting)
    with pytest.raises(ValueError, match=r"rank 0: all_reduce gave values in \[1.0, 2.0\], expected 1.0"):
        collectives.check(0, 1, megabytes=1, repeats=1, device=torch.device("cpu"))


@pytest.mark.parametrize("world", [2, 8, 64])
def test_bus_bandwidth_is_nccl_tests_definition(world):
    assert collectives.bus_bytes("all_reduce", 1000, world) == pytest.approx(2000 * (world - 1) / world)
    assert collectives.bus_bytes("broadcast", 1000, world) == 1000


def test_bad_arguments_are_refused_before_any_group_starts(capsys):
    with pytest.raises(SystemExit) as exit:
        collectives.main(["--megabytes", "0"])
    assert exit.value.code == 2 and "--megabytes" in capsys.readouterr().err
