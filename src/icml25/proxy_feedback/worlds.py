"""Synthetic expert/proxy worlds with known structure (the paper's appendix experiment, Sec. 6 /
App. of arXiv:2412.16475: ``X = R^5``, ``P_X = N(0, I_5)``, ``Y = {1, 2, 3}``).

The expert's policy factorises through a simplex embedding ``e†: X -> Δ^D``::

    e†(x) = softmax(W2 tanh(W1 x)),   π†(x) = softmax(Θ* e†(x))

and the proxy applies a bijection ``h`` of the simplex (wrong labels + over-smoothing) before the
same decoder: ``π̃(x) = softmax(Θ* h(e†(x)))`` with ``h(p) = normalise(p[perm] ** γ)``. Then
``π† = g ∘ π̃`` with ``g`` a bijection (Lemma A of the paper), and ``h^{-1}`` is exactly the
log-linear map ``softmax(P^{-1} log q / γ)`` that the default adapter can represent. The
violations break one sufficient condition each (docs/proxy_feedback.md, "Worlds"):

* ``v1_levelsets``: the proxy ignores ``masked_dims`` input coordinates the expert uses (C1);
* ``v2_image``: ``(1 - s) h(e†) + s / (D + 1)``: level sets kept, image strictly smaller (C2);
* ``v4_lipschitz``: ``γ = 0.1``, a near-flat proxy whose inverse has a huge Lipschitz constant (C4).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from icml25._validate import as_int, as_real

__all__ = ["SCENARIOS", "SyntheticPreferenceWorld"]

SCENARIOS = ("hold", "v1_levelsets", "v2_image", "v4_lipschitz")
HIDDEN = 16  # width of the expert's embedding network (W1 is 16 x d_x)
W2_SCALE = 1.5  # W2 ~ N(0, 1) * 1.5
THETA_SCALE = 3.0  # random decoder Θ* ~ N(0, 1) * 3 when K != D + 1
THETA_IDENTITY = 4.0  # Θ* = 4 I when K = D + 1
V4_GAMMA = 0.1  # the near-flat proxy of v4_lipschitz


class SyntheticPreferenceWorld:
    """An expert policy ``π†`` and a proxy policy ``π̃`` on ``X = R^{d_x}``, ``|Y| = n_outputs``.

    Args:
        d_x: input dimension (paper's appendix: 5).
        n_outputs: ``K = |Y|`` (paper: 3); the ambient dimension ``D'`` of the policies' values.
        D: simplex dimension of the embedding (``D + 1`` vertices; paper: 2).
        scenario: ``"hold"`` (C1-C4 hold), ``"v1_levelsets"``, ``"v2_image"`` or ``"v4_lipschitz"``.
        temperature_gamma: ``γ`` of the proxy's over-smoothing ``p ** γ`` (0.5; ``v4`` uses 0.1).
        permutation: the proxy's label permutation of the ``D + 1`` vertices (``None``: the cyclic
            shift ``(1, 2, ..., D, 0)``, which is ``(1, 2, 0)`` at ``D = 2``).
        shrink: ``s`` of ``v2_image`` (0.6).
        masked_dims: input coordinates the proxy ignores in ``v1_levelsets`` (the last ones; 2).
        seed: seeds ``W1``, ``W2`` and (when ``K != D + 1``) ``Θ*``, drawn in that order.

    Methods take ``x`` of shape ``(n, d_x)`` and return ``(n, K)`` probabilities in ``x``'s
    dtype on ``x``'s device (the world's matrices are moved there).
    """

    def __init__(
        self,
        d_x: int = 5,
        n_outputs: int = 3,
        D: int = 2,
        scenario: str = "hold",
        temperature_gamma: float = 0.5,
        permutation: tuple[int, ...] | None = None,
        shrink: float = 0.6,
        masked_dims: int = 2,
        seed: int = 0,
    ) -> None:
        self.d_x = as_int("d_x", d_x, 1)
        self.n_outputs = as_int("n_outputs", n_outputs, 2)
        self.D = as_int("D", D, 1)
        if scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
        self.scenario = scenario
        g = as_real("temperature_gamma", temperature_gamma, low=0, low_open=True)
        self.gamma = V4_GAMMA if scenario == "v4_lipschitz" else g
        v = self.D + 1
        if permutation is None:
            perm = tuple(range(1, v)) + (0,)
        else:
            perm = tuple(as_int(f"permutation[{i}]", p, 0) for i, p in enumerate(permutation))
        if sorted(perm) != list(range(v)):
            raise ValueError(
                f"permutation must be a permutation of 0..{v - 1} (D + 1 = {v} vertices), "
                f"got {permutation!r}"
            )
        self.permutation = perm
        shrink = as_real("shrink", shrink, low=0, high=1, high_open=True)
        self.shrink = float(shrink)
        self.masked_dims = as_int("masked_dims", masked_dims, 0)
        if scenario == "v1_levelsets" and not 0 < self.masked_dims < self.d_x:
            raise ValueError(
                f"masked_dims must be in 1..{d_x - 1} for v1_levelsets (d_x = {d_x}), got "
                f"{masked_dims!r}"
            )
        self.seed = as_int("seed", seed, 0)
        gen = torch.Generator().manual_seed(self.seed)
        dt = torch.float64
        d_x = self.d_x
        self.W1 = torch.randn(HIDDEN, d_x, generator=gen, dtype=dt)
        self.W2 = torch.randn(v, HIDDEN, generator=gen, dtype=dt) * W2_SCALE
        if self.n_outputs == v:
            self.theta_star = THETA_IDENTITY * torch.eye(v, dtype=dt)
        else:
            self.theta_star = torch.randn(self.n_outputs, v, generator=gen, dtype=dt) * THETA_SCALE
        mask = torch.ones(d_x, dtype=dt)
        if scenario == "v1_levelsets":
            mask[d_x - masked_dims :] = 0.0
        self.mask = mask

    def __repr__(self) -> str:
        return (
            f"SyntheticPreferenceWorld(d_x={self.d_x}, n_outputs={self.n_outputs}, D={self.D}, "
            f"scenario={self.scenario!r}, gamma={self.gamma}, permutation={self.permutation}, "
            f"seed={self.seed})"
        )

    # -- pieces ----------------------------------------------------------------------------------
    def _check_x(self, x: Any) -> Tensor:
        if not isinstance(x, Tensor):
            x = torch.as_tensor(x, dtype=torch.float64)
        if x.ndim != 2 or x.shape[1] != self.d_x:
            raise ValueError(f"x must have shape (n, d_x) = (n, {self.d_x}), got {tuple(x.shape)}")
        if not x.is_floating_point():
            x = x.to(torch.get_default_dtype())
        return x

    def _m(self, t: Tensor, x: Tensor) -> Tensor:
        return t.to(device=x.device, dtype=x.dtype)

    def true_embedding(self, x: Tensor) -> Tensor:
        """``e†(x) = softmax(W2 tanh(W1 x))``, ``(n, D + 1)`` points of the simplex."""
        x = self._check_x(x)
        return torch.softmax(torch.tanh(x @ self._m(self.W1, x).T) @ self._m(self.W2, x).T, -1)

    def distortion(self, p: Tensor) -> Tensor:
        """``h(p) = normalise(p[perm] ** γ)`` on ``(n, D + 1)`` simplex points (in log space)."""
        logq = self.gamma * torch.log(p[:, list(self.permutation)])
        return torch.softmax(logq, -1)

    def distortion_inverse_loglinear(self) -> tuple[Tensor, Tensor]:
        """``(M, b)`` with ``h^{-1}(q) = softmax(M log q + b)``: ``M = P^{-1} / γ``, ``b = 0``
        (float64), where ``(P v)_k = v[perm[k]]``."""
        v = self.D + 1
        P = torch.zeros(v, v, dtype=torch.float64)
        P[torch.arange(v), torch.tensor(self.permutation)] = 1.0
        return P.T / self.gamma, torch.zeros(v, dtype=torch.float64)

    def proxy_embedding(self, x: Tensor) -> Tensor:
        """``τ°(x)``: the proxy's simplex embedding ``h(e†(x))`` (with the scenario's violation)."""
        x = self._check_x(x)
        if self.scenario == "v1_levelsets":
            x = x * self._m(self.mask, x)
        q = self.distortion(self.true_embedding(x))
        if self.scenario == "v2_image":
            q = (1.0 - self.shrink) * q + self.shrink / (self.D + 1)
        return q

    def decode(self, p: Tensor) -> Tensor:
        """``φ(Θ* p) = softmax(Θ* p)``: simplex points to ``(n, K)`` output distributions."""
        return torch.softmax(p @ self._m(self.theta_star, p).T, -1)

    # -- the two policies ----------------------------------------------------------------------
    def true_policy(self, x: Tensor) -> Tensor:
        """``π†(x)``: ``(n, K)`` expert probabilities."""
        return self.decode(self.true_embedding(x))

    def proxy_policy(self, x: Tensor) -> Tensor:
        """``π̃(x)``: ``(n, K)`` proxy probabilities."""
        return self.decode(self.proxy_embedding(x))

    def sample_x(
        self,
        n: int,
        generator: torch.Generator | None = None,
        *,
        device: Any = None,
        dtype: torch.dtype = torch.float32,
    ) -> Tensor:
        """``n`` inputs ``x ~ N(0, I_{d_x})`` (on the generator's device unless ``device``)."""
        n = as_int("n", n, 0)
        if device is None and generator is not None:
            device = generator.device
        return torch.randn(n, self.d_x, generator=generator, device=device, dtype=dtype)
