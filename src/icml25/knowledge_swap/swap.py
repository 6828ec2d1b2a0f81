"""Knowledge swapping: forget user-specified classes, keep the rest, learn new ones, by training
LoRA parameters only (paper §3; official ``train/exchange_fltf.py`` / ``exchange_fftl.py``).

Strategies: ``"learn_then_forget"`` (the paper's "Learning Before Forgetting"; the forget stage
protects the freshly learned classes by merging them into the retained data), ``"forget_then_learn"``
and ``"simultaneous"`` (one stage, all losses; our ablation baseline). Every stage draws one batch
from its main data (retained, or retained + learned) and one from each auxiliary set per step; one
epoch is one pass over the main data. The same optimiser instance runs through both stages and the
cosine schedule restarts at each stage (official).

Data-parallel: with an ``accelerate.Accelerator`` (given, or created from the environment under
``torchrun`` / ``accelerate launch``) the model, optimiser and DataLoaders are prepared, each
process takes its share of the same seeded batches and the cross-entropy terms are means over the
global batch (:mod:`icml25.knowledge_swap.parallel`), so a step equals one process on the global
batch (docs/knowledge_swap.md, "Several GPUs").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)

from icml25._validate import as_bool, as_int, as_real
from icml25.knowledge_swap._inputs import _int_labels, _logits_of, _targets, _unpack
from icml25.knowledge_swap.lora import lora_groups
from icml25.knowledge_swap.losses import group_sparse_loss, swap_losses
from icml25.knowledge_swap.metrics import accuracy_on, swap_metrics
from icml25.knowledge_swap.parallel import (
    check_equal_lengths,
    gather_labels,
    global_cross_entropy,
    resolve_accelerator,
)

__all__ = ["KnowledgeSwapper", "SwapHistory", "frozen_norm_layers"]

STRATEGIES = ("learn_then_forget", "forget_then_learn", "simultaneous")
Data = Dataset | DataLoader | tuple[Tensor, Tensor] | None


@dataclass
class SwapHistory:
    """Per step: stage, step (global), lr and the loss terms; per stage end: the LoRA group norms."""

    steps: list[dict] = field(default_factory=list)
    stage_norms: list[tuple[str, list[float]]] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)


def _as_dataset(data, name: str = "data") -> Dataset | None:
    if data is None:
        return None
    if isinstance(data, DataLoader):
        return data.dataset
    if isinstance(data, tuple):
        if len(data) != 2:
            raise ValueError(f"the {name} tuple must be (inputs, labels), got {len(data)} elements")
        x, y = torch.as_tensor(data[0]), torch.as_tensor(data[1])
        if len(x) != len(y):
            raise ValueError(f"the {name} inputs and labels differ in length: {len(x)} vs {len(y)}")
        return TensorDataset(x, _int_labels(y, name))
    if isinstance(data, (list, str, bytes)) or (
        not isinstance(data, Dataset) and not hasattr(data, "__getitem__")
    ):
        raise TypeError(
            f"the {name} data must be a Dataset, a DataLoader or (inputs, labels) tensors, "
            f"got {type(data).__name__}"
        )
    return data


def _labels(ds: Dataset | None, name: str = "data") -> set[int] | None:
    """The label set when it can be read cheaply (see :func:`_targets`), else None."""
    if ds is None:
        return set()
    t = _targets(ds)
    return None if t is None else set(_int_labels(t, name).unique().tolist())


class _TensorItems(Dataset):
    """``dataset``'s items as ``(inputs, label)`` tensors (the label an int64 scalar), whatever
    form they come in (tuples with a plain ``int`` label as torchvision gives, numpy arrays, dicts
    with input and label keys): the retain + learn data of the forget stage concatenates two
    datasets, and ``default_collate`` cannot stack a tensor label with an ``int`` one."""

    def __init__(self, dataset: Dataset, name: str) -> None:
        self.dataset, self.name = dataset, name

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        x, y = _unpack(self.dataset[i], self.name)
        try:
            x, y = torch.as_tensor(x), torch.as_tensor(y)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(
                f"item {i} of the {self.name} data must hold a tensor-like input and an integer "
                f"label, got {type(x).__name__} and {y!r:.60} ({exc})"
            ) from None
        if y.ndim != 0:
            raise ValueError(
                f"item {i} of the {self.name} data has a label of shape {tuple(y.shape)}; "
                "one class index per item is needed"
            )
        return x, _int_labels(y, self.name)


def _like(loader: DataLoader, dataset: Dataset, generator: torch.Generator) -> DataLoader:
    """A shuffled DataLoader over ``dataset`` (the retain + learned data of the forget stage) with
    the user's ``loader``'s batch size, collate function and worker settings. Always shuffled:
    in order, the learned classes would come last and a short epoch would never show them. A
    custom sampler cannot carry over to the merged data: a warning says so."""
    if not isinstance(loader.sampler, (RandomSampler, SequentialSampler)) or (
        loader.batch_sampler is not None and type(loader.batch_sampler) is not BatchSampler
    ):
        warnings.warn(
            f"the retain DataLoader's {type(loader.sampler).__name__} does not carry over to the "
            "forget stage's retain + learned data, which is drawn shuffled",
            UserWarning,
            stacklevel=3,
        )
    return DataLoader(
        dataset,
        batch_size=loader.batch_size,
        shuffle=True,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        persistent_workers=loader.persistent_workers if loader.num_workers > 0 else False,
        generator=generator,
    )


_NORMS = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)


def frozen_norm_layers(model: nn.Module, trained=None) -> list[nn.Module]:
    """The BatchNorm/InstanceNorm layers whose own parameters do not train (or that have none):
    in ``train()`` they would still update their running statistics. ``trained``: the parameters
    that do train (e.g. a swapper's LoRA matrices); default: those with ``requires_grad``."""
    ids = None if trained is None else {id(p) for p in trained}

    def trains(p) -> bool:
        return p.requires_grad if ids is None else id(p) in ids

    return [
        m
        for m in model.modules()
        if isinstance(m, _NORMS) and not any(trains(p) for p in m.parameters(recurse=False))
    ]


class _Stream:
    """Endless batches from a DataLoader (cycled) or a dataset (shuffled, cycled); with an
    ``accelerator``, its prepared DataLoader (this process's share of every batch)."""

    def __init__(
        self, data, batch_size: int, generator: torch.Generator, accelerator: Any = None
    ) -> None:
        if isinstance(data, DataLoader):
            self.loader = data
        else:
            self.loader = DataLoader(
                data, batch_size=batch_size, shuffle=True, generator=generator, drop_last=False
            )
        if accelerator is not None:
            self.loader = accelerator.prepare_data_loader(self.loader)
        self._it: Iterator | None = None

    def __len__(self) -> int:
        return len(self.loader)

    def next(self):
        if self._it is None:
            self._it = iter(self.loader)
        try:
            return next(self._it)
        except StopIteration:
            self._it = iter(self.loader)
            return next(self._it)


class KnowledgeSwapper:
    """Train a LoRA-wrapped classifier to forget, retain and learn classes.

    Args:
        model: any ``nn.Module`` returning logits (or a tuple whose first element is the logits)
            with LoRA layers injected (:func:`~icml25.lora.inject_lora`, or PEFT).
        groups: LoRA parameter groups for the group-sparse loss (default: one per block).
        strategy: ``"learn_then_forget"`` (paper), ``"forget_then_learn"``, ``"simultaneous"``.
        epochs_per_stage, lr, weight_decay, min_lr: the optimiser schedule (official 5 epochs,
            lr 1e-2, weight decay 0.05 on matrices, min_lr 1e-5).
        schedule, schedule_step: ``"cosine"`` or ``"constant"``, stepped per ``"epoch"``
            (official) or per ``"iteration"``.
        beta_retain, beta_forget, alpha, bnd, w_learn: loss weights (0.2, 0.2, 0.005, 105, 1).
        merge_learn_into_retain: protect learned classes in learn-then-forget's forget stage (True).
        steps_per_epoch: overrides "one pass over the main data". batch_size: for datasets/tensors
            (official 80). grad_clip: max gradient norm (None). train_head, head, n_old: train the
            head rows of the new classes too (our extension; the official code freezes the head):
            ``head`` is the classifier ``nn.Linear`` whose rows ``>= n_old`` may change.
        callbacks: ``cb(event: dict)`` after every step (``event["kind"] == "step"``) and at every
            stage end (``"stage_end"``); a step event carries the stage, global step, lr, losses,
            the batch labels and the optimiser.
        norm_eval: keep the BatchNorm/InstanceNorm layers whose parameters are frozen in
            ``eval()`` while training (True), so the frozen backbone's running statistics do not
            drift with the forget and learn batches; False trains them in ``train()`` mode like
            the rest of the model (what the official code does on its LayerNorm-only ViTs, where
            the two are the same).
        accelerator: an ``accelerate.Accelerator`` for data-parallel training: it prepares the
            model (DDP), the optimiser and the DataLoaders (batch sizes are per process, so the
            global batch is ``num_processes`` times ``batch_size``), and the loss terms are
            global-batch means. None: created from the environment when there are several
            processes (``torchrun``, ``accelerate launch``: ``WORLD_SIZE > 1``, or an
            initialised ``torch.distributed`` group of more than one), else the plain
            single-process loop. Its ``gradient_accumulation_steps`` must be 1.
    """

    def __init__(
        self,
        model: nn.Module,
        groups: Sequence[Sequence[nn.Parameter]] | None = None,
        strategy: str = "learn_then_forget",
        epochs_per_stage: int = 5,
        lr: float = 1e-2,
        weight_decay: float = 0.05,
        optimizer: str = "adamw",
        schedule: str = "cosine",
        min_lr: float = 1e-5,
        beta_retain: float = 0.2,
        beta_forget: float = 0.2,
        alpha: float = 0.005,
        bnd: float = 105.0,
        w_learn: float = 1.0,
        merge_learn_into_retain: bool = True,
        steps_per_epoch: int | None = None,
        batch_size: int = 80,
        schedule_step: str = "epoch",
        seed: int = 0,
        callbacks: Sequence[Callable[[dict], None]] = (),
        grad_clip: float | None = None,
        train_head: bool = False,
        head: nn.Linear | None = None,
        n_old: int | None = None,
        norm_eval: bool = True,
        accelerator: Any = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if optimizer not in ("adamw", "adam", "sgd"):
            raise ValueError(f"optimizer must be 'adamw', 'adam' or 'sgd', got {optimizer!r}")
        if schedule not in ("cosine", "constant"):
            raise ValueError(f"schedule must be 'cosine' or 'constant', got {schedule!r}")
        if schedule_step not in ("epoch", "iteration"):
            raise ValueError(f"schedule_step must be 'epoch' or 'iteration', got {schedule_step!r}")
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        # bnd > 0: otherwise the forget loss is identically 0
        bnd = as_real("bnd", bnd, low=0, low_open=True)
        beta_retain, beta_forget, alpha, w_learn = (
            as_real(name, v, low=0)
            for name, v in (
                ("beta_retain", beta_retain),
                ("beta_forget", beta_forget),
                ("alpha", alpha),
                ("w_learn", w_learn),
            )
        )
        epochs_per_stage = as_int("epochs_per_stage", epochs_per_stage, 1)
        if steps_per_epoch is not None:
            steps_per_epoch = as_int("steps_per_epoch", steps_per_epoch, 1)
        batch_size = as_int("batch_size", batch_size, 1)
        seed = as_int("seed", seed)
        weight_decay = as_real("weight_decay", weight_decay, low=0)
        lr = as_real("lr", lr, low=0, low_open=True)
        min_lr = as_real("min_lr", min_lr, low=0, high=lr)
        if grad_clip is not None:
            grad_clip = as_real("grad_clip", grad_clip, low=0, low_open=True)
        if n_old is not None:
            n_old = as_int("n_old", n_old, 0)
        merge_learn_into_retain = as_bool("merge_learn_into_retain", merge_learn_into_retain)
        train_head, norm_eval = as_bool("train_head", train_head), as_bool("norm_eval", norm_eval)
        self.model = model
        self.groups = [list(g) for g in (groups if groups is not None else lora_groups(model))]
        params = [p for g in self.groups for p in g]
        if not params:
            raise ValueError(
                "no trainable LoRA parameters found: inject LoRA (or pass groups) first"
            )
        for p in params:
            p.requires_grad_(True)
        self.head, self.n_old, self.train_head = head, n_old, train_head
        if train_head:
            if head is None or n_old is None:
                raise ValueError("train_head=True needs head (the nn.Linear) and n_old")
            head.weight.requires_grad_(True)
            if head.bias is not None:
                head.bias.requires_grad_(True)
            mask = torch.zeros_like(head.weight)
            mask[n_old:] = 1
            # .to: an Accelerator may move the model after the masks were made
            head.weight.register_hook(lambda g, m=mask: g * m.to(g.device))
            if head.bias is not None:
                bmask = torch.zeros_like(head.bias)
                bmask[n_old:] = 1
                head.bias.register_hook(lambda g, m=bmask: g * m.to(g.device))
        head_params = list(head.parameters()) if train_head else []
        # the head gets no weight decay: decay would move the frozen old rows despite the mask
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2] + head_params
        pg = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        if optimizer == "adamw":
            self.optimizer = torch.optim.AdamW(pg, lr=lr, eps=1e-8)
        elif optimizer == "adam":
            self.optimizer = torch.optim.Adam(pg, lr=lr, eps=1e-8)
        else:
            self.optimizer = torch.optim.SGD(pg, lr=lr, momentum=0.9)
        self.strategy, self.epochs, self.lr, self.min_lr = strategy, epochs_per_stage, lr, min_lr
        self.schedule, self.schedule_step = schedule, schedule_step
        self.weights = dict(
            beta_retain=beta_retain, beta_forget=beta_forget, alpha=alpha, bnd=bnd, w_learn=w_learn
        )
        self.merge, self.steps_per_epoch, self.batch_size = (
            merge_learn_into_retain,
            steps_per_epoch,
            batch_size,
        )
        self.seed, self.callbacks, self.grad_clip = seed, list(callbacks), grad_clip
        self.norm_eval = bool(norm_eval)
        self.history = SwapHistory()
        self.acc_f_before: float | None = None
        self.accelerator = resolve_accelerator(accelerator)
        self._train_model: nn.Module = model  # the DDP wrapper once an accelerator prepared it
        self._prepared = False

    # ------------------------------------------------------------------ helpers
    @property
    def device(self) -> torch.device:
        return next(p for g in self.groups for p in g).device

    @property
    def num_processes(self) -> int:
        return 1 if self.accelerator is None else self.accelerator.num_processes

    def _logits(self, x: Tensor, model: nn.Module | None = None) -> Tensor:
        return _logits_of((self.model if model is None else model)(x))

    def _to(self, batch, name: str = "retain", step: int | None = None) -> tuple[Tensor, Tensor]:
        x, y = _unpack(batch, name)
        x, y = torch.as_tensor(x), _int_labels(y, name)
        dtype = next(p for g in self.groups for p in g).dtype
        x = x.to(self.device)
        if x.is_floating_point():
            if not bool(torch.isfinite(x).all()):
                at = "" if step is None else f" at step {step}"
                raise ValueError(
                    f"a batch of the {name} data{at} holds NaN or inf inputs; clean the data "
                    "(this is not a training divergence)"
                )
            x = x.to(dtype)
        return x, y.to(self.device)

    def _trained(self) -> list[nn.Parameter]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _train_mode(self) -> None:
        self._train_model.train()
        if self.norm_eval:  # norm layers this swapper does not train, whatever requires_grad says
            for m in frozen_norm_layers(self.model, self._trained()):
                m.eval()

    def _lr_at(self, progress: float) -> float:
        if self.schedule == "constant":
            return self.lr
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * progress))

    def stage_plan(self, has_forget: bool, has_learn: bool) -> list[str]:
        if self.strategy == "simultaneous":
            return ["simultaneous"]
        order = ["learn", "forget"] if self.strategy == "learn_then_forget" else ["forget", "learn"]
        return [s for s in order if (s == "learn" and has_learn) or (s == "forget" and has_forget)]

    def _check(self, retain, forget, learn) -> dict[str, set[int] | None]:
        if forget is None and learn is None:
            raise ValueError("both the forget and the learn data are empty: nothing to swap")
        sets = {
            "retain": _labels(retain, "retain"),
            "forget": _labels(forget, "forget"),
            "learn": _labels(learn, "learn"),
        }
        unread = [n for n, v in sets.items() if v is None]
        if unread:
            warnings.warn(
                f"the labels of the {', '.join(unread)} data cannot be read without loading every "
                "input (no TensorDataset, `targets`/`labels` attribute, Subset of one or label "
                "column): the retain, forget and learn classes are checked for overlap on the "
                "labels seen batch by batch instead of up front",
                UserWarning,
                stacklevel=3,
            )
        names = list(sets)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if sets[a] is not None and sets[b] is not None and sets[a] & sets[b]:
                    raise ValueError(
                        f"classes {sorted(sets[a] & sets[b])} are in both the {a} and the {b} data; "
                        "the retain, forget and learn class sets must be disjoint"
                    )
        return sets

    def _preflight(self, retain, learn, r, f, lrn) -> None:
        """Convert and collate one item of every data set, and one of the merged retain + learn
        data, as the stages will, before any parameter changes. Items are read by index (no
        sampler or random state is touched); a DataLoader's own ``collate_fn`` is the user's and
        is not called here, unless it is the default one."""
        from torch.utils.data import default_collate

        def probe(name: str, items, collate=default_collate) -> None:
            try:
                self._to(collate(items), name)
            except (TypeError, ValueError, RuntimeError, KeyError, IndexError) as exc:
                kind = TypeError if isinstance(exc, TypeError) else ValueError
                raise kind(
                    f"the {name} data cannot be batched for training ({exc}); nothing was trained"
                ) from exc

        for name, ds in (("retain", r), ("forget", f), ("learn", lrn)):
            if ds is None:
                continue
            probe(name, [ds[0]])
            raw = ds.dataset
            if isinstance(raw, TensorDataset) and raw.tensors[0].is_floating_point():
                # tensors at hand: every input is checked now, not when its batch is drawn
                bad = ~torch.isfinite(raw.tensors[0].reshape(len(raw), -1)).all(-1)
                if bool(bad.any()):
                    raise ValueError(
                        f"the {name} data holds NaN or inf inputs (item "
                        f"{int(bad.nonzero()[0])} and {int(bad.sum()) - 1} more); clean the "
                        "data (nothing was trained)"
                    )
        if self.strategy == "learn_then_forget" and self.merge and lrn is not None:
            merged = "retain + learn (the forget stage's)"
            if not isinstance(retain, DataLoader):
                probe(merged, [r[0], lrn[0]])
            elif retain.collate_fn is default_collate:
                probe(merged, [r.dataset[0], lrn.dataset[0]])

    @staticmethod
    def _overlap(seen: dict[str, set[int]], step: int) -> None:
        names = list(seen)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                both = seen[a] & seen[b]
                if both:
                    raise ValueError(
                        f"classes {sorted(both)} occur in both the {a} and the {b} data (seen by "
                        f"step {step}); the retain, forget and learn class sets must be disjoint"
                    )

    # ------------------------------------------------------------------ training
    def fit(
        self,
        retain: Data,
        forget: Data = None,
        learn: Data = None,
        *,
        forget_test: Data = None,
    ) -> SwapHistory:
        """Run the strategy's stages. Each argument: a Dataset (tensor pairs or dicts with inputs
        and labels per item), a DataLoader (its settings are kept, also for the merged
        retain + learn data of the forget stage) or ``(x, y)`` tensors. An empty forget (or
        learn) set is skipped with a warning. Before training, the forget accuracy is measured
        on ``forget_test`` (default: the forget training data) as ``acc_f_before``, which
        :meth:`evaluate` uses for GS-LoRA's ``h`` (the official code measures it first)."""
        r = _as_dataset(retain, "retain")
        f = _as_dataset(forget, "forget")
        lrn = _as_dataset(learn, "learn")
        if r is None or len(r) == 0:
            raise ValueError("the retain data is required and must not be empty")
        if f is not None and len(f) == 0:
            warnings.warn("the forget data is empty: only learning runs", UserWarning, stacklevel=2)
            f = forget = None
        if lrn is not None and len(lrn) == 0:
            warnings.warn(
                "the learn data is empty: only forgetting runs", UserWarning, stacklevel=2
            )
            lrn = learn = None
        sets = self._check(r, f, lrn)
        # every item in one form, checked here: nothing may fail after a stage changed the model
        r, f, lrn = (
            None if ds is None else _TensorItems(ds, name)
            for ds, name in ((r, "retain"), (f, "forget"), (lrn, "learn"))
        )
        self._preflight(retain, learn, r, f, lrn)
        acc = self.accelerator
        if acc is not None and not self._prepared:
            # parameters the optimiser does not hold never change; frozen, DDP neither computes
            # nor all-reduces their gradients (a backbone after inject_lora alone would be)
            trained = {id(p) for p in self._trained()}
            for p in self.model.parameters():
                if id(p) not in trained:
                    p.requires_grad_(False)
            self._train_model, self.optimizer = acc.prepare(self.model, self.optimizer)
            self._prepared = True
        distributed = self.num_processes > 1
        g = torch.Generator().manual_seed(self.seed)
        with torch.no_grad():
            self.model.eval()
            x, _ = self._to(next(iter(DataLoader(r, batch_size=1))), "retain")
            self._n_out = self._logits(x[:1]).shape[-1]
            for name, labels in sets.items():
                if labels and (max(labels) >= self._n_out or min(labels) < 0):
                    bad = max(labels) if max(labels) >= self._n_out else min(labels)
                    raise ValueError(
                        f"{name} label {bad} is outside the model's {self._n_out} outputs"
                        + (
                            "; enlarge the classifier with icml25.knowledge_swap.expand_head first"
                            if name == "learn"
                            else ""
                        )
                    )
        if f is not None:
            ref = forget_test if forget_test is not None else forget
            self.acc_f_before = accuracy_on(self.model, ref, name="forget")
        seen = {k: set(v) if v is not None else set() for k, v in sets.items()}
        step = 0
        for stage in self.stage_plan(f is not None, lrn is not None):
            main_ds = r
            if (
                stage == "forget"
                and self.strategy == "learn_then_forget"
                and self.merge
                and lrn is not None
            ):
                # official MergedDataset(retain, learn); a retain DataLoader's own collate
                # function gets the items as the user's data holds them
                main_ds = (
                    ConcatDataset([r.dataset, lrn.dataset])
                    if isinstance(retain, DataLoader)
                    else ConcatDataset([r, lrn])
                )
            if main_ds is r:
                main_src = retain if isinstance(retain, DataLoader) else r
            elif isinstance(retain, DataLoader):
                main_src = _like(retain, main_ds, g)  # keep the user's loader settings
            else:
                main_src = main_ds
            main = _Stream(main_src, self.batch_size, g, acc)
            aux_learn = (
                _Stream(learn if isinstance(learn, DataLoader) else lrn, self.batch_size, g, acc)
                if (lrn is not None and stage in ("learn", "simultaneous"))
                else None
            )
            aux_forget = (
                _Stream(forget if isinstance(forget, DataLoader) else f, self.batch_size, g, acc)
                if (f is not None and stage in ("forget", "simultaneous"))
                else None
            )
            check_equal_lengths(acc, {"retain": main, "learn": aux_learn, "forget": aux_forget})
            epochs = self.epochs * (
                2 if stage == "simultaneous" and self.strategy == "simultaneous" else 1
            )
            per_epoch = self.steps_per_epoch or len(main)
            total = epochs * per_epoch
            for i in range(total):
                progress = (i // per_epoch) / epochs if self.schedule_step == "epoch" else i / total
                lr = self._lr_at(progress)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                self._train_mode()
                rb = self._to(main.next(), "retain", step)
                fb = self._to(aux_forget.next(), "forget", step) if aux_forget else None
                lb = self._to(aux_learn.next(), "learn", step) if aux_learn else None
                for name, bt in (("retain", rb), ("forget", fb), ("learn", lb)):
                    if bt is not None and bt[1].numel():
                        lo, hi = int(bt[1].min()), int(bt[1].max())
                        if lo < 0 or hi >= self._n_out:
                            raise ValueError(
                                f"a batch of the {name} data at step {step} has label "
                                f"{hi if hi >= self._n_out else lo}, outside the model's "
                                f"{self._n_out} outputs"
                            )
                        if sets[name] is None and not (name == "retain" and main_ds is not r):
                            seen[name] |= set(bt[1].unique().tolist())
                            self._overlap(seen, step)
                net = self._train_model
                losses = swap_losses(
                    stage,
                    retain=(self._logits(rb[0], net), rb[1]),
                    forget=(self._logits(fb[0], net), fb[1]) if fb else None,
                    learn=(self._logits(lb[0], net), lb[1]) if lb else None,
                    l_gs=group_sparse_loss(self.groups),
                    **self.weights,
                    # several processes: means over the global batch, not per process
                    **({"cross_entropy": global_cross_entropy} if distributed else {}),
                )
                total_loss = losses["total"]
                if not bool(torch.isfinite(total_loss)):
                    raise FloatingPointError(
                        f"the {stage} loss became {float(total_loss)} at step {step} (the inputs "
                        "were finite): the training diverged; lower lr or set grad_clip"
                    )
                self.optimizer.zero_grad()
                if acc is None:
                    total_loss.backward()
                else:
                    acc.backward(total_loss)
                if self.grad_clip is not None:
                    clip = torch.nn.utils.clip_grad_norm_ if acc is None else acc.clip_grad_norm_
                    clip(
                        [p for pg in self.optimizer.param_groups for p in pg["params"]],
                        self.grad_clip,
                    )
                self.optimizer.step()
                rec = {
                    "stage": stage,
                    "step": step,
                    "lr": lr,
                    **{k: float(v.detach()) for k, v in losses.items()},
                }
                self.history.steps.append(rec)
                event = {
                    "kind": "step",
                    **rec,
                    # the global batch's labels (every process's, in process order)
                    "labels": {
                        name: None if bt is None else gather_labels(acc, bt[1].detach()).cpu()
                        for name, bt in (("retain", rb), ("forget", fb), ("learn", lb))
                    },
                    "optimizer": self.optimizer,
                    "swapper": self,
                }
                for cb in self.callbacks:
                    cb(event)
                step += 1
            norms = [
                math.sqrt(sum(float((p.detach() ** 2).sum()) for p in grp)) for grp in self.groups
            ]
            self.history.stage_norms.append((stage, norms))
            for cb in self.callbacks:
                cb(
                    {
                        "kind": "stage_end",
                        "stage": stage,
                        "step": step,
                        "norms": norms,
                        "swapper": self,
                    }
                )
        self.model.eval()
        return self.history

    def save_adapter(self, path: str | Path) -> None:
        """Save the trained adapter with :func:`icml25.lora.save_lora` (a PEFT model: its
        ``save_pretrained`` folder) and, with ``train_head``, the head's ``state_dict`` to
        ``<path>.head.pt``. Under several processes only the main process writes, after every
        process has finished its steps, and every process returns once the files exist;
        :func:`icml25.lora.load_lora` reloads the adapter."""
        from icml25.lora import save_lora

        acc = self.accelerator
        if acc is not None:
            acc.wait_for_everyone()
        if acc is None or acc.is_main_process:
            save_lora(self.model, path)
            if self.train_head:
                torch.save(self.head.state_dict(), f"{path}.head.pt")
        if acc is not None:
            acc.wait_for_everyone()

    @torch.no_grad()
    def evaluate(
        self,
        retain_test: Data,
        forget_test: Data,
        learn_test: Data,
        acc_f_before: float | None = None,
    ) -> dict[str, float]:
        """``acc_r``, ``acc_f``, ``acc_l`` (top-1 %, full logits) and GS-LoRA's ``h``.

        ``h`` needs the forget-set accuracy before the swap: the one :meth:`fit` measured, or
        ``acc_f_before``. Before any ``fit`` and without ``acc_f_before`` (e.g. to measure the
        pretrained model) ``h`` is NaN, with a ``UserWarning`` saying so (docs/knowledge_swap.md)."""
        before = acc_f_before if acc_f_before is not None else self.acc_f_before
        if before is None:
            warnings.warn(
                "KnowledgeSwapper.evaluate: h is NaN: it needs the forget-set accuracy before the "
                "swap, which fit() measures; call fit() first or pass acc_f_before=",
                UserWarning,
                stacklevel=2,
            )
        return swap_metrics(self.model, retain_test, forget_test, learn_test, acc_f_before=before)
