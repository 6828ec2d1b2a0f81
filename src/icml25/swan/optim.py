"""The SWAN optimizer: stateless GradNorm + GradWhitening on hidden matrices, AdamW elsewhere.

``SWAN`` is one ``torch.optim.Optimizer`` for a whole model: parameter groups with
``use_swan=True`` (build them with :func:`icml25.swan.swan_param_groups`) take the stateless SWAN
step of the paper's Algorithm 1, every other group takes a standard decoupled AdamW step (the same
code as ``torch.optim.AdamW``), so embeddings, the LM head, norms and biases keep Adam as in the
paper's GaLore-benchmark setup. Nothing is stored in ``optimizer.state`` for SWAN parameters.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim.adam import adam as adam_functional

from icml25._validate import as_bool, as_int, as_real, shown
from icml25.swan.functional import (
    FLOAT_DTYPES,
    RESCALES,
    WHITENINGS,
    _narrows,
    check_matmul_dtype,
    sinkhorn_normalize,
    swan_direction,
)

__all__ = ["SWAN", "SinkGD", "VARIANTS"]

#: Presets of docs/swan.md (our names): whitening method, Newton-Schulz steps and beta.
VARIANTS: dict[str, dict[str, Any]] = {
    # beta = 0.8, k = 10: third-party ports quoting the paper (unverified, docs/swan.md)
    "swan": {"whitening": "ns", "ns_steps": 10, "ns_beta": 0.8},
    # exact polar factor: the "ideal whitening" reference
    "swan_exact": {"whitening": "eigh", "ns_steps": 10, "ns_beta": 0.8},
    # NSDS fast variant, beta = 0.4, k = 2 (unverified, docs/swan.md)
    "swan_nsds": {"whitening": "nsds", "ns_steps": 2, "ns_beta": 0.4},
    # not the paper's: GradNorm + Muon's quintic iteration, 5 steps in bf16 (docs/swan.md,
    # Muon-class whitening); ns_beta is unused by this whitening
    "swan_muon": {
        "whitening": "muon",
        "ns_steps": 5,
        "ns_beta": 0.8,
        "matmul_dtype": torch.bfloat16,
    },
}

_NONFINITE = ("raise", "skip")


#: matrices with at least this many entries are whitened one by one rather than stacked with
#: their same-shape peers (stacking copies the gradients, batching gains nothing at that size)
_UNBATCHED_NUMEL = 1 << 20


# The constructor's checks, in the order SWAN.__init__ runs them. Their warnings use
# stacklevel=3: the caller of SWAN.__init__, as before they were split out of it.
def _refuse_unsupported(capturable: bool, differentiable: bool) -> None:
    """torch.optim flags SWAN cannot honour."""
    if capturable:
        raise ValueError(
            "SWAN(capturable=True) is not supported: the step is not CUDA-graph capturable "
            "(its finiteness check and the AdamW part's step counters live on the host)"
        )
    if differentiable:
        raise ValueError("SWAN(differentiable=True) is not supported (the step runs under no_grad)")


def _check_torch_flags(maximize: Any, foreach: Any, fused: Any) -> None:
    """``maximize``, ``foreach`` and ``fused``: each a bool or None."""
    for flag, value in (("maximize", maximize), ("foreach", foreach), ("fused", fused)):
        if value is not None:
            try:
                as_bool(flag, value)
            except TypeError:
                raise TypeError(f"{flag} must be a bool or None, got {shown(value)}") from None


def _apply_variant(
    variant: str, whitening: Any, ns_steps: Any, ns_beta: Any, matmul_dtype: Any
) -> tuple[Any, Any, Any, Any]:
    """``(whitening, ns_steps, ns_beta, matmul_dtype)``: the variant's preset (:data:`VARIANTS`)
    where the argument is unset (``...`` for whitening and matmul_dtype, None for the others);
    a warning when an explicit ``ns_beta`` is unused by the whitening."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    preset = VARIANTS[variant]
    whitening = preset["whitening"] if whitening is ... else whitening
    if ns_beta is not None and whitening in ("muon", "eigh", "svd", None):
        warnings.warn(
            f"SWAN: ns_beta={ns_beta} is unused by whitening={whitening!r}",
            UserWarning,
            stacklevel=3,
        )
    return (
        whitening,
        preset["ns_steps"] if ns_steps is None else ns_steps,
        preset["ns_beta"] if ns_beta is None else ns_beta,
        preset.get("matmul_dtype") if matmul_dtype is ... else matmul_dtype,
    )


def _check_compute_dtype(compute_dtype: Any) -> None:
    """A torch floating dtype with kernels for GradNorm and the whitening; half precision warns."""
    if compute_dtype not in FLOAT_DTYPES:
        why = ""
        if isinstance(compute_dtype, torch.dtype):
            why = (
                ": GradNorm and the whitening have no float8 kernels"
                if compute_dtype.is_floating_point
                else ": the whitening's inverse square root needs a real floating dtype"
            )
        raise ValueError(
            "compute_dtype must be a torch floating dtype, e.g. torch.float32 (or "
            f"torch.float64, torch.bfloat16, torch.float16), got {shown(compute_dtype)}{why}"
        )
    if compute_dtype in (torch.float16, torch.bfloat16):
        warnings.warn(
            f"SWAN(compute_dtype={compute_dtype}) runs GradNorm and the whole whitening in half "
            "precision (direction error about 0.04-0.2 relative); matmul_dtype=torch.bfloat16 "
            "keeps the rest in float32 (about 0.02-0.1)",
            UserWarning,
            stacklevel=3,
        )


def _check_nonfinite(nonfinite: Any) -> None:
    if nonfinite not in _NONFINITE:
        raise ValueError(f"nonfinite must be one of {_NONFINITE}, got {nonfinite!r}")


class SWAN(torch.optim.Optimizer):
    """SGD with Whitening And Normalization (Ma et al., ICML 2025, Algorithm 1).

    Args:
        params: tensors or param-group dicts; a group's ``use_swan`` selects the rule (inferred
            as ``p.ndim == 2`` with a warning when absent: tensors alone cannot tell an embedding
            from a projection, use :func:`~icml25.swan.swan_param_groups`).
        lr: learning rate; with ``rescale="rms"`` it is the per-entry RMS of the SWAN step
            (library default 1e-3; the paper's recipe is in :func:`~icml25.swan.paper_param_groups`).
        variant: ``"swan"`` (NS, beta 0.8, 10 steps), ``"swan_exact"`` (eigh), ``"swan_nsds"``
            (NSDS, beta 0.4, 2 steps) or ``"swan_muon"`` (not the paper's: Muon's quintic
            iteration, 5 steps, bf16 matmuls); explicit ``whitening``/``ns_steps``/``ns_beta``/
            ``matmul_dtype`` override it.
        scale: multiplies ``lr`` on SWAN groups (the paper's per-group scale, default 1).
        weight_decay: decoupled weight decay on SWAN groups (the paper's benchmark uses 0).
        norm, norm_dim, center: GradNorm switch, the axis rows are standardised along (-1: the
            ``in_features`` axis of ``nn.Linear``; 0 for HF ``Conv1D``), and centring.
        whitening: ``"ns"``, ``"nsds"``, ``"eigh"``, ``"svd"`` or ``None`` (no whitening).
        rescale: ``"rms"`` (default), ``"match_norm"`` or ``"none"``, see
            :func:`~icml25.swan.functional.swan_direction`.
        compute_dtype: dtype of the SWAN math (float32: the paper whitens in FP32).
        matmul_dtype: ``torch.bfloat16`` runs the Newton-Schulz matmuls in bf16 (about 2x faster
            on CPUs with AVX512-BF16 and on GPUs; relative error of the direction about 2e-2,
            docs/swan.md); None keeps them in ``compute_dtype``; unset, the variant's (bf16 for
            ``"swan_muon"``, None otherwise).
        maximize, foreach, fused: as in ``torch.optim.AdamW`` (``fused=None``: torch's fused
            AdamW where it applies); ``capturable`` and ``differentiable`` are refused.
        adamw_betas, adamw_eps, adamw_weight_decay: the AdamW rule of the other groups.
        nonfinite: ``"raise"`` (``FloatingPointError``) or ``"skip"`` the whole step on a NaN/inf
            gradient (counted in ``skipped_steps``); weights never receive NaN.
        flatten_nd: treat >= 3-D SWAN parameters (conv kernels) as ``(shape[0], rest)``.
        shard_work, process_group: under DDP, each rank whitens only the matrices it owns and
            broadcasts the update (see :mod:`icml25.swan.distributed`).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        *,
        variant: str = "swan",
        scale: float = 1.0,
        weight_decay: float = 0.0,
        norm: bool = True,
        norm_dim: int = -1,
        center: bool = True,
        whitening: str | None | type = ...,
        ns_steps: int | None = None,
        ns_beta: float | None = None,
        rescale: str = "rms",
        eps: float = 1e-8,
        compute_dtype: torch.dtype = torch.float32,
        matmul_dtype: torch.dtype | None | type = ...,
        adamw_betas: tuple[float, float] = (0.9, 0.999),
        adamw_eps: float = 1e-8,
        adamw_weight_decay: float = 0.0,
        nonfinite: str = "raise",
        flatten_nd: bool = False,
        shard_work: bool = False,
        process_group: Any = None,
        maximize: bool = False,
        foreach: bool | None = None,
        fused: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        _refuse_unsupported(capturable, differentiable)
        _check_torch_flags(maximize, foreach, fused)
        whitening, ns_steps, ns_beta, matmul_dtype = _apply_variant(
            variant, whitening, ns_steps, ns_beta, matmul_dtype
        )
        defaults = {
            "lr": lr,
            "scale": scale,
            "weight_decay": weight_decay,
            "norm": norm,
            "norm_dim": norm_dim,
            "center": center,
            "whitening": whitening,
            "ns_steps": ns_steps,
            "ns_beta": ns_beta,
            "rescale": rescale,
            "eps": eps,
            "compute_dtype": compute_dtype,
            "matmul_dtype": matmul_dtype,
            "adamw_betas": adamw_betas,
            # the key torch's schedulers cycle (OneCycleLR, CyclicLR): the AdamW rule reads it
            "betas": adamw_betas,
            "adamw_eps": adamw_eps,
            "adamw_weight_decay": adamw_weight_decay,
            "flatten_nd": flatten_nd,
            "maximize": maximize,
            "foreach": foreach,
            "fused": fused,
        }
        _check_compute_dtype(compute_dtype)
        _check_nonfinite(nonfinite)
        self.nonfinite = nonfinite
        self.skipped_steps = 0
        self.shard_work = shard_work
        self.process_group = process_group
        self._warned_inferred = False
        self._initialising = True
        super().__init__(params, defaults)
        self._initialising = False
        for group in self.param_groups:
            self._check_group(group)

    # -- construction ------------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        """Add a group; a group without ``use_swan`` is split PER PARAMETER: matrices (2-D, both
        sides >= 2) go to a SWAN group, everything else (biases, norm gains, 1-wide matrices) to
        an AdamW group, with a warning (a 2-D embedding or LM head would be whitened too)."""
        if isinstance(param_group, dict) and "use_swan" not in param_group:
            params = param_group["params"]
            params = [params] if isinstance(params, Tensor) else list(params)
            names = param_group.get("names") or [None] * len(params)
            parts: dict[bool, tuple[list, list]] = {True: ([], []), False: ([], [])}
            for p, n in zip(params, names):
                is_matrix = p.ndim == 2 and min(p.shape) >= 2
                parts[is_matrix][0].append(p)
                parts[is_matrix][1].append(n)
            if not self._warned_inferred:
                warnings.warn(
                    f"SWAN: a parameter group without 'use_swan' was split per parameter: "
                    f"{len(parts[True][0])} matrices -> SWAN, {len(parts[False][0])} other tensors "
                    "(biases, norms, 1-wide) -> AdamW. Tensors alone cannot tell an embedding or "
                    "LM head (keep them on AdamW) from a projection, nor that a packed "
                    "nn.MultiheadAttention.in_proj_weight holds Q, K and V (whitened here as one "
                    "matrix, mixing them): build the groups with "
                    "icml25.swan.swan_param_groups(model) (docs/swan.md, 'Use it').",
                    UserWarning,
                    stacklevel=4 if self._initialising else 2,
                )
                self._warned_inferred = True
            for flag in (True, False):
                ps, ns = parts[flag]
                if not ps:
                    continue
                sub = {**param_group, "params": ps, "use_swan": flag}
                if any(n is not None for n in ns):
                    sub["names"] = ns
                else:
                    sub.pop("names", None)
                self.add_param_group(sub)
            return
        if isinstance(param_group, dict):
            param_group = dict(param_group)
            # the AdamW rule's own keys, also under torch.optim.AdamW's names in an AdamW group
            if "adamw_betas" in param_group and "betas" not in param_group:
                param_group["betas"] = param_group["adamw_betas"]
            if not param_group.get("use_swan", True):
                for name, own in (("weight_decay", "adamw_weight_decay"), ("eps", "adamw_eps")):
                    if name in param_group and own not in param_group:
                        param_group[own] = param_group[name]
        super().add_param_group(param_group)
        if not self._initialising:
            self._check_group(self.param_groups[-1])

    def _check_group(self, group: dict) -> None:
        # a tensor lr (torch's schedulers allow one) is checked but kept as given
        as_real("lr", group["lr"], low=0)
        for key in ("scale", "eps", "weight_decay", "adamw_weight_decay", "ns_beta", "adamw_eps"):
            if key in group:
                group[key] = as_real(
                    key,
                    group[key],
                    low=0,
                    low_open=key in ("scale", "ns_beta"),
                    high=1 if key == "ns_beta" else None,
                )
        b = group["betas"]
        if not (isinstance(b, (tuple, list)) and len(b) == 2):
            raise ValueError(f"betas / adamw_betas must be two numbers in [0, 1), got {b!r}")
        for x in b:
            as_real("betas / adamw_betas", x, low=0, high=1, high_open=True)
        if group["whitening"] is not None and group["whitening"] not in WHITENINGS:
            raise ValueError(
                f"whitening must be one of {WHITENINGS} or None, got {group['whitening']!r}"
            )
        if group["rescale"] not in RESCALES:
            raise ValueError(f"rescale must be one of {RESCALES}, got {group['rescale']!r}")
        group["ns_steps"] = as_int("ns_steps", group["ns_steps"], 1)
        check_matmul_dtype(group.get("matmul_dtype"))
        if group["ns_beta"] > 2 / 3 and group["ns_steps"] > 30 and group["whitening"] == "ns":
            warnings.warn(
                f"ns_beta={group['ns_beta']} > 2/3 does not converge: more than 30 steps "
                f"({group['ns_steps']}) only cost time (singular values settle into a band)",
                UserWarning,
                stacklevel=3,
            )
        if not group["use_swan"]:
            return
        blocks = as_int("blocks", group.get("blocks", 1), 1)
        if "blocks" in group:
            group["blocks"] = blocks
        names = group.get("names") or [None] * len(group["params"])
        for p, name in zip(group["params"], names):
            label = (
                f"parameter {name!r} of shape {tuple(p.shape)}"
                if name
                else f"a parameter of shape {tuple(p.shape)}"
            )
            if p.is_complex():
                raise RuntimeError(f"SWAN does not support complex parameters ({label})")
            if p.ndim < 2 or (p.ndim > 2 and not group["flatten_nd"]):
                raise ValueError(
                    f"SWAN groups take 2-D matrices; got {label}. Route it to AdamW "
                    "(swan_param_groups does) or pass flatten_nd=True for conv kernels."
                )
            rows = p.reshape(p.shape[0], -1) if p.ndim > 2 else p
            axis = 1 if group["norm_dim"] == 0 else 0
            if rows.shape[axis] % blocks:
                raise ValueError(
                    f"{label}: its {rows.shape[axis]} {'columns' if axis else 'rows'} "
                    f"do not split into blocks={blocks}"
                )
            if rows.shape[group["norm_dim"]] < 2:
                raise ValueError(
                    f"GradNorm along norm_dim={group['norm_dim']} needs >= 2 entries per row; got "
                    f"{label}. Route it to AdamW."
                )

    # -- the step ------------------------------------------------------------------------------
    def _direction(self, G: Tensor, group: dict) -> Tensor:
        nd = group["norm_dim"]
        return swan_direction(
            G,
            norm=group["norm"],
            norm_dim=nd - 2 if nd >= 0 else nd,  # of the matrix, also under a batch dimension
            center=group["center"],
            whitening=group["whitening"],
            ns_steps=group["ns_steps"],
            ns_beta=group["ns_beta"],
            rescale=group["rescale"],
            eps=group["eps"],
            compute_dtype=group["compute_dtype"],
            matmul_dtype=group.get("matmul_dtype"),
            # the gradients were checked once for the whole step; in half precision the result
            # is checked too (and recomputed in float32 where it is not finite), so no NaN
            # reaches the weights
            check=group["compute_dtype"] in (torch.float16, torch.bfloat16),
        )

    def _grads_finite(self) -> bool:
        """One fused finiteness reduction over every gradient and ONE host sync per step (not
        one per parameter); under ``torch.compile`` the check is an async device assertion."""
        grads = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if p.grad.is_sparse:
                        raise RuntimeError("SWAN does not support sparse gradients")
                    grads.append(p.grad)
        if not grads:
            return True
        by_device: dict[Any, list[Tensor]] = {}
        for g in grads:
            by_device.setdefault(g.device, []).append(g)
        # the largest magnitude of each gradient, one fused pass (NaN and inf propagate into it),
        # instead of isfinite's four
        flags = [
            torch.isfinite(torch.stack(torch._foreach_norm(gs, math.inf))).all()
            for gs in by_device.values()
        ]
        ok = flags[0] if len(flags) == 1 else torch.stack([f.cpu() for f in flags]).all()
        if torch.compiler.is_compiling() and self.nonfinite == "raise":
            # no host sync under compile; note that torch leaves grad mode off after an exception
            # raised inside a compiled no_grad step (call torch.set_grad_enabled(True) to recover)
            torch._assert_async(ok, "SWAN: a gradient contains NaN/inf")
            return True
        return bool(ok)  # nonfinite="skip" needs the value: one host sync (a graph break)

    @torch.no_grad()
    def step(self, closure=None):
        """One optimisation step; returns the closure's loss when a closure is given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._grads_finite():
            if self.nonfinite == "raise":
                raise FloatingPointError(
                    "SWAN: a gradient contains NaN/inf; no parameter was changed "
                    "(use nonfinite='skip' to skip such steps, or a GradScaler with AMP)"
                )
            self.skipped_steps += 1
            return loss
        swan_jobs = [
            (p, group)
            for group in self.param_groups
            if group["use_swan"]
            for p in group["params"]
            if p.grad is not None
        ]
        if self.shard_work:
            from icml25.swan.distributed import sharded_swan_updates

            updates = sharded_swan_updates(self, swan_jobs)
        else:
            updates = self._batched_updates(swan_jobs)
        if not self._updates_finite(swan_jobs, updates):
            if self.nonfinite == "raise":
                raise FloatingPointError(
                    "SWAN: an update overflowed compute_dtype (a gradient past its range, without "
                    "GradNorm to bound it); no parameter was changed (use norm=True, a wider "
                    "compute_dtype, or nonfinite='skip')"
                )
            self.skipped_steps += 1
            return loss
        for group in self.param_groups:
            if not group["use_swan"]:
                self._adamw_group(group)
        for (p, group), delta in zip(swan_jobs, updates):
            self._apply(p, group, delta)
        return loss

    @staticmethod
    def _updates_finite(jobs: list, updates: list[Tensor]) -> bool:
        """The updates can be non-finite from finite gradients only where no GradNorm bounds a
        gradient cast to a narrower ``compute_dtype``: checked there (one host sync), not else."""
        risky = [
            d
            for (p, group), d in zip(jobs, updates)
            if not group["norm"] and _narrows(p.grad.dtype, group["compute_dtype"])
        ]
        if not risky:
            return True
        return bool(torch.isfinite(torch.stack(torch._foreach_norm(risky, math.inf))).all())

    def _matrix_grad(self, p: Tensor, group: dict) -> Tensor:
        """The gradient as the matrices SWAN whitens: ``(m, n)``, or ``(blocks, m / blocks, n)``
        for a fused projection (``nn.MultiheadAttention.in_proj_weight``: Q, K, V separately)."""
        G = p.grad
        if group.get("maximize"):
            G = -G
        if G.ndim > 2:
            G = G.reshape(G.shape[0], -1)
        blocks = group.get("blocks", 1)
        if blocks > 1 and group["norm_dim"] == 0:  # (in, out) storage: the blocks are columns
            G = G.reshape(G.shape[0], blocks, G.shape[1] // blocks).permute(1, 0, 2)
        elif blocks > 1:
            G = G.reshape(blocks, G.shape[0] // blocks, G.shape[1])
        return G

    @staticmethod
    def _as_param(D: Tensor, p: Tensor, group: dict) -> Tensor:
        """Inverse of :meth:`_matrix_grad`'s reshaping: the update in ``p``'s shape."""
        if group.get("blocks", 1) > 1 and group["norm_dim"] == 0:
            D = D.permute(1, 0, 2)
        return D.reshape(p.shape)

    def _update_of(self, p: Tensor, group: dict) -> Tensor:
        return self._as_param(self._direction(self._matrix_grad(p, group), group), p, group)

    def _batched_updates(self, jobs: list) -> list[Tensor]:
        """Updates of every job; same-shape matrices of one group are whitened as one batched
        matmul (the operators take leading batch dimensions)."""
        out: list[Tensor | None] = [None] * len(jobs)
        buckets: dict[tuple, list[int]] = {}
        for i, (p, group) in enumerate(jobs):
            G = self._matrix_grad(p, group)
            key = (id(group), tuple(G.shape), G.dtype, G.device)
            buckets.setdefault(key, []).append(i)
        for idx in buckets.values():
            grads = [self._matrix_grad(*jobs[i]) for i in idx]
            group = jobs[idx[0]][1]
            if len(idx) == 1 or grads[0].numel() >= _UNBATCHED_NUMEL:
                # one matrix, or matrices large enough to keep the matmul units busy alone:
                # whitened one by one, without the copy that stacking them costs
                D = [self._direction(G, group) for G in grads]
            else:
                D = self._direction(torch.stack(grads), group)
            for j, i in enumerate(idx):
                out[i] = self._as_param(D[j], jobs[i][0], jobs[i][1])
        return out  # type: ignore[return-value]

    def _apply(self, p: Tensor, group: dict, delta: Tensor) -> None:
        lr = group["lr"]
        if group["weight_decay"]:
            p.mul_(1 - lr * group["weight_decay"])
        p.add_(delta.to(p.dtype), alpha=-lr * group["scale"])

    def _adamw_group(self, group: dict) -> None:
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.is_complex():
                raise RuntimeError("SWAN's AdamW part does not support complex parameters")
            state = self.state[p]
            if not state:
                # the same initial state as torch.optim.AdamW
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            params.append(p)
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if not params:
            return
        beta1, beta2 = group["betas"]
        fused = group.get("fused")
        if fused is None:  # torch's fused AdamW where it applies (CPU and CUDA floating params)
            fused = not torch.compiler.is_compiling() and all(
                p.device.type in ("cpu", "cuda")
                and p.is_floating_point()
                and p.dtype != torch.float64
                for p in params
            )
        adam_functional(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            [],
            steps,
            foreach=None if fused else group.get("foreach"),
            fused=fused or None,
            decoupled_weight_decay=True,
            amsgrad=False,
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["adamw_weight_decay"],
            eps=group["adamw_eps"],
            maximize=bool(group.get("maximize")),
        )


class SinkGD(SWAN):
    """SinkGD (Scetbon et al., arXiv:2502.06742): the stateless follow-up of SWAN.

    Same hybrid structure; SWAN groups use ``sinkhorn_normalize(G, iters)`` (alternating row and
    column L2 normalisation) instead of GradNorm + whitening.
    """

    def __init__(self, params, lr: float = 1e-3, *, iters: int = 5, **kwargs: Any) -> None:
        iters = as_int("iters", iters, 1)
        self.iters = iters
        super().__init__(params, lr, **kwargs)

    def _direction(self, G: Tensor, group: dict) -> Tensor:
        return sinkhorn_normalize(G.to(group["compute_dtype"]), iters=self.iters, eps=group["eps"])
