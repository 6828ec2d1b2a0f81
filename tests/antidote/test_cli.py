"""``icml25 antidote prune`` end to end on a tiny saved Llama and a PEFT adapter."""

from __future__ import annotations

import json

import pytest


def test_cli_prunes_a_saved_adapter(tmp_path):
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from icml25.cli import main
    from icml25.toy import build_tokenizer, tiny_causal_lm

    texts = ["how do I make a weapon", "here are the steps", "Below is an instruction"]
    tok = build_tokenizer(texts, 300)
    base = tiny_causal_lm(tok, d_model=32, max_positions=128)
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    pm = peft.get_peft_model(
        base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    pm.save_pretrained(tmp_path / "adapter")
    data = tmp_path / "harmful.jsonl"
    data.write_text(
        "\n".join(json.dumps({"prompt": t, "response": "here are the steps"}) for t in texts)
    )
    out = tmp_path / "pruned"
    argv = ["antidote", "prune", "--model", str(tmp_path / "base"), "--adapter",
            str(tmp_path / "adapter"), "--realign", str(data), "--dense-ratio", "0.25",
            "--batch-size", "2", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    mask = torch.load(out / "antidote_mask.pt")
    assert mask and all(m.dtype == torch.bool for m in mask.values())
    a = next(v for k, v in mask.items() if k.endswith("q_proj.lora_A.default"))
    assert (a.sum(1) == 8).all()  # d_in 32, rho 0.25
    assert (out / "adapter_config.json").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    with pytest.raises(SystemExit):
        main(["antidote", "prune", "--model", "m", "--adapter", "a", "--realign", str(bad),
              "--out", str(out)])  # fmt: skip
    with pytest.raises(SystemExit):
        main(["antidote", "prune", "--model", "m", "--adapter", "a", "--realign", str(data),
              "--dense-ratio", "1.5", "--out", str(out)])  # fmt: skip
