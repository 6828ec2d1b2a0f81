"""Reward ensemble and the preference likelihoods (docs/distinguishability.md).

``RewardEnsemble`` is B-Pref's ``gen_net`` (MLP, LeakyReLU hidden layers, ``tanh`` output in
[-1, 1]) times ``K`` members, evaluated as one batched matmul per layer. Segment returns are sums
over the segment (return units, never averages).

Likelihoods: PCQ answers by Bradley-Terry on returns; DQ answers by (E1)-(E2): BT on the two
pairs' strengths ``|Delta|`` for "which pair is easier", then BT on the chosen pair's difference.
Orientation: ``y = 1`` means the pair's *first* segment is preferred (B-Pref stores the opposite:
``label_bpref = 1 - y``); ``d = 1`` means the first pair is the easier one, ``d = 0.5`` "equally easy".
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25._validate import as_int, as_real

__all__ = [
    "RewardEnsemble",
    "dq_answer_probs",
    "dq_loss",
    "pcq_loss",
    "smooth_abs",
    "soft_ce",
]


class RewardEnsemble(nn.Module):
    """``K`` reward networks ``r_k(s, a) in [-1, 1]`` (B-Pref ``gen_net``: ``n_layers`` hidden layers
    of ``hidden`` units with LeakyReLU, a linear output and ``tanh``).

    ``forward(obs (..., d_s), act (..., d_a)) -> (K, ...)`` per-step rewards. Inputs are cast to the
    ensemble's dtype and device.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        n_members: int = 3,  # B-Pref ensemble_size
        hidden: int = 256,  # B-Pref gen_net
        n_layers: int = 3,  # B-Pref gen_net
        activation: str = "tanh",  # B-Pref: tanh output
    ) -> None:
        super().__init__()
        for name, v, lo in (
            ("obs_dim", obs_dim, 1),
            ("act_dim", act_dim, 0),
            ("n_members", n_members, 1),
            ("hidden", hidden, 1),
            ("n_layers", n_layers, 0),
        ):
            as_int(name, v, lo)
        if activation not in ("tanh", "sigmoid", "none"):
            raise ValueError(f"activation must be 'tanh', 'sigmoid' or 'none', got {activation!r}")
        self.obs_dim, self.act_dim, self.K, self.activation = (
            obs_dim,
            act_dim,
            n_members,
            activation,
        )
        self.hidden, self.n_layers = hidden, n_layers
        sizes = [obs_dim + act_dim] + [hidden] * n_layers + [1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation, per member
            self.weights.append(
                nn.Parameter(torch.empty(n_members, fan_in, fan_out).uniform_(-bound, bound))
            )
            self.biases.append(
                nn.Parameter(torch.empty(n_members, 1, fan_out).uniform_(-bound, bound))
            )

    def _param(self) -> Tensor:
        return self.weights[0]

    def forward(self, obs: Tensor, act: Tensor, *, per_member: bool = False) -> Tensor:
        """``per_member=True``: inputs carry a leading ``K`` axis, member ``k`` sees ``obs[k]``."""
        p = self._param()
        obs = torch.as_tensor(obs).to(device=p.device, dtype=p.dtype)
        act = torch.as_tensor(act).to(device=p.device, dtype=p.dtype)
        if obs.shape[-1] != self.obs_dim or act.shape[-1] != self.act_dim:
            raise ValueError(
                f"expected obs (..., {self.obs_dim}) and act (..., {self.act_dim}), got "
                f"{tuple(obs.shape)} and {tuple(act.shape)}"
            )
        if obs.shape[:-1] != act.shape[:-1]:
            raise ValueError(
                f"obs and act batch shapes differ: {tuple(obs.shape)} vs {tuple(act.shape)}"
            )
        if per_member:
            if obs.shape[0] != self.K:
                raise ValueError(
                    f"per_member inputs need a leading axis of {self.K}, got {tuple(obs.shape)}"
                )
            lead = obs.shape[1:-1]
            x = torch.cat([obs, act], -1).reshape(self.K, -1, self.obs_dim + self.act_dim)
        else:
            lead = obs.shape[:-1]
            x = torch.cat([obs, act], -1).reshape(1, -1, self.obs_dim + self.act_dim)
            x = x.expand(self.K, -1, -1)
        n = len(self.weights)
        inplace = not torch.is_grad_enabled()  # scoring candidates: no activations kept
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            if i == 0 and not per_member:  # one matmul for all members on the shared input
                x0 = x[0]
                y = x0 @ w.permute(1, 0, 2).reshape(w.shape[1], -1)
                x = y.reshape(-1, self.K, w.shape[2]).permute(1, 0, 2) + b
            else:
                x = torch.baddbmm(b, x, w)
            if i < n - 1:
                x = F.leaky_relu(x, inplace=inplace)
        x = x.squeeze(-1)
        if self.activation == "tanh":
            x = torch.tanh_(x) if inplace else torch.tanh(x)
        elif self.activation == "sigmoid":
            x = torch.sigmoid_(x) if inplace else torch.sigmoid(x)
        return x.reshape(self.K, *lead)

    def segment_returns(self, obs: Tensor, act: Tensor, *, per_member: bool = False) -> Tensor:
        """``(N, H, d_s), (N, H, d_a) -> (K, N)``: undiscounted sums of the members' rewards
        (``per_member=True``: ``(K, N, H, .)`` inputs, a different batch per member)."""
        if obs.ndim != 3 + per_member:
            raise ValueError(
                f"obs must be ({'K, ' if per_member else ''}N, H, d_s), got shape {tuple(obs.shape)}"
            )
        r = self(obs, act, per_member=per_member)
        return r.to(torch.promote_types(r.dtype, torch.float32)).sum(-1)  # bf16 scores sum in fp32

    def reward(self, obs: Tensor, act: Tensor) -> Tensor:
        """The member mean: what the agent is trained on."""
        return self(obs, act).mean(0)


def smooth_abs(z: Tensor, eps: float = 1e-3) -> Tensor:
    """``|z|_eps = sqrt(z^2 + eps^2) - eps`` (docs/distinguishability.md): smooth, 0 at 0, ``|z|`` for ``|z| >> eps``."""
    return torch.sqrt(z * z + eps * eps) - eps


def soft_ce(z: Tensor, t: Tensor) -> Tensor:
    """``-[t log sigma(z) + (1 - t) log sigma(-z)]`` with soft targets, elementwise."""
    return -(t * F.logsigmoid(z) + (1 - t) * F.logsigmoid(-z))


def _targets(x, name: str, allowed: tuple[float, ...], like: Tensor) -> Tensor:
    t = torch.as_tensor(x, dtype=like.dtype, device=like.device)
    if t.ndim != 1 or t.shape[0] != like.shape[-1]:
        raise ValueError(
            f"{name} must be a vector of length {like.shape[-1]}, got shape {tuple(t.shape)}"
        )
    ok = torch.zeros_like(t, dtype=torch.bool)
    for a in allowed:
        ok |= t == a
    if not bool(ok.all()):
        bad = int((~ok).nonzero()[0])
        raise ValueError(f"{name}[{bad}] = {float(t[bad])} is not one of {allowed}")
    return t


def pcq_loss(ret0: Tensor, ret1: Tensor, y: Tensor, *, noise_prob: float = 0.0) -> Tensor:
    """Bradley-Terry cross-entropy of pairwise answers (B-Pref ``train_reward``/``train_soft_reward``):
    logits ``ret0 - ret1`` of shape ``(K, N)``, targets ``y in {0, 1/2, 1}`` (1: first preferred).
    ``noise_prob``: imitation's ``PreferenceModel`` noise, ``P = (1 - noise) sigma(z) + noise / 2``
    (0: plain Bradley-Terry, B-Pref). Returns the sum over members of the mean over answers."""
    if ret0.shape != ret1.shape or ret0.ndim != 2:
        raise ValueError(
            f"ret0 and ret1 must both be (K, N), got {tuple(ret0.shape)}, {tuple(ret1.shape)}"
        )
    noise_prob = as_real("noise_prob", noise_prob, low=0.0, high=1.0, high_open=True)
    t = _targets(y, "y", (0.0, 0.5, 1.0), ret0)
    z = ret0 - ret1
    if noise_prob == 0:
        return soft_ce(z, t).mean(-1).sum()
    # log p and log(1 - p) of p = (1 - eps) sigma(z) + eps / 2, each a log-add-exp: finite for
    # any z (p formed first rounds to 1 once eps < ~6e-8 in float32, and 0 * log 0 is NaN)
    keep, floor = math.log1p(-noise_prob), math.log(0.5 * noise_prob)
    log_p = torch.logaddexp(keep + F.logsigmoid(z), torch.full_like(z, floor))
    log_1mp = torch.logaddexp(keep + F.logsigmoid(-z), torch.full_like(z, floor))
    return -(t * log_p + (1 - t) * log_1mp).mean(-1).sum()


def _dq_logits(r1a, r1b, r2a, r2b, eps):
    shapes = {tuple(r.shape) for r in (r1a, r1b, r2a, r2b)}
    if len(shapes) != 1 or r1a.ndim != 2:
        raise ValueError(f"the four returns must share one (K, N) shape, got {sorted(shapes)}")
    eps = as_real("eps", eps, low=0.0, low_open=True)
    d1, d2 = r1a - r1b, r2a - r2b
    return d1, d2, smooth_abs(d1, eps) - smooth_abs(d2, eps)


def dq_answer_probs(
    r1a: Tensor,
    r1b: Tensor,
    r2a: Tensor,
    r2b: Tensor,
    *,
    beta_d: float = 1.0,
    beta_p: float = 1.0,
    eps: float = 1e-3,
) -> tuple[Tensor, Tensor]:
    """Labeler model (E1)-(E2): ``p_d = P(d = 1) = sigma(beta_d (|D1| - |D2|))`` and
    ``p_y[..., i] = P(y = 1 | pair i) = sigma(beta_p D_i)``; shapes ``(K, N)`` and ``(K, N, 2)``.
    ``P(d, y) = p_d^[d=1] (1 - p_d)^[d=2] * p_y[d]^y (1 - p_y[d])^(1-y)`` sums to one."""
    d1, d2, zd = _dq_logits(r1a, r1b, r2a, r2b, eps)
    p_d = torch.sigmoid(beta_d * zd)
    p_y = torch.sigmoid(beta_p * torch.stack([d1, d2], -1))
    return p_d, p_y


def dq_loss(
    r1a: Tensor,
    r1b: Tensor,
    r2a: Tensor,
    r2b: Tensor,
    d: Tensor,
    d_pref: Tensor,
    y: Tensor,
    *,
    likelihood: str = "abs",
    lambda_pref: float = 1.0,  # docs/distinguishability.md default (unverified in the paper)
    eps: float = 1e-3,  # docs/distinguishability.md, return units
    beta_d: Tensor | float = 1.0,
) -> Tensor:
    """Negative log-likelihood of distinguishability answers, (E3) or (E3').

    Args:
        r1a, r1b, r2a, r2b: ``(K, N)`` returns of the four segments (pair 1 = (a, b), pair 2 = (a, b)).
        d: ``(N,)`` in {1, 2, 0.5}: the easier pair (0.5 = "equally easy").
        d_pref: ``(N,)`` in {1, 2}: the pair the preference was given on (``= d`` unless d = 0.5).
        y: ``(N,)`` in {0, 0.5, 1}: preference on that pair (1 = its first segment).
        likelihood: ``"abs"`` (E3: BT on smoothed strengths + BT on the chosen pair) or
            ``"difference"`` (E3': two difference-relation statements + the preference).
        beta_d: temperature of the strength answer (a learnable scalar is allowed).
    Returns the sum over members of the mean over answers.
    """
    if likelihood not in ("abs", "difference"):
        raise ValueError(f"likelihood must be 'abs' or 'difference', got {likelihood!r}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    d1, d2, zd = _dq_logits(r1a, r1b, r2a, r2b, eps)
    dt = _targets(d, "d", (1.0, 2.0, 0.5), d1)
    dp = _targets(d_pref, "d_pref", (1.0, 2.0), d1)
    yt = _targets(y, "y", (0.0, 0.5, 1.0), d1)
    chosen = torch.where(dp == 1.0, d1, d2)
    other = torch.where(dp == 1.0, d2, d1)
    if likelihood == "abs":
        t_d = torch.where(dt == 1.0, 1.0, torch.where(dt == 2.0, 0.0, 0.5)).to(d1.dtype)
        per = soft_ce(beta_d * zd, t_d) + lambda_pref * soft_ce(chosen, yt)
        return per.mean(-1).sum()
    # (E3'): the chosen pair oriented winner -> loser dominates the other pair in both orientations
    sign = torch.where(yt == 0.0, -1.0, 1.0).to(d1.dtype)
    win = sign * chosen
    t_order = torch.where(dt == 0.5, 0.5, 1.0).to(d1.dtype)
    order = soft_ce(win - other, t_order) + soft_ce(win + other, t_order)
    tie = yt == 0.5
    order = torch.where(tie, torch.zeros_like(order), order)
    pref = torch.where(tie, soft_ce(chosen, yt), soft_ce(win, torch.ones_like(yt)))
    return (order + lambda_pref * pref).mean(-1).sum()
