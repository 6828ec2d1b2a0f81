"""The DigitsVLM stand-in (rules and evidence fusion), the tensor attacks' budgets, the metrics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icml25.dps import DPSDefense
from icml25.dps.attacks import apply_patch, pgd_linf, universal_patch
from icml25.dps.images import encode_data_url, to_pil
from icml25.dps.metrics import (
    LabelJudge,
    attack_success_rate,
    clean_accuracy,
    misleading_asr,
    relative_asr_reduction,
)
from icml25.dps.standin import DigitsCNN, DigitsVLM, confusion_matrix, fuse, random_resized_crop

pytest.importorskip("sklearn")


def test_fusion_rules_by_hand():
    p = np.array([0.05, 0.6, 0.3, 0.05] + [0.0] * 6) + 1e-6
    logp = np.log(p / p.sum())
    conf = np.full((10, 10), 0.02)
    np.fill_diagonal(conf, 0.82)
    # bayes: log p(c) + log C[c, 2] twice -> 2 wins (0.3 * 0.82^2 > 0.6 * 0.02^2)
    assert fuse(logp, [2, 2], fusion="bayes", confusion=conf) == 2
    scores = logp + np.log(conf[:, 2]) * 2
    assert fuse(logp, [2, 2], fusion="bayes", confusion=conf) == int(np.argmax(scores))
    # bonus: log p + lam per hint; one hint of 2 with lam 0.5 is not enough (log 0.6 - log 0.3 = 0.69)
    assert (
        fuse(logp, [2], fusion="bonus", lam=0.5) == 1
        and fuse(logp, [2], fusion="bonus", lam=1.0) == 2
    )
    with pytest.raises(ValueError, match="fusion"):
        fuse(logp, [], fusion="vote")


def test_a_confident_clean_answer_is_not_flipped_by_one_contrary_hint():
    conf = np.full((10, 10), 0.5 / 9 * 0.2)
    np.fill_diagonal(conf, 0.0)
    conf += np.eye(10) * 0.9
    conf /= conf.sum(1, keepdims=True)  # a classifier right 90 % of the time on crops
    p = np.full(10, 0.001)
    p[4] = 1 - 0.009  # max p > 0.99
    assert fuse(np.log(p), [7], fusion="bayes", confusion=conf) == 4


class Fixed(torch.nn.Module):
    """Logits from the image's mean brightness: dark -> 0, bright -> 9."""

    def forward(self, x):
        m = x.mean(dim=(1, 2, 3))
        return torch.stack([-((m - k / 9) ** 2) * 200 for k in range(10)], 1)


def test_digits_vlm_rules_and_dps_pipeline():
    conf = np.full((10, 10), 0.01)
    np.fill_diagonal(conf, 0.91)
    vlm = DigitsVLM(Fixed(), conf)
    bright = np.ones((32, 32))
    msg = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Which digit?"},
                {
                    "type": "image_url",
                    "image_url": {"url": encode_data_url(bright)},
                },
            ],
        }
    ]
    assert vlm.chat(msg)[0] == "The digit is 9."
    assert (
        vlm.chat(
            msg[:1]
            + [
                {"role": "assistant", "content": "x"},
                {"role": "user", "content": "Give the coordinates of every text box"},
            ]
        )[0]
        == "{}"
    )
    unsure = DigitsVLM(Fixed(), conf, tau_unsure=1.0)  # never sure (max p < 1)
    assert "unable to determine" in unsure.chat(msg)[0]
    res = DPSDefense(unsure).respond(bright, "Which digit is this?")
    assert (
        res.informative == [False] and res.observations == res.weak_descriptions
    )  # the description replaces it
    assert LabelJudge()(res.final) is None  # never sure, no hint: "no answer"
    with pytest.raises(ValueError, match="confusion"):
        DigitsVLM(Fixed(), None)


def test_pgd_respects_its_budget_and_raises_the_target_probability():
    torch.manual_seed(0)
    model = DigitsCNN(8).eval()
    x = torch.rand(6, 1, 32, 32)
    t = torch.tensor([3, 1, 4, 1, 5, 9])
    adv = pgd_linf(model, x, t, eps=0.1, step=0.02, steps=10)
    assert (adv - x).abs().max() <= 0.1 + 1e-6 and adv.min() >= 0 and adv.max() <= 1
    with torch.no_grad():
        before = torch.softmax(model(x), -1)[range(6), t]
        after = torch.softmax(model(adv), -1)[range(6), t]
    assert (after > before).all()
    ens = pgd_linf([model, DigitsCNN(8).eval()], x, t, eps=0.05, steps=3)
    assert (ens - x).abs().max() <= 0.05 + 1e-6
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        pgd_linf(model, x * 3, t)


def test_universal_patch_is_a_valid_image_and_pastes_at_corners():
    torch.manual_seed(0)
    model = DigitsCNN(8).eval()
    x = torch.rand(16, 1, 32, 32)
    patch = universal_patch(model, x, target=2, size=8, steps=5, batch_size=8)
    assert patch.shape == (1, 8, 8) and patch.min() >= 0 and patch.max() <= 1
    out = apply_patch(x[:4], patch, [0, 1, 2, 3])
    assert torch.equal(out[0, :, :8, :8], patch) and torch.equal(out[3, :, -8:, -8:], patch)
    assert torch.equal(out[0, :, 8:, 8:], x[0, :, 8:, 8:])  # the rest is untouched
    # the centre crop [8, 24) removes a corner patch completely
    assert torch.equal(out[:, :, 8:24, 8:24], x[:4, :, 8:24, 8:24])


def test_random_resized_crop_batched_and_confusion_matrix():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(5, 1, 32, 32)
    y = random_resized_crop(x, gen)
    assert y.shape == x.shape and y.min() >= 0 and y.max() <= 1
    c = confusion_matrix(
        Fixed(), torch.stack([torch.full((1, 32, 32), k / 9) for k in range(10)]), torch.arange(10)
    )
    assert (
        c.shape == (10, 10)
        and np.allclose(c.sum(1), 1)
        and (np.argmax(c, 1) == np.arange(10)).all()
    )


def test_standin_inputs_users_pass():
    from icml25.dps.standin import DigitsCNN, DigitsVLM, digits32

    vlm = DigitsVLM(DigitsCNN(4), np.full((10, 10), 0.1))
    img = np.linspace(0, 1, 32 * 32).reshape(32, 32)
    p = vlm.probs(torch.from_numpy(img))
    assert p.shape == (10,) and p.dtype == np.float64 and np.isclose(p.sum(), 1)
    assert np.allclose(vlm.probs(img), p, atol=1e-6)  # array and tensor read alike
    with pytest.raises(ValueError, match="seed must be an integer"):
        digits32(-1)
    with pytest.raises(ValueError, match="seed must be an integer"):
        digits32(1.5)


def test_metrics():
    assert LabelJudge()("The digit is 7.") == 7 and LabelJudge()("no idea") is None
    assert clean_accuracy([1, 2, None], [1, 3, 3]) == pytest.approx(1 / 3)
    assert attack_success_rate([2, 2, 0], [2, 1, 0]) == pytest.approx(2 / 3)
    assert misleading_asr([5, 1, None], [1, 1, 1], [True, True, True]) == pytest.approx(1 / 3)
    assert relative_asr_reduction(0.2, 0.8) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="nothing to reduce"):
        relative_asr_reduction(0.1, 0.0)
    with pytest.raises(ValueError, match="undefined"):
        misleading_asr([1], [1], [False])
    assert to_pil(np.zeros((4, 4))).size == (4, 4)
