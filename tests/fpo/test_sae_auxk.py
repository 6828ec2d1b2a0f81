"""Issue 49: the opt-in AuxK loss of ``train_sae`` (Gao et al. 2024, §A.2) against dead latents."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icml25.fpo import train_sae
from icml25.fpo.sae import _auxk_loss


def _acts(n=400, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g) @ torch.randn(d, d, generator=g)


def test_auxk_off_by_default_and_a_zero_coefficient_is_the_default_path():
    acts = _acts()
    a, ia = train_sae(acts, d_sae=32, k_sae=2, steps=30, batch=64, progress=False)
    b, ib = train_sae(
        acts, d_sae=32, k_sae=2, steps=30, batch=64, aux_k=4, aux_coef=0.0, progress=False
    )
    assert torch.equal(a.W_dec, b.W_dec) and torch.equal(a.W_enc, b.W_enc)
    assert "aux_dead_frac" not in ia and 0.0 <= ib["aux_dead_frac"] <= 1.0


def test_auxk_trains_the_dead_latents():
    acts = _acts()
    a, _ = train_sae(acts, d_sae=32, k_sae=2, steps=30, batch=64, progress=False)
    b, info = train_sae(
        acts,
        d_sae=32,
        k_sae=2,
        steps=30,
        batch=64,
        aux_k=4,
        dead_after_steps=np.int64(2),
        progress=False,
    )
    assert not torch.equal(a.W_enc, b.W_enc)
    assert info["aux_dead_frac"] > 0  # 32 latents, 2 active per vector: some go unused


def test_auxk_gradient_reaches_only_dead_latents():
    g = torch.Generator().manual_seed(1)
    pre = (torch.rand(5, 6, generator=g) + 0.1).requires_grad_(True)
    W = torch.randn(6, 3, generator=g).requires_grad_(True)
    dead = torch.tensor([True, False, True, False, False, True])
    _auxk_loss(pre, torch.randn(5, 3, generator=g), W, dead, 2).backward()
    assert bool((pre.grad[:, ~dead] == 0).all()) and bool((pre.grad[:, dead] != 0).any())
    assert bool((W.grad[~dead] == 0).all())


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"kind": "relu", "l1": 1e-3, "aux_k": 4}, "aux_k .* is for kind='topk'"),
        ({"aux_k": 0}, r"aux_k must be an integer in \[1, 32\], got 0"),
        ({"aux_k": 4, "aux_coef": float("nan")}, "aux_coef must be a finite number >= 0"),
        ({"aux_k": 4, "dead_after_steps": 0}, "dead_after_steps must be an integer >= 1"),
    ],
)
def test_auxk_bad_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        train_sae(_acts(), d_sae=32, k_sae=2, steps=2, progress=False, **kw)
