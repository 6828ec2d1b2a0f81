"""The over-refusal request language: ground truth, samplers and training data."""

from __future__ import annotations

import random

import pytest

from icml25.orbench import CATEGORIES
from icml25.toy.overrefusal_lang import REFUSAL, OverRefusalWorld


def test_ground_truth_is_harmful_verb_sensitive_topic_and_no_mitigation():
    w = OverRefusalWorld(CATEGORIES)
    assert w.is_toxic("poison hate0 now")
    assert not w.is_toxic("poison hate0 safely")  # mitigating word
    assert not w.is_toxic("explain hate0 now")  # benign verb
    assert not w.is_toxic("poison garden now")  # neutral noun
    assert not w.is_toxic("poison hate0")  # malformed
    assert w.category_of("steal selfharm2 today") == "self-harm"
    assert w.category_of("steal garden today") is None
    all_req = w.all_requests()
    assert len(all_req) == 16 * 70 * 12
    assert sum(map(w.is_toxic, all_req)) == 8 * 40 * 8


def test_samplers_produce_what_they_say():
    w, rng = OverRefusalWorld(CATEGORIES, 3), random.Random(0)
    for _ in range(200):
        assert (
            w.is_toxic(w.toxic("privacy", rng))
            and w.category_of(w.toxic("privacy", rng)) == "privacy"
        )
        assert not w.is_toxic(w.plain_benign(rng)) and w.category_of(w.plain_benign(rng)) is None
        assert not w.is_toxic(w.benign_sensitive(rng)) and w.category_of(w.benign_sensitive(rng))
        assert not w.is_toxic(w.mitigated(rng))
    pairs = w.safety_pairs(2000, rng, refusal_fraction=0.1, contrastive_fraction=0.2)
    refused = [p for p, a in pairs if a == REFUSAL]
    assert 0.07 < len(refused) / 2000 < 0.13 and all(w.is_toxic(p) for p in refused)
    answered = [p for p, a in pairs if a != REFUSAL]
    assert not any(w.is_toxic(p) for p in answered)
    assert all(a == w.answer(p) for p, a in pairs if a != REFUSAL)
    assert all(a.startswith("sure ") for _, a in w.base_pairs(50, rng))
    with pytest.raises(ValueError, match="refusal_fraction"):
        w.safety_pairs(10, rng, refusal_fraction=0.8, contrastive_fraction=0.5)
    with pytest.raises(ValueError, match="non-empty strings"):
        OverRefusalWorld([])
