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
from typing import Any

import torch
from torch import nn

from icml25._validate import as_bool, as_int, as_real
from icml25.fpo.cache import ReferenceCache, build_reference_cache
from icml25.fpo.data import PreferenceCollator, as_records
from icml25.fpo.forward import preference_pass
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

    method: str = "fpo"
    beta: float | None = None  # Table 5: 0.1 (SimPO 2)
    alpha: float | None = None  # Table 5: 0.5 for FPO and TDPO-2
    gamma: float | None = None  # Table 5: SimPO's 0.5
    k: int = 50  # official code, config/loss/fpo.yaml (Figure 2 plots the top-50)
    layer: int = 25  # paper §4 / Table 3: layer 25 of Gemma-2-2B; set it for your model
    lr: float = 5e-7  # Table 5
    batch_size: int = 32  # Table 5
    epochs: int = 1  # Table 5
    warmup_steps: int = 150  # Table 5: warm-up 150 steps, then constant
    optimizer: str = "adam"  # Table 5: Adam (2B), RMSprop (9B)
    adam_betas: tuple[float, float] = (0.9, 0.999)  # torch default (official config: 0.9, 0.95)
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # official config
    max_length: int = 1024  # official config
    max_prompt_length: int = 512
    truncation: str = "keep_end"
    pool: str = "mean"  # paper text, "average pooling"
    index_mode: str = "union"  # paper Eq. 10
    site: str = "hook"  # the residual output of block ℓ (what Gemma Scope was trained on)
    stop_grad_chosen: bool = True  # paper Eq. 11 / Table 3
    paper_mode: bool = True
    seed: int = 0
    dtype: str = "float32"  # the SAE encode / loss dtype; log-softmax is float32 anyway
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
    method = cfg.method
    need_codes = method == "fpo"
    dt = getattr(torch, cfg.dtype)
    out = preference_pass(
        policy,
        batch,
        sae=sae if need_codes else None,
        layer=cfg.layer if need_codes else None,
        pool=cfg.pool,
        site=cfg.site,
        keep_logits=method in ("tdpo1", "tdpo2"),
        sae_dtype=dt,
        role="policy",
    )
    dev = out.sum.device
    (sw, sl), (mw, ml) = out.halves("sum"), out.halves("mean")
    ref: dict[str, torch.Tensor] = {}
    ref_out = None
    if cfg.needs_ref_model:
        if ref_model is None:
            raise ValueError(
                f"method {method!r} (paper_mode={cfg.paper_mode}) runs the reference "
                "model every step: pass ref_model="
            )
        with torch.no_grad():
            ref_out = preference_pass(
                ref_model,
                batch,
                sae=sae if need_codes else None,
                layer=cfg.layer if need_codes else None,
                pool=cfg.pool,
                site=cfg.site,
                keep_logits=method != "fpo",
                sae_dtype=dt,
                role="reference model",
            )
        (ref["ref_sum_w"], ref["ref_sum_l"]) = ref_out.halves("sum")
        (ref["ref_mean_w"], ref["ref_mean_l"]) = ref_out.halves("mean")
        if need_codes:
            ref["ref_codes_w"], ref["ref_codes_l"] = ref_out.halves("codes")
    elif method in ("fpo", "dpo"):
        if ref_cache is None:
            raise ValueError(f"method {method!r} needs a ReferenceCache (ref_cache=)")
        ref = ref_cache.batch(batch["index"], dev, fingerprints=batch.get("fingerprint"))
    logs: dict[str, float] = {}
    if method == "fpo":
        if "ref_codes_w" not in ref:
            raise ValueError("the reference cache has no SAE codes (built with sae=None)")
        cw, cl = out.halves("codes")
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
        loss, u = o.loss, o.u
        logs.update(d_w=float(o.d_w.detach().mean()), d_l=float(o.d_l.detach().mean()))
    elif method == "dpo":
        loss, _, u = dpo_loss(sw, sl, ref["ref_sum_w"], ref["ref_sum_l"], cfg.beta)
    elif method == "simpo":
        loss, _, u = simpo_loss(mw, ml, cfg.beta, cfg.gamma)
    elif method in ("tdpo1", "tdpo2"):
        labels = batch["labels"].to(dev)
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
            version=1 if method == "tdpo1" else 2,
        )
        logs.update(kl_w=float(kl[:n].detach().mean()), kl_l=float(kl[n:].detach().mean()))
    else:  # sft on the chosen responses: token-mean NLL
        lw = out.length[: out.length.shape[0] // 2].to(sw.dtype)
        loss = -(sw.sum() / lw.sum())
        u = mw - ml
    if not bool(torch.isfinite(loss)):
        raise FloatingPointError(f"{method} loss is {float(loss)}")
    logs.update(
        loss=float(loss.detach()),
        margin=float(u.detach().mean()),
        acc=float((u.detach() > 0).float().mean()),
    )
    return loss, logs


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
    n = len(dataset)
    if n == 0:
        raise ValueError("the preference dataset is empty")
    collator = PreferenceCollator(
        tokenizer,
        max_length=cfg.max_length,
        max_prompt_length=cfg.max_prompt_length,
        truncation=cfg.truncation,
    )
    dev = next(policy.parameters()).device
    if cfg.method == "fpo":
        if sae is None:
            raise ValueError(
                "FPO needs an SAE (sae=): load_gemma_scope_npz, from_sae_lens, or "
                "train_sae on harvested activations"
            )
        if not isinstance(sae, SparseAutoencoder):
            raise TypeError(
                f"sae must be an icml25.fpo.SparseAutoencoder, got {type(sae).__name__}"
            )
        hidden = getattr(getattr(policy, "config", None), "hidden_size", None)
        if hidden is not None and hidden != sae.d_in:
            raise ValueError(
                f"the SAE's d_in={sae.d_in} differs from the model's hidden size {hidden}"
            )
        sae = sae.to(dev).requires_grad_(False)
        # resolve a negative layer and clamp k once (not a warning per step)
        cfg = replace(cfg, layer=resolve_layer(policy, cfg.layer), k=_k(cfg.k, sae.d_sae, 3))
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
    ref_was_training = ref_model.training if ref_model is not None else False
    if cfg.needs_ref_model:
        if ref_model is None:
            raise ValueError(
                f"method {cfg.method!r} runs the reference model each step: pass ref_model="
            )
        ref_model.eval()  # run under no_grad; restored at the end
    identical = 0
    for i in range(n):
        r = dataset[i]
        if isinstance(r, dict) and r.get("chosen") == r.get("rejected"):
            identical += 1
    if identical:
        warnings.warn(
            f"{identical} of {n} pairs have identical chosen and rejected responses "
            "(their logit is 0 minus the constraint)",
            stacklevel=2,
        )

    gen = torch.Generator().manual_seed(cfg.seed)
    if not any(p.requires_grad for p in policy.parameters()):
        raise ValueError("the policy has no trainable parameter")
    # a bf16/fp16 checkpoint trains float32 master weights under autocast (before the optimizer)
    mp = MixedPrecision.prepare(policy)
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = _optimizer(params, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
    )
    per_epoch = math.ceil(n / cfg.batch_size)
    total = per_epoch * cfg.epochs
    orders = [torch.randperm(n, generator=gen).tolist() for _ in range(cfg.epochs)]
    hist = History(config=asdict(cfg))
    data_fp = _data_fingerprint(dataset) if checkpoint is not None else None
    start = 0
    if checkpoint is not None and os.path.isfile(checkpoint):
        state = torch.load(checkpoint, map_location=dev, weights_only=False)
        if state.get("config") != hist.config:
            raise RuntimeError(
                f"checkpoint {checkpoint} was written with another config; "
                "remove it or pass another path"
            )
        if state.get("data") != data_fp:
            raise RuntimeError(
                f"checkpoint {checkpoint} was written for other training data "
                f"({state.get('data')} vs {data_fp}); remove it or pass another "
                "path"
            )
        policy.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        start = state["step"]
        hist = state["history"]

    def save(step: int) -> None:
        if checkpoint is None:
            return
        tmp = f"{os.fspath(checkpoint)}.tmp"
        torch.save(
            {
                "config": hist.config,
                "data": data_fp,
                "model": policy.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(),
                "step": step,
                "history": hist,
            },
            tmp,
        )
        os.replace(tmp, checkpoint)

    # count model forwards of the first steps (the efficiency bookkeeping of paper §3)
    n_fwd = [0]
    handles = [
        m.register_forward_pre_hook(lambda *_: n_fwd.__setitem__(0, n_fwd[0] + 1))
        for m in {policy, ref_model}
        if m is not None
    ]
    policy.train()
    disable = None if cfg.progress is None else not cfg.progress
    try:
        for step in track(
            range(start, total), f"{cfg.method} training", total=total - start, disable=disable
        ):
            ep, j = divmod(step, per_epoch)
            idx = orders[ep][j * cfg.batch_size : (j + 1) * cfg.batch_size]
            recs = []
            for i in idx:
                r = dict(dataset[i])
                r.setdefault("idx", i)
                recs.append(r)
            batch = collator(recs)
            t0 = time.perf_counter()
            before = n_fwd[0]
            try:
                # log-probs without dropout (TRL's disable_dropout): the policy then equals the
                # reference at step 0; the graph is kept, so backward runs after the block
                with dropout_disabled(policy, enabled=cfg.disable_dropout), mp.autocast():
                    loss, logs = preference_step_loss(
                        policy, batch, cfg, sae=sae, ref_cache=ref_cache, ref_model=ref_model
                    )
            except FloatingPointError as e:
                raise FloatingPointError(f"step {step + 1} (pairs {idx[:4]}...): {e}") from None
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            if not bool(torch.isfinite(gnorm)):
                raise FloatingPointError(f"non-finite gradient norm at step {step + 1}")
            opt.step()
            sched.step()
            hist.step_seconds.append(time.perf_counter() - t0)
            if step == start:
                hist.forwards_per_step = float(n_fwd[0] - before)
            if (step + 1) % cfg.log_every == 0 or step == start or step + 1 == total:
                hist.steps.append(
                    {
                        "step": step + 1,
                        "lr": sched.get_last_lr()[0],
                        "grad_norm": float(gnorm),
                        **logs,
                    }
                )
            if callback is not None:
                callback(step + 1, policy)
            if eval_fn is not None and eval_every and (step + 1) % eval_every == 0:
                policy.eval()
                hist.evals.append({"step": step + 1, **eval_fn(policy)})
                policy.train()
            if (step + 1) % save_every == 0:
                save(step + 1)
    finally:
        for h in handles:
            h.remove()
        policy.eval()
        if ref_model is not None:
            ref_model.train(ref_was_training)
    if eval_fn is not None and not (hist.evals and hist.evals[-1]["step"] == total):
        hist.evals.append({"step": total, **eval_fn(policy)})
    save(total)
    return hist
