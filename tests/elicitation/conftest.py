from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def world():
    from icml25.elicitation import PlantedTriggerWorld

    return PlantedTriggerWorld(0)


@pytest.fixture(scope="session")
def tok(world):
    return world.build_tokenizer()


@pytest.fixture()
def tiny(world, tok):
    """A random-init tiny Llama over the world's vocabulary (d 32, 2 layers)."""
    from icml25.toy.models import tiny_causal_lm

    return tiny_causal_lm(tok, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_positions=32, seed=0)


@pytest.fixture()
def inv(world, tok, tiny):
    from icml25.elicitation import Investigator

    return Investigator(
        tiny, tok, allowed_token_ids=world.content_ids(tok), exact_length=world.prompt_len
    )
