"""KnowledgeSwapper under ``torchrun`` (gloo, CPU): run as ``worker OUT --batch B --aux A``
(per-process batch sizes of the retain data and of the forget / learn data).

Two learn-then-forget swaps on a float64 LoRA MLP; each rank writes its records to
OUT/rank<r>.json. The test runs the same :func:`swap` in one process, without an Accelerator,
with twice the batch sizes, as the reference.

- ``explicit``: ``Accelerator(cpu=True)`` with ``even_batches=False``. The data sizes give every
  stream an even number of per-process batches whose last one is short on one rank only (retain:
  20 items in batches of 6 -> 6 + 6 on rank 0, 6 + 2 on rank 1), so the ranks hold unequal item
  counts at the end of each epoch and a per-rank mean would differ from one process. The retain
  loader's collate_fn records the local batch sizes. Rank 0 then saves the adapter
  (``save_adapter``) and every rank reloads it into a fresh model.
- ``auto``: ``accelerator=None``, so the swapper creates the Accelerator from torchrun's
  environment (default ``even_batches=True``), on data sizes that divide the global batch.

The three sets are DataLoaders with their own seeded generators, so each shuffling generator has
one consumer: accelerate's DataLoaders look one batch ahead, which moves a generator's
end-of-epoch draw earlier, and a generator shared between streams (the swapper's own, for
tensors and datasets) would then shuffle in another order than the plain loop does.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import icml25.lora
from icml25.knowledge_swap import KnowledgeSwapper, inject_lora
from icml25.lora import load_lora, lora_state_dict

EXPLICIT_SIZES = (20, 14, 15)  # uneven last batches: 6 + 2, 4 + 2, 4 + 3, merged 6 + 5
AUTO_SIZES = (24, 16, 24)  # multiples of the global batches 12 and 8 (and merged 48)


class MLP(nn.Module):
    def __init__(self, n_out: int = 6) -> None:
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(4, 16), nn.Linear(16, 16), nn.Linear(16, n_out)

    def forward(self, x):
        return self.head(F.relu(self.fc2(F.relu(self.fc1(x)))))


def base_model() -> MLP:
    torch.manual_seed(0)
    return MLP().double()


def lora_model() -> MLP:
    """LoRA injected, the head left trainable (the docs' recipe without
    mark_only_lora_trainable): under an Accelerator the swapper freezes it before DDP."""
    net = base_model()
    inject_lora(net, ["fc1", "fc2"], r=2, alpha=2.0, init_a=math.sqrt(5))
    return net


def items(classes: list[int], n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.tensor(classes)[torch.arange(n) % len(classes)]
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return x + F.one_hot(y % 4, 4).double() * 2, y


def swap(accelerator, batch: int, aux: int, sizes: tuple[int, int, int], sink: list | None):
    """One learn-then-forget swap (two epochs per stage); returns the swapper and its step
    events. ``sizes``: items of the retain, forget and learn data."""

    def collate(rows):
        if sink is not None:
            sink.append(len(rows))
        return torch.stack([a for a, _ in rows]), torch.stack([b for _, b in rows])

    def loader(classes, n, seed, size, **kw):
        return DataLoader(
            TensorDataset(*items(classes, n, seed)),
            batch_size=size,
            shuffle=True,
            generator=torch.Generator().manual_seed(10 + seed),
            **kw,
        )

    retain = loader([0, 1, 2], sizes[0], 1, batch, collate_fn=collate)
    forget, learn = loader([3], sizes[1], 2, aux), loader([4, 5], sizes[2], 3, aux)
    events: list[dict] = []
    sw = KnowledgeSwapper(
        lora_model(),
        epochs_per_stage=2,
        lr=1e-2,
        callbacks=[events.append],
        accelerator=accelerator,
    )
    sw.init_weights = {k: v.clone() for k, v in lora_state_dict(sw.model).items()}
    sw.fit(retain, forget, learn)
    return sw, [e for e in events if e["kind"] == "step"]


def record(sw, events) -> dict:
    return {
        "losses": [{k: v for k, v in s.items() if k != "stage"} for s in sw.history.steps],
        "stages": [s["stage"] for s in sw.history.steps],
        "labels": [
            {k: None if v is None else v.tolist() for k, v in e["labels"].items()} for e in events
        ],
        "weights": {k: v.flatten().tolist() for k, v in lora_state_dict(sw.model).items()},
        "init_weights": {k: v.flatten().tolist() for k, v in sw.init_weights.items()},
        "requires_grad": sorted(n for n, p in sw.model.named_parameters() if p.requires_grad),
        "num_processes": sw.num_processes,
        "wrapper": type(sw._train_model).__name__,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--aux", type=int, required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    from accelerate import Accelerator, DataLoaderConfiguration

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rec: dict = {"rank": rank, "world": world}

    sw, ev = swap(None, a.batch, a.aux, AUTO_SIZES, None)
    rec["auto"] = record(sw, ev)

    acc = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(even_batches=False))
    sizes: list[int] = []
    sw, ev = swap(acc, a.batch, a.aux, EXPLICIT_SIZES, sizes)
    rec["explicit"] = record(sw, ev)
    rec["explicit"]["local_retain_sizes"] = sizes

    saves = []
    real_save = icml25.lora.save_lora
    icml25.lora.save_lora = lambda *args, **kw: (saves.append(rank), real_save(*args, **kw))
    path = os.path.join(a.out, "adapter.pt")
    sw.save_adapter(path)
    icml25.lora.save_lora = real_save
    rec["saves"] = len(saves)
    fresh = load_lora(base_model(), path)  # rank 1 reads what rank 0 wrote
    x = items([0, 1, 2, 3, 4, 5], 12, 9)[0]
    with torch.no_grad():
        rec["reload_max_diff"] = float((fresh(x) - sw.model(x)).abs().max())

    try:
        KnowledgeSwapper(
            lora_model(), accelerator=Accelerator(cpu=True, gradient_accumulation_steps=2)
        )
    except ValueError as e:
        rec["accumulation_error"] = str(e)
    with open(os.path.join(a.out, f"rank{rank}.json"), "w") as f:
        json.dump(rec, f)


if __name__ == "__main__":
    main()
