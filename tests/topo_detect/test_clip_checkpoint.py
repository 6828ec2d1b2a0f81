"""``HFCLIPAdapter`` on a saved CLIP checkpoint (the tiny random-init ``"clip"`` architecture of
:mod:`icml25.toy.archs`, with its real ``CLIPProcessor``): loaded by path through
``icml25.llm.load_model(kind="clip")`` with ``device`` and ``dtype``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from icml25.topo_detect import HFCLIPAdapter  # noqa: E402
from icml25.toy import save_tiny  # noqa: E402


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    return save_tiny("clip", tmp_path_factory.mktemp("clip") / "clip")


def test_a_path_loads_through_load_model_with_device_dtype_and_its_processor(clip_dir, monkeypatch):
    import icml25.llm.loading as loading

    seen = {}
    real = loading.load_model

    def spy(*args, **kwargs):
        seen.update(kwargs, args=args)
        return real(*args, **kwargs)

    monkeypatch.setattr(loading, "load_model", spy)
    adapter = HFCLIPAdapter(str(clip_dir), dtype="bf16", device="cpu")
    assert seen["args"] == (str(clip_dir), "clip")
    assert (seen["device"], seen["dtype"]) == ("cpu", "bf16")
    assert next(adapter.model.parameters()).dtype == torch.bfloat16
    assert adapter.processor is not None and not adapter.model.training
    HFCLIPAdapter(str(clip_dir))
    assert (seen["device"], seen["dtype"]) == ("auto", "auto")
    with pytest.raises(ValueError, match="dtype must be"):
        HFCLIPAdapter(str(clip_dir), dtype="int8")


def test_bf16_clip_embeds_float32_pixels_like_fp32_and_passes_gradients(clip_dir):
    fp32 = HFCLIPAdapter(str(clip_dir), dtype="fp32")
    bf16 = HFCLIPAdapter(str(clip_dir), dtype="bf16")
    x = torch.rand(3, 3, 40, 40, generator=torch.Generator().manual_seed(0), requires_grad=True)
    a, b = fp32.encode_image(x), bf16.encode_image(x)
    assert a.dtype == b.dtype == torch.float32 and a.shape == (3, 16)
    torch.testing.assert_close(a.norm(dim=-1), torch.ones(3))
    assert (a * b).sum(-1).min() > 0.98  # same embeddings up to bf16 rounding
    texts = ["a photo of a cat", "a photo of a dog"]
    t32, t16 = fp32.encode_text(texts), bf16.encode_text(texts)
    assert t16.dtype == torch.float32 and t16.shape == (2, 16)
    assert (t32 * t16).sum(-1).min() > 0.98
    logits = bf16.logits(x, t16)
    assert logits.shape == (3, 2) and logits.dtype == torch.float32
    logits.sum().backward()  # attacks need d logits / d pixels through the bf16 model
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_a_text_longer_than_clips_context_is_refused(clip_dir):
    adapter = HFCLIPAdapter(str(clip_dir))
    with pytest.raises(ValueError, match="context of 77"):
        adapter.encode_text([" ".join(["cat"] * 100)])
