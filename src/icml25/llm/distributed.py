"""Losses normalised over the global batch when training runs data-parallel.

Under DDP (and FSDP, DeepSpeed ZeRO) every process computes a loss on its own micro-batch and the
engine averages the gradients over processes. A loss that is a mean over *items* of unequal count
(tokens, weighted pairs) is then a mean of per-process ratios, not the ratio over the global batch:
with weights 1 on one rank and 5 on the other, the heavy pairs get half the step instead of five
sixths. The fix every engine uses (``transformers``' ``num_items_in_batch``,
``average_tokens_across_devices``) is to divide the local *sum* by the global denominator and
multiply by the number of processes, so that the averaged gradient is the gradient of
``sum over all processes and accumulated micro-batches / global count``.

- :func:`world_size`, :func:`all_reduce_sum`: the process count and a detached sum over processes
  (the identity without an initialised process group), for plain loops.
- :func:`launched_processes`, :func:`refuse_several_processes`: a single-process loop started by
  ``torchrun`` or ``accelerate launch`` would train the same batches once per process; it refuses
  to run there and names the entry point that is data-parallel.
- :class:`GlobalBatchNormalisation`: a mixin for ``transformers.Trainer`` subclasses. The Trainer
  calls :meth:`~GlobalBatchNormalisation.loss_denominator` on every micro-batch of an optimiser
  step before the first forward, sums it over the accumulated micro-batches and the processes, and
  passes the total to ``compute_loss`` as ``num_items_in_batch``; ``compute_loss`` returns
  :meth:`~GlobalBatchNormalisation.global_mean` of its local sum. The logged training loss is
  then the global-batch mean too.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GlobalBatchNormalisation",
    "all_reduce_sum",
    "launched_processes",
    "refuse_several_processes",
    "world_size",
]


def world_size() -> int:
    """Number of processes of the default ``torch.distributed`` group (1 when none is set up)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def launched_processes() -> int:
    """The larger of :func:`world_size` and the ``WORLD_SIZE`` that ``torchrun`` and ``accelerate
    launch`` set: under plain ``torchrun`` no process group exists until a trainer creates one."""
    import os

    env = os.environ.get("WORLD_SIZE", "1").strip()
    return max(world_size(), int(env) if env.isdigit() else 1)


def refuse_several_processes(entry: str, scalable: str) -> None:
    """``RuntimeError`` when this process is one of several (:func:`launched_processes` > 1):
    ``entry`` is a single-process loop, and each process would train on the same batches.
    ``scalable`` names the data-parallel entry point to launch instead."""
    n = launched_processes()
    if n > 1:
        raise RuntimeError(
            f"{entry} is a single-process loop, but this is one of {n} processes (torchrun / "
            f"accelerate launch): each would train on the same batches. Launch {scalable} on "
            f"several GPUs, or run {entry} in one process"
        )


def all_reduce_sum(x: Any) -> Any:
    """``x`` (a tensor, detached) summed over all processes; ``x.detach()`` in one process."""
    import torch.distributed as dist

    x = x.detach().clone()
    if world_size() > 1:
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


class GlobalBatchNormalisation:
    """Mixin for a ``transformers.Trainer`` whose loss is ``sum of terms / count``.

    Subclasses define :meth:`loss_denominator` (the count of one collated micro-batch, e.g. its
    token count or its sum of weights) and, in ``compute_loss``, return
    ``self.global_mean(local_sum, num_items_in_batch)`` when ``num_items_in_batch`` is given (a
    training step) and their per-batch mean otherwise (evaluation). Put the mixin before the
    Trainer class in the bases.
    """

    #: the loss returned by compute_loss is already normalised over the accumulated batch
    loss_is_scaled_for_ga = True
    #: a step whose global count is 0 has loss 0 (its summed terms are exact zeros) instead of
    #: being refused; for losses where no counted item means no term at all
    empty_step_is_zero = False

    def loss_denominator(self, batch: dict[str, Any]) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _get_num_items_in_batch(self, batch_samples: list, device: Any) -> Any:
        import torch

        if not batch_samples:
            return None
        total = sum(
            torch.as_tensor(self.loss_denominator(b), dtype=torch.float64).reshape(())
            for b in batch_samples
        ).to(device)
        if self.args.world_size > 1:
            total = self.accelerator.gather(total.reshape(1)).sum()
        if not bool(total > 0):
            if self.empty_step_is_zero:  # every summed term is 0: divide by 1, not by 0
                return torch.ones((), dtype=torch.float64, device=device)
            raise ValueError(
                f"the loss denominator of this optimiser step is {float(total)} over all "
                "processes (no target token, or every weight 0); nothing to average"
            )
        return total

    def global_mean(self, local_sum: Any, num_items_in_batch: Any) -> Any:
        """``local_sum / num_items_in_batch`` times the number of processes: the engines average
        gradients over processes, so the step follows the global-batch mean."""
        import transformers

        loss = local_sum / num_items_in_batch.to(local_sum.dtype) * self.accelerator.num_processes
        # transformers before ``Trainer.loss_is_scaled_for_ga`` divides a loss by the accumulation
        # steps unless the model takes loss kwargs: undo that division there
        if not hasattr(transformers.Trainer, "loss_is_scaled_for_ga") and not getattr(
            self, "model_accepts_loss_kwargs", False
        ):
            loss = loss * self.current_gradient_accumulation_steps
        return loss
