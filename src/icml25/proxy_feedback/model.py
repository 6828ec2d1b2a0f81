"""The two-stage parameterisation ``π† = φ̃ ∘ Θ̃ ∘ π̄† ∘ τ̃°`` (P1) of arXiv:2412.16475 (Sec. 4):

* ``τ`` (embedding function): an encoder into ``D + 1`` logits, read as a point of ``Δ^D``;
* ``A`` (adapter ``π̄†``): a map ``Δ^D -> Δ^D``, the identity during stage 1 (P2);
* ``Θ`` (linear map): ``D + 1`` vertex vectors in ``R^{D'}``, no bias;
* ``φ`` (injective function): softmax over the ``D' = K`` outputs.

Pieces pass log-probabilities to each other, so the identity adapter is exact and a point on the
simplex's boundary never becomes ``log 0`` (the adapter's ``ε_p = 1e-6`` floor applies only when
it is called on probabilities; docs/proxy_feedback.md, "Decisions").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25._validate import as_bool, as_int

__all__ = [
    "ADAPTERS",
    "IdentityAdapter",
    "LogLinearAdapter",
    "MLPAdapter",
    "MLPPolicy",
    "ModuleAdapter",
    "SimplexPolicy",
    "make_adapter",
]

ADAPTERS = ("loglinear", "mlp", "identity")
EPS_P = 1e-6  # ε_p of the adapters' log(p + ε_p) on probability inputs


class _Adapter(nn.Module):
    """A map ``Δ^D -> Δ^D``: ``forward(p)`` on probabilities, ``forward_log(log p)`` on
    log-probabilities (what :class:`SimplexPolicy` uses). Both return probabilities' logs."""

    def __init__(self, n_vertices: int) -> None:
        super().__init__()
        self.n_vertices = as_int("n_vertices (D + 1)", n_vertices, 2)

    def forward(self, p: Tensor) -> Tensor:
        """``A(p)`` as probabilities, ``p`` of shape ``(..., D + 1)``; ``log(p + ε_p)`` inside."""
        if p.shape[-1] != self.n_vertices:
            raise ValueError(
                f"the adapter takes points of Δ^{self.n_vertices - 1} (last dim "
                f"{self.n_vertices}), got shape {tuple(p.shape)}"
            )
        return self.forward_log(torch.log(p + EPS_P)).exp()

    def forward_log(self, logp: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def reset_identity(self) -> None:
        """Back to the identity map (stage 2's initialisation)."""


class IdentityAdapter(_Adapter):
    """``A = id``: the proxy-only policy (P2)."""

    def forward_log(self, logp: Tensor) -> Tensor:
        return torch.log_softmax(logp, -1)


class LogLinearAdapter(_Adapter):
    """``A(p) = softmax(M log p + b)``, ``M`` ``(D + 1, D + 1)`` initialised to ``I``, ``b`` to 0:
    contains every vertex permutation composed with a power map (``M = γ P``), the canonical
    proxy distortions; ``(D + 1)^2 + D + 1`` parameters."""

    def __init__(self, n_vertices: int) -> None:
        super().__init__(n_vertices)
        self.M = nn.Parameter(torch.eye(n_vertices))
        self.b = nn.Parameter(torch.zeros(n_vertices))

    def forward_log(self, logp: Tensor) -> Tensor:
        return torch.log_softmax(logp @ self.M.T + self.b, -1)

    @torch.no_grad()
    def reset_identity(self, M: Tensor | None = None) -> None:
        """``M = I`` (or the given matrix, e.g. a permutation), ``b = 0``."""
        self.M.copy_(torch.eye(self.n_vertices) if M is None else M)
        self.b.zero_()


class MLPAdapter(_Adapter):
    """``A(p) = softmax(log p + W2 tanh(W1 p + c1) + c2)`` with ``W2, c2 = 0`` at init (the
    identity). ``spectral_norm=True`` spectrally normalises ``W1`` and ``W2`` and multiplies the
    correction by a scalar gate ``α`` initialised to 0, so the correction's Lipschitz constant is
    at most ``|α|`` (a zero matrix cannot be spectrally normalised)."""

    def __init__(self, n_vertices: int, hidden: int = 32, spectral_norm: bool = False) -> None:
        super().__init__(n_vertices)
        hidden = as_int("hidden", hidden, 1)
        self.l1 = nn.Linear(n_vertices, hidden)
        self.l2 = nn.Linear(hidden, n_vertices)
        self.spectral = as_bool("spectral_norm", spectral_norm)
        if self.spectral:
            self.l1 = nn.utils.parametrizations.spectral_norm(self.l1)
            self.l2 = nn.utils.parametrizations.spectral_norm(self.l2)
            self.gate = nn.Parameter(torch.zeros(()))
        self.reset_identity()

    def forward_log(self, logp: Tensor) -> Tensor:
        corr = self.l2(torch.tanh(self.l1(logp.exp())))
        if self.spectral:
            corr = self.gate * corr
        return torch.log_softmax(logp + corr, -1)

    @torch.no_grad()
    def reset_identity(self) -> None:
        self.l2.bias.zero_()
        if self.spectral:
            self.gate.zero_()
        else:
            self.l2.weight.zero_()


class ModuleAdapter(_Adapter):
    """A user's ``nn.Module`` mapping ``(..., D + 1)`` probabilities to probabilities, used as an
    adapter (stage 2 trains its parameters from their current values, one start)."""

    def __init__(self, module: nn.Module, n_vertices: int) -> None:
        super().__init__(n_vertices)
        self.module = module

    def forward_log(self, logp: Tensor) -> Tensor:
        out = self.module(logp.exp())
        if not isinstance(out, Tensor) or out.shape != logp.shape:
            raise ValueError(
                f"the adapter module must map (..., {self.n_vertices}) probabilities to the same "
                f"shape, got {tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__}"
            )
        return torch.log(out.clamp_min(torch.finfo(out.dtype).tiny))

    def reset_identity(self) -> None:
        reset = getattr(self.module, "reset_identity", None)
        if callable(reset):
            reset()


def make_adapter(kind: str | nn.Module, n_vertices: int, **kwargs: Any) -> _Adapter:
    """``"loglinear"`` (default of the paper's synthetic setting), ``"mlp"`` (keywords ``hidden``,
    ``spectral_norm``), ``"identity"``, or an ``nn.Module`` (one of ours, or any module mapping
    probabilities to probabilities)."""
    if isinstance(kind, nn.Module):
        if kwargs:
            raise TypeError(f"adapter options {sorted(kwargs)} apply to 'mlp' only")
        if isinstance(kind, _Adapter):
            if kind.n_vertices != n_vertices:
                raise ValueError(
                    f"the adapter has {kind.n_vertices} vertices, the bottleneck D + 1 = {n_vertices}"
                )
            return kind
        return ModuleAdapter(kind, n_vertices)
    if kind in ("loglinear", "identity") and kwargs:
        raise TypeError(f"adapter options {sorted(kwargs)} apply to 'mlp' only, not {kind!r}")
    if kind == "loglinear":
        return LogLinearAdapter(n_vertices)
    if kind == "mlp":
        return MLPAdapter(n_vertices, **kwargs)
    if kind == "identity":
        return IdentityAdapter(n_vertices)
    raise ValueError(f"adapter must be one of {ADAPTERS} (or an nn.Module), got {kind!r}")


def _check_input(x: Any, d_x: int, ref: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        try:
            x = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"x must be a tensor or an array, got {type(x).__name__}") from None
    if x.ndim != 2 or x.shape[1] != d_x:
        raise ValueError(f"x must have shape (n, d_x) = (n, {d_x}), got {tuple(x.shape)}")
    if x.device != ref.device:
        raise ValueError(
            f"x is on {x.device} but the model is on {ref.device}; move one of them (model.to(x.device))"
        )
    if x.dtype != ref.dtype:
        x = x.to(ref.dtype)
    return x


class SimplexPolicy(nn.Module):
    """``π(x) = φ(Θ A(τ(x)))`` over ``K = n_outputs`` outputs with a ``D``-simplex bottleneck.

    Args:
        d_x: input dimension.
        n_outputs: ``K``, the number of outputs (``D'`` in the paper).
        D: simplex dimension; the bottleneck has ``D + 1`` vertices.
        encoder_hidden: width of the encoder MLP ``d_x -> h -> h -> D + 1`` (tanh; 64).
        adapter: ``"loglinear"`` (default), ``"mlp"``, ``"identity"`` or an adapter module.

    ``forward(x, use_adapter=True)`` returns ``(n, K)`` log-probabilities in the module's dtype
    (torch's convention: ``.double()`` the model for float64; ``x`` is cast to it) on its device
    (``x`` on another device is a ``ValueError``); ``use_adapter=False`` is the proxy policy (P2). ``embed(x)`` gives ``log τ(x)`` ``(n, D + 1)``;
    ``from_simplex(logp)`` decodes log-simplex points through ``A``, ``Θ`` and ``φ``.
    """

    def __init__(
        self,
        d_x: int,
        n_outputs: int,
        D: int,
        encoder_hidden: int = 64,
        adapter: str | nn.Module = "loglinear",
        **adapter_kwargs: Any,
    ) -> None:
        super().__init__()
        self.d_x = d_x = as_int("d_x", d_x, 1)
        self.n_outputs = n_outputs = as_int("n_outputs", n_outputs, 2)
        self.D = D = as_int("D", D, 1)
        h = as_int("encoder_hidden", encoder_hidden, 1)
        self.encoder = nn.Sequential(
            nn.Linear(d_x, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(), nn.Linear(h, D + 1)
        )
        self.adapter = make_adapter(adapter, D + 1, **adapter_kwargs)
        self.theta = nn.Linear(D + 1, n_outputs, bias=False)

    def embed(self, x: Any) -> Tensor:
        """``log τ(x)``: ``(n, D + 1)`` log-probabilities of the simplex embedding."""
        x = _check_input(x, self.d_x, self.theta.weight)
        return torch.log_softmax(self.encoder(x), -1)

    def from_simplex(self, logp: Tensor, use_adapter: bool = True) -> Tensor:
        """``log φ(Θ A(p))`` for log-simplex points ``logp`` ``(n, D + 1)``."""
        if use_adapter:
            logp = self.adapter.forward_log(logp)
        return torch.log_softmax(F.linear(logp.exp(), self.theta.weight), -1)

    def forward(self, x: Any, use_adapter: bool = True) -> Tensor:
        return self.from_simplex(self.embed(x), use_adapter)

    def probs(self, x: Any, use_adapter: bool = True) -> Tensor:
        """``(n, K)`` probabilities (no gradient)."""
        with torch.no_grad():
            return self.forward(x, use_adapter).exp()

    def adapter_parameters(self) -> list[nn.Parameter]:
        """The stage-2 parameters (the adapter's)."""
        return list(self.adapter.parameters())

    def proxy_parameters(self) -> list[nn.Parameter]:
        """The stage-1 parameters: encoder ``τ`` and ``Θ``."""
        return [*self.encoder.parameters(), *self.theta.parameters()]


class MLPPolicy(nn.Module):
    """A plain ``X -> Δ(Y)`` MLP (``d_x -> h -> h -> K``, tanh), the expert-only baseline's second
    variant. ``forward(x)`` returns ``(n, K)`` log-probabilities (``use_adapter`` is ignored)."""

    def __init__(self, d_x: int, n_outputs: int, hidden: int = 64) -> None:
        super().__init__()
        self.d_x = d_x = as_int("d_x", d_x, 1)
        self.n_outputs = n_outputs = as_int("n_outputs", n_outputs, 2)
        hidden = as_int("hidden", hidden, 1)
        self.net = nn.Sequential(
            nn.Linear(d_x, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, n_outputs),
        )

    def forward(self, x: Any, use_adapter: bool = True) -> Tensor:
        x = _check_input(x, self.d_x, self.net[0].weight)
        return torch.log_softmax(self.net(x), -1)

    def probs(self, x: Any, use_adapter: bool = True) -> Tensor:
        with torch.no_grad():
            return self.forward(x).exp()
