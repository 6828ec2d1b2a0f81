"""SAE encoders and loaders, activation harvesting/training, and the residual-stream hook."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icml25.fpo import (
    SparseAutoencoder,
    from_sae_lens,
    harvest_activations,
    load_gemma_scope_npz,
    train_sae,
)
from icml25.fpo.hooks import ResidualCapture, get_decoder_layers
from icml25.fpo.sae import sae_metrics


def test_shapes_and_kinds():
    h = torch.randn(2, 5, 8)
    for kind, kw in (("topk", {"k_sae": 3}), ("relu", {}), ("jumprelu", {})):
        sae = SparseAutoencoder(8, 20, kind, **kw)
        torch.nn.init.normal_(sae.W_enc)
        rec, c = sae(h)
        assert rec.shape == (2, 5, 8) and c.shape == (2, 5, 20) and bool((c >= 0).all())
    assert (
        int(
            (
                (
                    SparseAutoencoder(8, 20, "topk", k_sae=3)
                    .requires_grad_(False)
                    .__class__(8, 20, "topk", k_sae=3)
                ).encode(h)
                > 0
            ).sum()
        )
        == 0
    )
    sae = SparseAutoencoder(8, 20, "topk", k_sae=3)
    torch.nn.init.normal_(sae.W_enc)
    assert int((sae.encode(h) > 0).sum(-1).max()) <= 3


def test_jumprelu_zeroes_preactivations_at_or_below_threshold():
    sae = SparseAutoencoder(2, 3, "jumprelu")
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(2, 3))
        sae.threshold.copy_(torch.tensor([0.5, 0.5, 0.0]))
    c = sae.encode(torch.tensor([[0.5, 0.7]]))
    assert c.tolist() == [[0.0, pytest.approx(0.7), 0.0]]


def _npz(tmp_path, d=6, m=10, seed=0):
    rng = np.random.default_rng(seed)
    arr = {
        "W_enc": rng.normal(size=(d, m)),
        "W_dec": rng.normal(size=(m, d)),
        "threshold": np.abs(rng.normal(size=m)) * 0.5,
        "b_enc": rng.normal(size=m) * 0.1,
        "b_dec": rng.normal(size=d),
    }
    p = tmp_path / "params.npz"
    np.savez(p, **{k: v.astype(np.float32) for k, v in arr.items()})
    return p, arr


def test_gemma_scope_npz_matches_numpy(tmp_path):
    p, a = _npz(tmp_path)
    sae = load_gemma_scope_npz(p)
    h = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    pre = h @ a["W_enc"].astype(np.float32) + a["b_enc"].astype(np.float32)
    want = (pre > a["threshold"].astype(np.float32)) * np.maximum(pre, 0)
    got = sae.encode(torch.from_numpy(h)).numpy()
    assert np.allclose(got, want, atol=1e-5) and (want > 0).any() and (want == 0).any()
    rec = sae.decode(torch.from_numpy(want.astype(np.float32))).numpy()
    assert np.allclose(rec, want @ a["W_dec"] + a["b_dec"], atol=1e-4)
    assert not any(q.requires_grad for q in sae.parameters())


def test_gemma_scope_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no SAE file"):
        load_gemma_scope_npz(tmp_path / "missing.npz")
    np.savez(tmp_path / "x.npz", W_enc=np.zeros((3, 4)))
    with pytest.raises(ValueError, match="missing"):
        load_gemma_scope_npz(tmp_path / "x.npz")
    p, a = _npz(tmp_path)
    a["b_dec"] = np.zeros(5)
    np.savez(tmp_path / "bad.npz", **a)
    with pytest.raises(ValueError, match="b_dec has shape"):
        load_gemma_scope_npz(tmp_path / "bad.npz")


class _Cfg:
    def __init__(self, arch, apply_b=True, norm="none", k=None):
        self._arch, self.apply_b_dec_to_input, self.normalize_activations, self.k = (
            arch,
            apply_b,
            norm,
            k,
        )

    def architecture(self):
        return self._arch


class _StandIn:
    """The attributes of an SAELens SAE object (6.x): weights plus a cfg."""

    def __init__(self, arch="jumprelu", **cfg):
        g = torch.Generator().manual_seed(0)
        self.W_enc, self.W_dec = torch.randn(6, 10, generator=g), torch.randn(10, 6, generator=g)
        self.b_enc, self.b_dec = torch.randn(10, generator=g), torch.randn(6, generator=g)
        self.threshold = torch.rand(10, generator=g)
        self.cfg = _Cfg(arch, **cfg)


def test_from_sae_lens_reads_weights_and_b_dec_convention():
    s = _StandIn("jumprelu", apply_b=True)
    sae = from_sae_lens(s)
    h = torch.randn(3, 6)
    pre = (h - s.b_dec) @ s.W_enc + s.b_enc
    assert torch.allclose(sae.encode(h), torch.relu(pre) * (pre > s.threshold), atol=1e-6)
    relu = from_sae_lens(_StandIn("standard", apply_b=False))
    assert relu.kind == "relu" and not relu.apply_b_dec_to_input
    with pytest.raises(ValueError, match="normalize_activations='expected_average_only_in'"):
        from_sae_lens(_StandIn(norm="expected_average_only_in"))
    with pytest.raises(ValueError, match="cfg.k"):
        from_sae_lens(_StandIn("topk"))
    with pytest.raises(TypeError, match="W_enc"):
        from_sae_lens(object())


def test_train_sae_reaches_fve_on_synthetic_sparse_data():
    g = torch.Generator().manual_seed(0)
    dirs = torch.nn.functional.normalize(torch.randn(64, 32, generator=g), dim=1)
    idx = torch.stack([torch.randperm(64, generator=g)[:4] for _ in range(6000)])
    acts = (dirs[idx] * (1 + torch.rand(6000, 4, 1, generator=g))).sum(1)
    sae, info = train_sae(acts, d_sae=128, steps=600, progress=False)  # default k_sae = 8
    assert info["fve"] >= 0.7, info["fve"]
    assert info["l0"] == pytest.approx(8.0) and 0 <= info["dead_frac"] < 1
    m = sae_metrics(sae, acts[:500])
    assert m["fve"] >= 0.7
    with pytest.raises(ValueError, match="kind='relu' needs an L1 coefficient"):
        train_sae(acts, d_sae=16, kind="relu")
    with pytest.raises(ValueError, match="NaN"):
        train_sae(acts * float("nan"), d_sae=16)


def test_sae_rejects_wrong_width():
    sae = SparseAutoencoder(8, 16)
    with pytest.raises(ValueError, match="expects d_in=8"):
        sae.encode(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="kind must be one of"):
        SparseAutoencoder(8, 16, "gated")


def _models():
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
    )

    torch.manual_seed(0)
    return {
        "gpt2": GPT2LMHeadModel(
            GPT2Config(vocab_size=30, n_embd=16, n_layer=3, n_head=2, n_positions=16)
        ),
        "llama": LlamaForCausalLM(
            LlamaConfig(
                vocab_size=30,
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=3,
                num_attention_heads=2,
                num_key_value_heads=2,
            )
        ),
        "neox": GPTNeoXForCausalLM(
            GPTNeoXConfig(
                vocab_size=30,
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=3,
                num_attention_heads=2,
            )
        ),
    }


@pytest.mark.parametrize("arch", ["gpt2", "llama", "neox"])
def test_residual_capture_matches_hidden_states(arch):
    model = _models()[arch].eval()
    ids = torch.randint(0, 30, (2, 7))
    assert len(get_decoder_layers(model)) == 3
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    for layer in (0, 1):
        with ResidualCapture(model, layer) as cap, torch.no_grad():
            model(input_ids=ids)
        assert torch.allclose(cap.output, hs[layer + 1], atol=1e-6)
    with ResidualCapture(model, 2) as cap:
        model(input_ids=ids)
    # the last block's output is the pre-final-norm state; hidden_states[-1] is normed
    assert not torch.allclose(cap.output, hs[-1], atol=1e-4)
    assert cap.output.requires_grad and cap.output.grad_fn is not None


def test_residual_capture_bad_input():
    model = _models()["llama"]
    with pytest.raises(
        ValueError, match="layer 3 is out of range for a model with 3 decoder blocks"
    ):
        ResidualCapture(model, 3)
    with pytest.raises(ValueError, match="cannot find the decoder blocks of Linear"):
        ResidualCapture(torch.nn.Linear(2, 2), 0)
    cap = ResidualCapture(torch.nn.Linear(2, 2), module=torch.nn.Sequential())
    assert cap.output is None


def test_harvest_activations_response_only(toy):
    from icml25.fpo import PreferenceCollator

    tok, model, recs = toy
    col = PreferenceCollator(tok)
    b = col(recs[:4])
    acts = harvest_activations(model, [b], layer=1, max_vectors=1000)
    assert acts.shape == (int(b["completion_mask"].sum()), 32) and acts.dtype == torch.float32
    assert len(harvest_activations(model, [b, b], layer=1, max_vectors=5)) == 5
