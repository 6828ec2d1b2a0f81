"""Target selection on our LoRA wrapper, PEFT and plain q/k/v; one-pass statistics equal the
layer-by-layer computation; pruned-then-merged equals the spec's merged-delta formula."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.antidote import (
    AntidoteConfig,
    activation_sq_norms,
    antidote_prune,
    select_target_layers,
)
from icml25.lora import inject_lora
from icml25.toy.safety_lang import HarmfulFinetuneWorld


def _tiny_llama_with_lora(seed=0):
    world = HarmfulFinetuneWorld(seed)
    model = world.model(seed, hidden=32, intermediate=64)
    torch.manual_seed(seed)
    inject_lora(model, ["q_proj", "k_proj", "v_proj"], r=4, alpha=8, init_a=math.sqrt(5))
    for name, p in model.named_parameters():
        if name.endswith("lora_B"):
            p.data.normal_(0, 0.1)  # a "fine-tuned" adapter
    return world, model


def _calib(world, n=12, bs=5):
    import random

    rng = random.Random(0)
    pairs = [world.harmful("cal", rng) if i % 2 else world.task(rng) for i in range(n)]
    return world.batches(pairs, bs)  # mixed lengths: padding present


def test_lora_targets_on_our_wrapper_and_one_pass_equals_layer_by_layer():
    world, model = _tiny_llama_with_lora()
    layers = select_target_layers(model, "lora")
    assert len(layers) == 2 * 3 * 2  # A and B of q, k, v in 2 layers
    assert all(k.endswith(("lora_A", "lora_B")) for k in layers)
    batches = _calib(world)
    together = activation_sq_norms(model, layers, batches, stat_dtype=torch.float64)
    for name, t in layers.items():
        alone = activation_sq_norms(model, {name: t}, batches, stat_dtype=torch.float64)
        torch.testing.assert_close(alone[name], together[name], rtol=1e-12, atol=0)
    # B's input is A x: its statistics have the adapter's rank
    assert together["model.layers.0.self_attn.q_proj.lora_B"].shape == (4,)


def test_pruned_adapter_merges_to_the_spec_formula():
    world, model = _tiny_llama_with_lora()
    wrapper = model.model.layers[1].self_attn.v_proj
    A0, B0 = wrapper.lora_A.detach().clone(), wrapper.lora_B.detach().clone()
    res = antidote_prune(model, _calib(world), AntidoteConfig(dense_ratio=0.25))
    mA = res.mask["model.layers.1.self_attn.v_proj.lora_A"]
    mB = res.mask["model.layers.1.self_attn.v_proj.lora_B"]
    expect = wrapper.scaling * (B0 * ~mB) @ (A0 * ~mA)
    torch.testing.assert_close(wrapper.delta_weight(), expect)
    assert res.n_pruned == sum(int(m.sum()) for m in res.mask.values()) > 0
    # base weights untouched
    assert select_target_layers(model, "qkv", lambda n, m: True)
    x = torch.randint(3, 20, (2, 7))
    wrapper.merge()
    with pytest.raises(ValueError, match="merged"):
        select_target_layers(model, "lora")
    wrapper.unmerge()
    assert model(input_ids=x).logits.shape == (2, 7, len(world.vocab))


def test_qkv_targets_and_errors():
    world = HarmfulFinetuneWorld(0)
    model = world.model(0, hidden=32, intermediate=64)
    layers = select_target_layers(model, "qkv")
    assert (
        sorted(k.rsplit(".", 1)[1] for k in layers)
        == ["k_proj"] * 2 + ["q_proj"] * 2 + ["v_proj"] * 2
    )
    with pytest.raises(ValueError, match="no target layers.*merged"):
        select_target_layers(model, "lora")
    with pytest.raises(ValueError, match="target must be"):
        select_target_layers(model, "mlp")
    with pytest.raises(ValueError, match="target_filter"):
        select_target_layers(model, "custom")


def test_peft_lora_names_and_merged_adapter():
    peft = pytest.importorskip("peft")
    world = HarmfulFinetuneWorld(0)
    model = world.model(0, hidden=32, intermediate=64)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj"])
    pm = peft.get_peft_model(model, cfg)
    layers = select_target_layers(pm, "lora")
    assert len(layers) == 12
    assert any(k.endswith("self_attn.q_proj.lora_A.default") for k in layers)
    for n, p in pm.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.1)
    res = antidote_prune(pm, _calib(world), AntidoteConfig(dense_ratio=0.25))
    a = res.mask[next(k for k in layers if k.endswith("q_proj.lora_A.default"))]
    assert (a.sum(1) == 32 - math.floor(32 * 0.75)).all()
    pm.merge_adapter()
    with pytest.raises(ValueError, match="merged"):
        select_target_layers(pm, "lora")
