"""A plain training loop over the losses of :mod:`icml25.fpo.losses` (FPO, DPO, SimPO, TDPO-1/2,
SFT), for small models and the offline reproduction, in ONE process (it refuses to run as one of
several). Real-scale and multi-GPU runs use :class:`~icml25.fpo.trl_trainer.FPOTrainer` (a TRL
``DPOTrainer``, data-parallel under ``torchrun`` / ``accelerate launch``) with the same losses.

Per step FPO runs ONE policy forward/backward over the chosen+rejected batch, with the residual
stream of block ℓ captured by a hook and encoded by the frozen SAE, and reads the reference from
the offline cache; TDPO runs the reference model online as well (its sequential KL needs full
reference distributions). That is the efficiency claim of paper §3 and Figure 4.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import torch
from torch import nn

from icml25._validate import as_bool, as_int, as_real
from icml25.fpo.cache import ReferenceCache, build_reference_cache
from icml25.fpo.data import PreferenceCollator, as_records
from icml25.fpo.forward import PassOutput, preference_pass
from icml25.fpo.hooks import SITES, resolve_layer
from icml25.fpo.logps import sequential_kl_from_logits
from icml25.fpo.losses import (
    INDEX_MODES,
    POOL_MODES,
    _k,
    dpo_loss,
    fpo_loss,
    simpo_loss,
    tdpo_loss,
)
from icml25.fpo.sae import SparseAutoencoder
from icml25.llm.distributed import refuse_several_processes
from icml25.llm.training import MixedPrecision, dropout_disabled

__all__ = ["METHODS", "History", "PreferenceConfig", "preference_step_loss", "train_preference"]

METHODS = ("fpo", "dpo", "simpo", "tdpo1", "tdpo2", "sft")

# Paper Table 5 (Gemma-2-2B/9B): β, α, γ per method
_TABLE5 = {
    "fpo": {"beta": 0.1, "alpha": 0.5, "gamma": 0.0},
    "dpo": {"beta": 0.1, "alpha": 0.0, "gamma": 0.0},
    "simpo": {"beta": 2.0, "alpha": 0.0, "gamma": 0.5},
    "tdpo1": {"beta": 0.1, "alpha": 0.0, "gamma": 0.0},
    "tdpo2": {"beta": 0.1, "alpha": 0.5, "gamma": 0.0},
    "sft": {"beta": 0.1, "alpha": 0.0, "gamma": 0.0},
}


@dataclass
class PreferenceConfig:
    """Training settings; ``None`` fields take the method's paper value (Table 5).

    ``paper_mode=False`` switches FPO to the official code's choices: the reference model run
    online every step, ``hidden_states`` as the SAE input (``site="hf_hidden_states"``), the
    policy's top-k only and its pooling (``pool="official"``: the codes at the positions shifted
    as the labels are, summed and divided by T - 1; docs/fpo.md, "Official code vs paper").
    """

    method: Literal["fpo", "dpo", "simpo", "tdpo1", "tdpo2", "sft"] = "fpo"
    beta: float | None = None  # Table 5: 0.1 (SimPO 2)
    alpha: float | None = None  # Table 5: 0.5 for FPO and TDPO-2
    gamma: float | None = None  # Table 5: SimPO's 0.5
    k: int = 50  # official code, config/loss/fpo.yaml (Figure 2 plots the top-50)
    layer: int = 25  # paper §4 / Table 3: layer 25 of Gemma-2-2B; set it for your model
    lr: float = 5e-7  # Table 5
    batch_size: int = 32  # Table 5
    epochs: int = 1  # Table 5
    warmup_steps: int = 150  # Table 5: warm-up 150 steps, then constant
    optimizer: Literal["adam", "adamw", "rmsprop"] = "adam"  # Table 5: Adam (2B), RMSprop (9B)
    adam_betas: tuple[float, float] = (0.9, 0.999)  # torch default (official config: 0.9, 0.95)
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # official config
    max_length: int = 1024  # official config
    max_prompt_length: int = 512
    truncation: Literal["keep_end", "keep_start"] = "keep_end"
    # paper text, "average pooling"
    pool: Literal["mean", "sum", "padded_mean", "official"] = "mean"
    index_mode: Literal["union", "policy"] = "union"  # paper Eq. 10
    # the residual output of block ℓ (what Gemma Scope was trained on)
    site: Literal["hook", "hf_hidden_states", "mlp"] = "hook"
    stop_grad_chosen: bool = True  # paper Eq. 11 / Table 3
    paper_mode: bool = True
    seed: int = 0
    # the SAE encode / loss dtype; log-softmax is float32 anyway
    dtype: Literal["float32", "float64", "bfloat16"] = "float32"
    disable_dropout: bool = True  # TRL's DPOConfig default: log-probs without dropout
    log_every: int = 10
    progress: bool | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        d = _TABLE5[self.method]
        uses = {
            "fpo": {"beta", "alpha"},
            "dpo": {"beta"},
            "simpo": {"beta", "gamma"},
            "tdpo1": {"beta"},
            "tdpo2": {"beta", "alpha"},
            "sft": set(),
        }[self.method]
        unused = [
            n
            for n in ("beta", "alpha", "gamma")
            if n not in uses and getattr(self, n) is not None and getattr(self, n) != d[n]
        ]
        if unused:
            warnings.warn(
                f"method {self.method!r} does not use {unused}; they are ignored", stacklevel=3
            )
        for n in ("beta", "alpha", "gamma"):
            if getattr(self, n) is None:
                setattr(self, n, d[n])
        for n in ("beta", "lr"):
            setattr(self, n, as_real(n, getattr(self, n), low=0.0, low_open=True))
        self.alpha = as_real("alpha", self.alpha, low=0.0)  # NaN refused here, not at step 1
        self.gamma = as_real("gamma", self.gamma)
        for n in ("k", "batch_size", "epochs", "max_length", "max_prompt_length"):
            setattr(self, n, as_int(n, getattr(self, n), 1))
        self.warmup_steps = as_int("warmup_steps", self.warmup_steps, 0)
        self.max_grad_norm = as_real(
            "max_grad_norm", self.max_grad_norm, low=0.0, low_open=True, finite=False
        )
        self.weight_decay = as_real("weight_decay", self.weight_decay, low=0.0)
        for n in ("paper_mode", "stop_grad_chosen", "disable_dropout"):
            setattr(self, n, as_bool(n, getattr(self, n)))
        if self.optimizer not in ("adam", "adamw", "rmsprop"):
            raise ValueError(
                f"optimizer must be 'adam', 'adamw' or 'rmsprop', got {self.optimizer!r}"
            )
        if not self.paper_mode:
            self.site, self.index_mode, self.pool = "hf_hidden_states", "policy", "official"
        if self.pool not in POOL_MODES:
            raise ValueError(f"pool must be one of {POOL_MODES}, got {self.pool!r}")
        if self.index_mode not in INDEX_MODES:
            raise ValueError(f"index_mode must be one of {INDEX_MODES}, got {self.index_mode!r}")
        if self.site not in SITES:
            raise ValueError(f"site must be one of {SITES}, got {self.site!r}")
        if self.dtype not in ("float32", "float64", "bfloat16"):
            raise ValueError(
                f"dtype must be 'float32', 'float64' or 'bfloat16', got {self.dtype!r}"
            )

    @property
    def needs_ref_model(self) -> bool:
        """Whether each step runs the reference model (TDPO; FPO in official-code mode)."""
        return self.method in ("tdpo1", "tdpo2") or (self.method == "fpo" and not self.paper_mode)


@dataclass
class History:
    """What a run recorded: per logged step the loss and diagnostics, the optimizer-step times
    (seconds), and ``evals`` from ``eval_fn``."""

    config: dict[str, Any]
    steps: list[dict[str, float]] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    forwards_per_step: float = 0.0


def preference_step_loss(
    policy: nn.Module,
    batch: dict[str, Any],
    cfg: PreferenceConfig,
    *,
    sae: SparseAutoencoder | None = None,
    ref_cache: ReferenceCache | None = None,
    ref_model: nn.Module | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one batch for ``cfg.method`` and its logged diagnostics (one policy forward;
    plus one reference forward for TDPO and official-code FPO)."""
    out = _pass(
        policy, batch, cfg, sae, keep_logits=cfg.method in ("tdpo1", "tdpo2"), role="policy"
    )
    ref, ref_out = _reference_terms(batch, cfg, out.sum.device, sae, ref_cache, ref_model)
    loss, u, logs = _METHOD_LOSSES.get(cfg.method, _sft_terms)(out, ref, ref_out, batch, cfg)
    if not bool(torch.isfinite(loss)):
        raise FloatingPointError(f"{cfg.method} loss is {float(loss)}")
    logs.update(
        loss=float(loss.detach()),
        margin=float(u.detach().mean()),
        acc=float((u.detach() > 0).float().mean()),
    )
    return loss, logs


def _pass(
    model: nn.Module,
    batch: dict[str, Any],
    cfg: PreferenceConfig,
    sae: SparseAutoencoder | None,
    *,
    keep_logits: bool,
    role: str,
) -> PassOutput:
    """One forward of ``model`` over the chosen+rejected batch: response log-probs and, for FPO,
    the pooled SAE codes of block ``cfg.layer`` (encoded in ``cfg.dtype``)."""
    need_codes = cfg.method == "fpo"
    return preference_pass(
        model,
        batch,
        sae=sae if need_codes else None,
        layer=cfg.layer if need_codes else None,
        pool=cfg.pool,
        site=cfg.site,
        keep_logits=keep_logits,
        sae_dtype=getattr(torch, cfg.dtype),
        role=role,
    )


def _reference_terms(
    batch: dict[str, Any],
    cfg: PreferenceConfig,
    dev: torch.device,
    sae: SparseAutoencoder | None,
    ref_cache: ReferenceCache | None,
    ref_model: nn.Module | None,
) -> tuple[dict[str, torch.Tensor], PassOutput | None]:
    """The reference's terms (``ref_sum_*``, ``ref_mean_*``, FPO's ``ref_codes_*``) and, where the
    reference model runs online (TDPO; FPO in official-code mode), its pass; paper-mode FPO and
    DPO read them from the offline cache; SimPO and SFT have none."""
    if cfg.needs_ref_model:
        if ref_model is None:
            raise ValueError(
                f"method {cfg.method!r} (paper_mode={cfg.paper_mode}) runs the reference "
                "model every step: pass ref_model="
            )
        with torch.no_grad():
            ref_out = _pass(
                ref_model,
                batch,
                cfg,
                sae,
                keep_logits=cfg.method != "fpo",
                role="reference model",
            )
        ref: dict[str, torch.Tensor] = {}
        (ref["ref_sum_w"], ref["ref_sum_l"]) = ref_out.halves("sum")
        (ref["ref_mean_w"], ref["ref_mean_l"]) = ref_out.halves("mean")
        if cfg.method == "fpo":
            ref["ref_codes_w"], ref["ref_codes_l"] = ref_out.halves("codes")
        return ref, ref_out
    if cfg.method in ("fpo", "dpo"):
        if ref_cache is None:
            raise ValueError(f"method {cfg.method!r} needs a ReferenceCache (ref_cache=)")
        return ref_cache.batch(batch["index"], dev, fingerprints=batch.get("fingerprint")), None
    return {}, None


# Each method's loss from the policy's pass and the reference's terms: ``(loss, u, logs)``, with
# ``u`` the per-pair margin (positive: chosen preferred) and ``logs`` the method's diagnostics.
_Terms = tuple[torch.Tensor, torch.Tensor, dict[str, float]]


def _fpo_terms(
    out: PassOutput, ref: dict, ref_out: PassOutput | None, batch: dict, cfg: PreferenceConfig
) -> _Terms:
    """FPO (paper Eq. 11): length-normalised log-probs plus the feature-level constraint on the
    SAE codes of block ℓ."""
    if "ref_codes_w" not in ref:
        raise ValueError("the reference cache has no SAE codes (built with sae=None)")
    (mw, ml), (cw, cl) = out.halves("mean"), out.halves("codes")
    o = fpo_loss(
        mw,
        ml,
        ref["ref_mean_w"],
        ref["ref_mean_l"],
        cw,
        cl,
        ref["ref_codes_w"],
        ref["ref_codes_l"],
        beta=cfg.beta,
        alpha=cfg.alpha,
        k=cfg.k,
        index_mode=cfg.index_mode,
        stop_grad_chosen=cfg.stop_grad_chosen,
    )
    return o.loss, o.u, {"d_w": float(o.d_w.detach().mean()), "d_l": float(o.d_l.detach().mean())}


def _dpo_terms(
    out: PassOutput, ref: dict, ref_out: PassOutput | None, batch: dict, cfg: PreferenceConfig
) -> _Terms:
    sw, sl = out.halves("sum")
    loss, _, u = dpo_loss(sw, sl, ref["ref_sum_w"], ref["ref_sum_l"], cfg.beta)
    return loss, u, {}


def _simpo_terms(
    out: PassOutput, ref: dict, ref_out: PassOutput | None, batch: dict, cfg: PreferenceConfig
) -> _Terms:
    mw, ml = out.halves("mean")
    loss, _, u = simpo_loss(mw, ml, cfg.beta, cfg.gamma)
    return loss, u, {}


def _tdpo_terms(
    out: PassOutput, ref: dict, ref_out: PassOutput | None, batch: dict, cfg: PreferenceConfig
) -> _Terms:
    """TDPO-1/2: DPO's margin minus the sequential KL of the policy to the reference model,
    computed from both models' logits on this batch."""
    sw, sl = out.halves("sum")
    labels = batch["labels"].to(out.sum.device)
    kl = sequential_kl_from_logits(out.logits, ref_out.logits, labels)
    n = kl.shape[0] // 2
    loss, _, u = tdpo_loss(
        sw,
        sl,
        ref["ref_sum_w"],
        ref["ref_sum_l"],
        kl[:n],
        kl[n:],
        cfg.beta,
        cfg.alpha,
        version=1 if cfg.method == "tdpo1" else 2,
    )
    return loss, u, {"kl_w": float(kl[:n].detach().mean()), "kl_l": float(kl[n:].detach().mean())}


def _sft_terms(
    out: PassOutput, ref: dict, ref_out: PassOutput | None, batch: dict, cfg: PreferenceConfig
) -> _Terms:
    """SFT on the chosen responses: token-mean NLL (the margin is logged only)."""
    (sw, _), (mw, ml) = out.halves("sum"), out.halves("mean")
    lw = out.length[: out.length.shape[0] // 2].to(sw.dtype)
    return -(sw.sum() / lw.sum()), mw - ml, {}


_METHOD_LOSSES: dict[str, Callable[..., _Terms]] = {
    "fpo": _fpo_terms,
    "dpo": _dpo_terms,
    "simpo": _simpo_terms,
    "tdpo1": _tdpo_terms,
    "tdpo2": _tdpo_terms,
    "sft": _sft_terms,
}


def _data_fingerprint(dataset: Any) -> str:
    import hashlib
    import json

    fp = getattr(dataset, "_fingerprint", None)
    if isinstance(fp, str):  # datasets.Dataset
        return fp
    h = hashlib.sha1()
    for i in range(len(dataset)):
        r = dataset[i]
        h.update(
            json.dumps(
                [r.get(c) for c in ("prompt", "chosen", "rejected", "idx")],
                sort_keys=True,
                default=str,
            ).encode()
        )
    return h.hexdigest()[:16]


def _optimizer(params: list, cfg: PreferenceConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(
            params, lr=cfg.lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay
        )
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(
            params, lr=cfg.lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay
        )
    return torch.optim.RMSprop(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def train_preference(
    policy: nn.Module,
    tokenizer: Any,
    dataset: Any,
    config: PreferenceConfig,
    *,
    ref_model: nn.Module | None = None,
    sae: SparseAutoencoder | None = None,
    ref_cache: ReferenceCache | None = None,
    eval_fn: Callable[[nn.Module], dict[str, Any]] | None = None,
    eval_every: int = 0,
    callback: Callable[[int, nn.Module], Any] | None = None,
    checkpoint: str | os.PathLike | None = None,
    save_every: int = 50,
) -> History:
    """Train ``policy`` in place on preference ``dataset`` (records with TRL's ``prompt`` /
    ``chosen`` / ``rejected``; a list, a ``datasets.Dataset``, or anything
    :func:`~icml25.fpo.data.load_preferences` reads) with ``config.method``.

    FPO needs ``sae`` and a reference: ``ref_cache`` (:func:`build_reference_cache`), or
    ``ref_model``, from which the cache is built before training (then no longer used). DPO uses
    the cache the same way (log-probs only); TDPO runs ``ref_model`` each step; SimPO and SFT need
    no reference. Learning rate: linear warm-up over ``warmup_steps``, then constant (Table 5).

    TRL's conventions: with ``config.disable_dropout`` (default) every policy forward runs with
    dropout off (:func:`~icml25.llm.dropout_disabled`: the policy equals its reference at step 0,
    so DPO's and FPO's first loss is ``log 2``); the reference model runs in eval mode; a
    bf16/fp16 policy trains float32 master weights with the forward under autocast in its own
    dtype (:class:`~icml25.llm.MixedPrecision`), so its trainable parameters are float32 after the
    call (``policy.to(torch.bfloat16)`` before saving restores the checkpoint's size).

    ``checkpoint``: a file; the run saves model, optimizer, RNG and history there every
    ``save_every`` steps and at the end, and a rerun with the same file resumes from it.
    ``eval_fn(model) -> dict`` runs every ``eval_every`` steps and at the end; ``callback(step,
    model)`` after every step. Returns a :class:`History`. The policy is left in eval mode.

    Single process, one device: under ``torchrun`` or ``accelerate launch`` with more than one
    process it raises ``RuntimeError`` (every process would train the same batches). The paper
    trained on 4 GPUs; :class:`~icml25.fpo.trl_trainer.FPOTrainer` is the data-parallel entry
    point (docs/fpo.md, "Several GPUs").
    """
    from icml25.progress import track

    refuse_several_processes(
        "train_preference",
        "icml25.fpo.FPOTrainer (a TRL DPOTrainer, data-parallel under accelerate/torchrun)",
    )
    run = _Run.start(policy, tokenizer, dataset, config, ref_model, sae, ref_cache, checkpoint)
    cfg, total = run.cfg, run.total
    handles = run.count_forwards()
    policy.train()
    disable = None if cfg.progress is None else not cfg.progress
    try:
        for step in track(
            range(run.first, total),
            f"{cfg.method} training",
            total=total - run.first,
            disable=disable,
        ):
            run.step(step)
            if callback is not None:
                callback(step + 1, policy)
            if eval_fn is not None and eval_every and (step + 1) % eval_every == 0:
                policy.eval()
                run.hist.evals.append({"step": step + 1, **eval_fn(policy)})
                policy.train()
            if (step + 1) % save_every == 0:
                run.save(step + 1)
    finally:
        run.close(handles)
    if eval_fn is not None and not (run.hist.evals and run.hist.evals[-1]["step"] == total):
        run.hist.evals.append({"step": total, **eval_fn(policy)})
    run.save(total)
    return run.hist


@dataclass
class _Run:
    """One run of :func:`train_preference`: its checked inputs, the optimisation state (what the
    checkpoint holds) and the steps of an epoch."""

    policy: nn.Module
    dataset: Any  # the records (as_records)
    cfg: PreferenceConfig  # with FPO's layer resolved and k clamped to the SAE's width
    collator: PreferenceCollator
    sae: SparseAutoencoder | None
    ref_cache: ReferenceCache | None
    ref_model: nn.Module | None
    ref_was_training: bool  # the reference model's mode, restored at the end
    checkpoint: str | os.PathLike | None
    data_fp: str | None  # what identifies the training data in a checkpoint
    mp: MixedPrecision
    params: list[nn.Parameter]
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    per_epoch: int  # steps per epoch
    total: int  # steps of the whole run
    orders: list[list[int]]  # one shuffle of the pairs per epoch
    hist: History
    first: int = 0  # the first step this call runs (after a resumed checkpoint's)
    n_fwd: int = 0  # model forwards so far (the efficiency bookkeeping of paper §3)

    # -- setting up ------------------------------------------------------------------------------
    @classmethod
    def start(
        cls, policy, tokenizer, dataset, config, ref_model, sae, ref_cache, checkpoint
    ) -> _Run:
        """Check the inputs, freeze the SAE, get the reference ready (the offline cache, or the
        reference model in eval mode), set up the optimiser and resume from the checkpoint."""
        cfg, dataset = _checked_inputs(policy, dataset, config, ref_model)
        collator = PreferenceCollator(
            tokenizer,
            max_length=cfg.max_length,
            max_prompt_length=cfg.max_prompt_length,
            truncation=cfg.truncation,
        )
        dev = next(policy.parameters()).device
        if cfg.method == "fpo":
            sae, cfg = _frozen_sae(policy, sae, cfg, dev)
        ref_cache = _reference_cache(cfg, dataset, collator, sae, ref_cache, ref_model)
        ref_was_training = ref_model.training if ref_model is not None else False
        if cfg.needs_ref_model:
            if ref_model is None:
                raise ValueError(
                    f"method {cfg.method!r} runs the reference model each step: pass ref_model="
                )
            ref_model.eval()  # run under no_grad; restored at the end
        _warn_identical(dataset, stacklevel=4)  # at the caller of train_preference
        mp, params, opt, sched = _optimisation(policy, cfg)
        per_epoch = math.ceil(len(dataset) / cfg.batch_size)
        gen = torch.Generator().manual_seed(cfg.seed)
        orders = [torch.randperm(len(dataset), generator=gen).tolist() for _ in range(cfg.epochs)]
        hist = History(config=asdict(cfg))
        run = cls(
            policy=policy,
            dataset=dataset,
            cfg=cfg,
            collator=collator,
            sae=sae,
            ref_cache=ref_cache,
            ref_model=ref_model,
            ref_was_training=ref_was_training,
            checkpoint=checkpoint,
            data_fp=_data_fingerprint(dataset) if checkpoint is not None else None,
            mp=mp,
            params=params,
            opt=opt,
            sched=sched,
            per_epoch=per_epoch,
            total=per_epoch * cfg.epochs,
            orders=orders,
            hist=hist,
        )
        run.resume(dev)
        return run

    def resume(self, dev: torch.device) -> None:
        """Load model, optimizer, scheduler, step and history from the checkpoint, if there is
        one; a checkpoint of another config or other training data is refused."""
        if self.checkpoint is None or not os.path.isfile(self.checkpoint):
            return
        state = torch.load(self.checkpoint, map_location=dev, weights_only=False)
        if state.get("config") != self.hist.config:
            raise RuntimeError(
                f"checkpoint {self.checkpoint} was written with another config; "
                "remove it or pass another path"
            )
        if state.get("data") != self.data_fp:
            raise RuntimeError(
                f"checkpoint {self.checkpoint} was written for other training data "
                f"({state.get('data')} vs {self.data_fp}); remove it or pass another "
                "path"
            )
        self.policy.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        self.first = state["step"]
        self.hist = state["history"]

    def count_forwards(self) -> list:
        """Count the policy's and the reference model's forwards (hooks; removed by
        :meth:`close`)."""
        return [
            m.register_forward_pre_hook(self._count_forward)
            for m in {self.policy, self.ref_model}
            if m is not None
        ]

    def _count_forward(self, *_: Any) -> None:
        self.n_fwd += 1

    # -- one step --------------------------------------------------------------------------------
    def batch(self, step: int) -> tuple[list[int], dict[str, Any]]:
        """The pairs of ``step`` (its slice of the epoch's shuffle) and their collated batch."""
        ep, j = divmod(step, self.per_epoch)
        idx = self.orders[ep][j * self.cfg.batch_size : (j + 1) * self.cfg.batch_size]
        recs = []
        for i in idx:
            r = dict(self.dataset[i])
            r.setdefault("idx", i)
            recs.append(r)
        return idx, self.collator(recs)

    def step(self, step: int) -> None:
        """One optimizer step: the loss of the step's batch, backward, gradient clipping, Adam
        (or RMSprop) and the warm-up schedule; then :meth:`record`."""
        cfg = self.cfg
        idx, batch = self.batch(step)
        t0 = time.perf_counter()
        before = self.n_fwd
        try:
            # log-probs without dropout (TRL's disable_dropout): the policy then equals the
            # reference at step 0; the graph is kept, so backward runs after the block
            with dropout_disabled(self.policy, enabled=cfg.disable_dropout), self.mp.autocast():
                loss, logs = preference_step_loss(
                    self.policy,
                    batch,
                    cfg,
                    sae=self.sae,
                    ref_cache=self.ref_cache,
                    ref_model=self.ref_model,
                )
        except FloatingPointError as e:
            raise FloatingPointError(f"step {step + 1} (pairs {idx[:4]}...): {e}") from None
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        if not bool(torch.isfinite(gnorm)):
            raise FloatingPointError(f"non-finite gradient norm at step {step + 1}")
        self.opt.step()
        self.sched.step()
        self.hist.step_seconds.append(time.perf_counter() - t0)
        self.record(step, self.n_fwd - before, gnorm, logs)

    def record(self, step: int, forwards: int, gnorm: torch.Tensor, logs: dict) -> None:
        """The forwards of this call's first step, and every ``log_every``-th step's loss,
        learning rate, gradient norm and diagnostics (the first and the last step always)."""
        if step == self.first:
            self.hist.forwards_per_step = float(forwards)
        if (step + 1) % self.cfg.log_every == 0 or step == self.first or step + 1 == self.total:
            self.hist.steps.append(
                {
                    "step": step + 1,
                    "lr": self.sched.get_last_lr()[0],
                    "grad_norm": float(gnorm),
                    **logs,
                }
            )

    # -- ending ----------------------------------------------------------------------------------
    def save(self, step: int) -> None:
        """Write the checkpoint (atomically: a temporary file, then a rename); no-op without one."""
        if self.checkpoint is None:
            return
        tmp = f"{os.fspath(self.checkpoint)}.tmp"
        torch.save(
            {
                "config": self.hist.config,
                "data": self.data_fp,
                "model": self.policy.state_dict(),
                "optimizer": self.opt.state_dict(),
                "scheduler": self.sched.state_dict(),
                "step": step,
                "history": self.hist,
            },
            tmp,
        )
        os.replace(tmp, self.checkpoint)

    def close(self, handles: list) -> None:
        """Remove the forward counters; the policy in eval mode, the reference model back in its
        own mode."""
        for h in handles:
            h.remove()
        self.policy.eval()
        if self.ref_model is not None:
            self.ref_model.train(self.ref_was_training)


def _checked_inputs(
    policy: Any, dataset: Any, config: Any, ref_model: Any
) -> tuple[PreferenceConfig, Any]:
    """The config and the policy checked, and the dataset as records (refused when empty)."""
    if not isinstance(config, PreferenceConfig):
        raise TypeError(f"config must be a PreferenceConfig, got {type(config).__name__}")
    cfg = config
    if not isinstance(policy, nn.Module):
        raise TypeError(f"policy must be a torch nn.Module, got {type(policy).__name__}")
    if ref_model is policy:
        raise ValueError(
            "ref_model is the policy itself: pass a frozen copy (copy.deepcopy(policy) "
            "before training) or a reference cache"
        )
    dataset = as_records(dataset)
    if len(dataset) == 0:
        raise ValueError("the preference dataset is empty")
    return cfg, dataset


def _optimisation(policy: nn.Module, cfg: PreferenceConfig) -> tuple:
    """Mixed precision, the trainable parameters, the optimizer and the learning-rate schedule
    (linear warm-up over ``warmup_steps``, then constant; Table 5)."""
    if not any(p.requires_grad for p in policy.parameters()):
        raise ValueError("the policy has no trainable parameter")
    # a bf16/fp16 checkpoint trains float32 master weights under autocast (before the optimizer)
    mp = MixedPrecision.prepare(policy)
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = _optimizer(params, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
    )
    return mp, params, opt, sched


def _frozen_sae(
    policy: nn.Module, sae: Any, cfg: PreferenceConfig, dev: torch.device
) -> tuple[SparseAutoencoder, PreferenceConfig]:
    """FPO's SAE checked against the policy, frozen on its device; ``cfg`` with the layer
    resolved and ``k`` clamped to the SAE's width."""
    if sae is None:
        raise ValueError(
            "FPO needs an SAE (sae=): load_gemma_scope_npz, from_sae_lens, or "
            "train_sae on harvested activations"
        )
    if not isinstance(sae, SparseAutoencoder):
        raise TypeError(f"sae must be an icml25.fpo.SparseAutoencoder, got {type(sae).__name__}")
    hidden = getattr(getattr(policy, "config", None), "hidden_size", None)
    if hidden is not None and hidden != sae.d_in:
        raise ValueError(f"the SAE's d_in={sae.d_in} differs from the model's hidden size {hidden}")
    sae = sae.to(dev).requires_grad_(False)
    # resolve a negative layer and clamp k once (not a warning per step); the warning points at
    # the caller of train_preference (_k <- here <- _Run.start <- train_preference <- caller)
    return sae, replace(cfg, layer=resolve_layer(policy, cfg.layer), k=_k(cfg.k, sae.d_sae, 5))


def _reference_cache(
    cfg: PreferenceConfig,
    dataset: Any,
    collator: PreferenceCollator,
    sae: SparseAutoencoder | None,
    ref_cache: ReferenceCache | None,
    ref_model: nn.Module | None,
) -> ReferenceCache | None:
    """The offline reference of paper-mode FPO and of DPO: ``ref_cache`` checked against the
    reference model and the SAE settings, or built from ``ref_model`` before training."""
    needs_cache = cfg.method == "dpo" or (cfg.method == "fpo" and cfg.paper_mode)
    if needs_cache and ref_cache is None:
        if ref_model is None:
            raise ValueError(
                f"method {cfg.method!r} needs ref_cache= or ref_model= (to build the cache)"
            )
        ref_cache = build_reference_cache(
            ref_model,
            sae if cfg.method == "fpo" else None,
            dataset,
            layer=cfg.layer if cfg.method == "fpo" else None,
            collator=collator,
            batch_size=max(cfg.batch_size, 8),
            pool=cfg.pool,
            site=cfg.site,
            progress=cfg.progress,
        )
    elif needs_cache and ref_model is not None:
        ref_cache.check_compatible(model=ref_model)  # a cache of another reference is refused
    if needs_cache and cfg.method == "fpo":
        ref_cache.check_compatible(layer=cfg.layer, sae=sae, pool=cfg.pool, site=cfg.site)
    return ref_cache


def _warn_identical(dataset: Any, stacklevel: int) -> None:
    """Warn about pairs whose chosen and rejected responses are the same."""
    n = len(dataset)
    identical = 0
    for i in range(n):
        r = dataset[i]
        if isinstance(r, dict) and r.get("chosen") == r.get("rejected"):
            identical += 1
    if identical:
        warnings.warn(
            f"{identical} of {n} pairs have identical chosen and rejected responses "
            "(their logit is 0 minus the constraint)",
            stacklevel=stacklevel,
        )
