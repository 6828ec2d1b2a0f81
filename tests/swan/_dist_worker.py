"""Two gloo processes on CPU: SWAN(shard_work=True) under DDP, and DTensor-sharded directions.

Run by test_distributed.py as ``python _dist_worker.py PORT``; exits non-zero on any mismatch.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from icml25.swan import SWAN, swan_direction, swan_param_groups
from icml25.swan.distributed import swan_direction_dtensor

D = torch.float64


def model_and_data():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 3)
    ).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 16, 6, dtype=D, generator=g), torch.randn(3, 16, 3, dtype=D, generator=g)
    return model, x, y


def ddp_check(rank: int) -> None:
    model, x, y = model_and_data()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = SWAN(swan_param_groups(model, lr=0.05), shard_work=True, compute_dtype=D)
    for s in range(3):
        opt.zero_grad()
        part = slice(8 * rank, 8 * rank + 8)
        nn.functional.mse_loss(ddp(x[s, part]), y[s, part]).backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(gathered, flat)
    assert torch.equal(gathered[0], gathered[1]), "ranks disagree"
    ref, x, y = model_and_data()
    ropt = SWAN(swan_param_groups(ref, lr=0.05), compute_dtype=D)
    for s in range(3):
        ropt.zero_grad()
        nn.functional.mse_loss(ref(x[s]), y[s]).backward()
        ropt.step()
    flat_ref = torch.cat([p.detach().flatten() for p in ref.parameters()])
    err = float((flat - flat_ref).abs().max())
    assert err <= 1e-6, f"DDP shard_work differs from single process by {err}"


def dtensor_check(rank: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2,))
    g = torch.Generator().manual_seed(2)
    for shape in ((12, 6), (6, 12), (8, 8)):
        G = torch.randn(*shape, dtype=D, generator=g)
        for dim in (0, 1):
            for kw in (
                {"whitening": "svd"},
                {"whitening": "eigh"},
                {"whitening": "ns"},
                {"whitening": "nsds", "ns_steps": 2, "ns_beta": 0.4},
                {"whitening": None},
            ):
                ref = swan_direction(G, compute_dtype=D, **kw)
                dt = distribute_tensor(G, mesh, [Shard(dim)])
                got = swan_direction_dtensor(dt, compute_dtype=D, **kw).full_tensor()
                err = float((got - ref).abs().max())
                assert err <= 1e-10, f"shape {shape}, Shard({dim}), {kw}: error {err}"
            # float64 past float32's range, computed in float32: GradNorm runs in float64
            # first (issue 50; the cast made it inf), so the direction is the unscaled one's
            big = distribute_tensor(G * 1e300, mesh, [Shard(dim)])
            got = swan_direction_dtensor(big, whitening="ns").full_tensor()
            ref = swan_direction_dtensor(distribute_tensor(G, mesh, [Shard(dim)]), whitening="ns")
            assert got.dtype == torch.float32 and bool(torch.isfinite(got).all()), (shape, dim)
            err = float((got - ref.full_tensor()).abs().max())
            assert err <= 1e-5, (shape, dim, err)


def worker(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        ddp_check(rank)
        dtensor_check(rank)
        # both ranks finish before teardown: without it gloo's background threads can outlive
        # the peer and abort one process ("terminate called without an active exception")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Every check passed on this rank. Leave without running interpreter teardown: torch's C++
    # static destructors (gloo/device-mesh threads) abort the process about 1 run in 10 on this
    # machine ("terminate called without an active exception"), *after* destroy_process_group
    # has returned on both ranks. That crash is torch's, not SWAN's; a failed check above still
    # raises and fails the spawn.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    torch.set_num_threads(1)
    mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2, join=True)
    print("distributed checks passed")
