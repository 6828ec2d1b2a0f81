"""Data-parallel knowledge swapping through ``accelerate`` (docs/knowledge_swap.md, "Several GPUs").

:class:`~icml25.knowledge_swap.KnowledgeSwapper` runs its stages in a plain loop; under several
processes an ``accelerate.Accelerator`` prepares the model (DDP), the optimiser and every
DataLoader (each process takes its share of the same seeded batches), and the losses below keep a
step equal to one process on the global batch:

- :func:`global_cross_entropy`: the mean cross-entropy of the global batch, ``sum over all
  processes of per-item terms / total item count`` (not the mean of per-process means, which
  differ when the processes hold unequal counts, e.g. the short last batch of an epoch), scaled so
  that DDP's averaging of the gradients gives the gradient of that global mean. The bounded forget
  term ``relu(BND - CE)`` (paper §3, official ``engine_cl.py``) is then gated on the global
  cross-entropy too.
- :func:`gather_labels`: the labels of the global batch, in process order, for callbacks.
- :func:`check_equal_lengths`: the swapper cycles each stream itself, and ``accelerate``
  synchronises the shuffling generator (a collective) whenever a stream restarts; every process
  must therefore restart its streams at the same step.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["check_equal_lengths", "gather_labels", "global_cross_entropy", "resolve_accelerator"]


def resolve_accelerator(accelerator: Any) -> Any:
    """``accelerator`` checked, or, when it is None, one created from the environment if there
    are several processes (an initialised ``torch.distributed`` group of more than one, or
    ``WORLD_SIZE > 1`` from ``torchrun`` / ``accelerate launch``); None otherwise (the plain
    single-process loop). Without a GPU (or other accelerator device) it is created with
    ``cpu=True``: ``accelerate`` otherwise runs every ``torchrun`` process on its own
    (``DistributedType.NO``), each on the whole data."""
    from icml25.llm.distributed import launched_processes

    launched = launched_processes()
    if accelerator is None and launched <= 1:
        return None
    try:
        from accelerate import Accelerator
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError(
            f"KnowledgeSwapper under {launched} processes needs accelerate: pip install "
            "'icml25[train]' (or run it in one process)"
        ) from exc
    if accelerator is None:
        on_device = (
            torch.accelerator.is_available()
            if hasattr(torch, "accelerator")
            else torch.cuda.is_available()
        )
        accelerator = Accelerator(cpu=not on_device)
    else:
        if not isinstance(accelerator, Accelerator):
            raise TypeError(
                f"accelerator must be an accelerate.Accelerator or None, got "
                f"{type(accelerator).__name__}"
            )
    steps = accelerator.gradient_accumulation_steps
    if steps != 1:
        raise ValueError(
            f"the swapper steps its optimiser on every batch; got an Accelerator with "
            f"gradient_accumulation_steps={steps} (valid: 1; raise the batch size instead)"
        )
    if launched > 1 and accelerator.num_processes == 1:
        warnings.warn(
            f"the launcher started {launched} processes (WORLD_SIZE) but the Accelerator runs "
            "one: every process trains alone on the whole data (on CPU, create it with "
            "Accelerator(cpu=True))",
            UserWarning,
            stacklevel=3,
        )
    return accelerator


def global_cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    """Mean cross-entropy over the global batch of all processes.

    ``logits (N, C)`` and ``target (N,)`` int64 are this process's share (``N`` may differ between
    processes, and may be 0). The value is ``sum_p sum_i CE_pi / sum_p N_p`` on every process;
    the gradient is ``W / sum_p N_p`` times that of this process's sum, so that the average over
    the ``W`` processes that DDP takes is the gradient of the global mean. In one process (no
    initialised group) it is ``F.cross_entropy(logits, target)`` itself."""
    from icml25.llm.distributed import all_reduce_sum, world_size

    w = world_size()
    if w == 1:
        return F.cross_entropy(logits, target)
    local = F.cross_entropy(logits, target, reduction="sum")
    stats = torch.stack(
        [
            local.detach().double(),
            torch.tensor(float(target.numel()), dtype=torch.float64, device=local.device),
        ]
    )
    total, count = all_reduce_sum(stats).unbind()
    if not bool(count > 0):
        raise ValueError("the global batch of a loss term holds no item on any process")
    scaled = local * (w / count.to(local.dtype))
    # value: the global mean (the same on every process); gradient: this process's share
    return scaled + ((total / count).to(local.dtype) - scaled).detach()


def gather_labels(accelerator: Any, labels: Tensor | None) -> Tensor | None:
    """The labels of every process's batch, concatenated in process order (the global batch of
    one process taking ``W`` times the per-process batch); ``labels`` may differ in length.
    Labels are class indices ``>= 0``, so ``-1`` pads the shorter ones across processes."""
    if labels is None or accelerator is None or accelerator.num_processes == 1:
        return labels
    padded = accelerator.pad_across_processes(labels.reshape(-1), dim=0, pad_index=-1)
    every = accelerator.gather(padded)
    return every[every >= 0]


def check_equal_lengths(accelerator: Any, streams: Mapping[str, Any]) -> None:
    """Raise unless every named stream has the same number of batches on every process."""
    if accelerator is None or accelerator.num_processes == 1:
        return
    names = [n for n, s in streams.items() if s is not None]
    mine = torch.tensor([len(streams[n]) for n in names], device=accelerator.device)
    every = accelerator.gather(mine.reshape(1, -1)).reshape(accelerator.num_processes, -1)
    for j, n in enumerate(names):
        counts = every[:, j].tolist()
        if len(set(counts)) > 1:
            raise ValueError(
                f"the {n} data gives {counts} batches on the {len(counts)} processes; every "
                "process must restart its streams at the same step: use the Accelerator's "
                "default even_batches=True, or a data size whose batch count is a multiple "
                "of the number of processes"
            )
