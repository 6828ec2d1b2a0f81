"""SWAN across 2 CPU processes (gloo): DDP work sharding and DTensor directions (tests 16-17)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from icml25.swan.distributed import shard_assignment

WORKER = Path(__file__).with_name("_dist_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in")
def test_ddp_sharded_work_and_dtensor_directions_match_single_process():
    out = subprocess.run(
        [sys.executable, str(WORKER), str(_free_port())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "distributed checks passed" in out.stdout


def test_shard_assignment_balances_sizes():
    params = [torch.empty(n) for n in (100, 10, 60, 50, 5)]
    owners = shard_assignment(params, 2)
    load = [sum(p.numel() for p, o in zip(params, owners) if o == r) for r in range(2)]
    assert sorted(load) == [110, 115]
    assert shard_assignment(params, 1) == [0] * 5
    with pytest.raises(ValueError, match="world_size"):
        shard_assignment(params, 0)
