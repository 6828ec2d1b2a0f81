from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def toy():
    """A word tokenizer over the reversal task's symbols, an untrained tiny Llama, and 24 pairs."""
    from icml25.fpo.synthetic import ReversalTask
    from icml25.toy import build_tokenizer, tiny_causal_lm

    task = ReversalTask()
    tok = build_tokenizer([" ".join(task.vocabulary())] * 2, kind="word")
    model = tiny_causal_lm(tok, d_model=32, n_layers=2, max_positions=32, seed=0)
    prompts = task.prompts(24, 1)
    recs = []
    for i, p in enumerate(prompts):
        good = task.ideal(p)
        bad = " ".join(good.split()[:-1]) or "a"
        if i % 2:  # half plain strings, half chat format
            recs.append({"prompt": p, "chosen": good, "rejected": bad})
        else:
            recs.append(
                {
                    "prompt": [{"role": "user", "content": p}],
                    "chosen": [{"role": "assistant", "content": good}],
                    "rejected": [{"role": "assistant", "content": bad + " b"}],
                }
            )
    return tok, model, recs


@pytest.fixture(scope="session")
def toy_sae(toy):
    from icml25.fpo import SparseAutoencoder

    g = torch.Generator().manual_seed(0)
    sae = SparseAutoencoder(32, 96, "topk", k_sae=6)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(32, 96, generator=g))
        sae.W_dec.copy_(torch.randn(96, 32, generator=g) / 6)
        sae.b_enc.copy_(torch.randn(96, generator=g) * 0.1)
    return sae.requires_grad_(False)
