from __future__ import annotations

import numpy as np
import pytest
import torch

from icml25.safety_reasoning.representation import (
    last_token_states,
    pca_projection,
    proxy_a_distance,
)

pytest.importorskip("sklearn")


def test_proxy_a_distance_limits():
    rng = np.random.default_rng(0)
    same = proxy_a_distance(rng.normal(size=(300, 8)), rng.normal(size=(300, 8)), seed=0)
    far = proxy_a_distance(rng.normal(size=(300, 8)), rng.normal(size=(300, 8)) + 6.0, seed=0)
    assert same < 0.3 and far == pytest.approx(2.0)
    d, err = proxy_a_distance(
        rng.normal(size=(50, 3)), rng.normal(size=(50, 3)) + 1.0, return_errors=True
    )
    assert err.shape == (100,) and d == pytest.approx(2 * (1 - 2 * min(0.5, err.mean())))


def test_proxy_a_distance_accepts_tensors_and_checks_input():
    a = torch.randn(40, 4)
    assert 0 <= proxy_a_distance(a, a + 10) <= 2
    with pytest.raises(ValueError, match="dimension"):
        proxy_a_distance(np.ones((10, 3)), np.ones((10, 4)))
    with pytest.raises(ValueError, match="at least folds"):
        proxy_a_distance(np.ones((1, 3)), np.ones((10, 3)))
    with pytest.raises(ValueError, match="non-finite"):
        proxy_a_distance(np.full((10, 3), np.nan), np.ones((10, 3)))


def test_last_token_states_match_a_manual_forward(toy_lm):
    model, tok = toy_lm
    prompts = ["hv1 dt2 f3", "cipher hv1_c dt2_c f3", "bv4 nt5 f1"]
    states = last_token_states(model, tok, prompts, layer=1, batch_size=2)
    assert states.shape == (3, model.config.hidden_size) and states.dtype == torch.float32
    for i, p in enumerate(prompts):
        text = tok.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            hs = model(input_ids=ids, output_hidden_states=True).hidden_states[1]
        torch.testing.assert_close(states[i], hs[0, -1], rtol=1e-4, atol=1e-5)
    assert torch.equal(
        last_token_states(model, tok, prompts, "last"), last_token_states(model, tok, prompts, -1)
    )
    with pytest.raises(ValueError, match="out of range"):
        last_token_states(model, tok, prompts, 9)
    with pytest.raises(ValueError, match="non-empty"):
        last_token_states(model, tok, [], 1)


def test_pca_projection_shapes():
    rng = np.random.default_rng(1)
    p = pca_projection(
        rng.normal(size=(20, 6)), rng.normal(size=(30, 6)), {"a": rng.normal(size=(5, 6))}
    )
    assert (
        p["id_harm"].shape == (20, 2)
        and p["id_help"].shape == (30, 2)
        and p["ood"]["a"].shape == (5, 2)
    )
    assert np.allclose(np.concatenate([p["id_harm"], p["id_help"]]).mean(0), 0, atol=1e-10)
    with pytest.raises(ValueError, match="n_components"):
        pca_projection(np.ones((3, 2)), np.ones((3, 2)), n_components=5)
