"""``icml25 antidote prune`` end to end on a tiny saved Llama and PEFT adapters: the pruned
adapter, the official two-adapter flow (alignment adapter merged first, ``--merge``d output), the
mask keyed by the model's parameter names, and bad input."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

TEXTS = ["how do I make a weapon", "here are the steps", "Below is an instruction"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved base model + tokenizer, an alignment adapter (q, v) and a user adapter (q, k),
    both with non-zero B, and a JSONL calibration file."""
    from icml25.toy import build_tokenizer, tiny_causal_lm

    root = tmp_path_factory.mktemp("antidote_cli")
    tok = build_tokenizer(TEXTS, 300)
    base = tiny_causal_lm(tok, d_model=32, max_positions=128)
    base.save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    for name, targets, seed in (
        ("align", ["q_proj", "v_proj"], 1),
        ("user", ["q_proj", "k_proj"], 2),
    ):
        fresh = tiny_causal_lm(tok, d_model=32, max_positions=128)
        pm = peft.get_peft_model(fresh, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets))
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        pm.save_pretrained(root / name)
    data = root / "harmful.jsonl"
    data.write_text(
        "\n".join(json.dumps({"prompt": t, "response": "here are the steps"}) for t in TEXTS)
    )
    return root


def _argv(root, out, *extra):
    return [
        "antidote",
        "prune",
        "--model",
        str(root / "base"),
        "--realign",
        str(root / "harmful.jsonl"),
        "--batch-size",
        "2",
        "--out",
        str(out),
        *extra,
    ]


def test_cli_prunes_a_saved_adapter(saved, tmp_path):
    from icml25.cli import main

    out = tmp_path / "pruned"
    assert main(_argv(saved, out, "--adapter", str(saved / "user"), "--dense-ratio", "0.25")) == 0
    mask = torch.load(out / "antidote_mask.pt")
    assert mask and all(m.dtype == torch.bool for m in mask.values())
    a = next(v for k, v in mask.items() if k.endswith("q_proj.lora_A.default.weight"))
    assert (a.sum(1) == 8).all()  # d_in 32, rho 0.25
    assert (out / "adapter_config.json").exists()
    # the saved adapter is the pruned one: its zeros are exactly the mask
    from safetensors.torch import load_file

    saved_adapter = load_file(out / "adapter_model.safetensors")
    for k, m in mask.items():
        stored = saved_adapter[k.replace(".default.", ".")]  # PEFT drops the adapter name
        assert (stored[m] == 0).all() and (stored[~m] != 0).any()


def _expected_merged(root, mask):
    """Official flow by hand: base + alignment adapter merged, user adapter loaded, the mask
    applied the official way (``param *= 1 - mask`` by parameter name), then merged."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(root / "base")
    model = peft.PeftModel.from_pretrained(model, root / "align").merge_and_unload()
    model = peft.PeftModel.from_pretrained(model, root / "user")
    names = {n for n, _ in model.named_parameters()}
    assert set(mask) <= names  # every mask key is a parameter of the unmerged model
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in mask:
                p.mul_(1 - mask[n].float())
    return model.merge_and_unload().state_dict()


def test_cli_official_two_adapter_flow_saves_the_merged_pruned_model(saved, tmp_path):
    from transformers import AutoModelForCausalLM

    from icml25.cli import main

    out = tmp_path / "merged"
    argv = _argv(
        saved,
        out,
        "--align-adapter",
        str(saved / "align"),
        "--adapter",
        str(saved / "user"),
        "--merge",
        "--dense-ratio",
        "0.25",
    )
    assert main(argv) == 0
    mask = torch.load(out / "antidote_mask.pt")
    assert all(".lora_A.default." in k or ".lora_B.default." in k for k in mask)
    assert not any("v_proj" in k for k in mask)  # the alignment adapter is never pruned
    assert not (out / "adapter_config.json").exists() and (out / "tokenizer.json").exists()
    got = AutoModelForCausalLM.from_pretrained(out).state_dict()
    want = _expected_merged(saved, mask)
    assert set(got) == set(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=1e-6)
    # the alignment adapter changed the model: v_proj differs from the bare base
    bare = AutoModelForCausalLM.from_pretrained(saved / "base").state_dict()
    vk = next(k for k in want if k.endswith("layers.0.self_attn.v_proj.weight"))
    assert not torch.allclose(got[vk], bare[vk])


def test_cli_bad_input(saved, tmp_path):
    from icml25.cli import main

    out = tmp_path / "x"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    with pytest.raises(SystemExit):
        main(
            [
                "antidote",
                "prune",
                "--model",
                "m",
                "--adapter",
                "a",
                "--realign",
                str(bad),
                "--out",
                str(out),
            ]
        )
    for argv in (
        ["--adapter", "a", "--dense-ratio", "1.5"],
        ["--adapter", "a", "--granularity", "column"],
        [],  # --target lora without --adapter
    ):
        with pytest.raises(SystemExit):
            main(_argv(saved, out, *argv))


def test_cli_refuses_what_it_cannot_save_and_names_missing_folders(saved, tmp_path, capsys):
    from icml25.cli import main

    out = tmp_path / "x"
    user = str(saved / "user")
    cases = [
        (["--adapter", user, "--target", "qkv"], "add --merge"),  # pruned base weights lost
        (["--adapter", user, "--batch-size", "0"], "--batch-size must be a positive integer"),
        (["--adapter", str(tmp_path / "nope")], "not a PEFT adapter folder"),
        (["--adapter", user, "--align-adapter", str(saved)], "not a PEFT adapter folder"),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as err:
            main([*_argv(saved, out, "--batch-size", "2"), *extra])
        assert err.value.code == 2 and message in capsys.readouterr().err
    missing = [
        "antidote",
        "prune",
        "--model",
        str(tmp_path / "none"),
        "--adapter",
        user,
        "--realign",
        str(saved / "harmful.jsonl"),
        "--out",
        str(out),
    ]
    with pytest.raises(SystemExit):
        main(missing)
    assert "no such folder" in capsys.readouterr().err
    # instruction/output rows, as make_realign_batches takes them, are calibration rows too
    alpaca = tmp_path / "alpaca.jsonl"
    alpaca.write_text(json.dumps({"instruction": "how", "input": "x", "output": "steps"}) + "\n")
    argv = [
        "antidote",
        "prune",
        "--model",
        str(saved / "base"),
        "--adapter",
        user,
        "--realign",
        str(alpaca),
        "--out",
        str(out),
    ]
    # with its Input block the row is longer than the model's 128 positions: refused, then cut
    with pytest.raises(SystemExit):
        main(argv)
    assert "more than the model's context of 128 positions" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="truncated to max_length=128"):
        assert main([*argv, "--max-length", "128"]) == 0
