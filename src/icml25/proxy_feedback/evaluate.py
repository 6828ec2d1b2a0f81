"""How close a learned policy is to the expert's, in a world where ``π†`` can be evaluated:
mean total variation (primary), KL, preference accuracy and greedy regret."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from icml25._validate import as_int
from icml25.proxy_feedback.data import sample_preferences

__all__ = ["evaluate"]


@torch.no_grad()
def evaluate(
    model: nn.Module,
    world: Any,
    n_test: int = 5000,
    generator: torch.Generator | None = None,
    *,
    use_adapter: bool = True,
) -> dict[str, float]:
    """Metrics of ``model`` (``x -> (n, K)`` log-probabilities) against ``world.true_policy``:

    * ``tv = E_x TV(π̂(x), π†(x))`` on ``n_test`` fresh inputs (the primary metric);
    * ``kl = E_x KL(π† || π̂)``;
    * ``pref_acc``: how often the model ranks the sampled winner of ``n_test`` fresh expert
      triples above the loser (the Bayes rate is below 1: expert labels are noisy);
    * ``regret = E_x[log π†(y*|x) - log π†(ŷ|x)]`` for the greedy ``ŷ = argmax π̂``.

    Without ``generator`` the test inputs come from a fixed seed, so repeated calls compare
    models on the same inputs.
    """
    n_test = as_int("n_test", n_test, 1)
    if not callable(getattr(world, "true_policy", None)):
        raise TypeError(f"world must have a true_policy(x) method, got {type(world).__name__}")
    ref = next(model.parameters())
    gen = generator if generator is not None else torch.Generator().manual_seed(12345)
    x = world.sample_x(n_test, gen).to(device=ref.device, dtype=ref.dtype)
    was = model.training
    model.eval()
    logq = model(x, use_adapter=use_adapter).to(torch.float64)
    p = world.true_policy(x.to(torch.float64))
    if p.shape != logq.shape:
        raise ValueError(f"the model has {logq.shape[1]} outputs, the world {p.shape[1]}")
    q = logq.exp()
    tv = 0.5 * (p - q).abs().sum(-1)
    kl = (p * (torch.log(p.clamp_min(1e-300)) - logq)).sum(-1)
    yhat = q.argmax(-1)
    logp = torch.log(p.clamp_min(1e-300))
    regret = logp.max(-1).values - logp.gather(1, yhat[:, None]).squeeze(1)
    t = sample_preferences(world.true_policy, n_test, generator=gen, d_x=world.d_x)
    t = t.to(device=ref.device, dtype=ref.dtype)
    lq = model(t.x, use_adapter=use_adapter)
    acc = (lq.gather(1, t.y_w[:, None]) > lq.gather(1, t.y_l[:, None])).double().mean()
    model.train(was)
    return {
        "tv": float(tv.mean()),
        "kl": float(kl.mean()),
        "pref_acc": float(acc),
        "regret": float(regret.mean()),
    }
