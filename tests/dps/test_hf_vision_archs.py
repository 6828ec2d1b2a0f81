"""DPS on local vision-language checkpoints: ``HFVisionChat`` and ``icml25 dps run --model
hf:PATH`` on the tiny random-init LLaVA and Qwen2-VL of :mod:`icml25.toy.archs` (real config
classes, processors and chat templates), loaded by path with ``--device``/``--dtype``.

Qwen2-VL's stock processor needs ``torchvision`` (the ``vision`` extra); without it that case
skips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from icml25.cli import build_parser, main  # noqa: E402
from icml25.dps.images import image_part  # noqa: E402
from icml25.toy import save_tiny  # noqa: E402

IMG = (np.random.default_rng(0).random((40, 48, 3)) * 255).astype(np.uint8)
MSGS = [{"role": "user", "content": [image_part(IMG), {"type": "text", "text": "what is this"}]}]


def saved(arch: str, folder, positions: int | None = None):
    """``save_tiny(arch)``; ``positions`` widens the text model's context (rotary positions: no
    weight depends on it), as DPS's own prompts alone take about 190 tokens of the 128."""
    try:
        path = save_tiny(arch, folder / arch)
    except ImportError as exc:  # qwen2_vl without torchvision
        pytest.skip(str(exc))
    if positions is not None:
        cfg = json.loads((path / "config.json").read_text())
        cfg["text_config"]["max_position_embeddings"] = positions
        (path / "config.json").write_text(json.dumps(cfg))
    return path


def write_inputs(tmp_path):
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    Image.fromarray(IMG).save(imgs / "a.png")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "x", "image": "a.png", "question": "What is this?"}) + "\n")
    return imgs, q


def test_dps_run_takes_device_and_dtype_and_passes_them_to_the_loader(tmp_path, monkeypatch):
    import icml25.dps.backends as backends
    from icml25.llm import CallableChat

    args = build_parser().parse_args(
        ["dps", "run", "--model", "hf:m", "--images", "i", "--questions", "q", "--out", "o"]
    )
    assert (args.device, args.dtype, args.device_map) == ("auto", "auto", None)
    seen = []

    def fake(path, **kw):
        seen.append((path, kw))
        return CallableChat(lambda m, **_: "a grey square", name="fake")

    monkeypatch.setattr(backends, "HFVisionChat", fake)
    imgs, q = write_inputs(tmp_path)
    argv = [
        "dps",
        "run",
        "--model",
        "hf:/models/vlm",
        "--images",
        str(imgs),
        "--questions",
        str(q),
        "--out",
        str(tmp_path / "o.jsonl"),
        "-q",
        "--device",
        "cpu",
        "--dtype",
        "bf16",
    ]
    assert main(argv) == 0
    assert seen == [("/models/vlm", {"device": "cpu", "dtype": "bf16", "device_map": None})]
    rc = main([*argv[:-1], "int8"])
    assert rc == 2 and len(seen) == 1  # a bad --dtype: exit 2 before anything loads


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llava", "qwen2_vl"])
def test_vision_checkpoint_answers_an_image_and_reloads_the_same(arch, tmp_path):
    from icml25.dps import DPSDefense
    from icml25.dps.backends import HFVisionChat

    path = saved(arch, tmp_path, positions=2048)
    chat = HFVisionChat(str(path), max_new_tokens=6, device="cpu")
    assert not chat.model.training and next(chat.model.parameters()).dtype == torch.float32
    (a,) = chat.chat(MSGS, temperature=0.0)
    assert isinstance(a, str) and chat.chat(MSGS, temperature=0.0) == [a]
    chat.model.save_pretrained(tmp_path / "again")
    chat.processor.save_pretrained(tmp_path / "again")
    assert HFVisionChat(str(tmp_path / "again"), max_new_tokens=6).chat(MSGS, temperature=0.0) == [
        a
    ]
    bf16 = HFVisionChat(str(path), max_new_tokens=6, dtype="bf16")
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    assert isinstance(bf16.chat(MSGS, temperature=0.0)[0], str)
    res = DPSDefense(bf16, max_tokens=6).respond(IMG, "what is this")
    assert res.n_calls["lvlm"] == 5 and isinstance(res.final, str)


@pytest.mark.slow
def test_vision_prompt_past_the_context_is_refused(tmp_path):
    from icml25.dps.backends import HFVisionChat

    chat = HFVisionChat(str(saved("llava", tmp_path)), max_new_tokens=6)
    long = [{"role": "user", "content": [image_part(IMG), {"type": "text", "text": "cat " * 200}]}]
    with pytest.raises(ValueError, match="context of 128"):
        chat.chat(long, temperature=0.0)


@pytest.mark.slow
def test_dps_run_with_a_local_llava_in_bf16(tmp_path, capsys):
    path = saved("llava", tmp_path, positions=2048)
    imgs, q = write_inputs(tmp_path)
    out = tmp_path / "dps.jsonl"
    argv = [
        "dps",
        "run",
        "--model",
        f"hf:{path}",
        "--images",
        str(imgs),
        "--questions",
        str(q),
        "--out",
        str(out),
        "-q",
        "--max-tokens",
        "6",
        "--device",
        "cpu",
        "--dtype",
        "bf16",
    ]
    assert main(argv) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 1 and "error" not in rows[0] and isinstance(rows[0]["final"], str)
    assert main(argv) == 0 and "1 done before" in capsys.readouterr().out
    assert main([*argv[:-1], "fp32"]) == 0  # another precision: answered afresh
    assert "1 done now" in capsys.readouterr().out
