"""The two-stage estimator of arXiv:2412.16475 (Sec. 4) and the baselines it is compared with.

* :func:`fit_proxy_stage` (stage 1): fit ``τ`` and ``Θ`` on proxy preferences, adapter = id (P2).
* :func:`fit_true_stage` (stage 2): freeze ``τ, Θ, φ``; fit the adapter alone on expert
  preferences, from permutation restarts, keeping the lowest unregularised NLL (P1).
* Baselines on the same losses: :func:`fit_true_only`, :func:`fit_finetune_all`,
  :func:`fit_pooled`.

Optimiser settings are ours (the paper's are not given; docs/proxy_feedback.md, "Decisions").

All five are single-process: full-batch (or in-memory minibatch) Adam on small models, the
synthetic setting of Sec. 4. Under ``torch.distributed`` with more than one process they raise
``RuntimeError`` rather than run the same fit on every rank. The entry point that scales over
processes is :class:`icml25.proxy_feedback.trainer.SimplexDPOTrainer` (the DPO stages of the LLM
path, Sec. 5: ``torchrun --nproc_per_node 8 train.py``).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import Tensor, nn

from icml25._validate import as_int, as_real
from icml25.llm.distributed import refuse_several_processes
from icml25.proxy_feedback.data import PreferenceBatch
from icml25.proxy_feedback.model import IdentityAdapter, LogLinearAdapter

__all__ = [
    "fit_finetune_all",
    "fit_pooled",
    "fit_proxy_stage",
    "fit_true_only",
    "fit_true_stage",
]

MAX_EXHAUSTIVE_VERTICES = 4  # all (D + 1)! permutation restarts up to D + 1 = 4 (24 starts)
RANDOM_RESTARTS = 8  # random permutations (plus the identity) above that


def _single_process(fn: str) -> None:
    """``RuntimeError`` when ``fn`` runs as one of several processes: each would repeat the same
    in-memory fit. The data-parallel entry point is :class:`SimplexDPOTrainer`."""
    refuse_several_processes(
        fn,
        "icml25.proxy_feedback.trainer.SimplexDPOTrainer (torchrun --nproc_per_node N script.py)",
    )


def _check_batch(model: nn.Module, batch: Any, what: str) -> PreferenceBatch:
    if not isinstance(batch, PreferenceBatch):
        raise TypeError(
            f"{what} must be a PreferenceBatch (PreferenceBatch.from_arrays(x, y_w, y_l)), got "
            f"{type(batch).__name__}"
        )
    if len(batch) == 0:
        raise ValueError(f"{what} is empty (0 triples); fitting needs at least one")
    d_x = getattr(model, "d_x", batch.d_x)
    if batch.d_x != d_x:
        raise ValueError(f"{what} has x of dimension {batch.d_x}, the model takes d_x = {d_x}")
    batch.check_outputs(model.n_outputs, "the model")
    ref = next(model.parameters())
    return batch.to(device=ref.device, dtype=ref.dtype)


def _nll(logp: Tensor, b: PreferenceBatch) -> Tensor:
    """The training loops' Bradley-Terry NLL with the uniform reference, the number
    :func:`~icml25.proxy_feedback.losses.preference_nll` gives by the same operations (``β = 1``,
    ``u = log π(y_w|x) - log π(y_l|x)``) without its per-call checks: the batch was checked once
    by :func:`_check_batch`, and a NaN loss (non-finite outputs) is refused here, once a step."""
    logp = logp.to(torch.promote_types(logp.dtype, torch.float32))
    w = logp.gather(1, b.y_w[:, None]).squeeze(1)
    l_ = logp.gather(1, b.y_l[:, None]).squeeze(1)
    return _checked(-torch.nn.functional.logsigmoid(w - l_).mean())


def _checked(loss: Tensor) -> Tensor:
    """``loss`` (any shape), or a ``ValueError`` if it holds NaN."""
    if bool(torch.isnan(loss).any()):
        raise ValueError(
            "the model's log-probabilities hold NaN (a non-finite parameter or input?); the fit "
            "stopped at this step"
        )
    return loss


def _adam(params: Any, **kw: Any) -> torch.optim.Adam:
    """Adam with torch's fused kernel where it has one (CPU and CUDA): these models are small, so
    a step is mostly per-tensor dispatch, which the fused kernel does once per tensor instead of
    once per operation (a quarter of a fit's time; the same update up to float rounding)."""
    params = list(params)
    fused = all(
        isinstance(p, Tensor) and p.device.type in ("cpu", "cuda") and p.is_floating_point()
        for p in params
    )
    return torch.optim.Adam(params, fused=fused, foreach=None if fused else True, **kw)


def _is_simplex(model: Any) -> bool:
    return all(hasattr(model, a) for a in ("embed", "from_simplex", "adapter_parameters"))


def fit_proxy_stage(
    model: nn.Module,
    batch: PreferenceBatch,
    *,
    epochs: int = 30,  # ours (Sec. 4, stage 1): 30 epochs over N = 8000
    lr: float = 3e-3,  # ours: Adam 3e-3
    batch_size: int = 256,  # ours
    seed: int = 0,
) -> dict[str, list[float]]:
    """Stage 1: fit the encoder ``τ`` and ``Θ`` of a :class:`SimplexPolicy` on proxy triples with
    the adapter held at the identity (P2). Returns ``{"loss": [mean NLL per epoch]}``.
    Single-process (``RuntimeError`` under several ``torch.distributed`` processes)."""
    _single_process("fit_proxy_stage")
    if not _is_simplex(model):
        raise TypeError(f"fit_proxy_stage needs a SimplexPolicy, got {type(model).__name__}")
    batch = _check_batch(model, batch, "the proxy data (N)")
    epochs, batch_size = as_int("epochs", epochs, 1), as_int("batch_size", batch_size, 1)
    lr = as_real("lr", lr, low=0, low_open=True)
    params = model.proxy_parameters()
    opt = _adam(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    n = len(batch)
    hist: list[float] = []
    model.train()
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen).to(batch.x.device)
        tot = 0.0
        for i in range(0, n, batch_size):
            b = batch[order[i : i + batch_size]]
            loss = _nll(model(b.x, use_adapter=False), b)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tot += loss.item() * len(b)
        hist.append(tot / n)
    return {"loss": hist}


def _restart_inits(adapter: nn.Module, restarts: Any, seed: int) -> list[tuple[int, ...] | None]:
    v = getattr(adapter, "n_vertices", None)
    ident = tuple(range(v)) if v else None
    if not isinstance(adapter, LogLinearAdapter):
        if not (
            restarts is None
            or isinstance(restarts, str)
            and restarts == "auto"
            or not isinstance(restarts, (list, tuple, str))
            and restarts == 1
        ):
            raise ValueError(
                f"permutation restarts need the log-linear adapter; {type(adapter).__name__} "
                f"starts once from the identity (pass restarts='auto' or 1), got {restarts!r}"
            )
        return [None]
    if restarts is None:
        return [ident]
    if hasattr(restarts, "tolist"):  # numpy array or tensor of permutations, or a 0-d count
        restarts = restarts.tolist()
    if isinstance(restarts, (list, tuple)) and restarts and not isinstance(restarts[0], int):
        out = []
        for p in restarts:
            p = tuple(p)
            if sorted(p) != list(range(v)):
                raise ValueError(f"restart {p} is not a permutation of 0..{v - 1}")
            out.append(p)
        return out
    if restarts == "auto":
        if v <= MAX_EXHAUSTIVE_VERTICES:
            return list(itertools.permutations(range(v)))
        restarts = RANDOM_RESTARTS + 1
    try:
        restarts = as_int("restarts", restarts, 1)
    except ValueError:
        raise ValueError(
            f"restarts must be 'auto', a positive integer or a list of permutations, got {restarts!r}"
        ) from None
    gen = torch.Generator().manual_seed(seed)
    out, seen = [ident], {ident}
    n_perm = math.factorial(v)
    while len(out) < min(restarts, n_perm):
        p = tuple(torch.randperm(v, generator=gen).tolist())
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def fit_true_stage(
    model: nn.Module,
    batch: PreferenceBatch,
    *,
    steps: int = 500,  # ours (Sec. 4, stage 2): full batch, 500 steps
    lr: float = 1e-2,  # ours: Adam 1e-2
    reg: float = 1e-3,  # ours: λ_A, pulls the adapter towards its initialisation at tiny n
    restarts: Any = "auto",
    seed: int = 0,
) -> dict[str, Any]:
    """Stage 2: fit only the adapter of a stage-1 :class:`SimplexPolicy` on expert triples.

    Loss: the Bradley-Terry NLL plus ``reg * ||θ_A - θ_A^init||^2``, full batch. ``restarts``:
    ``"auto"`` starts the log-linear adapter from every vertex permutation ``M = P`` when
    ``D + 1 <= 4`` and from the identity plus 8 random permutations above; an integer asks for
    the identity plus random permutations; a list gives the permutations; ``None`` the identity
    only. The start with the lowest *unregularised* training NLL is kept (no validation data at
    small ``n``: docs/proxy_feedback.md, "Decisions"). ``τ`` is computed once (frozen).

    Every non-adapter parameter and buffer is left bitwise unchanged (checked; ``RuntimeError``
    otherwise). Returns ``{"nll", "loss", "restarts": [{"init", "nll"}], "best"}``.
    Single-process (``RuntimeError`` under several ``torch.distributed`` processes).
    """
    _single_process("fit_true_stage")
    if not _is_simplex(model):
        raise TypeError(f"fit_true_stage needs a SimplexPolicy, got {type(model).__name__}")
    batch = _check_batch(model, batch, "the expert data (n)")
    steps = as_int("steps", steps, 1)
    lr = as_real("lr", lr, low=0, low_open=True)
    reg = as_real("reg", reg, low=0)
    adapter = model.adapter
    a_params = model.adapter_parameters()
    if isinstance(adapter, IdentityAdapter) or not a_params:
        raise ValueError(
            "the model's adapter has no parameters (adapter='identity'); stage 2 "
            "needs 'loglinear' or 'mlp'"
        )
    a_ids = {id(p) for p in a_params}
    others = {n: p for n, p in model.named_parameters() if id(p) not in a_ids}
    shared = [
        n for n, p in model.named_parameters() if id(p) in a_ids and not n.startswith("adapter.")
    ]
    if shared:
        raise ValueError(
            f"adapter parameters are shared with the rest of the model ({shared}); "
            "stage 2 would change stage-1 parameters"
        )
    before = {
        n: t.detach().clone() for n, t in model.state_dict().items() if not n.startswith("adapter.")
    }
    if not any(p.requires_grad for p in a_params):
        raise ValueError(
            "the adapter's parameters are all frozen (requires_grad=False); stage 2 "
            "trains the adapter: unfreeze it, or skip stage 2"
        )
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    grads = {n: p.grad for n, p in others.items()}
    inits = _restart_inits(adapter, restarts, seed)
    try:
        for p in others.values():
            p.requires_grad_(False)
        for p in a_params:
            p.requires_grad_(True)
        with torch.no_grad():
            logtau = model.embed(batch.x)
        if isinstance(adapter, LogLinearAdapter):
            runs, state, best_curve = _loglinear_restarts(
                model, adapter, logtau, batch, inits, steps=steps, lr=lr, reg=reg
            )
        else:
            runs, state, best_curve = _single_start(
                model, adapter, a_params, logtau, batch, steps=steps, lr=lr, reg=reg
            )
        best = min(range(len(runs)), key=lambda r: runs[r]["nll"])
        best_state = state(best)
        best_curve = list(best_curve)
        adapter.load_state_dict(best_state)
    finally:
        for n, p in model.named_parameters():
            p.requires_grad_(flags[n])
    after = {n: t for n, t in model.state_dict().items() if not n.startswith("adapter.")}
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    if changed or any(p.grad is not grads[n] for n, p in others.items()):
        raise RuntimeError(f"stage 2 changed or gave gradients to non-adapter tensors: {changed}")
    return {"nll": runs[best]["nll"], "loss": best_curve, "restarts": runs, "best": best}


def _loglinear_restarts(model, adapter, logtau, batch, inits, *, steps, lr, reg):
    """All permutation starts of the log-linear adapter at once: stacked ``(R, v, v)`` matrices
    under one Adam, which is elementwise, so each start follows exactly the path it would alone."""
    v = adapter.n_vertices
    R = len(inits)
    M0 = torch.zeros(R, v, v, dtype=adapter.M.dtype, device=adapter.M.device)
    for r, init in enumerate(inits):
        M0[r, torch.arange(v), torch.tensor(init)] = 1.0
    M = M0.clone().requires_grad_(True)
    b = torch.zeros(R, v, dtype=M0.dtype, device=M0.device, requires_grad=True)
    opt = _adam([M, b], lr=lr)
    theta = model.theta.weight
    yw, yl = batch.y_w, batch.y_l

    def nll_per_start() -> Tensor:
        la = torch.log_softmax(torch.einsum("nj,rij->rni", logtau, M) + b[:, None, :], -1)
        lp = torch.log_softmax(la.exp() @ theta.T, -1)  # (R, n, K)
        w = lp.gather(2, yw.expand(R, -1)[..., None]).squeeze(-1)
        l_ = lp.gather(2, yl.expand(R, -1)[..., None]).squeeze(-1)
        return _checked(-torch.nn.functional.logsigmoid(w - l_).mean(1))

    curves = []
    for _ in range(steps):
        nll = nll_per_start()
        pen = ((M - M0) ** 2).sum((1, 2)) + (b**2).sum(1)
        loss = nll + reg * pen
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        opt.step()
        curves.append(loss.detach())
    with torch.no_grad():
        final = nll_per_start()
    curves_t = torch.stack(curves) if curves else torch.zeros(0, R)
    runs = [{"init": list(init), "nll": float(final[r])} for r, init in enumerate(inits)]

    def state(r: int) -> dict[str, Tensor]:
        best_curve[:] = curves_t[:, r].tolist()
        return {"M": M[r].detach().clone(), "b": b[r].detach().clone()}

    best_curve: list[float] = []
    return runs, state, best_curve


def _single_start(model, adapter, a_params, logtau, batch, *, steps, lr, reg):
    adapter.reset_identity()
    theta0 = [p.detach().clone() for p in a_params]
    opt = _adam(a_params, lr=lr)
    curve = []
    for _ in range(steps):
        nll = _nll(model.from_simplex(logtau), batch)
        penalty = sum(((p - p0) ** 2).sum() for p, p0 in zip(a_params, theta0))
        loss = nll + reg * penalty
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        curve.append(loss.item())
    with torch.no_grad():
        final = float(_nll(model.from_simplex(logtau), batch))
    st = {k: v.detach().clone() for k, v in adapter.state_dict().items()}
    return [{"init": None, "nll": final}], (lambda r: st), curve


def _full_batch(model, params, batch, *, steps, lr, weight_decay, use_adapter=True) -> dict:
    opt = _adam(params, lr=lr, weight_decay=weight_decay)
    curve = []
    model.train()
    for _ in range(steps):
        loss = _nll(model(batch.x, use_adapter=use_adapter), batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        curve.append(loss.item())
    return {"loss": curve}


def fit_true_only(
    model: nn.Module,
    batch: PreferenceBatch,
    *,
    steps: int = 2000,  # ours: deliberately more than stage 2, so the baseline is not under-trained
    lr: float = 3e-3,  # ours: Adam 3e-3
    weight_decay: float = 1e-4,  # ours
) -> dict[str, list[float]]:
    """Expert-only baseline: every parameter of a fresh model (a :class:`SimplexPolicy` with its
    adapter, or a plain :class:`MLPPolicy`) trained on the expert triples, full batch.
    Single-process (``RuntimeError`` under several ``torch.distributed`` processes)."""
    _single_process("fit_true_only")
    batch = _check_batch(model, batch, "the expert data (n)")
    steps = as_int("steps", steps, 1)
    lr = as_real("lr", lr, low=0, low_open=True)
    return _full_batch(
        model, list(model.parameters()), batch, steps=steps, lr=lr, weight_decay=weight_decay
    )


def fit_finetune_all(
    model: nn.Module,
    batch: PreferenceBatch,
    *,
    steps: int = 2000,  # ours
    lr: float = 1e-3,  # ours: smaller than from scratch, it starts from stage 1
) -> dict[str, list[float]]:
    """Common practice: a stage-1 model with *all* parameters fine-tuned on the expert triples,
    full batch. Single-process (``RuntimeError`` under several ``torch.distributed`` processes)."""
    _single_process("fit_finetune_all")
    if not _is_simplex(model):
        raise TypeError(f"fit_finetune_all needs a SimplexPolicy, got {type(model).__name__}")
    batch = _check_batch(model, batch, "the expert data (n)")
    steps = as_int("steps", steps, 1)
    lr = as_real("lr", lr, low=0, low_open=True)
    return _full_batch(model, list(model.parameters()), batch, steps=steps, lr=lr, weight_decay=0.0)


def fit_pooled(
    model: nn.Module,
    proxy_batch: PreferenceBatch,
    true_batch: PreferenceBatch,
    *,
    weight: float | None = None,
    epochs: int = 30,
    lr: float = 3e-3,
    batch_size: int = 256,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Common practice: one model trained on ``proxy ∪ weight·expert`` (``weight = N / n`` by
    default, so both pools weigh the same). Each step pairs a proxy minibatch with an expert
    minibatch and weighs their mean losses by ``N`` and ``weight·n``: the same expected loss as
    minibatches of the weighted union, without steps that see no expert triple. Single-process
    (``RuntimeError`` under several ``torch.distributed`` processes)."""
    _single_process("fit_pooled")
    proxy_batch = _check_batch(model, proxy_batch, "the proxy data (N)")
    true_batch = _check_batch(model, true_batch, "the expert data (n)")
    epochs, batch_size = as_int("epochs", epochs, 1), as_int("batch_size", batch_size, 1)
    lr = as_real("lr", lr, low=0, low_open=True)
    N, n = len(proxy_batch), len(true_batch)
    w = N / n if weight is None else weight
    w = as_real("weight", w, low=0, low_open=True)
    a = N / (N + w * n)
    opt = _adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    hist = []
    use_adapter = not _is_simplex(model)  # a SimplexPolicy is trained as in stage 1 (A = id)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(N, generator=gen).to(proxy_batch.x.device)
        tot, k = 0.0, 0
        for i in range(0, N, batch_size):
            bp = proxy_batch[order[i : i + batch_size]]
            tb = true_batch
            if n > batch_size:
                tb = true_batch[torch.randperm(n, generator=gen)[:batch_size].to(tb.x.device)]
            loss = a * _nll(model(bp.x, use_adapter=use_adapter), bp) + (1 - a) * _nll(
                model(tb.x, use_adapter=use_adapter), tb
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tot, k = tot + loss.item(), k + 1
        hist.append(tot / k)
    return {"loss": hist}
