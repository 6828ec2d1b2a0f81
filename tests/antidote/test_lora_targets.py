"""Target selection on our LoRA wrapper, PEFT (one and two adapters) and plain q/k/v; mask keys
are the model's parameter names (the official ``bad_mask.pt`` keys); one-pass statistics equal the
layer-by-layer computation; pruned-then-merged equals the merged-delta formula
``(alpha/r) (B * (1 - M_B)) (A * (1 - M_A))``."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.antidote import AntidoteConfig, antidote_prune
from icml25.antidote.masks import apply_mask
from icml25.antidote.scores import activation_sq_norms
from icml25.antidote.targets import peft_adapters, select_target_layers
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
        sorted(k.split(".")[-2] for k in layers) == ["k_proj"] * 2 + ["q_proj"] * 2 + ["v_proj"] * 2
    )
    with pytest.raises(ValueError, match="no target layers.*merged"):
        select_target_layers(model, "lora")
    with pytest.raises(ValueError, match="target must be"):
        select_target_layers(model, "mlp")
    with pytest.raises(ValueError, match="target_filter"):
        select_target_layers(model, "custom")


def test_config_choices_are_typed_as_the_values_they_accept():
    """The ``Literal`` types of the string choices list exactly what the checks accept."""
    from typing import get_args, get_type_hints

    hints = get_type_hints(AntidoteConfig)
    for name in ("score", "granularity"):
        for choice in get_args(hints[name]):
            AntidoteConfig(**{name: choice}).validate()
        with pytest.raises(ValueError, match=f"{name} must be"):
            AntidoteConfig(**{name: "other"}).validate()
    # the config's target goes to select_target_layers, which checks it
    targets = get_args(get_type_hints(select_target_layers)["target"])
    assert get_args(hints["target"]) == targets == ("lora", "qkv", "custom")
    _, model = _tiny_llama_with_lora()
    for target in targets:
        assert select_target_layers(model, target, lambda n, m: "q_proj" in n)
    with pytest.raises(ValueError, match="target must be"):
        select_target_layers(model, "other")


def test_peft_lora_names_and_merged_adapter():
    peft = pytest.importorskip("peft")
    world = HarmfulFinetuneWorld(0)
    model = world.model(0, hidden=32, intermediate=64)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj"])
    pm = peft.get_peft_model(model, cfg)
    layers = select_target_layers(pm, "lora")
    assert len(layers) == 12
    assert any(k.endswith("self_attn.q_proj.lora_A.default.weight") for k in layers)
    for n, p in pm.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.1)
    res = antidote_prune(pm, _calib(world), AntidoteConfig(dense_ratio=0.25))
    a = res.mask[next(k for k in layers if k.endswith("q_proj.lora_A.default.weight"))]
    assert (a.sum(1) == 32 - math.floor(32 * 0.75)).all()
    pm.merge_adapter()
    with pytest.raises(ValueError, match="merged"):
        select_target_layers(pm, "lora")


def _two_adapter_peft(seed=0):
    """A tiny Llama with PEFT adapters ``align`` (q, v) and ``user`` (q, k), ``user`` active."""
    peft = pytest.importorskip("peft")
    world = HarmfulFinetuneWorld(seed)
    model = world.model(seed, hidden=32, intermediate=64)
    torch.manual_seed(seed)
    pm = peft.get_peft_model(
        model,
        peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        adapter_name="align",
    )
    pm.add_adapter("user", peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "k_proj"]))
    pm.set_adapter("user")
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    return world, pm


def _lora_state(pm, adapter):
    return {n: p.detach().clone() for n, p in pm.named_parameters() if f".{adapter}." in n}


def test_only_the_active_adapter_is_pruned_by_default():
    world, pm = _two_adapter_peft()
    layers = select_target_layers(pm)
    assert len(layers) == 2 * 2 * 2  # A and B of q and k in 2 layers, the user adapter only
    assert all(".user." in k for k in layers), sorted(layers)
    align_before = _lora_state(pm, "align")
    for score in ("magnitude", "random", "wanda"):
        res = antidote_prune(pm, _calib(world), AntidoteConfig(dense_ratio=0.25, score=score))
        assert set(res.mask) == set(layers) and res.n_pruned > 0
        align_now = _lora_state(pm, "align")
        assert all(torch.equal(align_now[n], v) for n, v in align_before.items()), score


def test_named_adapters_and_their_errors():
    world, pm = _two_adapter_peft()
    assert peft_adapters(pm) == (["align", "user"], ["user"])
    # the inner transformers model (its own PEFT-integration method raises): read from the layers
    assert peft_adapters(pm.base_model.model) == (["align", "user"], ["user"])
    align = select_target_layers(pm, adapters="align")
    assert len(align) == 8 and all(".align." in k for k in align)
    both = select_target_layers(pm, adapters=["align", "user"])
    assert set(both) == set(align) | set(select_target_layers(pm))
    user_before = _lora_state(pm, "user")
    res = antidote_prune(pm, None, AntidoteConfig(score="magnitude", adapters=["align"]))
    assert set(res.mask) == set(align)
    assert all(torch.equal(p, _lora_state(pm, "user")[n]) for n, p in user_before.items())
    with pytest.raises(
        ValueError, match=r"\['nope'\] not loaded.*loaded adapters: \['align', 'user'\]"
    ):
        select_target_layers(pm, adapters=["nope"])
    with pytest.raises(ValueError, match=r"\['align'\] are not active"):
        antidote_prune(pm, _calib(world), AntidoteConfig(adapters="align"))
    # with the default Wanda score too, an unknown name is "not loaded", not "not active"
    with pytest.raises(ValueError, match=r"\['nope'\] not loaded"):
        antidote_prune(pm, _calib(world), AntidoteConfig(adapters=["nope"]))
    with pytest.raises(ValueError, match="target='lora' only"):
        select_target_layers(pm, "qkv", adapters="user")
    with pytest.raises(ValueError, match="adapters must be"):
        AntidoteConfig(adapters=[3]).validate()
    _, ours = _tiny_llama_with_lora()
    with pytest.raises(ValueError, match="no PEFT LoRA layers"):
        select_target_layers(ours, adapters="default")


def _assert_keys_are_parameter_names(model, layers):
    params = dict(model.named_parameters())
    assert layers and set(layers) <= set(params), sorted(set(layers) - set(params))[:4]
    for k, t in layers.items():
        assert t.weight is params[k], k


def test_mask_keys_are_the_models_parameter_names():
    world, pm = _two_adapter_peft()
    for kw in ({}, {"adapters": ["align", "user"]}):
        _assert_keys_are_parameter_names(pm, select_target_layers(pm, **kw))
    _assert_keys_are_parameter_names(pm, select_target_layers(pm, "qkv"))  # PEFT base_layer
    assert all(k.endswith("base_layer.weight") for k in select_target_layers(pm, "qkv"))
    res = antidote_prune(pm, _calib(world), AntidoteConfig(dense_ratio=0.25))
    assert set(res.mask) <= set(dict(pm.named_parameters()))
    assert any(k.endswith("self_attn.q_proj.lora_A.user.weight") for k in res.mask)
    _, ours = _tiny_llama_with_lora()
    _assert_keys_are_parameter_names(ours, select_target_layers(ours))
    _assert_keys_are_parameter_names(ours, select_target_layers(ours, "qkv"))  # ours: .base
    plain = HarmfulFinetuneWorld(0).model(0, hidden=32, intermediate=64)
    _assert_keys_are_parameter_names(plain, select_target_layers(plain, "qkv"))
    mlp = select_target_layers(plain, "custom", lambda n, m: n.endswith("mlp.up_proj"))
    _assert_keys_are_parameter_names(plain, mlp)


def test_masks_interchange_with_the_official_format():
    """Official ``train.py``: ``param.data *= (1 - bad_mask[name])`` over
    ``model.named_parameters()``, with float 0/1 masks; ours are bool with the same keys."""
    world, pm = _two_adapter_peft()
    batches = _calib(world)
    start = {n: p.detach().clone() for n, p in pm.named_parameters()}
    res = antidote_prune(pm, batches, AntidoteConfig(dense_ratio=0.25))
    ours = {n: p.detach().clone() for n, p in pm.named_parameters()}
    official = {k: m.float() for k, m in res.mask.items()}  # the bad_mask.pt format
    with torch.no_grad():
        for n, p in pm.named_parameters():
            p.copy_(start[n])
        for name, param in pm.named_parameters():  # the official loop, verbatim in effect
            if name in official:
                param.data *= 1 - official[name]
    assert all(torch.equal(p, ours[n]) for n, p in pm.named_parameters())
    with torch.no_grad():
        for n, p in pm.named_parameters():
            p.copy_(start[n])
    apply_mask(select_target_layers(pm), official)  # an official mask through our apply_mask
    assert all(torch.equal(p, ours[n]) for n, p in pm.named_parameters())
    with pytest.raises(ValueError, match="other than 0 and 1"):
        apply_mask(select_target_layers(pm), {k: 0.5 * m for k, m in official.items()})


def test_grad_magnitude_per_tensor_equals_the_official_prune_with_fi():
    """``prune_with_FI``: gradients summed over the batches, then per trainable tensor the
    ``int(numel * rho)`` largest ``|W| * |grad|`` entries are masked."""
    world, model = _tiny_llama_with_lora()
    for p in model.parameters():
        p.requires_grad_(False)
    for n, p in model.named_parameters():
        if "lora_" in n:
            p.requires_grad_(True)
    batches = _calib(world)
    model.zero_grad()
    for b in batches:
        model(**b).loss.backward()
    ref = {}
    for name, param in model.named_parameters():
        if param.requires_grad:
            k = int(param.numel() * 0.1)
            idx = torch.sort((param.abs() * param.grad.abs()).view(-1), descending=True)[1]
            ref[name] = torch.zeros(param.numel(), dtype=torch.bool)
            ref[name][idx[:k]] = True
            ref[name] = ref[name].view(param.shape)
    model.zero_grad()
    res = antidote_prune(
        model,
        batches,
        AntidoteConfig(dense_ratio=0.1, score="grad_magnitude", granularity="tensor"),
    )
    assert set(res.mask) == set(ref)
    for k in ref:
        assert torch.equal(res.mask[k], ref[k]), k
    # the default (per row) is a different mask with the per-row count
    world, model = _tiny_llama_with_lora()
    row = antidote_prune(model, batches, AntidoteConfig(dense_ratio=0.1, score="grad_magnitude"))
    a = row.mask["model.layers.0.self_attn.q_proj.lora_A"]
    assert (a.sum(1) == 32 - math.floor(32 * 0.9)).all()
    assert any(not torch.equal(row.mask[k], ref[k]) for k in ref)
    with pytest.raises(ValueError, match="granularity must be"):
        AntidoteConfig(granularity="column").validate()
