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
- :func:`check_global_batches`: several processes train the global batches of one process only
  when the rows fill them; it warns where ``accelerate`` would repeat rows to fill the last one
  and refuses a split that would leave the processes with different numbers of batches.
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
    "check_global_batches",
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


def check_global_batches(trainer: Any) -> None:
    """Check that ``trainer``'s processes share its training rows into equal global batches.

    ``accelerate`` shards each global batch of ``W`` processes x ``b`` rows; with its default
    ``even_batches=True`` a last global batch that the rows do not fill is completed with rows
    from the start of the data (as torch's ``DistributedSampler`` pads), so the run then differs
    from one process with batch ``W x b`` in its last step: a ``UserWarning`` says so. With
    ``even_batches=False`` the processes get different numbers of batches unless the batch count
    is a multiple of ``W``; the Trainer then hangs in a collective or trains other rows, so that
    is a ``ValueError``. One process, or a dataset without a length: nothing to check."""
    import math
    import warnings

    world = int(getattr(trainer.args, "world_size", 1) or 1)
    data = getattr(trainer, "train_dataset", None)
    if world <= 1 or data is None:
        return
    try:
        n = len(data)
    except TypeError:  # an iterable dataset: its length is unknown
        return
    b = int(trainer.args.per_device_train_batch_size)
    if getattr(trainer.accelerator, "even_batches", True):
        if n % (world * b):
            warnings.warn(
                f"{n} training rows do not fill the last global batch of {world} processes x {b} "
                f"rows: accelerate (even_batches=True) completes it with "
                f"{world * b - n % (world * b)} rows from the start of the data, so the last "
                f"step differs from one process with batch {world * b}; give a multiple of "
                f"{world * b} rows for an exact match",
                UserWarning,
                stacklevel=3,
            )
        return
    batches = n // b if trainer.args.dataloader_drop_last else math.ceil(n / b)
    if batches % world:
        raise ValueError(
            f"{n} training rows in batches of {b} give {batches} batches, which {world} "
            "processes cannot share with even_batches=False: they would run different numbers "
            "of steps (the Trainer hangs in a collective or trains other rows). Give a row count "
            f"whose batch count is a multiple of {world}, or keep accelerate's default "
            "even_batches=True"
        )


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

    def get_train_dataloader(self) -> Any:
        check_global_batches(self)
        return super().get_train_dataloader()

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
                f"the loss denominator of optimiser step {self.state.global_step + 1} is "
                f"{float(total)} over all processes and accumulated micro-batches: none of its "
                f"rows carries a counted item ({type(self).__name__}.loss_denominator), so it "
                "has no mean; remove such rows or give the step more rows"
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
