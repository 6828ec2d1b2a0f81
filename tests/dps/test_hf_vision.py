"""HFVisionChat on a random-init tiny LLaVA, offline, through DPS."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def tiny_llava():
    transformers = pytest.importorskip("transformers")
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaProcessor,
    )

    from icml25.toy.tokenizer import build_tokenizer

    tok = build_tokenizer(
        ["what is this a cat dog digit the image shows"], vocab_size=64, kind="word"
    )
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    vc = CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
        projection_dim=16,
    )
    tc = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    cfg = LlavaConfig(
        vision_config=vc,
        text_config=tc,
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    import torch

    torch.manual_seed(0)
    model = transformers.LlavaForConditionalGeneration(cfg).eval()
    template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{% for p in m['content'] %}{% if p['type'] == 'image' %}"
        "<image>{% else %}{{ p['text'] }}{% endif %}{% endfor %}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ip = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    proc = LlavaProcessor(
        image_processor=ip,
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy="default",
        chat_template=template,
        num_additional_image_tokens=1,
    )
    return model, proc


def test_hf_vision_chat_answers_with_images_and_runs_dps(tiny_llava):
    from icml25.dps import DPSDefense
    from icml25.dps.backends import HFVisionChat
    from icml25.dps.images import image_part

    model, proc = tiny_llava
    chat = HFVisionChat(model, proc, max_new_tokens=4)
    img = (np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)
    msgs = [
        {"role": "user", "content": [image_part(img), {"type": "text", "text": "what is this"}]}
    ]
    a, b = chat.chat(msgs, temperature=0.0)[0], chat.chat(msgs, temperature=0.0)[0]
    assert isinstance(a, str) and a == b  # greedy is deterministic
    conv, images = chat.convert(msgs)
    assert conv[0]["content"][0] == {"type": "image"} and images[0].size == (32, 32)
    res = DPSDefense(chat, max_tokens=4).respond(img, "what is this")
    assert res.n_calls["lvlm"] == 5 and isinstance(res.final, str)
    with pytest.raises(ValueError, match="local folder"):
        HFVisionChat("no/such/model")
