from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def world():
    from icml25.toy.jailbreak_lang import JailbreakWorld

    return JailbreakWorld(0, "V2")


@pytest.fixture(scope="session")
def toy_lm(world):
    """The world's tokenizer and a random-init tiny Llama (hidden 32, 2 layers)."""
    tok = world.build_tokenizer()
    model = world.build_model(tok, seed=0, d_model=32, n_layers=2)
    return model, tok
