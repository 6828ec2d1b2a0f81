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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

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

__all__ = ["KnowledgeSwapConfig", "KnowledgeSwapper", "SwapHistory", "frozen_norm_layers"]

Strategy = Literal["learn_then_forget", "forget_then_learn", "simultaneous"]
OptimizerName = Literal["adamw", "adam", "sgd"]
Schedule = Literal["cosine", "constant"]
ScheduleStep = Literal["epoch", "iteration"]
STRATEGIES = get_args(Strategy)
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
            stacklevel=5,  # the caller of KnowledgeSwapper.fit (via _Fit.stage and .streams)
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


def _check_choices(strategy: Any, optimizer: Any, schedule: Any, schedule_step: Any) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if optimizer not in ("adamw", "adam", "sgd"):
        raise ValueError(f"optimizer must be 'adamw', 'adam' or 'sgd', got {optimizer!r}")
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"schedule must be 'cosine' or 'constant', got {schedule!r}")
    if schedule_step not in ("epoch", "iteration"):
        raise ValueError(f"schedule_step must be 'epoch' or 'iteration', got {schedule_step!r}")


@dataclass(frozen=True)
class KnowledgeSwapConfig:
    """The hyper-parameters of :class:`KnowledgeSwapper`, checked when made (the same checks and
    messages as the swapper's keywords; numbers become Python ``int``/``float``). The defaults
    are the official classification ones (docs/knowledge_swap.md, "Use it"); the fields are the
    swapper's keywords of the same names, documented there. ``dataclasses.replace`` gives a
    changed copy, checked again."""

    strategy: Strategy = "learn_then_forget"
    epochs_per_stage: int = 5
    lr: float = 1e-2
    weight_decay: float = 0.05
    optimizer: OptimizerName = "adamw"
    schedule: Schedule = "cosine"
    min_lr: float = 1e-5
    beta_retain: float = 0.2
    beta_forget: float = 0.2
    alpha: float = 0.005
    bnd: float = 105.0
    w_learn: float = 1.0
    merge_learn_into_retain: bool = True
    steps_per_epoch: int | None = None
    batch_size: int = 80
    schedule_step: ScheduleStep = "epoch"
    seed: int = 0
    grad_clip: float | None = None
    train_head: bool = False
    n_old: int | None = None
    norm_eval: bool = True

    def __post_init__(self) -> None:
        _check_choices(self.strategy, self.optimizer, self.schedule, self.schedule_step)

        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        # bnd > 0: otherwise the forget loss is identically 0
        put("bnd", as_real("bnd", self.bnd, low=0, low_open=True))
        for name in ("beta_retain", "beta_forget", "alpha", "w_learn"):
            put(name, as_real(name, getattr(self, name), low=0))
        put("epochs_per_stage", as_int("epochs_per_stage", self.epochs_per_stage, 1))
        if self.steps_per_epoch is not None:
            put("steps_per_epoch", as_int("steps_per_epoch", self.steps_per_epoch, 1))
        put("batch_size", as_int("batch_size", self.batch_size, 1))
        put("seed", as_int("seed", self.seed))
        put("weight_decay", as_real("weight_decay", self.weight_decay, low=0))
        put("lr", as_real("lr", self.lr, low=0, low_open=True))
        put("min_lr", as_real("min_lr", self.min_lr, low=0))
        if self.min_lr > self.lr:  # the cosine schedule's floor; its default is 1e-5
            raise ValueError(
                f"min_lr={self.min_lr} is above lr={self.lr}: the cosine schedule decays from lr "
                f"to min_lr, so min_lr must be in [0, lr] (set min_lr too when lr < 1e-5)"
            )
        if self.grad_clip is not None:
            put("grad_clip", as_real("grad_clip", self.grad_clip, low=0, low_open=True))
        if self.n_old is not None:
            put("n_old", as_int("n_old", self.n_old, 0))
        for name in ("merge_learn_into_retain", "train_head", "norm_eval"):
            put(name, as_bool(name, getattr(self, name)))


_DEFAULTS = KnowledgeSwapConfig()


def _one_config(config: KnowledgeSwapConfig, given: KnowledgeSwapConfig) -> KnowledgeSwapConfig:
    """``config``, unless a keyword of the swapper (``given``) differs from both its default and
    ``config``'s value: a keyword left at its default defers to ``config``."""
    clash = [
        f.name
        for f in fields(KnowledgeSwapConfig)
        if getattr(given, f.name) != getattr(_DEFAULTS, f.name)
        and getattr(given, f.name) != getattr(config, f.name)
    ]
    if clash:
        raise TypeError(
            "KnowledgeSwapper got config= and keywords that differ from it: "
            + ", ".join(
                f"{n}={getattr(given, n)!r} (config.{n}={getattr(config, n)!r})" for n in clash
            )
            + "; give each hyper-parameter once, in the config (dataclasses.replace(config, "
            "...)) or as a keyword"
        )
    return config


def _train_new_rows(head: nn.Linear | None, n_old: int | None) -> None:
    """Let ``head``'s rows ``>= n_old`` (weight and bias) train; the gradient of the old rows is
    masked to 0."""
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


def _optimizer(
    config: KnowledgeSwapConfig, params: list[nn.Parameter], head_params: list[nn.Parameter]
) -> torch.optim.Optimizer:
    """The one optimiser of every stage: weight decay on the LoRA matrices only."""
    # the head gets no weight decay: decay would move the frozen old rows despite the mask
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2] + head_params
    pg = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if config.optimizer == "adamw":
        return torch.optim.AdamW(pg, lr=config.lr, eps=1e-8)
    if config.optimizer == "adam":
        return torch.optim.Adam(pg, lr=config.lr, eps=1e-8)
    return torch.optim.SGD(pg, lr=config.lr, momentum=0.9)


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
        config: the hyper-parameters as one :class:`KnowledgeSwapConfig` (keyword only), in
            place of the keywords of the same names; a keyword that differs from both its
            default and the config's value is refused (``TypeError``). ``swapper.config`` is
            the configuration the swapper was built with, whichever way it was given.
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
        *,
        config: KnowledgeSwapConfig | None = None,
    ) -> None:
        args = locals()  # every hyper-parameter keyword is the config field of the same name
        if config is not None and not isinstance(config, KnowledgeSwapConfig):
            raise TypeError(f"config must be a KnowledgeSwapConfig, got {type(config).__name__}")
        _check_choices(strategy, optimizer, schedule, schedule_step)
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        given = KnowledgeSwapConfig(**{f.name: args[f.name] for f in fields(KnowledgeSwapConfig)})
        cfg = self.config = given if config is None else _one_config(config, given)
        self.model = model
        self.groups = [list(g) for g in (groups if groups is not None else lora_groups(model))]
        params = [p for g in self.groups for p in g]
        if not params:
            raise ValueError(
                "no trainable LoRA parameters found: inject LoRA (or pass groups) first"
            )
        for p in params:
            p.requires_grad_(True)
        self.head, self.n_old, self.train_head = head, cfg.n_old, cfg.train_head
        if cfg.train_head:
            _train_new_rows(head, cfg.n_old)
        self.optimizer = _optimizer(cfg, params, list(head.parameters()) if cfg.train_head else [])
        self._adopt(cfg)
        self.callbacks = list(callbacks)
        self.history = SwapHistory()
        self.acc_f_before: float | None = None
        self.accelerator = resolve_accelerator(accelerator)
        self._train_model: nn.Module = model  # the DDP wrapper once an accelerator prepared it
        self._prepared = False

    def _adopt(self, cfg: KnowledgeSwapConfig) -> None:
        """The hyper-parameters :meth:`fit` reads, as attributes (which may be changed before
        ``fit``; ``self.config`` stays as the swapper was built)."""
        self.strategy, self.epochs, self.lr, self.min_lr = (
            cfg.strategy,
            cfg.epochs_per_stage,
            cfg.lr,
            cfg.min_lr,
        )
        self.schedule, self.schedule_step = cfg.schedule, cfg.schedule_step
        self.weights = {
            n: getattr(cfg, n) for n in ("beta_retain", "beta_forget", "alpha", "bnd", "w_learn")
        }
        self.merge, self.steps_per_epoch, self.batch_size = (
            cfg.merge_learn_into_retain,
            cfg.steps_per_epoch,
            cfg.batch_size,
        )
        self.seed, self.grad_clip, self.norm_eval = cfg.seed, cfg.grad_clip, cfg.norm_eval

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
                stacklevel=4,  # the caller of fit (via _Fit.start)
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
        run = _Fit.start(self, retain, forget, learn)
        self._prepare()
        run.check_outputs()
        if run.f is not None:
            ref = forget_test if forget_test is not None else run.forget
            self.acc_f_before = accuracy_on(self.model, ref, name="forget")
        for stage in self.stage_plan(run.f is not None, run.lrn is not None):
            run.stage(stage)
        self.model.eval()
        return self.history

    def _prepare(self) -> None:
        """With an accelerator, once: prepare the model (DDP) and the optimiser."""
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


_Batch = tuple[Tensor, Tensor]


@dataclass
class _Fit:
    """One call of :meth:`KnowledgeSwapper.fit`: the data as the user gave it (a DataLoader's
    settings are kept), the same data as checked ``(inputs, label)`` items, and the state the
    stages share: the seeded generator every stream draws from, the label sets read up front
    (None where they cannot be), the labels seen batch by batch, and the global step."""

    sw: KnowledgeSwapper
    retain: Data
    forget: Data
    learn: Data
    r: _TensorItems
    f: _TensorItems | None
    lrn: _TensorItems | None
    sets: dict[str, set[int] | None]
    g: torch.Generator
    seen: dict[str, set[int]]
    step: int = 0

    # -- before any parameter changes --------------------------------------------------------------
    @classmethod
    def start(cls, sw: KnowledgeSwapper, retain: Data, forget: Data, learn: Data) -> _Fit:
        """Convert and check the three data sets; an empty forget (or learn) set is dropped."""
        r = _as_dataset(retain, "retain")
        f = _as_dataset(forget, "forget")
        lrn = _as_dataset(learn, "learn")
        if r is None or len(r) == 0:
            raise ValueError("the retain data is required and must not be empty")
        if f is not None and len(f) == 0:
            warnings.warn(
                "the forget data is empty: only learning runs",
                UserWarning,
                stacklevel=3,  # the caller of fit
            )
            f = forget = None
        if lrn is not None and len(lrn) == 0:
            warnings.warn(
                "the learn data is empty: only forgetting runs",
                UserWarning,
                stacklevel=3,  # the caller of fit
            )
            lrn = learn = None
        sets = sw._check(r, f, lrn)
        # every item in one form, checked here: nothing may fail after a stage changed the model
        r, f, lrn = (
            None if ds is None else _TensorItems(ds, name)
            for ds, name in ((r, "retain"), (f, "forget"), (lrn, "learn"))
        )
        sw._preflight(retain, learn, r, f, lrn)
        return cls(
            sw=sw,
            retain=retain,
            forget=forget,
            learn=learn,
            r=r,
            f=f,
            lrn=lrn,
            sets=sets,
            g=torch.Generator().manual_seed(sw.seed),
            seen={k: set(v) if v is not None else set() for k, v in sets.items()},
        )

    def check_outputs(self) -> None:
        """Read the model's number of outputs (``sw._n_out``) on one retain item; every label
        read up front must be one of them."""
        sw = self.sw
        with torch.no_grad():
            sw.model.eval()
            x, _ = sw._to(next(iter(DataLoader(self.r, batch_size=1))), "retain")
            sw._n_out = sw._logits(x[:1]).shape[-1]
            for name, labels in self.sets.items():
                if labels and (max(labels) >= sw._n_out or min(labels) < 0):
                    bad = max(labels) if max(labels) >= sw._n_out else min(labels)
                    raise ValueError(
                        f"{name} label {bad} is outside the model's {sw._n_out} outputs"
                        + (
                            "; enlarge the classifier with icml25.knowledge_swap.expand_head first"
                            if name == "learn"
                            else ""
                        )
                    )

    # -- one stage -----------------------------------------------------------------------------
    def stage(self, stage: str) -> None:
        """One stage (paper §3): every step draws one batch from the main data and one from each
        auxiliary set; one epoch is one pass over the main data (``steps_per_epoch`` overrides);
        the schedule restarts at each stage (official)."""
        sw = self.sw
        main, merged, aux_forget, aux_learn = self.streams(stage)
        check_equal_lengths(
            sw.accelerator, {"retain": main, "learn": aux_learn, "forget": aux_forget}
        )
        epochs = sw.epochs * (2 if stage == "simultaneous" and sw.strategy == "simultaneous" else 1)
        per_epoch = sw.steps_per_epoch or len(main)
        total = epochs * per_epoch
        for i in range(total):
            progress = (i // per_epoch) / epochs if sw.schedule_step == "epoch" else i / total
            lr = sw._lr_at(progress)
            for group in sw.optimizer.param_groups:
                group["lr"] = lr
            sw._train_mode()
            batches = {
                "retain": sw._to(main.next(), "retain", self.step),
                "forget": sw._to(aux_forget.next(), "forget", self.step) if aux_forget else None,
                "learn": sw._to(aux_learn.next(), "learn", self.step) if aux_learn else None,
            }
            self.check_labels(batches, merged)
            losses = self.losses(stage, batches)
            self.update(stage, losses["total"])
            self.record(stage, lr, losses, batches)
            self.step += 1
        self.end_stage(stage)

    def streams(self, stage: str) -> tuple[_Stream, bool, _Stream | None, _Stream | None]:
        """The stage's main stream (retain; retain + learned in learn-then-forget's forget stage),
        whether it is that merged data, and the forget and learn streams the stage uses."""
        sw, r, lrn, g, acc = self.sw, self.r, self.lrn, self.g, self.sw.accelerator
        retain = self.retain
        merged = (
            stage == "forget"
            and sw.strategy == "learn_then_forget"
            and sw.merge
            and lrn is not None
        )
        # merged: official MergedDataset(retain, learn); a retain DataLoader's own collate
        # function gets the items as the user's data holds them
        if not merged:
            main_src = retain if isinstance(retain, DataLoader) else r
        elif isinstance(retain, DataLoader):
            # keep the user's loader settings
            main_src = _like(retain, ConcatDataset([r.dataset, lrn.dataset]), g)
        else:
            main_src = ConcatDataset([r, lrn])
        main = _Stream(main_src, sw.batch_size, g, acc)
        learn, forget = self.learn, self.forget
        aux_learn = (
            _Stream(learn if isinstance(learn, DataLoader) else lrn, sw.batch_size, g, acc)
            if (lrn is not None and stage in ("learn", "simultaneous"))
            else None
        )
        aux_forget = (
            _Stream(forget if isinstance(forget, DataLoader) else self.f, sw.batch_size, g, acc)
            if (self.f is not None and stage in ("forget", "simultaneous"))
            else None
        )
        return main, bool(merged), aux_forget, aux_learn

    # -- one step ------------------------------------------------------------------------------
    def check_labels(self, batches: dict[str, _Batch | None], merged: bool) -> None:
        """Every batch label must be a model output; the labels of data whose classes could not
        be read up front are collected, and the class sets checked for overlap."""
        sw, step = self.sw, self.step
        for name, bt in batches.items():
            if bt is not None and bt[1].numel():
                lo, hi = int(bt[1].min()), int(bt[1].max())
                if lo < 0 or hi >= sw._n_out:
                    raise ValueError(
                        f"a batch of the {name} data at step {step} has label "
                        f"{hi if hi >= sw._n_out else lo}, outside the model's "
                        f"{sw._n_out} outputs"
                    )
                if self.sets[name] is None and not (name == "retain" and merged):
                    self.seen[name] |= set(bt[1].unique().tolist())
                    sw._overlap(self.seen, step)

    def losses(self, stage: str, batches: dict[str, _Batch | None]) -> dict[str, Tensor]:
        """The stage's loss terms (:func:`~icml25.knowledge_swap.losses.swap_losses`)."""
        sw, net = self.sw, self.sw._train_model
        rb, fb, lb = batches["retain"], batches["forget"], batches["learn"]
        return swap_losses(
            stage,
            retain=(sw._logits(rb[0], net), rb[1]),
            forget=(sw._logits(fb[0], net), fb[1]) if fb else None,
            learn=(sw._logits(lb[0], net), lb[1]) if lb else None,
            l_gs=group_sparse_loss(sw.groups),
            **sw.weights,
            # several processes: means over the global batch, not per process
            **({"cross_entropy": global_cross_entropy} if sw.num_processes > 1 else {}),
        )

    def update(self, stage: str, total_loss: Tensor) -> None:
        """One optimiser step on ``total_loss`` (refused when it is not finite)."""
        sw, acc = self.sw, self.sw.accelerator
        if not bool(torch.isfinite(total_loss)):
            raise FloatingPointError(
                f"the {stage} loss became {float(total_loss)} at step {self.step} (the inputs "
                "were finite): the training diverged; lower lr or set grad_clip"
            )
        sw.optimizer.zero_grad()
        if acc is None:
            total_loss.backward()
        else:
            acc.backward(total_loss)
        if sw.grad_clip is not None:
            clip = torch.nn.utils.clip_grad_norm_ if acc is None else acc.clip_grad_norm_
            clip(
                [p for pg in sw.optimizer.param_groups for p in pg["params"]],
                sw.grad_clip,
            )
        sw.optimizer.step()

    def record(
        self, stage: str, lr: float, losses: dict[str, Tensor], batches: dict[str, _Batch | None]
    ) -> None:
        """The step's history row, and the step event to every callback."""
        sw = self.sw
        rec = {
            "stage": stage,
            "step": self.step,
            "lr": lr,
            **{k: float(v.detach()) for k, v in losses.items()},
        }
        sw.history.steps.append(rec)
        event = {
            "kind": "step",
            **rec,
            # the global batch's labels (every process's, in process order)
            "labels": {
                name: None if bt is None else gather_labels(sw.accelerator, bt[1].detach()).cpu()
                for name, bt in batches.items()
            },
            "optimizer": sw.optimizer,
            "swapper": sw,
        }
        for cb in sw.callbacks:
            cb(event)

    def end_stage(self, stage: str) -> None:
        """The LoRA group norms at the stage's end, to the history and every callback."""
        sw = self.sw
        norms = [math.sqrt(sum(float((p.detach() ** 2).sum()) for p in grp)) for grp in sw.groups]
        sw.history.stage_norms.append((stage, norms))
        for cb in sw.callbacks:
            cb(
                {
                    "kind": "stage_end",
                    "stage": stage,
                    "step": self.step,
                    "norms": norms,
                    "swapper": sw,
                }
            )
