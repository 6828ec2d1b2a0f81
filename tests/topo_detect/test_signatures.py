"""signature_curve (§5) on the user's own embeddings and models, and the input-space gradient
signatures (§6, wrt="input")."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.topo_detect import sample_signatures, signature_curve, tp_loss
from icml25.topo_detect.models import TinyTwoTower


def _unit(n, d, seed):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.normalize(x, dim=-1)


def test_signature_curve_on_embeddings_grows_with_a_spread_out_adversary():
    clean = _unit(120, 8, 0) * 0.2 + torch.tensor([1.0] + [0.0] * 7)  # a tight cluster
    clean = torch.nn.functional.normalize(clean, dim=-1)
    adv = _unit(120, 8, 1)  # adversarial embeddings spread over the sphere
    T = torch.nn.functional.normalize(torch.eye(3, 8), dim=-1)
    out = signature_curve(
        None,
        clean,
        adv,
        T,
        fractions=(0, 0.5, 1),
        batch_size=40,
        n_batches=3,
        generator=torch.Generator().manual_seed(0),
    )
    assert out["fractions"] == [0.0, 0.5, 1.0]
    for key in ("tp", "mk", "pers0_x", "pers1_x", "pers0_y", "pers1_y"):
        assert len(out[key]["mean"]) == 3 and all(math.isfinite(v) for v in out[key]["mean"])
        assert all(s >= 0 for s in out[key]["std"])
    assert out["pers0_x"]["mean"][0] < out["pers0_x"]["mean"][2]  # the image cloud spreads
    assert out["spearman"]["tp"] == pytest.approx(1.0)
    # pairings: by label and by caption
    labels = torch.arange(120) % 3
    lab = signature_curve(
        None,
        clean,
        adv,
        T,
        fractions=(0, 1),
        batch_size=40,
        n_batches=2,
        pairing="label",
        labels=labels,
    )
    assert lab["pers0_y"]["mean"][0] > 0
    cap = signature_curve(
        None,
        clean,
        adv,
        _unit(120, 8, 2),
        fractions=(0, 1),
        batch_size=40,
        n_batches=2,
        pairing="caption",
    )
    assert cap["pers0_y"]["mean"][0] > lab["pers0_y"]["mean"][0]  # 40 distinct captions


def test_signature_curve_encodes_images_with_the_model():
    model = TinyTwoTower(8)
    x = torch.rand(60, 64, generator=torch.Generator().manual_seed(0))
    adv = (x + 0.3 * torch.rand(60, 64, generator=torch.Generator().manual_seed(1))).clamp(0, 1)
    T = model.encode_text_embeddings(torch.randn(10, 384)).detach()
    out = signature_curve(model, x, adv, T, fractions=(0, 1), batch_size=30, n_batches=2)
    direct = signature_curve(
        None,
        model.encode_image(x).detach(),
        model.encode_image(adv).detach(),
        T,
        fractions=(0, 1),
        batch_size=30,
        n_batches=2,
        generator=torch.Generator().manual_seed(3),
    )
    assert len(out["tp"]["mean"]) == 2 and len(direct["tp"]["mean"]) == 2


def test_signature_curve_bad_input():
    E = _unit(20, 4, 0)
    T = _unit(3, 4, 1)
    with pytest.raises(ValueError, match="attacked clean"):
        signature_curve(None, E, E[:10], T)
    with pytest.raises(ValueError, match="pairing"):
        signature_curve(None, E, E, T, pairing="nearest")
    with pytest.raises(ValueError, match="labels"):
        signature_curve(None, E, E, T, pairing="label")
    with pytest.raises(ValueError, match="fractions"):
        signature_curve(None, E, E, T, fractions=(0, 1.5), batch_size=10)
    with pytest.raises(ValueError, match="at least 2 distinct"):
        signature_curve(None, E, E, T, fractions=(0.5,), batch_size=10)
    with pytest.raises(ValueError, match="batch_size"):
        signature_curve(None, E, E, T, batch_size=100)
    with pytest.raises(ValueError, match=r"class_texts must be \(K, 4\)"):
        signature_curve(None, E, E, _unit(3, 5, 1), batch_size=10)
    with pytest.raises(ValueError, match="encode_text"):
        signature_curve(None, E, E, ["a cat", "a dog"], batch_size=10)


def test_input_space_gradients_chain_through_the_encoder():
    model = TinyTwoTower(8).double()
    x = torch.rand(30, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    e = model.encode_image(x).detach()
    t = _unit(30, 8, 3).double()
    g = sample_signatures(
        e,
        t,
        mode="gradient",
        wrt="input",
        image_encoder=model.encode_image,
        images=x,
        chunk_size=30,
        generator=torch.Generator().manual_seed(0),
    )
    assert g.shape == (30, 64) and bool(torch.isfinite(g).all())
    leaf = x.clone().requires_grad_(True)
    (ref,) = torch.autograd.grad(tp_loss(model.encode_image(leaf), t), leaf)
    assert torch.allclose(g, ref, atol=1e-10)  # one chunk holds every sample
    imgs = torch.rand(4, 3, 64, 64, dtype=torch.float64)
    enc = lambda z: torch.nn.functional.normalize(z.mean((2, 3)), dim=-1)  # noqa: E731
    big = sample_signatures(
        torch.randn(4, 3, dtype=torch.float64),
        _unit(4, 3, 0).double(),
        mode="gradient",
        wrt="input",
        image_encoder=enc,
        images=imgs,
        chunk_size=4,
    )
    assert big.shape == (4, 3 * 32 * 32)  # pooled to 32 x 32
    with pytest.raises(ValueError, match="mode='gradient'"):
        sample_signatures(e, t, wrt="input", image_encoder=model.encode_image, images=x)
    with pytest.raises(ValueError, match="needs image_encoder"):
        sample_signatures(e, t, mode="gradient", wrt="input")
    with pytest.raises(ValueError, match="wrt"):
        sample_signatures(e, t, mode="gradient", wrt="pixels")
